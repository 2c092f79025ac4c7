//! The HTTP JSON API (axum): search, batch search, collections, points,
//! count, health, readiness and metrics.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use eddy_model::{CollectionDef, FieldType, IdType, Metric, PointId};
use prometheus::Registry;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::auth::{self, ApiKeys, Scope};
use crate::collection::Collection;
use crate::engine::Engine;
use crate::error::ApiError;
use crate::policy::CollectionPolicy;
use crate::prepared::{PreparedSearch, QueryBatch};
use crate::request::{
    ScanRequestJson, SearchRequest, SearchRequestJson, Vectors, MAX_ANSWER_HITS, MAX_BATCH_GROUPS,
    MAX_BATCH_QUERIES,
};
use crate::results::{BatchResult, Hit};

/// State shared by the handlers.
#[derive(Clone)]
pub struct HttpState {
    /// The engine.
    pub engine: Arc<Engine>,
    /// The registry `/metrics` exports.
    pub registry: Registry,
    /// Who may call what.
    pub keys: Arc<ApiKeys>,
    /// Which collections `PUT /v1/collections/{c}` may create.
    pub policy: Arc<CollectionPolicy>,
}

/// Largest accepted request body (a batch of many vectors).
const MAX_BODY_BYTES: usize = 64 << 20;

/// The router. Every route but `/healthz` and `/readyz` needs a key when
/// keys are configured: a read key for reads (GET, and POST searches and
/// counts), an admin key for writes (PUT, PATCH, DELETE).
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
        .route("/v1/collections/{c}/scroll", post(scroll))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authorize,
        ))
        .with_state(state)
}

/// Lets a request through if its key covers it (see [`router`]) and a
/// request slot is free (`--max-concurrent-requests`; health, readiness
/// and metrics need none); else answers 401, 403 or 429, counted under
/// `api="http_auth"` or `api="http_limit"`.
async fn authorize(
    State(state): State<HttpState>,
    request: axum::extract::Request,
    next: Next,
) -> Response {
    let need = match request.uri().path() {
        "/healthz" | "/readyz" => return next.run(request).await,
        _ if matches!(
            *request.method(),
            Method::PUT | Method::PATCH | Method::DELETE
        ) =>
        {
            Scope::Admin
        }
        _ => Scope::Read,
    };
    let headers = request.headers();
    let presented = auth::presented_key(|name| headers.get(name).and_then(|v| v.to_str().ok()));
    let refuse = |api: &str, e: ApiError| {
        state
            .engine
            .metrics
            .requests
            .with_label_values(&[api, e.kind()])
            .inc();
        e.into_response()
    };
    if let Err(e) = state.keys.authorize(presented, need) {
        return refuse("http_auth", e);
    }
    if request.uri().path() == "/metrics" {
        return next.run(request).await;
    }
    match state.engine.requests.take() {
        Ok(_slot) => next.run(request).await,
        Err(e) => refuse("http_limit", e),
    }
}

/// Body of `POST /search/batch`: one search request per entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchBody {
    searches: Vec<SearchRequestJson>,
}

/// Answer of `POST /search`.
#[derive(Serialize)]
struct SearchAnswer<'a> {
    result: &'a [Hit],
    offsets: &'a BTreeMap<u32, i64>,
    /// Why the answer may miss published events (absent when it cannot).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    stale: Vec<String>,
    took_ms: f64,
}

/// One entry of the answer of `POST /search/batch`.
#[derive(Serialize)]
struct BatchEntry<'a> {
    result: &'a [Hit],
}

/// Answer of `POST /search/batch`.
#[derive(Serialize)]
struct BatchAnswer<'a> {
    results: Vec<BatchEntry<'a>>,
    offsets: &'a BTreeMap<u32, i64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    stale: Vec<String>,
    took_ms: f64,
}

