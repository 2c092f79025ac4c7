//! eddy's shared vocabulary: point ids, distance metrics, payload field types
//! and the collection definition that ingest and query both read from the store.
//!
//! No I/O here; every other crate depends on this one.

mod collection;
mod id;
mod metric;

pub use collection::{
    collection_of_chain, validate_name, CollectionDef, FieldType, ValueFormat, DEFAULT_PARTITIONS,
    SHARD_SEPARATOR,
};
pub use id::{IdType, PointId};
pub use metric::Metric;

/// Errors raised when a definition or value breaks the model's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A collection definition is invalid; the message says which field and why.
    #[error("invalid collection definition: {0}")]
    InvalidDefinition(String),
    /// An alteration would change the type of an indexed payload field.
    #[error(
        "payload field {field:?} is indexed as {indexed:?}; its type cannot change to {asked:?}"
    )]
    FieldTypeConflict {
        /// The field.
        field: String,
        /// Its indexed type.
        indexed: FieldType,
        /// The type asked for.
        asked: FieldType,
    },
    /// A point id does not match the collection's id type.
    #[error("id {got:?} is not a valid {expected} id")]
    WrongIdType {
        /// The collection's id type.
        expected: IdType,
        /// The offending text.
        got: String,
    },
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
