//! Search over one collection: every live segment plus the tail, deleted and
//! shadowed rows masked, per-source top-k merged into one top-k.

use std::collections::BTreeMap;

use eddy_filter::Filter;
use eddy_model::{CollectionDef, PointId};
use eddy_segment::{search_sealed, Neighbor, Quantization, SealedQuery};
use serde_json::{Map, Value};

use crate::collection::{Collection, Served};
use crate::error::ApiError;

/// Largest `k` a request may ask for.
pub const MAX_K: usize = 10_000;

/// Which payload fields to return.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum PayloadSelector {
    /// None.
    #[default]
    None,
    /// The whole payload.
    All,
    /// These fields.
    Fields(Vec<String>),
}

/// Largest beam width a request may ask for.
pub const MAX_EF: usize = 8_192;
/// Largest oversampling factor a request may ask for.
pub const MAX_OVERSAMPLING: f32 = 100.0;

/// Options of one search request.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchParams {
    /// Neighbours per query.
    pub k: usize,
    /// Beam width of graph searches (default [`eddy_segment::DEFAULT_EF`]).
    pub ef: Option<usize>,
    /// Scan every row exactly instead of walking graphs.
    pub exact: bool,
    /// Codes a graph walk scores with.
    pub quantization: Quantization,
    /// Quantized candidates rescored in f32, as a multiple of `k`.
    pub oversampling: Option<f32>,
    /// Rescore quantized candidates in f32.
    pub rescore: bool,
    /// Payload filter (Qdrant-shaped JSON), checked against the collection's
    /// indexed fields before the search runs.
    pub filter: Option<Value>,
    /// Payload fields to return.
    pub with_payload: PayloadSelector,
}

impl Default for SearchParams {
    fn default() -> Self {
        Self {
            k: 10,
            ef: None,
            exact: false,
            quantization: Quantization::Auto,
            oversampling: None,
            rescore: true,
            filter: None,
            with_payload: PayloadSelector::None,
        }
    }
}

impl SearchParams {
    /// Checks the options.
    pub fn validate(&self) -> Result<(), ApiError> {
        if self.k == 0 || self.k > MAX_K {
            return Err(ApiError::BadRequest(format!(
                "k must be in 1..={MAX_K}, got {}",
                self.k
            )));
        }
        if let Some(ef) = self.ef {
            if ef == 0 || ef > MAX_EF {
                return Err(ApiError::BadRequest(format!(
                    "ef must be in 1..={MAX_EF}, got {ef}"
                )));
            }
        }
        if let Some(o) = self.oversampling {
            if !(1.0..=MAX_OVERSAMPLING).contains(&o) {
                return Err(ApiError::BadRequest(format!(
                    "oversampling must be in 1..={MAX_OVERSAMPLING}, got {o}"
                )));
            }
        }
        Ok(())
    }

    /// Parses the filter against the collection's indexed payload fields.
    pub fn parse_filter(&self, def: &CollectionDef) -> Result<Option<Filter>, ApiError> {
        match &self.filter {
            None | Some(Value::Null) => Ok(None),
            Some(v) => Filter::parse(v, &def.payload_fields)
                .map(Some)
                .map_err(|e| ApiError::BadRequest(e.to_string())),
        }
    }

    /// The per-segment search options.
    fn sealed<'a>(&self, filter: Option<&'a Filter>) -> SealedQuery<'a> {
        let defaults = SealedQuery::default();
        SealedQuery {
            k: self.k,
            ef: self.ef.unwrap_or(defaults.ef),
            exact: self.exact,
            quantization: self.quantization,
            oversampling: self.oversampling.unwrap_or(defaults.oversampling),
            rescore: self.rescore,
            filter,
            planner: defaults.planner,
        }
    }
}

/// Parses a `quantization` option (absent = auto).
pub fn parse_quantization(text: Option<&str>) -> Result<Quantization, ApiError> {
    match text {
        None | Some("") => Ok(Quantization::Auto),
        Some(t) => t.parse().map_err(ApiError::BadRequest),
    }
}

/// One result row.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// The point id.
    pub id: PointId,
    /// The score as users see it ([`eddy_model::Metric::reported`]): the
    /// similarity for cosine and dot, the squared distance for L2.
    pub score: f32,
    /// The selected payload, when asked for.
    pub payload: Option<Map<String, Value>>,
}

/// Results of a batch, with the offsets they reflect.
#[derive(Debug, Clone)]
pub struct BatchResult {
    /// Per query, the hits, closest first.
    pub hits: Vec<Vec<Hit>>,
    /// Per partition, the first offset the results do not reflect.
    pub offsets: BTreeMap<u32, i64>,
}

/// Checks a query vector against the collection and prepares it for the
/// metric (unit length for cosine).
pub fn prepare_query(def: &CollectionDef, mut vector: Vec<f32>) -> Result<Vec<f32>, ApiError> {
    if vector.len() != def.dimension as usize {
        return Err(ApiError::BadRequest(format!(
            "query vector has {} values, collection {} has dimension {}",
            vector.len(),
            def.name,
            def.dimension
        )));
    }
    eddy_event::validate_vector(&vector)
        .map_err(|r| ApiError::BadRequest(format!("query {}", r.detail)))?;
    if def.metric.normalizes() && !eddy_event::normalize(&mut vector) {
        return Err(ApiError::BadRequest(
            "query vector is all zeros (cosine needs a direction)".into(),
        ));
    }
    Ok(vector)
}

