//! The HTTP JSON API (axum): search, batch search, collections, points,
//! count, health, readiness and metrics.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use eddy_model::{CollectionDef, FieldType, IdType, Metric, PointId};
use prometheus::Registry;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::collection::Collection;
use crate::engine::Engine;
use crate::error::ApiError;
use crate::search::{parse_quantization, BatchResult, Hit, PayloadSelector, SearchParams};

/// State shared by the handlers.
#[derive(Clone)]
pub struct HttpState {
    /// The engine.
    pub engine: Arc<Engine>,
    /// The registry `/metrics` exports.
    pub registry: Registry,
}

/// Largest accepted request body (a batch of many vectors).
const MAX_BODY_BYTES: usize = 64 << 20;

/// The router.
pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/v1/collections", get(list_collections))
        .route(
            "/v1/collections/{c}",
            get(get_collection).put(put_collection),
        )
        .route("/v1/collections/{c}/search", post(search))
        .route("/v1/collections/{c}/search/batch", post(search_batch))
        .route("/v1/collections/{c}/points/{id}", get(get_point))
        .route("/v1/collections/{c}/count", post(count))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// `with_payload`: a flag or a list of fields.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(untagged)]
enum WithPayload {
    #[default]
    None,
    Flag(bool),
    Fields(Vec<String>),
}

impl From<WithPayload> for PayloadSelector {
    fn from(w: WithPayload) -> Self {
        match w {
            WithPayload::None | WithPayload::Flag(false) => PayloadSelector::None,
            WithPayload::Flag(true) => PayloadSelector::All,
            WithPayload::Fields(f) => PayloadSelector::Fields(f),
        }
    }
}

fn default_k() -> usize {
    10
}

/// One search request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchBody {
    vector: Vec<f32>,
    #[serde(default = "default_k", alias = "limit")]
    k: usize,
    #[serde(default)]
    exact: bool,
    #[serde(default)]
    ef: Option<usize>,
    #[serde(default)]
    quantization: Option<String>,
    #[serde(default)]
    oversampling: Option<f32>,
    #[serde(default)]
    rescore: Option<bool>,
    #[serde(default)]
    with_payload: WithPayload,
    #[serde(default)]
    filter: Option<Value>,
    #[serde(default)]
    min_offsets: BTreeMap<u32, i64>,
}

/// A search body split into vector, options and read-your-writes offsets.
type ParsedSearch = (Vec<f32>, SearchParams, BTreeMap<u32, i64>);

