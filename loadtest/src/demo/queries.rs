//! Running the dataset's queries through each eddy-query API and scoring them
//! against the ground truth.

use std::time::Duration;

use anyhow::Context as _;
use tokio::time::Instant;

use crate::dataset::Dataset;
use crate::flight::{FlightSearch, Hits};
use crate::http::{QueryClient, SearchRequest};
use crate::stats::{mean, LatencySummary};

/// Queries sent per record batch in the DoExchange run.
const EXCHANGE_BATCH_ROWS: usize = 64;

/// One API's outcome.
#[derive(Debug, Clone)]
pub struct ApiRun {
    /// The API's display name, with the search mode.
    pub name: String,
    /// Number of queries.
    pub queries: usize,
    /// Mean tie-aware recall@k.
    pub recall: f64,
    /// Per-query latencies (`None` when the queries went as one request).
    pub latency: Option<LatencySummary>,
    /// Wall time of the whole run.
    pub total: Duration,
}

impl ApiRun {
    /// Queries per second over the whole run.
    pub fn qps(&self) -> f64 {
        self.queries as f64 / self.total.as_secs_f64().max(1e-9)
    }
}

/// Mean tie-aware recall@k of `hits` (one list per query, in query order).
pub fn mean_recall(ds: &Dataset, hits: &[Hits], k: usize) -> f64 {
    let per_query: Vec<f64> = hits
        .iter()
        .enumerate()
        .map(|(q, h)| eddy_dataset::recall_at_k(h, ds.gt_ids.row(q), ds.gt_scores.row(q), k))
        .collect();
    mean(&per_query).unwrap_or(0.0)
}

fn queries(ds: &Dataset) -> impl Iterator<Item = &[f32]> {
    ds.queries.iter()
}

/// How the queries search: every row exactly, or through the graphs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `exact: true`.
    Exact,
    /// The server's default (graph walk over SQ8 codes, f32 rescoring).
    Graph,
}

impl Mode {
    fn exact(self) -> bool {
        self == Mode::Exact
    }

    fn label(self) -> &'static str {
        match self {
            Mode::Exact => "exact",
            Mode::Graph => "graph",
        }
    }
}

/// One HTTP search per query, sequentially.
pub async fn http(
    ds: &Dataset,
    client: &QueryClient,
    k: usize,
    mode: Mode,
) -> anyhow::Result<ApiRun> {
    let mut hits = Vec::with_capacity(ds.queries.rows());
    let mut latencies = Vec::with_capacity(ds.queries.rows());
    let start = Instant::now();
    for (q, vector) in queries(ds).enumerate() {
        let t = Instant::now();
        let resp = client
            .search(&SearchRequest {
                vector,
                k,
                with_payload: false,
                exact: mode.exact(),
            })
            .await
            .with_context(|| format!("HTTP search, query {q}"))?;
        latencies.push(t.elapsed());
        hits.push(
            resp.result
                .iter()
                .map(|h| (h.id, h.score))
                .collect::<Hits>(),
        );
    }
    Ok(ApiRun {
        name: format!("HTTP search ({})", mode.label()),
        queries: hits.len(),
        recall: mean_recall(ds, &hits, k),
        latency: LatencySummary::from_samples(&latencies),
        total: start.elapsed(),
    })
}

/// One Flight `DoGet` ticket per query, sequentially.
pub async fn do_get(
    ds: &Dataset,
    flight: &mut FlightSearch,
    collection: &str,
    k: usize,
    mode: Mode,
) -> anyhow::Result<ApiRun> {
    let mut hits = Vec::with_capacity(ds.queries.rows());
    let mut latencies = Vec::with_capacity(ds.queries.rows());
    let start = Instant::now();
    for (q, vector) in queries(ds).enumerate() {
        let t = Instant::now();
        let mut got = flight
            .do_get(collection, &[vector], k, mode.exact())
            .await
            .with_context(|| format!("Flight DoGet, query {q}"))?;
        latencies.push(t.elapsed());
        hits.push(got.pop().unwrap_or_default());
    }
    Ok(ApiRun {
        name: format!("Flight DoGet ({})", mode.label()),
        queries: hits.len(),
        recall: mean_recall(ds, &hits, k),
        latency: LatencySummary::from_samples(&latencies),
        total: start.elapsed(),
    })
}

/// All queries in one Flight `DoExchange`.
pub async fn do_exchange(
    ds: &Dataset,
    flight: &mut FlightSearch,
    collection: &str,
    k: usize,
    mode: Mode,
) -> anyhow::Result<ApiRun> {
    let start = Instant::now();
    let hits = flight
        .do_exchange(
            collection,
            &ds.queries.data,
            ds.queries.dim,
            k,
            mode.exact(),
            EXCHANGE_BATCH_ROWS,
        )
        .await
        .context("Flight DoExchange")?;
    let total = start.elapsed();
    Ok(ApiRun {
        name: format!("Flight DoExchange ({})", mode.label()),
        queries: hits.len(),
        recall: mean_recall(ds, &hits, k),
        latency: None,
        total,
    })
}
