//! The collection definition: what ingest and query agree on for a collection.

use std::collections::BTreeMap;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::{Error, IdType, Metric, Result};

/// Partitions a topic is created with when eddy creates it (demo, tests).
pub const DEFAULT_PARTITIONS: u32 = 3;

/// Type of an indexed payload field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    /// Exact-match string values (never free text).
    Keyword,
    /// Signed 64-bit integers.
    Integer,
    /// 64-bit floats.
    Float,
    /// Booleans.
    Bool,
}

impl FieldType {
    /// Whether a JSON value fits this type (`null` always fits: the field is absent).
    pub fn accepts(self, value: &serde_json::Value) -> bool {
        use serde_json::Value;
        match (self, value) {
            (_, Value::Null) => true,
            (FieldType::Keyword, Value::String(_)) => true,
            (FieldType::Integer, Value::Number(n)) => {
                n.is_i64() || n.is_u64() && n.as_i64().is_some()
            }
            (FieldType::Float, Value::Number(_)) => true,
            (FieldType::Bool, Value::Bool(_)) => true,
            // A list of keywords (tags) is a keyword field with many values.
            (FieldType::Keyword, Value::Array(items)) => items.iter().all(Value::is_string),
            _ => false,
        }
    }
}

/// The value format of a collection's events that carry no `content-type`
/// header: producers that cannot set headers publish in the format the
/// collection declares (a header, where present, always decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueFormat {
    /// `{"id": 42, "vector": [...], "payload": {...}}`.
    #[default]
    Json,
    /// `eddy.v1.PointEvent`.
    Protobuf,
    /// An Arrow IPC stream of many points.
    Arrow,
}

impl ValueFormat {
    /// Whether this is the default (JSON), which definitions leave out.
    pub fn is_default(&self) -> bool {
        *self == ValueFormat::Json
    }
}

impl FromStr for ValueFormat {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "json" => Ok(ValueFormat::Json),
            "protobuf" => Ok(ValueFormat::Protobuf),
            "arrow" => Ok(ValueFormat::Arrow),
            _ => Err(format!(
                "value format {s:?} must be json, protobuf or arrow"
            )),
        }
    }
}

/// A collection: one Kafka topic of point events, indexed into segments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectionDef {
    /// Collection name: 1-64 chars of `[A-Za-z0-9_-]`.
    pub name: String,
    /// Kafka topic carrying the collection's events (defaults to the name).
    #[serde(default)]
    pub topic: String,
    /// Vector dimension.
    pub dimension: u32,
    /// Similarity metric.
    #[serde(default)]
    pub metric: Metric,
    /// Type of the point ids.
    #[serde(default)]
    pub id_type: IdType,
    /// Payload fields to index, with their types. Other payload fields are
    /// stored and returned but never indexed.
    #[serde(default)]
    pub payload_fields: BTreeMap<String, FieldType>,
    /// Shards the collection is split into (1 = not split). Partition `p`
    /// belongs to shard `p % shards`; each shard has its own manifest chain
    /// (see [`CollectionDef::chain`]), segments and merges, and a query node
    /// may serve a subset of them. Fixed at creation.
    #[serde(default = "one_shard", skip_serializing_if = "is_one_shard")]
    pub shards: u32,
    /// The format of events without a `content-type` header.
    #[serde(default, skip_serializing_if = "ValueFormat::is_default")]
    pub format: ValueFormat,
}

fn one_shard() -> u32 {
    1
}

fn is_one_shard(shards: &u32) -> bool {
    *shards == 1
}

/// Separates a collection's name from its shard number in the name of a
/// shard's manifest chain (`docs.1`): a character no collection name holds,
/// so a chain never collides with a collection.
pub const SHARD_SEPARATOR: char = '.';

impl CollectionDef {
    /// Largest accepted vector dimension.
    pub const MAX_DIMENSION: u32 = 65_536;

