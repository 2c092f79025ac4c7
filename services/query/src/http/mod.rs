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

/// A JSON request body for the hot paths (search, batch search): parsed in
/// one plain `serde_json` pass. axum's `Json` tracks the path of every
/// value it parses, for its error messages, which costs ~11 µs on a
/// 384-float vector (7.5 % of the server's CPU for one search at ef 64);
/// here only a body that fails, or one whose content type is not plainly
/// `application/json`, goes through `Json`, so errors read as before.
pub(super) struct FastJson<T>(pub T);

impl<T, S> axum::extract::FromRequest<S> for FastJson<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = JsonRejection;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        if !plainly_json(req.headers()) {
            let Json(t) = Json::<T>::from_request(req, state).await?;
            return Ok(Self(t));
        }
        let bytes = bytes::Bytes::from_request(req, state).await?;
        match serde_json::from_slice(&bytes) {
            Ok(t) => Ok(Self(t)),
            Err(_) => Json::<T>::from_bytes(&bytes).map(|Json(t)| Self(t)),
        }
    }
}

/// Whether the content type is `application/json`, perhaps with
/// parameters (anything else axum's `Json` judges itself).
fn plainly_json(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim() == "application/json")
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

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::extract::{FromRequest, Request};
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body2 {
        k: u32,
        vector: Vec<f32>,
    }

    fn request(content_type: Option<&str>, body: &str) -> Request {
        let mut r = Request::builder().method("POST").uri("/");
        if let Some(ct) = content_type {
            r = r.header(header::CONTENT_TYPE, ct);
        }
        r.body(Body::from(body.to_owned())).expect("request")
    }

    /// `FastJson` takes what axum's `Json` takes and refuses what it
    /// refuses, with the same status and message.
    #[tokio::test]
    async fn fast_json_answers_as_json_does() {
        let cases = [
            (
                Some("application/json"),
                r#"{"k": 3, "vector": [0.5, 1e-3]}"#,
            ),
            (
                Some("application/json; charset=utf-8"),
                r#"{"k": 3, "vector": []}"#,
            ),
            (
                Some("application/vnd.eddy+json"),
                r#"{"k": 3, "vector": [1]}"#,
            ),
            (Some("application/json"), r#"{"k": "3", "vector": [1]}"#),
            (Some("application/json"), r#"{"k": 3, "vector": [1, "x"]}"#),
            (
                Some("application/json"),
                r#"{"k": 3, "vector": [1], "extra": 1}"#,
            ),
            (
                Some("application/json"),
                r#"{"k": 3, "vector": [1]} trailing"#,
            ),
            (Some("application/json"), r#"{"k": 3,"#),
            (Some("text/plain"), r#"{"k": 3, "vector": [1]}"#),
            (None, r#"{"k": 3, "vector": [1]}"#),
        ];
        for (content_type, text) in cases {
            let fast = FastJson::<Body2>::from_request(request(content_type, text), &())
                .await
                .map(|FastJson(b)| b)
                .map_err(|e| (e.status(), e.body_text()));
            let plain = Json::<Body2>::from_request(request(content_type, text), &())
                .await
                .map(|Json(b)| b)
                .map_err(|e| (e.status(), e.body_text()));
            assert_eq!(fast, plain, "{content_type:?} {text}");
        }
    }
}
