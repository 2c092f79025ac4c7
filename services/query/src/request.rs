//! One search request, whichever door it came through: the HTTP JSON body,
//! a Flight JSON ticket or command, or the protobuf `eddy.v1.SearchOptions`.
//! Defaults and caps live here and nowhere else; the doors only say which
//! fields they allow (a collection in the body, vectors in the command).

use std::collections::BTreeMap;

use eddy_proto::v1::SearchOptions;
use eddy_segment::Quantization;
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;

/// Neighbours per query when a request does not say.
pub const DEFAULT_K: usize = 10;
/// Largest `k` a request may ask for.
pub const MAX_K: usize = 10_000;
/// Largest beam width a request may ask for.
pub const MAX_EF: usize = 8_192;
/// Largest oversampling factor a request may ask for.
pub const MAX_OVERSAMPLING: f32 = 100.0;
/// Most hits one answer may hold (query vectors × `k`): 100 queries at the
/// largest `k`, or a full batch of 10,000 at `k` = 100.
pub const MAX_ANSWER_HITS: usize = 1_000_000;

/// Refuses an answer of `queries` × `k` hits over [`MAX_ANSWER_HITS`].
pub fn check_answer_size(queries: usize, k: usize) -> Result<(), ApiError> {
    let hits = queries.saturating_mul(k);
    if hits > MAX_ANSWER_HITS {
        return Err(ApiError::BadRequest(format!(
            "{queries} queries x k={k} is {hits} hits; one answer holds at most {MAX_ANSWER_HITS}: send fewer queries per request or a smaller k"
        )));
    }
    Ok(())
}

/// Refuses a request whose searches ask for `hits` hits in all (rows of
/// different `k`) over [`MAX_ANSWER_HITS`].
pub fn check_total_hits(hits: usize) -> Result<(), ApiError> {
    if hits > MAX_ANSWER_HITS {
        return Err(ApiError::BadRequest(format!(
            "the request asks for {hits} hits in all; one answer holds at most {MAX_ANSWER_HITS}"
        )));
    }
    Ok(())
}

/// Points per scroll page when a request does not say.
pub const DEFAULT_SCROLL_LIMIT: usize = 100;
/// Most points per scroll page.
pub const MAX_SCROLL_LIMIT: usize = 10_000;

/// A scan of a collection's live points (HTTP scroll, Flight scan ticket):
/// which points, which columns, and where a scroll resumes.
#[derive(Debug, Clone, Default)]
pub struct ScanRequest {
    /// The collection (a Flight ticket names it; HTTP takes the path's).
    pub collection: Option<String>,
    /// A payload filter (the search filter language).
    pub filter: Option<Value>,
    /// Points per page (scroll).
    pub limit: usize,
    /// Resume after this id (scroll; the previous page's `next_after`).
    pub after: Option<Value>,
    /// Which payload fields to return.
    pub with_payload: PayloadSelector,
    /// Whether to return vectors.
    pub with_vector: bool,
    /// Read this pinned snapshot (its token) instead of the live collection.
    pub snapshot: Option<String>,
    /// On a split collection, answer from the shards at hand (marked
    /// partial) when no node serving the others answers, instead of 503.
    pub allow_partial: bool,
}

/// The JSON form of a [`ScanRequest`]: an HTTP scroll body, or a Flight
/// ticket whose `scan` names the collection.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScanRequestJson {
    /// The collection (a Flight scan ticket's key; HTTP takes the path's).
    #[serde(default)]
    scan: Option<String>,
    /// A payload filter (must / should / must_not conditions).
    #[serde(default)]
    #[schema(value_type = Object)]
    filter: Option<Value>,
    /// Points per page, 1..=10,000 (default 100).
    #[serde(default)]
    limit: Option<usize>,
    /// Resume after this id (the previous page's `next_after`).
    #[serde(default)]
    #[schema(value_type = Object)]
    after: Option<Value>,
    /// `true` (all, the default), `false` (none) or a list of field names.
    #[serde(default)]
    #[schema(value_type = Object)]
    with_payload: Option<Value>,
    /// Return vectors.
    #[serde(default)]
    with_vector: bool,
    /// A pinned snapshot's token.
    #[serde(default)]
    snapshot: Option<String>,
    /// On a split collection, answer from the shards at hand (marked
    /// partial) when no node serving the others answers, instead of 503.
    #[serde(default)]
    allow_partial: bool,
}

impl ScanRequestJson {
    /// Checks the values and applies defaults (payload: all of it).
    pub fn into_request(self) -> Result<ScanRequest, ApiError> {
        let limit = self.limit.unwrap_or(DEFAULT_SCROLL_LIMIT);
        if limit == 0 || limit > MAX_SCROLL_LIMIT {
            return Err(ApiError::BadRequest(format!(
                "limit must be in 1..={MAX_SCROLL_LIMIT}, got {limit}"
            )));
        }
        let with_payload = match self.with_payload {
            None => PayloadSelector::All,
            some => selector(some)?,
        };
        Ok(ScanRequest {
            collection: self.scan,
            filter: self.filter,
            limit,
            after: self.after,
            with_payload,
            with_vector: self.with_vector,
            snapshot: self.snapshot,
            allow_partial: self.allow_partial,
        })
    }
}