    /// A definition with defaults for everything but name and dimension.
    pub fn new(name: impl Into<String>, dimension: u32) -> Self {
        let name = name.into();
        Self {
            topic: name.clone(),
            name,
            dimension,
            metric: Metric::default(),
            id_type: IdType::default(),
            payload_fields: BTreeMap::new(),
            shards: 1,
            format: ValueFormat::default(),
        }
    }

    /// Most shards a collection may have.
    pub const MAX_SHARDS: u32 = 256;

    /// The shard partition `partition` belongs to.
    pub fn shard_of(&self, partition: u32) -> u32 {
        partition % self.shards.max(1)
    }

    /// The store name of shard `shard`'s manifest chain: the collection's
    /// own name when it is not split, `<name>.<shard>` when it is.
    pub fn chain(&self, shard: u32) -> String {
        if self.shards <= 1 {
            self.name.clone()
        } else {
            format!("{}{SHARD_SEPARATOR}{shard}", self.name)
        }
    }

    /// Every manifest chain of the collection, shard 0 first.
    pub fn chains(&self) -> Vec<String> {
        (0..self.shards.max(1)).map(|s| self.chain(s)).collect()
    }

    /// The definition as each manifest chain sees it, shard 0 first: this
    /// one alone when the collection is not split.
    pub fn chain_defs(&self) -> Vec<CollectionDef> {
        if self.shards <= 1 {
            return vec![self.clone()];
        }
        (0..self.shards).map(|s| self.for_chain(s)).collect()
    }

    /// This definition as seen by the manifest chain of `shard`: the same
    /// but for its name, which is the chain's (what ingest state, segment
    /// files and metrics of one shard are keyed by).
    pub fn for_chain(&self, shard: u32) -> CollectionDef {
        CollectionDef {
            name: self.chain(shard),
            ..self.clone()
        }
    }

    /// Fills defaults (topic = name) and checks every field.
    pub fn validated(mut self) -> Result<Self> {
        validate_name(&self.name)?;
        if self.topic.is_empty() {
            self.topic = self.name.clone();
        }
        if self.topic.len() > 249
            || !self
                .topic
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(Error::InvalidDefinition(format!(
                "topic {:?} is not a valid Kafka topic name",
                self.topic
            )));
        }
        if self.topic.starts_with("__") {
            return Err(Error::InvalidDefinition(format!(
                "topic {:?} is internal to Kafka (`__*`); a collection cannot read it",
                self.topic
            )));
        }
        if self.dimension == 0 || self.dimension > Self::MAX_DIMENSION {
            return Err(Error::InvalidDefinition(format!(
                "dimension must be in 1..={}, got {}",
                Self::MAX_DIMENSION,
                self.dimension
            )));
        }
        if self.shards == 0 || self.shards > Self::MAX_SHARDS {
            return Err(Error::InvalidDefinition(format!(
                "shards must be in 1..={}, got {}",
                Self::MAX_SHARDS,
                self.shards
            )));
        }
        for field in self.payload_fields.keys() {
            if field.is_empty() || field.len() > 128 {
                return Err(Error::InvalidDefinition(format!(
                    "payload field name {field:?} must be 1-128 bytes"
                )));
            }
        }
        Ok(self)
    }
}

impl CollectionDef {
    /// This definition with `fields` added to its indexed payload fields:
    /// the one change a live collection takes (`PATCH` / `alter_collection`).
    /// A field it already indexes must keep its type (changing it would
    /// make existing payload indexes disagree with the definition); adding
    /// a field twice with the same type changes nothing.
    pub fn with_payload_fields(&self, fields: &BTreeMap<String, FieldType>) -> Result<Self> {
        if fields.is_empty() {
            return Err(Error::InvalidDefinition(
                "payload_fields names no field to add".to_owned(),
            ));
        }
        let mut altered = self.clone();
        for (field, ty) in fields {
            match self.payload_fields.get(field) {
                Some(existing) if existing != ty => {
                    return Err(Error::FieldTypeConflict {
                        field: field.clone(),
                        indexed: *existing,
                        asked: *ty,
                    })
                }
                _ => {
                    altered.payload_fields.insert(field.clone(), *ty);
                }
            }
        }
        altered.validated()
    }

