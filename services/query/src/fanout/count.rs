//! Counting a split collection: a node that lacks some shards counts its
//! own and asks peers (the Flight action `count_shards`, a
//! [`CountLegRequest`] answered with a [`CountLegAnswer`], both JSON) for
//! the others, and adds the counts up.

use std::collections::BTreeMap;
use std::sync::Arc;

use eddy_filter::Filter;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::leg::LegTarget;
use super::{Peers, COUNT_SHARDS};
use crate::collection::Collection;
use crate::engine::Engine;
use crate::error::ApiError;

/// A count of some shards of a split collection, as one node asks it of
/// another.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CountLegRequest {
    /// The collection.
    pub collection: String,
    /// The shards to count (all served by the node asked).
    pub shards: Vec<u32>,
    /// The payload filter, as the caller sent it.
    #[serde(default)]
    pub filter: Option<Value>,
    /// The pinned snapshot counted (the asked node's token), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
}

/// A count leg's answer.
#[derive(Debug, Serialize, Deserialize)]
pub struct CountLegAnswer {
    /// Live points of the shards (that the filter lets through).
    pub count: u64,
    /// Per partition of the shards counted, the first offset not reflected.
    pub offsets: BTreeMap<u32, i64>,
}

/// A count over every shard a node could reach.
#[derive(Debug, Default)]
pub struct Counted {
    /// Live points (that the filter lets through).
    pub count: u64,
    /// Per partition counted, the first offset not reflected.
    pub offsets: BTreeMap<u32, i64>,
    /// Shards neither this node nor a peer counted.
    pub missing: Vec<u32>,
}

impl Peers {
    /// Counts `shards` of `collection` on peers (`filter` as the caller
    /// sent it): the sum of the answers and the shards nobody answered for.
    pub async fn count(
        &self,
        collection: &Collection,
        shards: &[u32],
        filter: Option<&Value>,
    ) -> Result<Counted, ApiError> {
        let mut out = Counted::default();
        out.missing = self
            .gather(
                collection,
                shards,
                COUNT_SHARDS,
                |leg_shards, snapshot| {
                    let request = CountLegRequest {
                        collection: collection.name().to_owned(),
                        shards: leg_shards.to_vec(),
                        filter: filter.cloned(),
                        snapshot: snapshot.map(str::to_owned),
                    };
                    serde_json::to_vec(&request).map_err(|e| ApiError::Internal(e.to_string()))
                },
                |answer: CountLegAnswer, _: &str, _: &[u32]| {
                    out.count += answer.count;
                    out.offsets.extend(answer.offsets);
                },
            )
            .await?;
        Ok(out)
    }
}

/// Counts `collection` on this node (`filter` parsed from `filter_json`),
/// and the shards it lacks on its peers (a pinned snapshot's on the peers
/// holding its pins): the whole count, or what was reachable with the
/// missing shards named (the caller refuses or marks it partial).
pub async fn count_everywhere(
    engine: &Arc<Engine>,
    collection: &Arc<Collection>,
    filter_json: Option<&Value>,
    filter: Option<Filter>,
) -> Result<Counted, ApiError> {
    let missing = collection.missing_shards();
    let local = async {
        match filter {
            None => Ok(collection.count()),
            Some(filter) => {
                let counted = collection.clone();
                engine
                    .on_pool(move || counted.count_matching(Some(&filter)))
                    .await
            }
        }
    };
    // The legs go out while this node counts its own shards.
    let remote = async {
        match (engine.peers(), missing.is_empty()) {
            (Some(peers), false) => peers.count(collection, &missing, filter_json).await,
            _ => Ok(Counted {
                missing: missing.clone(),
                ..Counted::default()
            }),
        }
    };
    let (local, remote) = tokio::join!(local, remote);
    let ((count, mut offsets), remote) = (local?, remote?);
    offsets.extend(remote.offsets);
    let out = Counted {
        count: count + remote.count,
        offsets,
        missing: remote.missing,
    };
    Ok(out)
}

/// Answers a `count_shards` action: the count of the asked shards of this
/// node's collection, never fanned out again. Refused with 503 when this
/// node does not serve one of them (its caller asks another replica).
pub async fn answer(engine: &Arc<Engine>, body: &[u8]) -> Result<Vec<u8>, ApiError> {
    let leg: CountLegRequest = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("invalid count_shards body: {e}")))?;
    let LegTarget {
        collection: counted,
        filter,
        only,
    } = LegTarget::open(
        engine,
        &leg.collection,
        leg.snapshot.as_deref(),
        leg.shards,
        leg.filter.as_ref(),
    )?;
    let (count, offsets) = engine
        .on_pool(move || counted.count_in(filter.as_ref(), &only))
        .await?;
    serde_json::to_vec(&CountLegAnswer { count, offsets })
        .map_err(|e| ApiError::Internal(e.to_string()))
}
