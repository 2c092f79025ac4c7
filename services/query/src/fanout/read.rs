//! Reading points of a split collection: a node that lacks some shards
//! reads its own and asks peers for the others — a point by id (the Flight
//! action `get_point_shards`) or a scroll page (`scroll_shards`), both
//! JSON — so a point of another shard is found, never "not found", and a
//! scroll pages through every shard in one id order.
//!
//! A scroll page merges the smallest `limit` ids after the cursor of each
//! source (this node's shards and every leg's): each source's page is its
//! own smallest ids, so the merged smallest `limit` are the collection's,
//! and the next page resumes every source after the last id kept.

use std::collections::BTreeMap;
use std::sync::Arc;

use eddy_filter::Filter;
use eddy_model::PointId;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::leg::LegTarget;
use super::{Peers, GET_POINT_SHARDS, SCROLL_SHARDS};
use crate::collection::{Collection, PagePoint, PointRecord, ScrollPage};
use crate::engine::Engine;
use crate::error::ApiError;
use crate::request::PayloadSelector;
use crate::results::HitPayload;

/// A point read of some shards of a split collection, as one node asks it
/// of another.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PointLegRequest {
    /// The collection.
    pub collection: String,
    /// The shards to look in (all served by the node asked).
    pub shards: Vec<u32>,
    /// The id.
    pub id: PointId,
}

/// A point read leg's answer.
#[derive(Debug, Serialize, Deserialize)]
pub struct PointLegAnswer {
    /// The point, if one of the shards holds it live.
    pub point: Option<WirePoint>,
}

/// A scroll page of some shards of a split collection, as one node asks it
/// of another.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScrollLegRequest {
    /// The collection.
    pub collection: String,
    /// The shards to page through (all served by the node asked).
    pub shards: Vec<u32>,
    /// The payload filter, as the caller sent it.
    #[serde(default)]
    pub filter: Option<Value>,
    /// Resume after this id.
    #[serde(default)]
    pub after: Option<PointId>,
    /// Points wanted.
    pub limit: usize,
    /// Whether the caller returns vectors (else they are not sent).
    #[serde(default)]
    pub with_vector: bool,
    /// The pinned snapshot paged (the asked node's token), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
}

/// A scroll leg's answer: the shards' page.
#[derive(Debug, Serialize, Deserialize)]
pub struct ScrollLegAnswer {
    /// The (at most `limit`) smallest ids after the cursor, in id order.
    pub points: Vec<WirePoint>,
    /// Whether more follow in these shards.
    pub more: bool,
    /// Per partition of the shards, the first offset the page does not
    /// reflect.
    pub offsets: BTreeMap<u32, i64>,
}

/// A point as a leg sends it: the payload as its stored JSON text.
#[derive(Debug, Serialize, Deserialize)]
pub struct WirePoint {
    /// The id.
    pub id: PointId,
    /// The stored vector (empty when the caller did not ask for it).
    #[serde(default)]
    pub vector: Vec<f32>,
    /// The payload as stored (a JSON object; empty = none).
    #[serde(default)]
    pub payload_json: String,
}

impl WirePoint {
    fn from_page(p: PagePoint, with_vector: bool) -> Self {
        Self {
            id: p.id,
            vector: if with_vector { p.vector } else { Vec::new() },
            payload_json: String::from_utf8_lossy(&p.payload_json).into_owned(),
        }
    }

    fn into_page(self) -> PagePoint {
        PagePoint {
            id: self.id,
            vector: self.vector,
            payload_json: self.payload_json.into_bytes(),
        }
    }
}

/// A point read over every shard a node could reach.
#[derive(Debug, Default)]
pub struct Found {
    /// The point, if a shard holds it live.
    pub point: Option<PointRecord>,
    /// Shards neither this node nor a peer looked in (empty when found).
    pub missing: Vec<u32>,
}

/// A scroll page over every shard a node could reach.
#[derive(Debug)]
pub struct Paged {
    /// The merged page.
    pub page: ScrollPage,
    /// Shards neither this node nor a peer paged through.
    pub missing: Vec<u32>,
}

impl Peers {
    /// Looks `id` up in `shards` of `collection` on peers: the first point
    /// found, and the shards nobody answered for.
    pub async fn get_point(
        &self,
        collection: &Collection,
        shards: &[u32],
        id: &PointId,
    ) -> Result<(Option<WirePoint>, Vec<u32>), ApiError> {
        let mut found = None;
        let missing = self
            .gather(
                collection,
                shards,
                GET_POINT_SHARDS,
                |leg_shards, _| {
                    let request = PointLegRequest {
                        collection: collection.name().to_owned(),
                        shards: leg_shards.to_vec(),
                        id: id.clone(),
                    };
                    serde_json::to_vec(&request).map_err(|e| ApiError::Internal(e.to_string()))
                },
                |answer: PointLegAnswer, _: &str, _: &[u32]| {
                    if found.is_none() {
                        found = answer.point;
                    }
                },
            )
            .await?;
        Ok((found, missing))
    }

