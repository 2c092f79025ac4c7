//! The HTTP JSON API (axum): the router, key checks and request slots, and
//! what every handler shares; the handlers are in [`search`] (search, batch
//! search) and [`collections`] (collections, points, count, scroll), the
//! OpenAPI document in [`openapi`].

mod collections;
pub mod openapi;
mod search;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use prometheus::Registry;
use serde_json::{json, Value};

use crate::auth::{self, ApiKeys, Scope};
use crate::collection::Collection;
use crate::engine::Engine;
use crate::error::ApiError;

/// State shared by the handlers.
#[derive(Clone)]
pub struct HttpState {
    /// The engine.
    pub engine: Arc<Engine>,
    /// The registry `/metrics` exports.
    pub registry: Registry,
    /// Who may call what.
    pub keys: Arc<ApiKeys>,
}

/// Largest accepted request body (a batch of many vectors).
const MAX_BODY_BYTES: usize = 64 << 20;

/// The router. Every route but `/healthz` and `/readyz` needs a key when
/// keys are configured: a read key for reads (GET, and POST searches and
/// counts), an admin key for writes (PUT, PATCH, DELETE).
pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/v1/collections", get(collections::list_collections))
        .route(
            "/v1/collections/{c}",
            get(collections::get_collection)
                .put(collections::put_collection)
                .patch(collections::patch_collection)
                .delete(collections::delete_collection),
        )
        .route("/v1/collections/{c}/search", post(search::search))
        .route(
            "/v1/collections/{c}/search/batch",
            post(search::search_batch),
        )
        .route(
            "/v1/collections/{c}/points/{id}",
            get(collections::get_point),
        )
        .route("/v1/collections/{c}/count", post(collections::count))
        .route("/v1/collections/{c}/scroll", post(collections::scroll))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/v1/openapi.json", get(openapi::document))
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
        "/healthz" | "/readyz" | "/v1/openapi.json" => return next.run(request).await,
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
            .with_label_values(&[api, e.kind(), ""])
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

fn body<T>(payload: Result<Json<T>, JsonRejection>) -> Result<T, ApiError> {
    payload.map(|Json(t)| t).map_err(|rejection| {
        ApiError::BadRequest(format!("invalid request body: {}", rejection.body_text()))
    })
}

/// Times a handler and counts it by API, status and collection (empty
/// for routes of no one collection).
async fn observed<F>(state: &HttpState, api: &str, collection: &str, fut: F) -> Response
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
    m.requests
        .with_label_values(&[api, &status, collection])
        .inc();
    m.latency
        .with_label_values(&[api, &status, collection])
        .observe(started.elapsed().as_secs_f64());
    response
}

/// A request's payload filter, checked against the collection's fields.
fn parse_filter(collection: &Collection, filter: &Value) -> Result<eddy_filter::Filter, ApiError> {
    eddy_filter::Filter::parse(filter, &collection.def().payload_fields)
        .map_err(|e| ApiError::BadRequest(e.to_string()))
}

/// `200 ready` when every collection serves; `200` with a `degraded` map
/// when some serve without quarantined segments (the rest is served: taking
/// the replica out of rotation would not help); `503` while a collection
/// loads or its tail is over its bound.
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