/// The one query vector and the request of a search body; the collection
/// is the path's (a body may repeat it).
fn one_search(body: SearchRequestJson, path: &str) -> Result<(Vec<f32>, SearchRequest), ApiError> {
    let parsed = body.into_parts()?;
    if let Some(named) = parsed.collection.filter(|n| n != path) {
        return Err(ApiError::BadRequest(format!(
            "body names collection {named:?}, path names {path:?}"
        )));
    }
    match parsed.vectors {
        Some(Vectors::Rows(mut rows)) if rows.len() == 1 => {
            Ok((rows.pop().unwrap_or_default(), parsed.request))
        }
        Some(_) => Err(ApiError::BadRequest(
            "a search takes one `vector`; send several through /search/batch".into(),
        )),
        None => Err(ApiError::BadRequest("missing field `vector`".into())),
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

async fn search(
    State(state): State<HttpState>,
    Path(c): Path<String>,
    payload: Result<Json<SearchRequestJson>, JsonRejection>,
) -> Response {
    observed(&state, "http_search", async {
        let started = Instant::now();
        let (vector, request) = one_search(body(payload)?, &c)?;
        let collection = state
            .engine
            .collection_at(&c, request.snapshot.as_deref())?;
        let search = Arc::new(PreparedSearch::new(collection.def(), request)?);
        let queries = QueryBatch::new(collection.def(), Vectors::Rows(vec![vector]))?;
        let result = state.engine.search(&collection, &search, queries).await?;
        state
            .engine
            .metrics
            .queries
            .with_label_values(&["http_search"])
            .inc();
        Ok(Json(SearchAnswer {
            result: result.hits.first().map_or(&[], Vec::as_slice),
            offsets: &result.offsets,
            stale: collection.staleness(),
            took_ms: started.elapsed().as_secs_f64() * 1e3,
        })
        .into_response())
    })
    .await
}

/// Searches of a batch that share their options, run as one batch.
struct Group {
    request: SearchRequest,
    /// (position in the request, query vector)
    queries: Vec<(usize, Vec<f32>)>,
}

/// Groups a batch's searches by their options (at most
/// [`MAX_BATCH_GROUPS`] different ones, [`MAX_BATCH_QUERIES`] in all).
fn group_searches(searches: Vec<SearchRequestJson>, path: &str) -> Result<Vec<Group>, ApiError> {
    if searches.len() > MAX_BATCH_QUERIES {
        return Err(ApiError::BadRequest(format!(
            "{} searches in one batch; at most {MAX_BATCH_QUERIES}",
            searches.len()
        )));
    }
    let mut groups: Vec<Group> = Vec::new();
    for (i, s) in searches.into_iter().enumerate() {
        let (vector, request) =
            one_search(s, path).map_err(|e| ApiError::BadRequest(format!("search {i}: {e}")))?;
        if let Some(g) = groups.iter_mut().find(|g| g.request == request) {
            g.queries.push((i, vector));
        } else if groups.len() < MAX_BATCH_GROUPS {
            groups.push(Group {
                request,
                queries: vec![(i, vector)],
            });
        } else {
            return Err(ApiError::BadRequest(format!(
                "a batch may use at most {MAX_BATCH_GROUPS} different option sets"
            )));
        }
    }
    Ok(groups)
}

async fn search_batch(
    State(state): State<HttpState>,
    Path(c): Path<String>,
    payload: Result<Json<BatchBody>, JsonRejection>,
) -> Response {
    observed(&state, "http_batch", async {
        let started = Instant::now();
        let groups = group_searches(body(payload)?.searches, &c)?;
        let n: usize = groups.iter().map(|g| g.queries.len()).sum();
        let hits: usize = groups
            .iter()
            .map(|g| g.queries.len() * g.request.params.k)
            .sum();
        if hits > MAX_ANSWER_HITS {
            return Err(ApiError::BadRequest(format!(
                "the batch asks for {hits} hits in all; one answer holds at most {MAX_ANSWER_HITS}"
            )));
        }
        let snapshot = groups.first().and_then(|g| g.request.snapshot.clone());
        if groups.iter().any(|g| g.request.snapshot != snapshot) {
            return Err(ApiError::BadRequest(
                "the searches of a batch name different snapshots; send one batch per snapshot"
                    .into(),
            ));
        }
        let collection = state.engine.collection_at(&c, snapshot.as_deref())?;
        let def = collection.def();
        let mut runs = Vec::with_capacity(groups.len());
        for group in groups {
            let search = Arc::new(PreparedSearch::new(def, group.request)?);
            let queries = QueryBatch::from_rows(def, group.queries.iter().map(|q| q.1.as_slice()))?;
            let positions: Vec<usize> = group.queries.iter().map(|q| q.0).collect();
            let engine = &state.engine;
            let collection = &collection;
            runs.push(async move {
                let result = engine.search(collection, &search, queries).await?;
                Ok::<_, ApiError>((positions, result))
            });
        }
        let mut hits: Vec<Vec<Hit>> = vec![Vec::new(); n];
        let mut all = BatchResult::default();
        for run in futures::future::join_all(runs).await {
            let (positions, mut result) = run?;
            for (pos, h) in positions.into_iter().zip(result.hits.drain(..)) {
                hits[pos] = h;
            }
            all.extend(BatchResult {
                hits: vec![Vec::new()],
                offsets: result.offsets,
            });
        }
        state
            .engine
            .metrics
            .queries
            .with_label_values(&["http_batch"])
            .inc_by(n as u64);
        Ok(Json(BatchAnswer {
            results: hits.iter().map(|h| BatchEntry { result: h }).collect(),
            offsets: &all.offsets,
            stale: collection.staleness(),
            took_ms: started.elapsed().as_secs_f64() * 1e3,
        })
        .into_response())
    })
    .await
}

fn collection_info(c: &Collection) -> Value {
    let def = c.def();
    json!({
        "name": def.name,
        "topic": def.topic,
        "dimension": def.dimension,
        "metric": def.metric,
        "id_type": def.id_type,
        "payload_fields": def.payload_fields,
        "status": c.status(),
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
        let existing = state.engine.collections();
        let exists = existing.iter().any(|e| e.def().name == c);
        state.policy.check(&def, existing.len(), exists)?;
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
        let id = PointId::parse(&id, collection.def().id_type)
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
    #[serde(default)]
    snapshot: Option<String>,
}

async fn count(
    State(state): State<HttpState>,
    Path(c): Path<String>,
    payload: Result<Json<CountBody>, JsonRejection>,
) -> Response {
    observed(&state, "http_count", async {
        // An empty body counts everything.
        let b = match payload {
            Err(JsonRejection::MissingJsonContentType(_)) => CountBody::default(),
            other => body(other)?,
        };
        let collection = state.engine.collection_at(&c, b.snapshot.as_deref())?;
        let (count, offsets) = match b.filter {
            None => collection.count(),
            Some(filter) => {
                let filter = parse_filter(&collection, &filter)?;
                let counted = collection.clone();
                state
                    .engine
                    .on_pool(move || counted.count_matching(Some(&filter)))
                    .await?
            }
        };
        let mut answer = json!({"count": count, "offsets": offsets});
        let stale = collection.staleness();
        if !stale.is_empty() {
            answer["stale"] = json!(stale);
        }
        Ok(Json(answer).into_response())
    })
    .await
}

/// `200 ready` when every collection serves; `200` with a `degraded` map
/// when some serve without quarantined segments (the rest is served: taking
/// the replica out of rotation would not help); `503` while a collection
/// loads or its tail is over its bound.
/// A request's payload filter, checked against the collection's fields.
fn parse_filter(collection: &Collection, filter: &Value) -> Result<eddy_filter::Filter, ApiError> {
    eddy_filter::Filter::parse(filter, &collection.def().payload_fields)
        .map_err(|e| ApiError::BadRequest(e.to_string()))
}

/// `POST /v1/collections/{c}/scroll`: one page of the live points (a filter
/// may narrow them) in id order, after the id `after`; `next_after` is the
/// `after` of the next page, absent on the last one.
async fn scroll(
    State(state): State<HttpState>,
    Path(c): Path<String>,
    payload: Result<Json<ScanRequestJson>, JsonRejection>,
) -> Response {
    observed(&state, "http_scroll", async {
        let request = body(payload)?.into_request()?;
        let collection = state
            .engine
            .collection_at(&c, request.snapshot.as_deref())?;
        if let Some(named) = request.collection.as_ref().filter(|n| **n != c) {
            return Err(ApiError::BadRequest(format!(
                "body names collection {named:?}, path names {c:?}"
            )));
        }
        let filter = request
            .filter
            .as_ref()
            .map(|f| parse_filter(&collection, f))
            .transpose()?;
        let id_type = collection.def().id_type;
        let after = request
            .after
            .as_ref()
            .map(|v| {
                let text = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                PointId::parse(&text, id_type)
                    .map_err(|e| ApiError::BadRequest(format!("after: {e}")))
            })
            .transpose()?;
        let answer = state
            .engine
            .on_pool(move || {
                let view = collection.view(filter.as_ref());
                let (page, more) = view.page(after.as_ref(), request.limit);
                let mut last = None;
                let points: Vec<Value> = page
                    .iter()
                    .filter_map(|&i| view.point(i))
                    .map(|p| {
                        let mut point = json!({"id": p.id});
                        if let Some(payload) = crate::results::HitPayload::select(
                            p.payload_json,
                            &request.with_payload,
                        ) {
                            point["payload"] = json!(payload);
                        }
                        if request.with_vector {
                            point["vector"] = json!(p.vector);
                        }
                        last = Some(p.id);
                        point
                    })
                    .collect();
                let next = if more { last } else { None };
                json!({"points": points, "next_after": next, "offsets": view.offsets})
            })
            .await?;
        Ok(Json(answer).into_response())
    })
    .await
}

async fn readyz(State(state): State<HttpState>) -> Response {
    let not_ready: BTreeMap<String, String> = state.engine.not_ready().into_iter().collect();
    let degraded: BTreeMap<String, String> = state.engine.degraded().into_iter().collect();
    if !not_ready.is_empty() {
        let body = json!({"ready": false, "not_ready": not_ready, "degraded": degraded});
        (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
    } else if !degraded.is_empty() {
        let body = json!({"ready": true, "degraded": degraded});
        (StatusCode::OK, Json(body)).into_response()
    } else {
        (StatusCode::OK, "ready").into_response()
    }
}

async fn metrics(State(state): State<HttpState>) -> Response {
    let (content_type, body) = eddy_config::metrics::encode(&state.registry);
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}