    /// Pages through `shards` of `collection` on peers: every leg's page,
    /// and the shards nobody answered for.
    pub async fn scroll(
        &self,
        collection: &Collection,
        shards: &[u32],
        page: &ScrollLegRequest,
    ) -> Result<(Vec<ScrollPage>, Vec<u32>), ApiError> {
        let mut pages = Vec::new();
        let missing = self
            .gather(
                collection,
                shards,
                SCROLL_SHARDS,
                |leg_shards, snapshot| {
                    let request = ScrollLegRequest {
                        shards: leg_shards.to_vec(),
                        snapshot: snapshot.map(str::to_owned),
                        ..page.clone()
                    };
                    serde_json::to_vec(&request).map_err(|e| ApiError::Internal(e.to_string()))
                },
                |answer: ScrollLegAnswer, _: &str, _: &[u32]| {
                    pages.push(ScrollPage {
                        points: answer
                            .points
                            .into_iter()
                            .map(WirePoint::into_page)
                            .collect(),
                        more: answer.more,
                        offsets: answer.offsets,
                    });
                },
            )
            .await?;
        Ok((pages, missing))
    }
}

/// Looks `id` up on this node and in the shards it lacks on its peers
/// (asked only when this node's shards do not hold it).
pub async fn get_everywhere(
    engine: &Arc<Engine>,
    collection: &Arc<Collection>,
    id: &PointId,
) -> Result<Found, ApiError> {
    if let Some(point) = collection.get(id, None) {
        return Ok(Found {
            point: Some(point),
            missing: Vec::new(),
        });
    }
    let missing = collection.missing_shards();
    match (engine.peers(), missing.is_empty()) {
        (Some(peers), false) => {
            let (point, missing) = peers.get_point(collection, &missing, id).await?;
            let point = point.map(|p| PointRecord {
                payload: HitPayload::select(p.payload_json.as_bytes(), &PayloadSelector::All)
                    .unwrap_or(HitPayload::Fields(serde_json::Map::new())),
                id: p.id,
                vector: p.vector,
            });
            let missing = if point.is_some() { Vec::new() } else { missing };
            Ok(Found { point, missing })
        }
        _ => Ok(Found {
            point: None,
            missing,
        }),
    }
}

/// Which page a scroll asks for.
#[derive(Debug, Clone, Default)]
pub struct PageAsk {
    /// The payload filter, as the caller sent it (for the legs).
    pub filter_json: Option<Value>,
    /// The same filter, parsed (for this node).
    pub filter: Option<Filter>,
    /// Resume after this id.
    pub after: Option<PointId>,
    /// Points wanted.
    pub limit: usize,
    /// Whether vectors are returned (else the legs do not send them).
    pub with_vector: bool,
}

/// One scroll page of `collection`: this node's shards and the shards it
/// lacks on its peers (a pinned snapshot's on the peers holding its
/// pins), merged into one page of at most `ask.limit` points in id order.
pub async fn scroll_everywhere(
    engine: &Arc<Engine>,
    collection: &Arc<Collection>,
    ask: PageAsk,
) -> Result<Paged, ApiError> {
    let missing = collection.missing_shards();
    let PageAsk {
        filter_json,
        filter,
        after,
        limit,
        with_vector,
    } = ask;
    let leg = ScrollLegRequest {
        collection: collection.name().to_owned(),
        shards: missing.clone(),
        filter: filter_json,
        after: after.clone(),
        limit,
        with_vector,
        snapshot: None,
    };
    let local = {
        let collection = collection.clone();
        engine.on_pool(move || collection.scroll(filter.as_ref(), after.as_ref(), limit, None))
    };
    // The legs go out while this node reads its own shards.
    let remote = async {
        match (engine.peers(), missing.is_empty()) {
            (Some(peers), false) => peers.scroll(collection, &missing, &leg).await,
            _ => Ok((Vec::new(), missing.clone())),
        }
    };
    let (local, remote) = tokio::join!(local, remote);
    let (local, (pages, missing)) = (local?, remote?);
    Ok(Paged {
        page: merge_pages(local, pages, limit),
        missing,
    })
}

