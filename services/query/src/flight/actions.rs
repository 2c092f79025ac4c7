//! Flight actions: collection management and stats for clients that speak
//! only Flight. Bodies and answers are JSON.
//!
//! - `create_collection` (admin): a collection definition with its `name`
//!   (as `PUT /v1/collections/{c}` takes it); answers `{"created", "info"}`.
//! - `drop_collection` (admin): `{"name"}`; answers `{"dropped"}`; NOT_FOUND
//!   when there is no such collection or it was dropped already.
//! - `alter_collection` (admin): `{"name", "payload_fields"}` (as `PATCH
//!   /v1/collections/{c}` takes it); answers `{"altered", "info"}`.
//! - `collection_stats` (read): `{"name"}`; answers the collection info
//!   (definition, status, recall estimate).
//! - `served_shards` (read): no body; answers, per collection this node
//!   serves, the shards it serves (how peers plan a fan-out).
//! - `search_shards` (read): a search of some shards of a split collection,
//!   as one node asks it of another (`crate::fanout::leg`).

use std::sync::Arc;

use arrow_flight::ActionType;
use serde::Deserialize;

use crate::admin_request::{AlterJson, CollectionJson};
use crate::auth::Scope;
use crate::engine::{store_io, Engine};
use crate::error::ApiError;
use crate::fanout;

/// The actions, with what each does.
pub const ACTIONS: [(&str, &str); 10] = [
    (
        "create_collection",
        "Create a collection (admin): JSON {name, dimension, metric, id_type, topic, payload_fields}",
    ),
    ("drop_collection", "Drop a collection (admin): JSON {name}"),
    (
        "alter_collection",
        "Add indexed payload fields (admin; old segments are indexed in the background): JSON {name, payload_fields}",
    ),
    (
        "collection_stats",
        "A collection's definition, status and recall estimate: JSON {name}",
    ),
    (
        fanout::SERVED_SHARDS,
        "Per collection served here, the shards this node serves: no body",
    ),
    (
        fanout::SEARCH_SHARDS,
        "A search of some shards of a split collection (how query nodes fan out): JSON {collection, shards, vectors, k, ...}",
    ),
    (
        fanout::COUNT_SHARDS,
        "A count of some shards of a split collection (how query nodes fan out): JSON {collection, shards, filter}",
    ),
    (
        fanout::GET_POINT_SHARDS,
        "A point of some shards of a split collection, by id (how query nodes fan out): JSON {collection, shards, id}",
    ),
    (
        fanout::SCROLL_SHARDS,
        "A scroll page of some shards of a split collection (how query nodes fan out): JSON {collection, shards, filter, after, limit, with_vector}",
    ),
    (
        fanout::PIN_SHARDS,
        "Pin some shards of a split collection (how a query node pins a snapshot across shards): JSON {collection, shards}",
    ),
];

/// The scope an action needs (`None`: no such action).
pub fn scope(action: &str) -> Option<Scope> {
    match action {
        "create_collection" | "drop_collection" | "alter_collection" => Some(Scope::Admin),
        "collection_stats"
        | fanout::SERVED_SHARDS
        | fanout::SEARCH_SHARDS
        | fanout::COUNT_SHARDS
        | fanout::GET_POINT_SHARDS
        | fanout::SCROLL_SHARDS
        | fanout::PIN_SHARDS => Some(Scope::Read),
        _ => None,
    }
}

/// `ListActions`' answer.
pub fn action_types() -> Vec<ActionType> {
    ACTIONS
        .iter()
        .map(|(name, description)| ActionType {
            r#type: (*name).to_owned(),
            description: (*description).to_owned(),
        })
        .collect()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Named {
    name: String,
}

fn json<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("invalid action body: {e}")))
}

/// Runs `action` with `body` (the caller checked its scope); the JSON
/// answer. Store I/O runs off the async workers.
pub async fn run(engine: &Arc<Engine>, action: &str, body: &[u8]) -> Result<Vec<u8>, ApiError> {
    let answer = match action {
        "create_collection" => {
            let def = json::<CollectionJson>(body)?.into_def(None)?;
            let name = def.name.clone();
            let creator = engine.clone();
            let created = store_io(move || creator.create_collection(def)).await?;
            let collection = engine.collection(&name)?;
            let info = engine.collection_info(&collection);
            serde_json::json!({"created": created, "info": info})
        }
        "drop_collection" => {
            let Named { name } = json(body)?;
            let dropper = engine.clone();
            let target = name.clone();
            store_io(move || dropper.drop_collection(&target, "flight")).await?;
            serde_json::json!({"dropped": name})
        }
        "alter_collection" => {
            let alter = json::<AlterJson>(body)?;
            let name = alter.collection(None)?;
            let alterer = engine.clone();
            let (info, changed) =
                store_io(move || alterer.alter_collection(&name, &alter.payload_fields)).await?;
            serde_json::json!({"altered": changed, "info": info})
        }
        "collection_stats" => {
            let Named { name } = json(body)?;
            let collection = engine.collection(&name)?;
            engine.collection_info(&collection)
        }
        fanout::SERVED_SHARDS => {
            let served: std::collections::BTreeMap<String, Vec<u32>> = engine
                .collections()
                .iter()
                .filter(|c| c.is_ready())
                .map(|c| (c.name().to_owned(), c.shards().to_vec()))
                .collect();
            serde_json::json!(served)
        }
        fanout::SEARCH_SHARDS => return fanout::leg::answer(engine, body).await,
        fanout::COUNT_SHARDS => return fanout::count::answer(engine, body).await,
        fanout::GET_POINT_SHARDS => return fanout::read::answer_point(engine, body).await,
        fanout::SCROLL_SHARDS => return fanout::read::answer_scroll(engine, body).await,
        fanout::PIN_SHARDS => return fanout::pin::answer(engine, body).await,
        other => {
            return Err(ApiError::BadRequest(format!(
                "unknown action {other:?}; ListActions lists them"
            )))
        }
    };
    serde_json::to_vec(&answer).map_err(|e| ApiError::Internal(e.to_string()))
}
