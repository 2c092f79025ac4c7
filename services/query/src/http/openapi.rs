//! The OpenAPI document of the HTTP API, served at `/v1/openapi.json`:
//! generated from the handlers' annotations and the request types, so it
//! lists every route, body and error as the code has them.

use axum::response::{IntoResponse, Response};
use axum::Json;
use utoipa::OpenApi;

/// An error answer: `{"error": {"code", "message"}}`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code, reason = "documents the shape ApiError serialises to")]
pub struct ErrorBody {
    error: ErrorDetail,
}

/// The kind (`bad_request`, `unauthorized`, ...) and a message for people.
#[derive(utoipa::ToSchema)]
#[allow(dead_code, reason = "documents the shape ApiError serialises to")]
pub struct ErrorDetail {
    code: String,
    message: String,
}

/// The document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "eddy-query",
        description = "Search over sealed segments plus the fresh Kafka tail. With API keys configured, send `Authorization: Bearer KEY` (or `api-key: KEY`); writes need an admin key."
    ),
    paths(
        super::search::search,
        super::search::search_batch,
        super::collections::list_collections,
        super::collections::get_collection,
        super::collections::put_collection,
        super::collections::delete_collection,
        super::collections::get_point,
        super::collections::count,
        super::collections::scroll,
    ),
    components(schemas(ErrorBody, ErrorDetail))
)]
pub struct ApiDoc;

/// `GET /v1/openapi.json`.
pub(super) async fn document() -> Response {
    Json(ApiDoc::openapi()).into_response()
}
