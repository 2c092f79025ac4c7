//! Collection admin requests as both doors carry them: create (HTTP `PUT`
//! body, Flight `create_collection`) and alter (HTTP `PATCH` body, Flight
//! `alter_collection`).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::error::ApiError;

/// A collection definition as a request carries it (HTTP `PUT` body,
/// Flight `create_collection` action).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CollectionJson {
    /// The name (optional over HTTP: the path names it).
    #[serde(default)]
    name: Option<String>,
    /// The Kafka topic (default: the name).
    #[serde(default)]
    topic: String,
    /// Vector dimension.
    dimension: u32,
    /// `cosine` (default), `dot` or `l2`.
    #[serde(default)]
    #[schema(value_type = String)]
    metric: eddy_model::Metric,
    /// `u64` (default) or `string`.
    #[serde(default)]
    #[schema(value_type = String)]
    id_type: eddy_model::IdType,
    /// Indexed payload fields: name -> `keyword`, `integer`, `float`, `bool`.
    #[serde(default)]
    #[schema(value_type = Object)]
    payload_fields: BTreeMap<String, eddy_model::FieldType>,
    /// Shards to split the collection into (default 1): partition `p`
    /// belongs to shard `p % shards`. Fixed at creation.
    #[serde(default = "one_shard")]
    shards: u32,
    /// The format of events without a `content-type` header: `json`
    /// (default), `protobuf` or `arrow`.
    #[serde(default)]
    #[schema(value_type = String)]
    format: eddy_model::ValueFormat,
}

fn one_shard() -> u32 {
    1
}

impl CollectionJson {
    /// The validated definition; `named` is the name the request's path
    /// gives (the body may repeat it), else the body must name it.
    pub fn into_def(self, named: Option<&str>) -> Result<eddy_model::CollectionDef, ApiError> {
        let name = collection_name(named, self.name.as_deref())?;
        eddy_model::CollectionDef {
            name,
            topic: self.topic,
            dimension: self.dimension,
            metric: self.metric,
            id_type: self.id_type,
            payload_fields: self.payload_fields,
            shards: self.shards,
            format: self.format,
        }
        .validated()
        .map_err(|e| ApiError::BadRequest(e.to_string()))
    }
}

/// An alteration as a request carries it (HTTP `PATCH` body, Flight
/// `alter_collection` action): indexed payload fields to add. Fields
/// already indexed keep their type; segments sealed before are indexed in
/// the background (`payload_index_pending` in the collection's status).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AlterJson {
    /// The collection (Flight; over HTTP the path names it, and the body
    /// may repeat it).
    #[serde(default)]
    pub name: Option<String>,
    /// Payload fields to index: name -> `keyword`, `integer`, `float`, `bool`.
    #[schema(value_type = Object)]
    pub payload_fields: BTreeMap<String, eddy_model::FieldType>,
}

impl AlterJson {
    /// The collection it alters: the path's (`named`), which the body may
    /// repeat, else the body's.
    pub fn collection(&self, named: Option<&str>) -> Result<String, ApiError> {
        collection_name(named, self.name.as_deref())
    }
}

/// The collection a request names: the path's (`named`), which the body
/// may repeat, else the body's.
fn collection_name(named: Option<&str>, body: Option<&str>) -> Result<String, ApiError> {
    match (named, body) {
        (Some(path), Some(body)) if body != path => Err(ApiError::BadRequest(format!(
            "body names collection {body:?}, path names {path:?}"
        ))),
        (Some(path), _) => Ok(path.to_owned()),
        (None, Some(body)) => Ok(body.to_owned()),
        (None, None) => Err(ApiError::BadRequest("missing field `name`".into())),
    }
}