    /// Whether `other` could be this collection altered: everything but
    /// the payload fields equal (name, topic, dimension, metric and id
    /// type never change for a live collection).
    pub fn same_but_payload_fields(&self, other: &CollectionDef) -> bool {
        (
            &self.name,
            &self.topic,
            self.dimension,
            self.metric,
            self.id_type,
            self.shards,
        ) == (
            &other.name,
            &other.topic,
            other.dimension,
            other.metric,
            other.id_type,
            other.shards,
        )
    }
}

/// The collection a manifest chain belongs to: `docs` for `docs.1` (a
/// shard's chain) and for `docs` (an unsplit collection's).
pub fn collection_of_chain(chain: &str) -> &str {
    chain
        .split_once(SHARD_SEPARATOR)
        .map_or(chain, |(name, _)| name)
}

/// Checks a collection name: 1-64 chars of `[A-Za-z0-9_-]`.
pub fn validate_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
    {
        return Err(Error::InvalidDefinition(format!(
            "collection name {name:?} must be 1-64 characters of [A-Za-z0-9_-]"
        )));
    }
    Ok(())
}

/// Parses the compact command-line form
/// `name=docs,dim=384[,metric=cosine][,topic=docs][,id=u64][,shards=2][,format=json][,field.section=keyword]`.
impl FromStr for CollectionDef {
    type Err = Error;

