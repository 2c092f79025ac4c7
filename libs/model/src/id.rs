//! Point ids: unsigned 64-bit integers or strings, as the collection declares.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The id type a collection declares for its points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum IdType {
    /// Unsigned 64-bit integer ids (`"id": 42`).
    #[default]
    U64,
    /// String ids (`"id": "doc-42"`), at most [`PointId::MAX_STR_LEN`] bytes.
    String,
}

impl fmt::Display for IdType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IdType::U64 => "u64",
            IdType::String => "string",
        })
    }
}

/// The id of one point.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PointId {
    /// A numeric id.
    Num(u64),
    /// A string id.
    Str(String),
}

impl PointId {
    /// Longest accepted string id, in bytes.
    pub const MAX_STR_LEN: usize = 1024;

    /// The id type this id belongs to.
    pub fn id_type(&self) -> IdType {
        match self {
            PointId::Num(_) => IdType::U64,
            PointId::Str(_) => IdType::String,
        }
    }

    /// Parses an id from its text form (the Kafka message key, a URL path
    /// segment) for a collection of the given id type.
    pub fn parse(text: &str, id_type: IdType) -> Result<Self> {
        let wrong = || Error::WrongIdType {
            expected: id_type,
            got: text.chars().take(64).collect(),
        };
        match id_type {
            IdType::U64 => text.parse::<u64>().map(PointId::Num).map_err(|_| wrong()),
            IdType::String if text.is_empty() || text.len() > Self::MAX_STR_LEN => Err(wrong()),
            IdType::String => Ok(PointId::Str(text.to_owned())),
        }
    }

    /// Checks that this id is valid for a collection of type `id_type`.
    pub fn check(&self, id_type: IdType) -> Result<()> {
        match (self, id_type) {
            (PointId::Num(_), IdType::U64) => Ok(()),
            (PointId::Str(s), IdType::String) if !s.is_empty() && s.len() <= Self::MAX_STR_LEN => {
                Ok(())
            }
            _ => Err(Error::WrongIdType {
                expected: id_type,
                got: self.to_string().chars().take(64).collect(),
            }),
        }
    }
}

impl fmt::Display for PointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PointId::Num(n) => write!(f, "{n}"),
            PointId::Str(s) => f.write_str(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_check() {
        assert_eq!(PointId::parse("42", IdType::U64), Ok(PointId::Num(42)));
        assert!(PointId::parse("-1", IdType::U64).is_err());
        assert!(PointId::parse("x", IdType::U64).is_err());
        assert_eq!(
            PointId::parse("x", IdType::String),
            Ok(PointId::Str("x".into()))
        );
        assert!(PointId::parse("", IdType::String).is_err());
        assert!(PointId::Num(1).check(IdType::String).is_err());
        assert!(PointId::Str("a".into()).check(IdType::String).is_ok());
    }

    #[test]
    fn json_form_is_untagged() {
        let ids: Vec<PointId> = serde_json::from_str(r#"[7, "a"]"#).expect("valid json");
        assert_eq!(ids, vec![PointId::Num(7), PointId::Str("a".into())]);
    }
}
