//! Collections (list, describe, create, alter, drop), points, count and scroll.

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use eddy_model::PointId;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{body, observed, parse_filter, HttpState};
use crate::admin_request::{AlterJson, CollectionJson};
use crate::engine::store_io;
use crate::error::ApiError;
use crate::fanout::count::count_everywhere;
use crate::fanout::read::{get_everywhere, scroll_everywhere, PageAsk};
use crate::request::ScanRequestJson;

#[utoipa::path(
    get,
    tag = "collections",
    path = "/v1/collections",
    responses(
        (status = 200, description = "`collections`: each one's definition and status", body = Object),
        (status = 401, description = "No API key, or an unknown one", body = super::openapi::ErrorBody),
    )
)]
pub(super) async fn list_collections(State(state): State<HttpState>) -> Response {
    observed(&state, "http_collections", "", async {
        let all: Vec<Value> = state
            .engine
            .collections()
            .iter()
            .map(|c| state.engine.collection_info(c))
            .collect();
        Ok(Json(json!({"collections": all})).into_response())
    })
    .await
}

#[utoipa::path(
    get,
    tag = "collections",
    path = "/v1/collections/{c}",
    params(("c" = String, Path, description = "Collection name")),
    responses(
        (status = 200, description = "The definition and status (segments, tail rows, offsets, quarantined segments)", body = Object),
        super::openapi::RequestErrors,
    )
)]
pub(super) async fn get_collection(
    State(state): State<HttpState>,
    Path(c): Path<String>,
) -> Response {
    observed(&state, "http_collections", &c, async {
        let collection = state.engine.collection(&c)?;
        Ok(Json(state.engine.collection_info(&collection)).into_response())
    })
    .await
}

#[utoipa::path(
    put,
    tag = "collections",
    path = "/v1/collections/{c}",
    params(("c" = String, Path, description = "Collection name")),
    request_body = CollectionJson,
    responses(
        (status = 200, description = "Exists with this definition (201 when created)", body = Object),
        super::openapi::RequestErrors,
        (status = 201, description = "Created", body = Object),
        (status = 403, description = "Not an admin key, or a topic outside the allow-list", body = super::openapi::ErrorBody),
        (status = 409, description = "Exists with another definition, or the collection cap is reached", body = super::openapi::ErrorBody),
    )
)]
pub(super) async fn put_collection(
    State(state): State<HttpState>,
    Path(c): Path<String>,
    payload: Result<Json<CollectionJson>, JsonRejection>,
) -> Response {
    observed(&state, "http_collections", &c, async {
        let def = body(payload)?.into_def(Some(&c))?;
        let engine = state.engine.clone();
        let created = store_io(move || engine.create_collection(def)).await?;
        let collection = state.engine.collection(&c)?;
        let status = if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        Ok((status, Json(state.engine.collection_info(&collection))).into_response())
    })
    .await
}

#[utoipa::path(
    patch,
    tag = "collections",
    path = "/v1/collections/{c}",
    params(("c" = String, Path, description = "Collection name")),
    request_body = AlterJson,
    responses(
        (status = 200, description = "`altered` (false: it indexed those fields already) and the collection info; `status.payload_index_pending` counts segments still being indexed for the new fields", body = Object),
        super::openapi::RequestErrors,
        (status = 403, description = "Not an admin key", body = super::openapi::ErrorBody),
        (status = 409, description = "A field is indexed already with another type", body = super::openapi::ErrorBody),
    )
)]
/// `PATCH /v1/collections/{c}`: adds indexed payload fields (admin).
pub(super) async fn patch_collection(
    State(state): State<HttpState>,
    Path(c): Path<String>,
    payload: Result<Json<AlterJson>, JsonRejection>,
) -> Response {
    observed(&state, "http_collections", &c, async {
        let alter = body(payload)?;
        let name = alter.collection(Some(&c))?;
        let engine = state.engine.clone();
        let (info, changed) =
            store_io(move || engine.alter_collection(&name, &alter.payload_fields)).await?;
        Ok(Json(json!({"altered": changed, "info": info})).into_response())
    })
    .await
}

#[utoipa::path(
    delete,
    tag = "collections",
    path = "/v1/collections/{c}",
    params(("c" = String, Path, description = "Collection name")),
    responses(
        (status = 200, description = "Dropped: `{\"dropped\": name}`", body = Object),
        (status = 401, description = "No API key, or an unknown one", body = super::openapi::ErrorBody),
        (status = 403, description = "Not an admin key", body = super::openapi::ErrorBody),
        (status = 404, description = "Unknown collection, or dropped already", body = super::openapi::ErrorBody),
    )
)]
/// `DELETE /v1/collections/{c}`: drops the collection (admin).
pub(super) async fn delete_collection(
    State(state): State<HttpState>,
    Path(c): Path<String>,
) -> Response {
    observed(&state, "http_collections", &c, async {
        let engine = state.engine.clone();
        let name = c.clone();
        store_io(move || engine.drop_collection(&name, "http")).await?;
        Ok(Json(json!({"dropped": c})).into_response())
    })
    .await
}