/// Merges scroll pages of disjoint sources into one of at most `limit`
/// points in id order (an id on two sources is kept once, the first
/// source's); more follow when any source had more or points were cut.
pub fn merge_pages(first: ScrollPage, others: Vec<ScrollPage>, limit: usize) -> ScrollPage {
    if others.is_empty() {
        return first;
    }
    let mut more = first.more;
    let mut offsets = first.offsets;
    let mut points = first.points;
    for page in others {
        more |= page.more;
        offsets.extend(page.offsets);
        points.extend(page.points);
    }
    // Stable: among equal ids the earlier source's point comes first.
    points.sort_by(|a, b| a.id.cmp(&b.id));
    points.dedup_by(|later, earlier| later.id == earlier.id);
    more |= points.len() > limit;
    points.truncate(limit);
    ScrollPage {
        points,
        more,
        offsets,
    }
}

/// Answers a `get_point_shards` action: the point, if the asked shards of
/// this node's collection hold it, never fanned out again. Refused with
/// 503 when this node does not serve one of them.
pub async fn answer_point(engine: &Arc<Engine>, body: &[u8]) -> Result<Vec<u8>, ApiError> {
    let leg: PointLegRequest = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("invalid {GET_POINT_SHARDS} body: {e}")))?;
    let LegTarget {
        collection, only, ..
    } = LegTarget::open(engine, &leg.collection, None, leg.shards, None)?;
    let point = collection.get(&leg.id, Some(&only)).map(|p| WirePoint {
        payload_json: serde_json::to_string(&p.payload).unwrap_or_default(),
        id: p.id,
        vector: p.vector,
    });
    serde_json::to_vec(&PointLegAnswer { point }).map_err(|e| ApiError::Internal(e.to_string()))
}

/// Answers a `scroll_shards` action: one page of the asked shards of this
/// node's collection, never fanned out again. Refused with 503 when this
/// node does not serve one of them.
pub async fn answer_scroll(engine: &Arc<Engine>, body: &[u8]) -> Result<Vec<u8>, ApiError> {
    let leg: ScrollLegRequest = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("invalid {SCROLL_SHARDS} body: {e}")))?;
    if leg.limit == 0 || leg.limit > crate::request::MAX_SCROLL_LIMIT {
        return Err(ApiError::BadRequest(format!(
            "limit must be in 1..={}, got {}",
            crate::request::MAX_SCROLL_LIMIT,
            leg.limit
        )));
    }
    let LegTarget {
        collection,
        filter,
        only,
    } = LegTarget::open(
        engine,
        &leg.collection,
        leg.snapshot.as_deref(),
        leg.shards,
        leg.filter.as_ref(),
    )?;
    let (after, limit, with_vector) = (leg.after, leg.limit, leg.with_vector);
    let page = engine
        .on_pool(move || collection.scroll(filter.as_ref(), after.as_ref(), limit, Some(&only)))
        .await?;
    let answer = ScrollLegAnswer {
        points: page
            .points
            .into_iter()
            .map(|p| WirePoint::from_page(p, with_vector))
            .collect(),
        more: page.more,
        offsets: page.offsets,
    };
    serde_json::to_vec(&answer).map_err(|e| ApiError::Internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(ids: &[u64], more: bool, partition: u32) -> ScrollPage {
        ScrollPage {
            points: ids
                .iter()
                .map(|id| PagePoint {
                    id: PointId::Num(*id),
                    vector: vec![partition as f32],
                    payload_json: Vec::new(),
                })
                .collect(),
            more,
            offsets: BTreeMap::from([(partition, 10 + i64::from(partition))]),
        }
    }

    fn ids(page: &ScrollPage) -> Vec<u64> {
        page.points
            .iter()
            .map(|p| match p.id {
                PointId::Num(n) => n,
                PointId::Str(_) => u64::MAX,
            })
            .collect()
    }

    /// Interleaved sources merge into the smallest `limit` ids in order,
    /// every source's offsets kept.
    #[test]
    fn pages_merge_in_id_order() {
        let merged = merge_pages(
            page(&[1, 4, 9], false, 0),
            vec![page(&[2, 3, 10], false, 1)],
            4,
        );
        assert_eq!(ids(&merged), [1, 2, 3, 4]);
        assert!(merged.more, "9 and 10 were cut");
        assert_eq!(merged.offsets, BTreeMap::from([(0, 10), (1, 11)]));
        let all = merge_pages(page(&[1, 4], false, 0), vec![page(&[2], false, 1)], 4);
        assert_eq!(ids(&all), [1, 2, 4]);
        assert!(!all.more, "nothing left anywhere");
    }

    /// A source with more keeps the page open even when nothing was cut;
    /// an id on two sources is kept once, the first source's.
    #[test]
    fn more_and_duplicates() {
        let merged = merge_pages(page(&[5], false, 0), vec![page(&[1, 5], true, 1)], 10);
        assert_eq!(ids(&merged), [1, 5]);
        assert!(merged.more);
        assert_eq!(
            merged.points[1].vector,
            vec![0.0],
            "the first source's copy"
        );
    }
}
