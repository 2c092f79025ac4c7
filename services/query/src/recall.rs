//! The online recall estimate: a share of live queries (`--recall-sample-rate`)
//! is searched again on a background thread when no search is in flight,
//! once as the user asked and once exactly, both on the snapshot that
//! served it (pinned: the segments, without the tail), and the tie-aware
//! overlap of the two is averaged over each collection's last
//! [`WINDOW`] samples: `eddy_query_recall_estimate{collection}` and
//! `recall_estimate` in the collection info. It measures the graph walk on
//! the queries users really send, at the `ef` and quantization they use.

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eddy_model::{CollectionDef, Metric};
use parking_lot::Mutex;
use prometheus::IntGauge;

use crate::collection::Collection;
use crate::metrics::QueryMetrics;
use crate::prepared::{PreparedSearch, QueryBatch};
use crate::results::Hit;

/// Samples each collection's estimate averages over.
pub const WINDOW: usize = 1_000;
/// Samples waiting for an idle moment at most; more are dropped.
const QUEUE: usize = 256;
/// Longest a sample waits for an idle moment before it is dropped.
const IDLE_WAIT: Duration = Duration::from_secs(2);

/// A live query to search again.
struct Sample {
    /// The collection as it was when the query ran (no tail).
    pinned: Arc<Collection>,
    query: QueryBatch,
    search: Arc<PreparedSearch>,
}

/// A collection's estimate: the mean of its last samples.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Estimate {
    /// Mean recall@k over the window.
    pub value: f64,
    /// Samples in the window.
    pub samples: usize,
}

#[derive(Default)]
struct Window {
    recalls: VecDeque<f64>,
    sum: f64,
}

impl Window {
    fn push(&mut self, recall: f64) {
        self.recalls.push_back(recall);
        self.sum += recall;
        if self.recalls.len() > WINDOW {
            self.sum -= self.recalls.pop_front().unwrap_or(0.0);
        }
    }

    fn estimate(&self) -> Option<Estimate> {
        (!self.recalls.is_empty()).then(|| Estimate {
            value: self.sum / self.recalls.len() as f64,
            samples: self.recalls.len(),
        })
    }
}

/// Samples live queries and keeps the estimates.
pub struct RecallEstimator {
    rate: f64,
    queue: SyncSender<Sample>,
    windows: Arc<Mutex<HashMap<String, Window>>>,
}

impl std::fmt::Debug for RecallEstimator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecallEstimator")
            .field("rate", &self.rate)
            .finish()
    }
}

/// The share of `exact`'s hits that `approx` found, ties counted: a hit
/// scoring as well as the exact k-th one is as good as any exact hit.
/// Scores are as reported for `metric` (`Metric::reported` is its own
/// inverse, so it turns them back into "higher is closer").
pub fn tie_aware_recall(approx: &[Hit], exact: &[Hit], metric: Metric) -> Option<f64> {
    let last = metric.reported(exact.last()?.score);
    let eps = 1e-6 * last.abs().max(1.0);
    let good =
        |h: &Hit| exact.iter().any(|e| e.id == h.id) || metric.reported(h.score) >= last - eps;
    let found = approx.iter().take(exact.len()).filter(|h| good(h)).count();
    Some(found as f64 / exact.len() as f64)
}

impl RecallEstimator {
    /// An estimator sampling `rate` (0..=1) of live queries; its thread
    /// runs a sample only while `busy` reads 0.
    pub fn start(rate: f64, metrics: QueryMetrics, busy: IntGauge) -> Self {
        let (queue, samples) = sync_channel(QUEUE);
        let windows = Arc::new(Mutex::new(HashMap::new()));
        let rate = rate.clamp(0.0, 1.0);
        if rate > 0.0 {
            let kept = windows.clone();
            let spawned = std::thread::Builder::new()
                .name("eddy-recall".into())
                .spawn(move || run(samples, kept, metrics, busy));
            if let Err(e) = spawned {
                tracing::error!(error = %e, "starting the recall estimator");
            }
        }
        Self {
            rate,
            queue,
            windows,
        }
    }