/// Largest number of query vectors in one request (or one DoExchange batch).
pub const MAX_BATCH_QUERIES: usize = 10_000;
/// Largest number of different option sets in one HTTP batch: each runs as
/// its own batch on the search pool.
pub const MAX_BATCH_GROUPS: usize = 64;

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

/// Options of one search request, validated by [`SearchParams::validate`].
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
    /// Payload filter (Qdrant-shaped JSON), parsed against the collection's
    /// indexed fields once per request ([`crate::prepared::PreparedSearch`]).
    pub filter: Option<Value>,
    /// Payload fields to return.
    pub with_payload: PayloadSelector,
    /// Answer from the shards at hand when some cannot be reached, marked
    /// partial (default: such a search fails with 503).
    pub allow_partial: bool,
}

impl Default for SearchParams {
    fn default() -> Self {
        Self {
            k: DEFAULT_K,
            ef: None,
            exact: false,
            quantization: Quantization::Auto,
            oversampling: None,
            rescore: true,
            filter: None,
            with_payload: PayloadSelector::None,
            allow_partial: false,
        }
    }
}

impl SearchParams {
    /// Checks the options against the caps.
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
}

/// A search request: its options and the offsets it must reflect.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SearchRequest {
    /// Options.
    pub params: SearchParams,
    /// Read-your-writes: per partition, an offset the answer must reflect.
    pub min_offsets: BTreeMap<u32, i64>,
    /// Search this pinned snapshot (its token) instead of the live
    /// collection.
    pub snapshot: Option<String>,
}

/// Query vectors as a door received them.
#[derive(Debug, Clone, PartialEq)]
pub enum Vectors {
    /// One vector per entry.
    Rows(Vec<Vec<f32>>),
    /// Vectors concatenated (protobuf tickets); split by the collection's
    /// dimension.
    Flat(Vec<f32>),
}

/// The JSON form of a search request, shared by the HTTP body, a Flight
/// JSON ticket and a Flight JSON exchange command.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequestJson {
    /// The collection (optional over HTTP: the path names it).
    #[serde(default)]
    collection: Option<String>,
    /// One query vector.
    #[serde(default)]
    vector: Option<Vec<f32>>,
    /// Several query vectors (Flight tickets).
    #[serde(default)]
    vectors: Option<Vec<Vec<f32>>>,
    /// Neighbours per query, 1..=10,000 (default 10; alias `limit`).
    #[serde(default, alias = "limit")]
    k: Option<usize>,
    /// Graph beam width, 1..=8,192.
    #[serde(default)]
    ef: Option<usize>,
    /// Scan every row exactly.
    #[serde(default)]
    exact: bool,
    /// `auto`, `none` or `sq8`.
    #[serde(default)]
    quantization: Option<String>,
    /// Quantized candidates rescored in f32, as a multiple of k (1..=100).
    #[serde(default)]
    oversampling: Option<f32>,
    /// Rescore quantized candidates in f32 (default true).
    #[serde(default)]
    rescore: Option<bool>,
    /// `true` (all), `false` (none) or a list of field names.
    #[serde(default)]
    #[schema(value_type = Object)]
    with_payload: Option<Value>,
    /// A payload filter (must / should / must_not conditions).
    #[serde(default)]
    #[schema(value_type = Object)]
    filter: Option<Value>,
    /// Read-your-writes: per partition, an offset the answer must reflect.
    #[serde(default)]
    min_offsets: BTreeMap<u32, i64>,
    /// A pinned snapshot's token.
    #[serde(default)]
    snapshot: Option<String>,
    /// On a split collection, answer from the shards at hand when others
    /// cannot be reached, marked partial with the missing shards named
    /// (default: fail with 503).
    #[serde(default)]
    allow_partial: bool,
}

/// The parts of a [`SearchRequestJson`].
#[derive(Debug)]
pub struct ParsedJson {
    /// The collection it names, if any.
    pub collection: Option<String>,
    /// Its vectors (`vector` or `vectors`), if any.
    pub vectors: Option<Vectors>,
    /// The request.
    pub request: SearchRequest,
}

impl SearchRequestJson {
    /// Parses JSON bytes (a Flight ticket or command).
    pub fn from_slice(bytes: &[u8]) -> Result<Self, ApiError> {
        serde_json::from_slice(bytes)
            .map_err(|e| ApiError::BadRequest(format!("invalid JSON search request: {e}")))
    }

