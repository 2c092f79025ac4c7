//! The filter model and its parser for Qdrant-shaped filter JSON.
//!
//! Parsing resolves every condition against the collection's indexed payload
//! fields, so a parsed [`Filter`] is already typed: keyword lists are sorted,
//! integer ranges are inclusive `i64` bounds, and evaluation never has to look
//! at the schema again.

mod parse;
mod parse_predicate;
mod to_json;

#[cfg(test)]
mod tests;

use eddy_model::FieldType;

/// Deepest nesting of filters accepted (the top-level filter is depth 1).
pub const MAX_DEPTH: usize = 16;
/// Most conditions accepted in one filter, counting nested ones.
pub const MAX_CONDITIONS: usize = 1024;
/// Most values accepted across all `any` / `except` lists of one filter.
pub const MAX_MATCH_VALUES: usize = 10_000;

/// A parsed, schema-checked filter: `must` all, `should` at least one (when
/// non-empty), `must_not` none.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Filter {
    /// Every condition must hold.
    pub must: Vec<Condition>,
    /// At least one condition must hold; ignored when empty.
    pub should: Vec<Condition>,
    /// No condition may hold.
    pub must_not: Vec<Condition>,
}

/// One condition of a filter.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// A `match` or `range` condition on one field.
    Field(FieldCondition),
    /// `is_null`: the payload has the key with an explicit JSON `null`.
    IsNull {
        /// The field name.
        key: String,
    },
    /// `is_empty`: the field has no indexable value (missing, `null`, `[]`,
    /// or only values of the wrong type).
    IsEmpty {
        /// The field name.
        key: String,
        /// The field's declared type (decides which values count).
        field_type: FieldType,
    },
    /// A nested filter used as a condition.
    Filter(Box<Filter>),
}

/// A `match` or `range` condition on one field.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldCondition {
    /// The field name.
    pub key: String,
    /// What the field's value must satisfy.
    pub predicate: Predicate,
}

/// A typed predicate on one field's value(s).
#[derive(Debug, Clone, PartialEq)]
pub enum Predicate {
    /// `match`: with `except == false` the field has a value in `values`
    /// (`value` is a one-element list); with `except == true` the field has a
    /// value that is *not* in `values`. A missing field never matches.
    Match {
        /// The listed values, sorted and deduplicated.
        values: MatchValues,
        /// `except` instead of `value` / `any`.
        except: bool,
    },
    /// `range` on an integer field, as inclusive bounds (empty when `lo > hi`).
    IntRange {
        /// Smallest accepted value.
        lo: i64,
        /// Largest accepted value.
        hi: i64,
    },
    /// `range` on a float field.
    FloatRange(FloatRange),
}

/// The values listed in a `match`, typed by the field.
#[derive(Debug, Clone, PartialEq)]
pub enum MatchValues {
    /// Keyword values, sorted and deduplicated.
    Keyword(Vec<String>),
    /// Integer values, sorted and deduplicated.
    Integer(Vec<i64>),
    /// Bool values, sorted (`false` first) and deduplicated.
    Bool(Vec<bool>),
}

impl MatchValues {
    /// Number of listed values.
    pub fn len(&self) -> usize {
        match self {
            MatchValues::Keyword(v) => v.len(),
            MatchValues::Integer(v) => v.len(),
            MatchValues::Bool(v) => v.len(),
        }
    }

    /// Whether the list is empty (only possible for `except`).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The field type these values belong to.
    pub fn field_type(&self) -> FieldType {
        match self {
            MatchValues::Keyword(_) => FieldType::Keyword,
            MatchValues::Integer(_) => FieldType::Integer,
            MatchValues::Bool(_) => FieldType::Bool,
        }
    }
}

/// Bounds of a float range; at least one is set by the parser.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FloatRange {
    /// Exclusive lower bound.
    pub gt: Option<f64>,
    /// Inclusive lower bound.
    pub gte: Option<f64>,
    /// Exclusive upper bound.
    pub lt: Option<f64>,
    /// Inclusive upper bound.
    pub lte: Option<f64>,
}

impl FloatRange {
    /// Whether `v` fails the lower bounds (true on a prefix of sorted values).
    pub(crate) fn below(&self, v: f64) -> bool {
        self.gt.is_some_and(|g| v <= g) || self.gte.is_some_and(|g| v < g)
    }

    /// Whether `v` meets the upper bounds (true on a prefix of sorted values).
    pub(crate) fn within_upper(&self, v: f64) -> bool {
        self.lt.is_none_or(|l| v < l) && self.lte.is_none_or(|l| v <= l)
    }

    /// Whether `v` is in the range.
    pub fn contains(&self, v: f64) -> bool {
        !self.below(v) && self.within_upper(v)
    }
}

impl Predicate {
    /// The field type this predicate applies to.
    pub fn field_type(&self) -> FieldType {
        match self {
            Predicate::Match { values, .. } => values.field_type(),
            Predicate::IntRange { .. } => FieldType::Integer,
            Predicate::FloatRange(_) => FieldType::Float,
        }
    }
}

impl Filter {
    /// A filter that matches every row.
    pub fn all() -> Self {
        Self::default()
    }

    /// Whether the filter has no conditions (matches every row).
    pub fn is_empty(&self) -> bool {
        self.must.is_empty() && self.should.is_empty() && self.must_not.is_empty()
    }
}
