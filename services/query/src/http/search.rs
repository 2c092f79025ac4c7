//! Search and batch search.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::{body, observed, FastJson, HttpState};
use crate::error::ApiError;
use crate::prepared::{PreparedSearch, QueryBatch};
use crate::request::{
    check_total_hits, SearchRequest, SearchRequestJson, Vectors, MAX_BATCH_GROUPS,
    MAX_BATCH_QUERIES,
};
use crate::results::{BatchResult, Hit};

/// Body of `POST /search/batch`: one search request per entry.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct BatchBody {
    /// One search per entry (at most 10,000, at most 64 option sets).
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
    /// Shards of a split collection the answer leaves out (`allow_partial`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    missing_shards: Vec<u32>,
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
    #[serde(skip_serializing_if = "Vec::is_empty")]
    missing_shards: Vec<u32>,
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

#[utoipa::path(
    post,
    tag = "search",
    path = "/v1/collections/{c}/search",
    params(("c" = String, Path, description = "Collection name")),
    request_body = SearchRequestJson,
    responses(
        (status = 200, description = "`result` (hits best first: id, score, payload), `offsets` reflected, `stale` when events may be missing, `took_ms`", body = Object),
        super::openapi::RequestErrors,
    )
)]
pub(super) async fn search(
    State(state): State<HttpState>,
    Path(c): Path<String>,
    payload: Result<FastJson<SearchRequestJson>, JsonRejection>,
) -> Response {
    observed(&state, "http_search", &c, async {
        let started = Instant::now();
        let (vector, request) = one_search(body(payload.map(|FastJson(t)| Json(t)))?, &c)?;
        let collection = state
            .engine
            .collection_at(&c, request.snapshot.as_deref())?;
        let search = Arc::new(PreparedSearch::new(&collection.def(), request)?);
        let queries = QueryBatch::new(&collection.def(), Vectors::Rows(vec![vector]))?;
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
            stale: collection.search_staleness(&result.missing_shards),
            missing_shards: result.missing_shards.clone(),
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

#[utoipa::path(
    post,
    tag = "search",
    path = "/v1/collections/{c}/search/batch",
    params(("c" = String, Path, description = "Collection name")),
    request_body = BatchBody,
    responses(
        (status = 200, description = "`results` (one `result` per search), `offsets`, `stale`, `took_ms`", body = Object),
        super::openapi::RequestErrors,
    )
)]
pub(super) async fn search_batch(
    State(state): State<HttpState>,
    Path(c): Path<String>,
    payload: Result<FastJson<BatchBody>, JsonRejection>,
) -> Response {
    observed(&state, "http_batch", &c, async {
        let started = Instant::now();
        let groups = group_searches(body(payload.map(|FastJson(t)| Json(t)))?.searches, &c)?;
        let n: usize = groups.iter().map(|g| g.queries.len()).sum();
        let hits: usize = groups
            .iter()
            .map(|g| g.queries.len() * g.request.params.k)
            .sum();
        check_total_hits(hits)?;
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
            let search = Arc::new(PreparedSearch::new(&def, group.request)?);
            let queries =
                QueryBatch::from_rows(&def, group.queries.iter().map(|q| q.1.as_slice()))?;
            let positions: Vec<usize> = group.queries.iter().map(|q| q.0).collect();
            let engine = &state.engine;
            let collection = &collection;
            runs.push(async move {
                let result = engine.search(collection, &search, queries).await?;
                Ok::<_, ApiError>((positions, result))
            });
        }
        let parts = futures::future::join_all(runs)
            .await
            .into_iter()
            .collect::<Result<Vec<_>, ApiError>>()?;
        let all = BatchResult::scatter(n, parts);
        state
            .engine
            .metrics
            .queries
            .with_label_values(&["http_batch"])
            .inc_by(n as u64);
        Ok(Json(BatchAnswer {
            results: all.hits.iter().map(|h| BatchEntry { result: h }).collect(),
            offsets: &all.offsets,
            stale: collection.search_staleness(&all.missing_shards),
            missing_shards: all.missing_shards.clone(),
            took_ms: started.elapsed().as_secs_f64() * 1e3,
        })
        .into_response())
    })
    .await
}
