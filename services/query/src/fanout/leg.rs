//! One fan-out leg on the wire: the Flight action `search_shards` carries a
//! [`LegRequest`] (JSON) to a node that serves the shards, which answers a
//! [`LegAnswer`] (JSON) searched over those shards alone.

use std::collections::BTreeMap;
use std::sync::Arc;

use eddy_model::PointId;
use eddy_segment::Quantization;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::collection::Collection;
use crate::engine::Engine;
use crate::error::ApiError;
use crate::prepared::{PreparedSearch, QueryBatch, ShardSet};
use crate::request::{PayloadSelector, SearchParams, SearchRequest, Vectors};
use crate::results::{BatchResult, Hit, HitPayload};

/// A search of some shards of a split collection, as one node asks it of
/// another.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LegRequest {
    /// The collection.
    pub collection: String,
    /// The shards to search (all served by the node asked).
    pub shards: Vec<u32>,
    /// The query vectors, concatenated.
    pub vectors: Vec<f32>,
    /// Neighbours per query.
    pub k: usize,
    /// Beam width, if set.
    #[serde(default)]
    pub ef: Option<usize>,
    /// Exact scan.
    #[serde(default)]
    pub exact: bool,
    /// `auto`, `none` or `sq8`.
    pub quantization: String,
    /// Rescore depth as a multiple of k, if set.
    #[serde(default)]
    pub oversampling: Option<f32>,
    /// Rescore in f32.
    pub rescore: bool,
    /// The payload filter, as the caller sent it.
    #[serde(default)]
    pub filter: Option<Value>,
    /// `true`, `false` or a list of fields.
    pub with_payload: Value,
    /// Read-your-writes offsets of the shards' partitions.
    #[serde(default)]
    pub min_offsets: BTreeMap<u32, i64>,
    /// The pinned snapshot searched (the asked node's token), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
}

/// One hit of a leg's answer.
#[derive(Debug, Serialize, Deserialize)]
pub struct LegHit {
    /// The point id.
    pub id: PointId,
    /// The score as users see it.
    pub score: f32,
    /// The selected payload (a JSON object), when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Box<RawValue>>,
}

/// A leg's answer: per query its hits, best first, and the offsets of the
/// shards' partitions it reflects.
#[derive(Debug, Serialize, Deserialize)]
pub struct LegAnswer {
    /// Per query, the hits.
    pub hits: Vec<Vec<LegHit>>,
    /// Per partition of the shards searched, the first offset not reflected.
    pub offsets: BTreeMap<u32, i64>,
}

impl LegRequest {
    /// The leg of `search` over `queries` for `shards` of `collection`.
    pub fn new(
        collection: &str,
        shards: &[u32],
        search: &PreparedSearch,
        queries: &QueryBatch,
        shard_count: u32,
    ) -> Self {
        let p = &search.params;
        let with_payload = match &p.with_payload {
            PayloadSelector::None => Value::Bool(false),
            PayloadSelector::All => Value::Bool(true),
            PayloadSelector::Fields(f) => Value::from(f.clone()),
        };
        let min_offsets = search
            .min_offsets
            .iter()
            .filter(|(part, _)| shards.contains(&(**part % shard_count.max(1))))
            .map(|(part, off)| (*part, *off))
            .collect();
        Self {
            collection: collection.to_owned(),
            shards: shards.to_vec(),
            vectors: queries.values().to_vec(),
            k: p.k,
            ef: p.ef,
            exact: p.exact,
            quantization: quantization_name(p.quantization).to_owned(),
            oversampling: p.oversampling,
            rescore: p.rescore,
            filter: p.filter.clone(),
            with_payload,
            min_offsets,
            snapshot: None,
        }
    }

    /// This leg, searching the asked node's pinned snapshot `snapshot`.
    pub fn at(mut self, snapshot: Option<&str>) -> Self {
        self.snapshot = snapshot.map(str::to_owned);
        self
    }

    /// The search it asks for (validated) and its query vectors.
    fn into_parts(self) -> Result<(SearchRequest, Vectors), ApiError> {
        let snapshot = self.snapshot;
        let with_payload = match self.with_payload {
            Value::Bool(false) | Value::Null => PayloadSelector::None,
            Value::Bool(true) => PayloadSelector::All,
            Value::Array(fields) => PayloadSelector::Fields(
                fields
                    .into_iter()
                    .filter_map(|f| f.as_str().map(str::to_owned))
                    .collect(),
            ),
            other => {
                return Err(ApiError::BadRequest(format!(
                    "with_payload must be a boolean or a list of fields, got {other}"
                )))
            }
        };
        let params = SearchParams {
            k: self.k,
            ef: self.ef,
            exact: self.exact,
            quantization: self.quantization.parse().map_err(ApiError::BadRequest)?,
            oversampling: self.oversampling,
            rescore: self.rescore,
            filter: self.filter,
            with_payload,
            allow_partial: false,
        };
        params.validate()?;
        let request = SearchRequest {
            params,
            min_offsets: self.min_offsets,
            snapshot,
        };
        Ok((request, Vectors::Flat(self.vectors)))
    }
}