    fn from_str(spec: &str) -> Result<Self> {
        let bad = |msg: String| Error::InvalidDefinition(msg);
        let mut def = CollectionDef::new("", 0);
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("expected key=value, got {part:?}")))?;
            match key {
                "name" => def.name = value.to_owned(),
                "topic" => def.topic = value.to_owned(),
                "dim" | "dimension" => {
                    def.dimension = value
                        .parse()
                        .map_err(|_| bad(format!("dimension {value:?} is not a number")))?
                }
                "metric" => def.metric = value.parse().map_err(bad)?,
                "format" => def.format = value.parse().map_err(bad)?,
                "shards" => {
                    def.shards = value
                        .parse()
                        .map_err(|_| bad(format!("shards {value:?} is not a number")))?
                }
                "id" | "id_type" => {
                    def.id_type = match value {
                        "u64" => IdType::U64,
                        "string" => IdType::String,
                        _ => return Err(bad(format!("id type {value:?} must be u64 or string"))),
                    }
                }
                _ => match key.strip_prefix("field.") {
                    Some(field) => {
                        let ty =
                            serde_json::from_value(serde_json::Value::String(value.to_owned()))
                                .map_err(|_| {
                                    bad(format!(
                                    "field type {value:?} must be keyword, integer, float or bool"
                                ))
                                })?;
                        def.payload_fields.insert(field.to_owned(), ty);
                    }
                    None => return Err(bad(format!("unknown key {key:?}"))),
                },
            }
        }
        def.validated()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_value_format_is_declared_in_the_spec_and_left_out_when_json() {
        let json: CollectionDef = "name=docs,dim=4".parse().expect("valid");
        assert_eq!(json.format, ValueFormat::Json);
        let text = serde_json::to_string(&json).expect("serialise");
        assert!(!text.contains("format"), "{text}");
        let proto: CollectionDef = "name=docs,dim=4,format=protobuf".parse().expect("valid");
        assert_eq!(proto.format, ValueFormat::Protobuf);
        let text = serde_json::to_string(&proto).expect("serialise");
        assert!(text.contains(r#""format":"protobuf""#), "{text}");
        let back: CollectionDef = serde_json::from_str(&text).expect("read back");
        assert_eq!(back, proto);
        let err = "name=docs,dim=4,format=csv"
            .parse::<CollectionDef>()
            .expect_err("csv");
        assert!(err.to_string().contains("json, protobuf or arrow"), "{err}");
    }

    #[test]
    fn shards_split_partitions_into_chains() {
        let one: CollectionDef = "name=docs,dim=4".parse().expect("valid");
        assert_eq!(one.shards, 1);
        assert_eq!(one.chains(), vec!["docs"]);
        assert_eq!(one.shard_of(7), 0);
        let split: CollectionDef = "name=docs,dim=4,shards=3".parse().expect("valid");
        assert_eq!(split.chains(), vec!["docs.0", "docs.1", "docs.2"]);
        assert_eq!(split.shard_of(7), 1);
        assert_eq!(split.for_chain(2).name, "docs.2");
        assert_eq!(split.chain_defs()[1].name, "docs.1");
        assert_eq!(one.chain_defs(), vec![one.clone()]);
        // A chain's name is never a collection's.
        assert!(validate_name(&split.chain(0)).is_err());
        assert_eq!(collection_of_chain("docs.2"), "docs");
        assert_eq!(collection_of_chain("docs"), "docs");
        assert!("name=docs,dim=4,shards=0".parse::<CollectionDef>().is_err());
        assert!("name=docs,dim=4,shards=257"
            .parse::<CollectionDef>()
            .is_err());
        // One shard is the default and is not written out.
        let json = serde_json::to_string(&one).expect("encodes");
        assert!(!json.contains("shards"));
        let back: CollectionDef =
            serde_json::from_str(&serde_json::to_string(&split).expect("encodes"))
                .expect("decodes");
        assert_eq!(back, split);
    }

    #[test]
    fn spec_parses_with_defaults() {
        let def: CollectionDef = "name=docs,dim=4,field.section=keyword"
            .parse()
            .expect("valid");
        assert_eq!(def.topic, "docs");
        assert_eq!(def.metric, Metric::Cosine);
        assert_eq!(def.payload_fields["section"], FieldType::Keyword);
        assert!("name=docs".parse::<CollectionDef>().is_err());
        assert!("name=a b,dim=3".parse::<CollectionDef>().is_err());
        assert!("name=a,dim=3,metric=x".parse::<CollectionDef>().is_err());
        // Kafka's internal topics are never a collection's source.
        assert!("name=a,dim=3,topic=__consumer_offsets"
            .parse::<CollectionDef>()
            .is_err());
    }

    #[test]
    fn field_types_accept_values() {
        use serde_json::json;
        assert!(FieldType::Integer.accepts(&json!(3)));
        assert!(!FieldType::Integer.accepts(&json!(3.5)));
        assert!(FieldType::Float.accepts(&json!(3)));
        assert!(FieldType::Keyword.accepts(&json!(["a", "b"])));
        assert!(!FieldType::Bool.accepts(&json!("yes")));
        assert!(FieldType::Bool.accepts(&json!(null)));
    }

    #[test]
    fn altering_adds_payload_fields_but_never_changes_a_type() {
        let mut def = CollectionDef::new("a", 4);
        def.payload_fields.insert("kind".into(), FieldType::Keyword);
        let add = BTreeMap::from([
            ("kind".to_owned(), FieldType::Keyword),
            ("size".to_owned(), FieldType::Integer),
        ]);
        let altered = def.with_payload_fields(&add).expect("added");
        assert_eq!(altered.payload_fields, add);
        assert_eq!(
            (
                altered.name.as_str(),
                altered.dimension,
                altered.topic.as_str()
            ),
            ("a", 4, "a")
        );
        let retyped = BTreeMap::from([("kind".to_owned(), FieldType::Integer)]);
        assert!(matches!(
            def.with_payload_fields(&retyped),
            Err(Error::FieldTypeConflict { .. })
        ));
        assert!(def.with_payload_fields(&BTreeMap::new()).is_err());
        let unnamed = BTreeMap::from([(String::new(), FieldType::Bool)]);
        assert!(matches!(
            def.with_payload_fields(&unnamed),
            Err(Error::InvalidDefinition(_))
        ));
    }
}