    /// Offers the queries a live search just answered on `live`: each is
    /// sampled with the configured probability.
    pub fn offer(&self, live: &Collection, queries: &QueryBatch, search: &Arc<PreparedSearch>) {
        if self.rate <= 0.0 || search.params.exact {
            return;
        }
        let mut pinned = None;
        for i in 0..queries.len() {
            if !rand::random_bool(self.rate) {
                continue;
            }
            let pinned = pinned
                .get_or_insert_with(|| {
                    Arc::new(Collection::pinned(
                        CollectionDef::clone(&live.def()),
                        live.shards(),
                        live.snapshot(),
                    ))
                })
                .clone();
            let Some(query) = queries.row(i) else {
                continue;
            };
            let sample = Sample {
                pinned,
                query,
                search: search.clone(),
            };
            if let Err(TrySendError::Full(_)) = self.queue.try_send(sample) {
                return;
            }
        }
    }

    /// The estimate of `collection`, once it has samples.
    pub fn estimate(&self, collection: &str) -> Option<Estimate> {
        self.windows
            .lock()
            .get(collection)
            .and_then(Window::estimate)
    }
}

fn run(
    samples: Receiver<Sample>,
    windows: Arc<Mutex<HashMap<String, Window>>>,
    metrics: QueryMetrics,
    busy: IntGauge,
) {
    while let Ok(sample) = samples.recv() {
        // Only on idle CPU: wait for no search in flight, a bounded time.
        let since = Instant::now();
        while busy.get() > 0 && since.elapsed() < IDLE_WAIT {
            std::thread::sleep(Duration::from_millis(2));
        }
        if busy.get() > 0 {
            continue;
        }
        let Some(recall) = measure(&sample) else {
            continue;
        };
        let name = sample.pinned.name().to_owned();
        let mut windows = windows.lock();
        let window = windows.entry(name.clone()).or_default();
        window.push(recall);
        if let Some(e) = window.estimate() {
            metrics
                .recall_estimate
                .with_label_values(&[&name])
                .set(e.value);
        }
    }
}

/// The sample's recall: its search as asked against an exact one, both on
/// its pinned snapshot. `None` when the exact search finds nothing, or a
/// search panics.
fn measure(sample: &Sample) -> Option<f64> {
    let n = sample.query.len();
    let asked = crate::cpu::guarded(|| sample.pinned.search(&sample.query, 0..n, &sample.search));
    let mut exact_params = sample.search.params.clone();
    exact_params.exact = true;
    let exact = PreparedSearch {
        params: exact_params,
        filter: sample.search.filter.clone(),
        min_offsets: Default::default(),
        only_shards: sample.search.only_shards.clone(),
    };
    let truth = crate::cpu::guarded(|| sample.pinned.search(&sample.query, 0..n, &exact));
    let (asked, truth) = (asked.ok()?, truth.ok()?);
    let metric = sample.pinned.def().metric;
    tie_aware_recall(asked.hits.first()?, truth.hits.first()?, metric)
}

#[cfg(test)]
mod tests {
    use eddy_model::PointId;

    use super::*;

    fn hit(id: u64, score: f32) -> Hit {
        Hit {
            id: PointId::Num(id),
            score,
            payload: None,
        }
    }

    #[test]
    fn ties_count_as_found() {
        let exact = [hit(1, 0.9), hit(2, 0.8), hit(3, 0.7)];
        let approx = [hit(1, 0.9), hit(4, 0.7), hit(5, 0.1)];
        assert_eq!(
            tie_aware_recall(&approx, &exact, Metric::Cosine),
            Some(2.0 / 3.0)
        );
        // Distances (lower is better).
        let exact = [hit(1, 0.1), hit(2, 0.2)];
        let approx = [hit(3, 0.2), hit(1, 0.1)];
        assert_eq!(tie_aware_recall(&approx, &exact, Metric::L2), Some(1.0));
        assert_eq!(tie_aware_recall(&approx, &[], Metric::L2), None);
    }

    #[test]
    fn the_window_keeps_the_last_samples() {
        let mut w = Window::default();
        assert!(w.estimate().is_none());
        for _ in 0..WINDOW {
            w.push(0.0);
        }
        for _ in 0..WINDOW {
            w.push(1.0);
        }
        let e = w.estimate().expect("estimate");
        assert_eq!(e.samples, WINDOW);
        assert!((e.value - 1.0).abs() < 1e-9);
    }
}
