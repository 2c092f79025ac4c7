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

/// The errors every collection route may answer (the route's own, such
/// as 403 and 409 on create, are listed beside it).
#[derive(utoipa::IntoResponses)]
#[allow(dead_code, reason = "documents the answers ApiError serialises to")]
pub enum RequestErrors {
    /// 400.
    #[response(status = 400, description = "Malformed body or invalid option")]
    BadRequest(ErrorBody),
    /// 401.
    #[response(status = 401, description = "No API key, or an unknown one")]
    Unauthorized(ErrorBody),
    /// 404.
    #[response(status = 404, description = "Unknown collection or snapshot")]
    NotFound(ErrorBody),
    /// 429.
    #[response(status = 429, description = "Overloaded: retry later")]
    Overloaded(ErrorBody),
    /// 504.
    #[response(status = 504, description = "Timed out")]
    Timeout(ErrorBody),
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
        super::collections::patch_collection,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every route is listed, and each collection route with the errors
    /// it may answer, the shared ones included.
    #[test]
    fn the_document_lists_every_route_and_its_errors() {
        let doc = serde_json::to_value(ApiDoc::openapi()).expect("json");
        let paths = doc["paths"].as_object().expect("paths");
        let mut routes: Vec<String> = paths
            .iter()
            .flat_map(|(path, ops)| {
                let ops = ops.as_object().cloned().unwrap_or_default();
                ops.keys()
                    .map(|m| format!("{} {path}", m.to_uppercase()))
                    .collect::<Vec<_>>()
            })
            .collect();
        routes.sort();
        assert_eq!(
            routes,
            [
                "DELETE /v1/collections/{c}",
                "GET /v1/collections",
                "GET /v1/collections/{c}",
                "GET /v1/collections/{c}/points/{id}",
                "PATCH /v1/collections/{c}",
                "POST /v1/collections/{c}/count",
                "POST /v1/collections/{c}/scroll",
                "POST /v1/collections/{c}/search",
                "POST /v1/collections/{c}/search/batch",
                "PUT /v1/collections/{c}",
            ]
        );
        let search = &paths["/v1/collections/{c}/search"]["post"]["responses"];
        for status in ["200", "400", "401", "404", "429", "504"] {
            assert!(search.get(status).is_some(), "search lists {status}");
        }
        let put = &paths["/v1/collections/{c}"]["put"]["responses"];
        for status in ["200", "201", "400", "403", "409", "504"] {
            assert!(put.get(status).is_some(), "create lists {status}");
        }
        let patch = &paths["/v1/collections/{c}"]["patch"]["responses"];
        for status in ["200", "400", "403", "404", "409"] {
            assert!(patch.get(status).is_some(), "alter lists {status}");
        }
        assert!(
            search["400"].to_string().contains("ErrorBody"),
            "{}",
            search["400"]
        );
    }
}
