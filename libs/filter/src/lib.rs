//! Payload filters for eddy.
//!
//! * [`Filter`]: Qdrant-shaped filter JSON (`must` / `should` / `must_not`
//!   with `match`, `range`, `is_null`, `is_empty` and nested filters), parsed
//!   and checked against a collection's indexed payload fields.
//! * [`Filter::matches`]: row-by-row evaluation for growing (unindexed) rows.
//! * [`PayloadIndexBuilder`] / [`PayloadIndexView`]: the per-segment payload
//!   index written at seal time and read in place from an mmap; evaluation
//!   gives a [`roaring::RoaringBitmap`] of matching rows.
//! * [`plan()`]: exact scan versus filtered graph walk, by selectivity.
//!
//! See `README.md` in this crate for the JSON accepted and the byte format.

mod column;
mod eval;
mod filter;
mod index;
mod plan;
#[cfg(test)]
mod test_schema;

pub use filter::{
    Condition, FieldCondition, Filter, FloatRange, MatchValues, Predicate, MAX_CONDITIONS,
    MAX_DEPTH, MAX_MATCH_VALUES,
};
pub use index::{
    Estimate, PayloadIndexBuilder, PayloadIndexView, FORMAT_VERSION, HEADER_LEN, MAGIC,
    OLDEST_SUPPORTED_VERSION,
};
pub use plan::{plan, Plan, Planner, DEFAULT_EXACT_FRACTION, DEFAULT_EXACT_ROWS};

pub use eddy_model::FieldType;
pub use roaring::RoaringBitmap;

/// A filter that could not be parsed or does not fit the collection's schema.
///
/// The `Display` text is meant for users (an HTTP 400 body).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// The text is not JSON; the message has line and column.
    #[error("filter is not valid JSON: {0}")]
    Json(String),
    /// The JSON is not a valid filter for this collection.
    #[error("invalid filter at {path}: {message}")]
    Invalid {
        /// Where, e.g. `filter.must[1].range.gt`.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// A payload index that cannot be opened or evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// Not a payload index of a readable version, cut short, or failing
    /// its checksum.
    #[error(transparent)]
    Format(#[from] eddy_format::FormatError),
    /// The structure is inconsistent; the message says what.
    #[error("payload index corrupt: {0}")]
    Corrupt(String),
    /// The filter names a field this segment has no index for (for example a
    /// field added to the collection after the segment was sealed).
    #[error("field '{0}' is not indexed in this segment")]
    FieldNotIndexed(String),
    /// The filter's type for a field differs from the type the segment indexed.
    #[error(
        "field '{field}' is indexed as {indexed:?} in this segment, filter expects {wanted:?}"
    )]
    FieldTypeMismatch {
        /// Field name.
        field: String,
        /// Type in the segment.
        indexed: FieldType,
        /// Type the filter was parsed with.
        wanted: FieldType,
    },
}