/// The name [`Quantization`] parses back from.
fn quantization_name(q: Quantization) -> &'static str {
    match q {
        Quantization::Auto => "auto",
        Quantization::None => "none",
        Quantization::Sq8 => "sq8",
    }
}

impl LegAnswer {
    /// The hits as the merging node holds them.
    pub fn into_hits(self) -> Vec<Vec<Hit>> {
        self.hits
            .into_iter()
            .map(|hits| {
                hits.into_iter()
                    .map(|h| Hit {
                        id: h.id,
                        score: h.score,
                        payload: h.payload.map(HitPayload::Raw),
                    })
                    .collect()
            })
            .collect()
    }
}

/// Answers a `search_shards` action: the search over the asked shards of
/// this node's collection, never fanned out again. Refused with 503 when
/// this node does not serve one of them (its caller asks another replica).
pub async fn answer(engine: &Arc<Engine>, body: &[u8]) -> Result<Vec<u8>, ApiError> {
    let leg: LegRequest = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("invalid search_shards body: {e}")))?;
    let collection = engine.collection_at(&leg.collection, leg.snapshot.as_deref())?;
    check_serves(&collection, &leg.collection, &leg.shards)?;
    let def = collection.def();
    let shards = leg.shards.clone();
    let (request, vectors) = leg.into_parts()?;
    let search = Arc::new(PreparedSearch::new(&def, request)?.only(&def, shards));
    let queries = QueryBatch::new(&def, vectors)?;
    let result: BatchResult = engine.search(&collection, &search, queries).await?;
    let only = search.only_shards.as_ref();
    let answer = LegAnswer {
        hits: result
            .hits
            .into_iter()
            .map(|hits| {
                hits.into_iter()
                    .map(|h| LegHit {
                        id: h.id,
                        score: h.score,
                        payload: h
                            .payload
                            .and_then(|p| RawValue::from_string(p.json_text()).ok()),
                    })
                    .collect()
            })
            .collect(),
        offsets: result
            .offsets
            .into_iter()
            .filter(|(p, _)| only.is_none_or(|o| o.has_partition(*p)))
            .collect(),
    };
    serde_json::to_vec(&answer).map_err(|e| ApiError::Internal(e.to_string()))
}

/// What a count, point or scroll leg reads: this node's collection, the
/// leg's filter parsed against it, and the shards asked for.
pub(super) struct LegTarget {
    pub(super) collection: Arc<Collection>,
    pub(super) filter: Option<eddy_filter::Filter>,
    pub(super) only: ShardSet,
}

impl LegTarget {
    /// The leg for `shards` of collection `name` (or of its pinned
    /// snapshot `snapshot`), filtered by `filter` (as the caller sent it):
    /// refused as [`check_serves`] says, or as a bad request when the
    /// filter does not parse.
    pub(super) fn open(
        engine: &Engine,
        name: &str,
        snapshot: Option<&str>,
        shards: Vec<u32>,
        filter: Option<&serde_json::Value>,
    ) -> Result<Self, ApiError> {
        let collection = engine.collection_at(name, snapshot)?;
        check_serves(&collection, name, &shards)?;
        let def = collection.def();
        let filter = filter
            .map(|v| {
                eddy_filter::Filter::parse(v, &def.payload_fields)
                    .map_err(|e| ApiError::BadRequest(e.to_string()))
            })
            .transpose()?;
        Ok(Self {
            only: ShardSet::new(&def, shards),
            collection,
            filter,
        })
    }
}

/// Refuses (503, so the caller asks another replica) a leg for `shards` of
/// `name` unless this node's `collection` is ready and serves them all.
pub(super) fn check_serves(
    collection: &Collection,
    name: &str,
    shards: &[u32],
) -> Result<(), ApiError> {
    if !collection.is_ready() {
        return Err(ApiError::Unavailable(format!(
            "{name:?} is still loading on this node"
        )));
    }
    if shards.is_empty() || shards.iter().any(|s| !collection.shards().contains(s)) {
        return Err(ApiError::Unavailable(format!(
            "this node serves shards {:?} of {name:?}, not all of {shards:?}",
            collection.shards(),
        )));
    }
    Ok(())
}