impl SearchBody {
    fn params(self) -> Result<ParsedSearch, ApiError> {
        Ok((
            self.vector,
            SearchParams {
                k: self.k,
                ef: self.ef,
                exact: self.exact,
                quantization: parse_quantization(self.quantization.as_deref())?,
                oversampling: self.oversampling,
                rescore: self.rescore.unwrap_or(true),
                filter: self.filter,
                with_payload: self.with_payload.into(),
            },
            self.min_offsets,
        ))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchBody {
    searches: Vec<SearchBody>,
}

#[derive(Serialize)]
struct HitJson {
    id: PointId,
    score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<serde_json::Map<String, Value>>,
}

impl From<Hit> for HitJson {
    fn from(h: Hit) -> Self {
        Self {
            id: h.id,
            score: h.score,
            payload: h.payload,
        }
    }
}

fn body<T>(payload: Result<Json<T>, JsonRejection>) -> Result<T, ApiError> {
    payload.map(|Json(t)| t).map_err(|rejection| {
        ApiError::BadRequest(format!("invalid request body: {}", rejection.body_text()))
    })
}

/// Times a handler and counts it by API and status.
async fn observed<F>(state: &HttpState, api: &str, fut: F) -> Response
where
    F: std::future::Future<Output = Result<Response, ApiError>>,
{
    let started = Instant::now();
    let response = match fut.await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    let status = response.status().as_u16().to_string();
    let m = &state.engine.metrics;
    m.requests.with_label_values(&[api, &status]).inc();
    m.latency
        .with_label_values(&[api, &status])
        .observe(started.elapsed().as_secs_f64());
    response
}

fn result_json(result: BatchResult, took: Instant) -> (Vec<Value>, Value, f64) {
    let hits = result
        .hits
        .into_iter()
        .map(|hits| json!(hits.into_iter().map(HitJson::from).collect::<Vec<_>>()))
        .collect();
    (
        hits,
        json!(result.offsets),
        took.elapsed().as_secs_f64() * 1e3,
    )
}

async fn search(
    State(state): State<HttpState>,
    Path(c): Path<String>,
    payload: Result<Json<SearchBody>, JsonRejection>,
) -> Response {
    observed(&state, "http_search", async {
        let started = Instant::now();
        let (vector, params, min_offsets) = body(payload)?.params()?;
        let result = state
            .engine
            .search(&c, vec![vector], params, min_offsets)
            .await?;
        state
            .engine
            .metrics
            .queries
            .with_label_values(&["http_search"])
            .inc();
        let (mut hits, offsets, took_ms) = result_json(result, started);
        let result = hits.pop().unwrap_or_else(|| json!([]));
        Ok(Json(json!({"result": result, "offsets": offsets, "took_ms": took_ms})).into_response())
    })
    .await
}

async fn search_batch(
    State(state): State<HttpState>,
    Path(c): Path<String>,
    payload: Result<Json<BatchBody>, JsonRejection>,
) -> Response {
    observed(&state, "http_batch", async {
        let started = Instant::now();
        let batch = body(payload)?;
        let n = batch.searches.len();
        // Requests that share options run as one batch on the pool; others
        // run one by one.
        let mut results = Vec::with_capacity(n);
        let mut offsets = Value::Null;
        let mut parsed = Vec::with_capacity(n);
        for (i, s) in batch.searches.into_iter().enumerate() {
            parsed.push(
                s.params()
                    .map_err(|e| ApiError::BadRequest(format!("search {i}: {e}")))?,
            );
        }
        let uniform = parsed
            .windows(2)
            .all(|w| w[0].1 == w[1].1 && w[0].2 == w[1].2);
        if uniform && !parsed.is_empty() {
            let (params, min) = (parsed[0].1.clone(), parsed[0].2.clone());
            let queries = parsed.into_iter().map(|(v, _, _)| v).collect();
            let result = state.engine.search(&c, queries, params, min).await?;
            let (hits, o, _) = result_json(result, started);
            results = hits;
            offsets = o;
        } else {
            for (v, params, min) in parsed {
                let result = state.engine.search(&c, vec![v], params, min).await?;
                let (mut hits, o, _) = result_json(result, started);
                results.push(hits.pop().unwrap_or_else(|| json!([])));
                offsets = o;
            }
        }
        state
            .engine
            .metrics
            .queries
            .with_label_values(&["http_batch"])
            .inc_by(n as u64);
        let results: Vec<Value> = results.into_iter().map(|r| json!({"result": r})).collect();
        let took_ms = started.elapsed().as_secs_f64() * 1e3;
        Ok(
            Json(json!({"results": results, "offsets": offsets, "took_ms": took_ms}))
                .into_response(),
        )
    })
    .await
}

fn collection_info(c: &Collection) -> Value {
    let served = c.served.read();
    json!({
        "name": c.def.name,
        "topic": c.def.topic,
        "dimension": c.def.dimension,
        "metric": c.def.metric,
        "id_type": c.def.id_type,
        "payload_fields": c.def.payload_fields,
        "status": {
            "ready": c.is_ready(),
            "manifest_version": served.snapshot.version,
            "segments": served.snapshot.segments.len(),
            "indexed_segments": served.snapshot.segments.iter().filter(|s| s.index.is_some()).count(),
            "sealed_rows": served.snapshot.sealed_rows(),
            "tail_rows": served.tail.live_rows(),
            "points": served.count(),
            "offsets": served.visible_offsets(),
        }
    })
}

async fn list_collections(State(state): State<HttpState>) -> Response {
    observed(&state, "http_collections", async {
        let all: Vec<Value> = state
            .engine
            .collections()
            .iter()
            .map(|c| collection_info(c))
            .collect();
        Ok(Json(json!({"collections": all})).into_response())
    })
    .await
}

async fn get_collection(State(state): State<HttpState>, Path(c): Path<String>) -> Response {
    observed(&state, "http_collections", async {
        let collection = state.engine.collection(&c)?;
        Ok(Json(collection_info(&collection)).into_response())
    })
    .await
}

/// Body of `PUT /v1/collections/{c}`: the definition without the name.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    topic: String,
    dimension: u32,
    #[serde(default)]
    metric: Metric,
    #[serde(default)]
    id_type: IdType,
    #[serde(default)]
    payload_fields: BTreeMap<String, FieldType>,
}

async fn put_collection(
    State(state): State<HttpState>,
    Path(c): Path<String>,
    payload: Result<Json<CreateBody>, JsonRejection>,
) -> Response {
    observed(&state, "http_collections", async {
        let b = body(payload)?;
        if b.name.as_ref().is_some_and(|n| *n != c) {
            return Err(ApiError::BadRequest(format!(
                "body names collection {:?}, path names {c:?}",
                b.name
            )));
        }
        let def = CollectionDef {
            name: c.clone(),
            topic: b.topic,
            dimension: b.dimension,
            metric: b.metric,
            id_type: b.id_type,
            payload_fields: b.payload_fields,
        }
        .validated()
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let engine = state.engine.clone();
        let created = tokio::task::spawn_blocking(move || engine.create_collection(def))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))??;
        let collection = state.engine.collection(&c)?;
        let status = if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        Ok((status, Json(collection_info(&collection))).into_response())
    })
    .await
}

async fn get_point(
    State(state): State<HttpState>,
    Path((c, id)): Path<(String, String)>,
) -> Response {
    observed(&state, "http_point", async {
        let collection = state.engine.collection(&c)?;
        let id = PointId::parse(&id, collection.def.id_type)
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let point = collection
            .get(&id)
            .ok_or_else(|| ApiError::NotFound(format!("point {id} not found in {c}")))?;
        Ok(
            Json(json!({"id": point.id, "vector": point.vector, "payload": point.payload}))
                .into_response(),
        )
    })
    .await
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CountBody {
    #[serde(default)]
    filter: Option<Value>,
}

async fn count(
    State(state): State<HttpState>,
    Path(c): Path<String>,
    payload: Result<Json<CountBody>, JsonRejection>,
) -> Response {
    observed(&state, "http_count", async {
        let collection = state.engine.collection(&c)?;
        // An empty body counts everything.
        let b = match payload {
            Err(JsonRejection::MissingJsonContentType(_)) => CountBody::default(),
            other => body(other)?,
        };
        if b.filter.is_some() {
            return Err(ApiError::BadRequest(
                "payload filters are not supported by this version yet".into(),
            ));
        }
        let served = collection.served.read();
        Ok(
            Json(json!({"count": served.count(), "offsets": served.visible_offsets()}))
                .into_response(),
        )
    })
    .await
}

async fn readyz(State(state): State<HttpState>) -> Response {
    let not_ready: BTreeMap<String, String> = state.engine.not_ready().into_iter().collect();
    if not_ready.is_empty() {
        (StatusCode::OK, "ready").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"ready": false, "not_ready": not_ready})),
        )
            .into_response()
    }
}

async fn metrics(State(state): State<HttpState>) -> Response {
    let (content_type, body) = eddy_config::metrics::encode(&state.registry);
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}