    /// Splits the request into collection, vectors and options (validated).
    pub fn into_parts(self) -> Result<ParsedJson, ApiError> {
        let vectors = match (self.vector, self.vectors) {
            (None, None) => None,
            (Some(v), None) => Some(Vectors::Rows(vec![v])),
            (None, Some(v)) => Some(Vectors::Rows(v)),
            (Some(_), Some(_)) => {
                return Err(ApiError::BadRequest(
                    "give either `vector` or `vectors`, not both".into(),
                ))
            }
        };
        let params = SearchParams {
            k: self.k.unwrap_or(DEFAULT_K),
            ef: self.ef,
            exact: self.exact,
            quantization: parse_quantization(self.quantization.as_deref())?,
            oversampling: self.oversampling,
            rescore: self.rescore.unwrap_or(true),
            filter: self.filter.filter(|f| !f.is_null()),
            with_payload: selector(self.with_payload)?,
            allow_partial: self.allow_partial,
        };
        params.validate()?;
        Ok(ParsedJson {
            collection: self.collection,
            vectors,
            request: SearchRequest {
                params,
                min_offsets: self.min_offsets,
                snapshot: self.snapshot,
            },
        })
    }
}

/// The request of a protobuf `SearchOptions` (absent = all defaults),
/// validated.
pub fn from_proto(o: Option<SearchOptions>) -> Result<SearchRequest, ApiError> {
    let o = o.unwrap_or_default();
    let filter = if o.filter_json.trim().is_empty() {
        None
    } else {
        Some(
            serde_json::from_str(&o.filter_json)
                .map_err(|e| ApiError::BadRequest(format!("filter_json is not valid JSON: {e}")))?,
        )
    };
    let with_payload = if o.with_payload.is_empty() {
        PayloadSelector::None
    } else if o.with_payload == ["*"] {
        PayloadSelector::All
    } else {
        PayloadSelector::Fields(o.with_payload)
    };
    let params = SearchParams {
        k: if o.k == 0 { DEFAULT_K } else { o.k as usize },
        ef: (o.ef > 0).then_some(o.ef as usize),
        exact: o.exact,
        quantization: parse_quantization(Some(&o.quantization))?,
        oversampling: (o.oversampling > 0.0).then_some(o.oversampling),
        rescore: o.rescore.unwrap_or(true),
        filter,
        with_payload,
        allow_partial: o.allow_partial,
    };
    params.validate()?;
    Ok(SearchRequest {
        params,
        min_offsets: o.min_offsets.into_iter().collect(),
        snapshot: (!o.snapshot.is_empty()).then_some(o.snapshot),
    })
}

/// Parses a `quantization` option (absent or empty = auto).
fn parse_quantization(text: Option<&str>) -> Result<Quantization, ApiError> {
    match text {
        None | Some("") => Ok(Quantization::Auto),
        Some(t) => t.parse().map_err(ApiError::BadRequest),
    }
}

/// `with_payload`: absent / `false` (none), `true` (all), or a list of fields.
fn selector(v: Option<Value>) -> Result<PayloadSelector, ApiError> {
    match v {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(PayloadSelector::None),
        Some(Value::Bool(true)) => Ok(PayloadSelector::All),
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|i| match i {
                Value::String(s) => Ok(s),
                other => Err(ApiError::BadRequest(format!(
                    "with_payload entries must be strings, got {other}"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(PayloadSelector::Fields),
        Some(other) => Err(ApiError::BadRequest(format!(
            "with_payload must be a bool or a list of fields, got {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<ParsedJson, ApiError> {
        SearchRequestJson::from_slice(json.as_bytes())?.into_parts()
    }

    #[test]
    fn json_defaults_and_aliases() {
        let p = parse(r#"{"vector":[1,2],"limit":3}"#).expect("parses");
        assert_eq!(p.request.params.k, 3);
        assert_eq!(p.request.params.ef, None);
        assert!(p.request.params.rescore);
        assert_eq!(p.vectors, Some(Vectors::Rows(vec![vec![1.0, 2.0]])));
        let p = parse(r#"{"collection":"c","with_payload":["a"],"filter":null}"#).expect("parses");
        assert_eq!(p.collection.as_deref(), Some("c"));
        assert_eq!(p.request.params.filter, None);
        assert_eq!(
            p.request.params.with_payload,
            PayloadSelector::Fields(vec!["a".into()])
        );
    }

    #[test]
    fn json_and_proto_share_defaults_and_caps() {
        let json = parse("{}").expect("parses").request;
        let proto = from_proto(None).expect("defaults");
        assert_eq!(json, proto);
        for bad in [
            r#"{"k":0}"#,
            r#"{"k":10001}"#,
            r#"{"ef":9000}"#,
            r#"{"oversampling":0.5}"#,
            r#"{"quantization":"pq9"}"#,
            r#"{"with_payload":3}"#,
            r#"{"vector":[1],"vectors":[[1]]}"#,
            r#"{"nope":1}"#,
        ] {
            let err = parse(bad).expect_err(bad);
            assert!(matches!(err, ApiError::BadRequest(_)), "{bad}: {err:?}");
        }
        let too_big = SearchOptions {
            k: 20_000,
            ..Default::default()
        };
        assert!(from_proto(Some(too_big)).is_err());
    }
}
