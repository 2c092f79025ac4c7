//! The online recall estimate: a share of live queries (`--recall-sample-rate`)
//! is searched again on a background thread when no search is in flight,
//! once as the user asked and once exactly, both on the snapshot that
//! served it (pinned: the segments, without the tail), and the tie-aware
//! overlap of the two is averaged over each collection's last
//! [`WINDOW`] samples: `eddy_query_recall_estimate{collection}` and
//! `recall_estimate` in the collection info. It measures the graph walk on
//! the queries users really send, at the `ef` and quantization they use.
//!
//! Its cost is bounded by `--recall-cpu-share`: after each sample the
//! thread rests so that its searches take at most that share of one core,
//! and queries offered while it measures or rests are not sampled. Without
//! the bound an exact scan per sampled query took ~27 % of a core beside
//! 11.6k q/s of DoExchange (1 % sampled, 61k rows), slipping into the gaps
//! between batches and delaying the next one.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// Whether the thread takes samples now (not while it measures or
    /// rests under a CPU share below 1): offers are dropped at once
    /// otherwise.
    wanted: Arc<AtomicBool>,
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
    /// runs a sample only while `busy` reads 0, and takes at most
    /// `cpu_share` (0..=1) of one core.
    pub fn start(rate: f64, cpu_share: f64, metrics: QueryMetrics, busy: IntGauge) -> Self {
        let (queue, samples) = sync_channel(QUEUE);
        let windows = Arc::new(Mutex::new(HashMap::new()));
        let wanted = Arc::new(AtomicBool::new(true));
        let rate = rate.clamp(0.0, 1.0);
        if rate > 0.0 {
            let thread = Thread {
                samples,
                windows: windows.clone(),
                wanted: wanted.clone(),
                // Not finite: no bound; the floor is `rest_after`'s.
                cpu_share: if cpu_share.is_finite() {
                    cpu_share
                } else {
                    1.0
                },
                metrics,
                busy,
            };
            let spawned = std::thread::Builder::new()
                .name("eddy-recall".into())
                .spawn(move || thread.run());
            if let Err(e) = spawned {
                tracing::error!(error = %e, "starting the recall estimator");
            }
        }
        Self {
            rate,
            wanted,
            queue,
            windows,
        }
    }

    /// Offers the queries a live search just answered on `live`: each is
    /// sampled with the configured probability.
    pub fn offer(&self, live: &Collection, queries: &QueryBatch, search: &Arc<PreparedSearch>) {
        if self.rate <= 0.0 || search.params.exact || !self.wanted.load(Ordering::Relaxed) {
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

/// The estimator's thread and what it shares with [`RecallEstimator`].
struct Thread {
    samples: Receiver<Sample>,
    windows: Arc<Mutex<HashMap<String, Window>>>,
    wanted: Arc<AtomicBool>,
    cpu_share: f64,
    metrics: QueryMetrics,
    busy: IntGauge,
}

impl Thread {
    fn run(self) {
        let rests = self.cpu_share < 1.0;
        loop {
            self.wanted.store(true, Ordering::Relaxed);
            let Ok(sample) = self.samples.recv() else {
                return;
            };
            if rests {
                self.wanted.store(false, Ordering::Relaxed);
            }
            // Only on idle CPU: wait for no search in flight, a bounded time.
            let since = Instant::now();
            while self.busy.get() > 0 && since.elapsed() < IDLE_WAIT {
                std::thread::sleep(Duration::from_millis(2));
            }
            if self.busy.get() > 0 {
                continue;
            }
            let started = Instant::now();
            let recall = measure(&sample);
            let spent = started.elapsed();
            if let Some(recall) = recall {
                self.record(sample.pinned.name(), recall);
            }
            // The pinned snapshot is let go before the rest.
            drop(sample);
            if rests {
                std::thread::sleep(rest_after(spent, self.cpu_share));
            }
        }
    }

    fn record(&self, name: &str, recall: f64) {
        let mut windows = self.windows.lock();
        let window = windows.entry(name.to_owned()).or_default();
        window.push(recall);
        if let Some(e) = window.estimate() {
            self.metrics
                .recall_estimate
                .with_label_values(&[name])
                .set(e.value);
        }
    }
}

/// The smallest CPU share the estimator is held to (one sample in 1,000
/// times its cost).
const MIN_CPU_SHARE: f64 = 0.001;

/// How long to rest after a sample that took `spent` so that sampling
/// takes `cpu_share` of one core: `spent × (1 − share) / share`.
fn rest_after(spent: Duration, cpu_share: f64) -> Duration {
    if cpu_share >= 1.0 {
        return Duration::ZERO;
    }
    let share = cpu_share.max(MIN_CPU_SHARE);
    spent.mul_f64((1.0 - share) / share)
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
    fn the_rest_holds_sampling_to_its_cpu_share() {
        let spent = Duration::from_millis(3);
        // 2 %: 3 ms of work, then 147 ms of rest.
        assert_eq!(rest_after(spent, 0.02), Duration::from_millis(147));
        // Half a core: rest as long as the work.
        assert_eq!(rest_after(spent, 0.5), spent);
        assert_eq!(rest_after(spent, 1.0), Duration::ZERO);
        // Shares at or below zero are held to the floor, never a division
        // by zero.
        assert_eq!(rest_after(spent, 0.0), spent.mul_f64(999.0));
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
