//! Running the dataset's queries once through each eddy-query API (one
//! client, in order: the driver's closed loop with one worker) and scoring
//! them against the ground truth.

use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;

use crate::dataset::QuerySet;
use crate::driver::{closed_loop, Searcher, Work};
use crate::flight::FlightSearch;
use crate::histogram::LatencyStats;
use crate::http::QueryClient;
use crate::options::SearchOptions;

/// The demo's phases never end by time: each runs its queries once.
const NO_TIME_LIMIT: Duration = Duration::from_secs(24 * 3600);

/// One API's outcome.
#[derive(Debug, Clone)]
pub struct ApiRun {
    /// The API's display name, with the search mode.
    pub name: String,
    /// Number of queries.
    pub queries: usize,
    /// Mean tie-aware recall@k.
    pub recall: f64,
    /// Per-request latencies (`None` when the queries went as one request).
    pub latency: Option<LatencyStats>,
    /// Wall time of the whole run.
    pub total: Duration,
}

impl ApiRun {
    /// Queries per second over the whole run.
    pub fn qps(&self) -> f64 {
        self.queries as f64 / self.total.as_secs_f64().max(1e-9)
    }
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
    fn options(self, k: usize) -> SearchOptions {
        SearchOptions::new(k, self == Mode::Exact)
    }

    fn label(self) -> &'static str {
        match self {
            Mode::Exact => "exact",
            Mode::Graph => "graph",
        }
    }
}

/// The APIs the demo runs, in report order.
pub fn searchers(
    client: &QueryClient,
    flight: &FlightSearch,
    collection: &str,
    queries: usize,
) -> [(&'static str, Searcher); 3] {
    [
        ("HTTP search", Searcher::Http(client.clone())),
        (
            "Flight DoGet",
            Searcher::DoGet {
                flight: flight.clone(),
                collection: collection.to_owned(),
            },
        ),
        (
            "Flight DoExchange",
            Searcher::DoExchange {
                flight: flight.clone(),
                collection: collection.to_owned(),
                batch: queries.max(1),
                batches: 1,
            },
        ),
    ]
}

/// Runs every query of `set` once through `searcher`, one request at a time
/// (a `DoExchange` searcher carries them all in one exchange).
pub async fn run(
    name: &str,
    searcher: &Searcher,
    set: &Arc<QuerySet>,
    k: usize,
    mode: Mode,
) -> anyhow::Result<ApiRun> {
    let requests = set.len().div_ceil(searcher.batch()) as u64;
    let work = Work {
        searcher: searcher.clone(),
        set: set.clone(),
        options: Arc::new(mode.options(k)),
        duration: NO_TIME_LIMIT,
        requests: Some(requests),
    };
    let outcome = closed_loop(&work, 1, &indicatif::ProgressBar::hidden()).await;
    let t = &outcome.tally;
    if let Some(e) = &t.first_error {
        bail!(
            "{name} ({}): {} of {} requests failed: {e}",
            mode.label(),
            t.errors,
            requests
        );
    }
    let recall = t
        .recall
        .means(k)
        .and_then(|r| if k >= 10 { r.at10 } else { r.at1 });
    Ok(ApiRun {
        name: format!("{name} ({})", mode.label()),
        queries: t.recall.queries() as usize,
        recall: recall.unwrap_or(0.0),
        latency: (searcher.batch() == 1)
            .then(|| t.latency.summary())
            .flatten(),
        total: outcome.elapsed,
    })
}