/// Where a candidate came from.
#[derive(Debug, Clone, Copy)]
enum Source {
    Tail(u32),
    Segment(usize, u32),
}

impl Collection {
    /// Runs prepared queries against the current snapshot and tail.
    ///
    /// The read lock is taken per query, not per batch, so a long batch never
    /// holds the tail writer back; the offsets reported are those of the
    /// first query, a lower bound for the whole batch.
    pub fn search(
        &self,
        queries: &[Vec<f32>],
        params: &SearchParams,
        filter: Option<&Filter>,
    ) -> BatchResult {
        let offsets = self.served.read().visible_offsets();
        let hits = queries
            .iter()
            .map(|q| search_one(&self.served.read(), q, params, filter))
            .collect();
        BatchResult { hits, offsets }
    }

    /// Segments a query searches now.
    pub fn segment_count(&self) -> usize {
        self.served.read().snapshot.segments.len()
    }
}

fn search_one(
    live: &Served,
    query: &[f32],
    params: &SearchParams,
    filter: Option<&Filter>,
) -> Vec<Hit> {
    let k = params.k;
    let metric = live.tail.metric();
    let mut candidates: Vec<(Neighbor, Source)> = Vec::new();
    let tail_accept = |row: u32| {
        filter.is_none_or(|f| {
            let json = live.tail.row(row).payload_json;
            let payload = if json.is_empty() {
                Value::Object(Map::new())
            } else {
                serde_json::from_slice(json).unwrap_or(Value::Null)
            };
            f.matches(&payload)
        })
    };
    for n in live.tail.search(query, k, &tail_accept) {
        candidates.push((n, Source::Tail(n.row)));
    }
    let sealed = params.sealed(filter);
    let tail_empty = live.tail.is_empty();
    for (i, s) in live.snapshot.segments.iter().enumerate() {
        let seg = &s.segment;
        let accept = |row: u32| {
            !s.deleted.contains(row)
                && (tail_empty
                    || seg
                        .id(row)
                        .is_none_or(|id| live.tail.touched(&id).is_none()))
        };
        for n in search_sealed(seg, s.index.as_deref(), query, &sealed, &accept) {
            candidates.push((n, Source::Segment(i, n.row)));
        }
    }
    // Best first; a stable sort keeps ties in source order (tail, then segments).
    candidates.sort_by(|a, b| b.0.score.total_cmp(&a.0.score));
    candidates.truncate(k);
    candidates
        .into_iter()
        .filter_map(|(n, src)| {
            let (id, payload_json) = match src {
                Source::Tail(row) => {
                    let r = live.tail.row(row);
                    (r.id.clone(), r.payload_json)
                }
                Source::Segment(i, row) => {
                    let seg = &live.snapshot.segments[i].segment;
                    (seg.id(row)?, seg.payload_json(row))
                }
            };
            Some(Hit {
                id,
                score: metric.reported(n.score),
                payload: select_payload(payload_json, &params.with_payload),
            })
        })
        .collect()
}

/// Parses a stored payload and keeps the selected fields.
pub fn select_payload(json: &[u8], selector: &PayloadSelector) -> Option<Map<String, Value>> {
    let parse = || -> Map<String, Value> {
        if json.is_empty() {
            Map::new()
        } else {
            serde_json::from_slice(json).unwrap_or_default()
        }
    };
    match selector {
        PayloadSelector::None => None,
        PayloadSelector::All => Some(parse()),
        PayloadSelector::Fields(fields) => {
            let mut all = parse();
            Some(fields.iter().filter_map(|f| all.remove_entry(f)).collect())
        }
    }
}

/// A point looked up by id: the tail first, then the segments.
#[derive(Debug, Clone)]
pub struct PointRecord {
    /// The id.
    pub id: PointId,
    /// The stored vector (normalised for cosine).
    pub vector: Vec<f32>,
    /// The payload.
    pub payload: Map<String, Value>,
}

impl Collection {
    /// The current version of point `id`, if it exists.
    pub fn get(&self, id: &PointId) -> Option<PointRecord> {
        let live = self.served.read();
        let all = PayloadSelector::All;
        if let Some(touch) = live.tail.touched(id) {
            if touch.deleted {
                return None;
            }
            let row = live.tail.row(live.tail.row_of(id)?);
            return Some(PointRecord {
                id: id.clone(),
                vector: row.vector.to_vec(),
                payload: select_payload(row.payload_json, &all).unwrap_or_default(),
            });
        }
        let (i, row) = live.snapshot.find(id)?;
        let seg = &live.snapshot.segments[i].segment;
        Some(PointRecord {
            id: id.clone(),
            vector: seg.vector(row).to_vec(),
            payload: select_payload(seg.payload_json(row), &all).unwrap_or_default(),
        })
    }
}