#[utoipa::path(
    get,
    tag = "collections",
    path = "/v1/collections/{c}/points/{id}",
    params(
        ("c" = String, Path, description = "Collection name"),
        ("id" = String, Path, description = "Point id"),
        ("allow_partial" = Option<bool>, Query, description = "On a split collection, answer 404 from the shards at hand when no node serving the others answers, instead of 503"),
    ),
    responses(
        (status = 200, description = "`id`, `vector`, `payload`", body = Object),
        super::openapi::RequestErrors,
    )
)]
pub(super) async fn get_point(
    State(state): State<HttpState>,
    Path((c, id)): Path<(String, String)>,
    Query(options): Query<PointOptions>,
) -> Response {
    observed(&state, "http_point", &c, async {
        let collection = state.engine.collection(&c)?;
        let id = PointId::parse(&id, collection.def().id_type)
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        // A split collection's other shards are looked in by its peers.
        let found = get_everywhere(&state.engine, &collection, &id).await?;
        let Some(point) = found.point else {
            if !found.missing.is_empty() && !options.allow_partial {
                return Err(state.engine.shards_unreachable(&collection, &found.missing));
            }
            return Err(ApiError::NotFound(format!("point {id} not found in {c}")));
        };
        Ok(
            Json(json!({"id": point.id, "vector": point.vector, "payload": point.payload}))
                .into_response(),
        )
    })
    .await
}

/// A point read's query options.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct PointOptions {
    /// On a split collection, answer from the shards at hand when no node
    /// serving the others answers.
    #[serde(default)]
    allow_partial: bool,
}

#[derive(Debug, Deserialize, Default, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CountBody {
    /// A payload filter (must / should / must_not conditions).
    #[serde(default)]
    #[schema(value_type = Object)]
    filter: Option<Value>,
    /// A pinned snapshot's token.
    #[serde(default)]
    snapshot: Option<String>,
    /// On a split collection, answer from the shards at hand (marked
    /// partial) when no node serving the others answers, instead of 503.
    #[serde(default)]
    allow_partial: bool,
}

#[utoipa::path(
    post,
    tag = "collections",
    path = "/v1/collections/{c}/count",
    params(("c" = String, Path, description = "Collection name")),
    request_body = CountBody,
    responses(
        (status = 200, description = "`count` of live points (a filter may narrow them), `offsets`", body = Object),
        super::openapi::RequestErrors,
    )
)]
pub(super) async fn count(
    State(state): State<HttpState>,
    Path(c): Path<String>,
    payload: Result<Json<CountBody>, JsonRejection>,
) -> Response {
    observed(&state, "http_count", &c, async {
        // An empty body counts everything.
        let b = match payload {
            Err(JsonRejection::MissingJsonContentType(_)) => CountBody::default(),
            other => body(other)?,
        };
        let collection = state.engine.collection_at(&c, b.snapshot.as_deref())?;
        let filter = match &b.filter {
            None => None,
            Some(filter) => Some(parse_filter(&collection, filter)?),
        };
        // A split collection's other shards are counted by its peers (a
        // pinned snapshot's by the peers holding its pins).
        let counted =
            count_everywhere(&state.engine, &collection, b.filter.as_ref(), filter).await?;
        if !counted.missing.is_empty() && !b.allow_partial {
            return Err(state
                .engine
                .shards_unreachable(&collection, &counted.missing));
        }
        let mut answer = json!({"count": counted.count, "offsets": counted.offsets});
        let stale = collection.search_staleness(&counted.missing);
        if !stale.is_empty() {
            answer["stale"] = json!(stale);
        }
        if !counted.missing.is_empty() {
            answer["missing_shards"] = json!(counted.missing);
        }
        Ok(Json(answer).into_response())
    })
    .await
}

/// `POST /v1/collections/{c}/scroll`: one page of the live points (a filter
/// may narrow them) in id order, after the id `after`; `next_after` is the
/// `after` of the next page, absent on the last one.
#[utoipa::path(
    post,
    tag = "collections",
    path = "/v1/collections/{c}/scroll",
    params(("c" = String, Path, description = "Collection name")),
    request_body = ScanRequestJson,
    responses(
        (status = 200, description = "`points` in id order, `next_after` (null on the last page), `offsets`", body = Object),
        super::openapi::RequestErrors,
    )
)]
pub(super) async fn scroll(
    State(state): State<HttpState>,
    Path(c): Path<String>,
    payload: Result<Json<ScanRequestJson>, JsonRejection>,
) -> Response {
    observed(&state, "http_scroll", &c, async {
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
        // A split collection's other shards are paged by its peers (a
        // pinned snapshot's by the peers holding its pins).
        let ask = PageAsk {
            filter_json: request.filter.clone(),
            filter,
            after,
            limit: request.limit,
            with_vector: request.with_vector,
        };
        let paged = scroll_everywhere(&state.engine, &collection, ask).await?;
        if !paged.missing.is_empty() && !request.allow_partial {
            return Err(state.engine.shards_unreachable(&collection, &paged.missing));
        }
        let page = paged.page;
        let (with_payload, with_vector) = (request.with_payload, request.with_vector);
        let mut answer = state
            .engine
            .on_pool(move || {
                let mut last = None;
                let points: Vec<Value> = page
                    .points
                    .into_iter()
                    .map(|p| {
                        let mut point = json!({"id": p.id});
                        if let Some(payload) =
                            crate::results::HitPayload::select(&p.payload_json, &with_payload)
                        {
                            point["payload"] = json!(payload);
                        }
                        if with_vector {
                            point["vector"] = json!(p.vector);
                        }
                        last = Some(p.id);
                        point
                    })
                    .collect();
                let next = if page.more { last } else { None };
                json!({"points": points, "next_after": next, "offsets": page.offsets})
            })
            .await?;
        if !paged.missing.is_empty() {
            let stale = collection.search_staleness(&paged.missing);
            answer["stale"] = json!(stale);
            answer["missing_shards"] = json!(paged.missing);
        }
        Ok(Json(answer).into_response())
    })
    .await
}
