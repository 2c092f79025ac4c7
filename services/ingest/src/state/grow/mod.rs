//! A buffer's graph, grown while its events arrive, so that a seal can
//! publish its segment together with the segment's index.
//!
//! Without it a sealed segment is published flat and waits for the
//! maintenance thread to build its graph; until then every query scans its
//! rows one by one (8–17 s for 20k rows beside a query load on 2 cores).
//! The graph costs the same CPU either way; growing it while the rows
//! arrive moves that work before the seal instead of after it.
//!
//! A thread of its own takes the buffer's rows in batches and inserts them
//! into an HNSW graph in rounds: each round starts from the last round's
//! graph ([`Graph::build_from_prior`]), so only the new rows are inserted,
//! and a round waits until the new rows are a share of the rows already
//! grown, which bounds the repeated per-round work (layout, the beam's
//! codes) to a few times one build's. The seal finishes the graph for the
//! segment's rows (the rows grown since, and the graph's in-degree and
//! reachability passes) with [`eddy_segment::build_index_from`]. When the
//! grower fell far behind (ingest faster than graph building) the seal
//! publishes flat, as before, and maintenance builds the graph: ingest
//! speed is never capped by graph-build speed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;

use eddy_hnsw::{BuildOptions, Graph, HnswParams, Prior, Vectors};
use eddy_model::Metric;
use eddy_segment::Growing;

use crate::config::GrowPolicy;

mod finish;
#[cfg(test)]
mod tests;

pub(super) use finish::{write_grown_index, GrowBackoff};
use tracing::{debug, warn};

/// Rows handed to the grower's thread at a time.
const BATCH_ROWS: usize = 64;
/// A round starts once the rows not yet grown are at least this share
/// (1/n) of the rows grown (and at least [`MIN_ROUND_ROWS`]).
const ROUND_SHARE: usize = 8;
/// The fewest new rows a round inserts.
const MIN_ROUND_ROWS: usize = 256;
/// The most rows a round inserts (about half a second of one core at
/// 384 dimensions), so a seal never waits long for the round under way.
const MAX_ROUND_ROWS: usize = 4_096;

/// The grower of one buffer: hands the buffer's rows to its thread as they
/// arrive and, at the seal, hands back the graph grown so far.
#[derive(Debug)]
pub(super) struct Grower {
    policy: Option<GrowPolicy>,
    dim: usize,
    metric: Metric,
    /// Buffer rows handed to the thread.
    sent: usize,
    /// Rows the thread's latest graph covers.
    grown: Arc<AtomicUsize>,
    running: Option<Running>,
}

#[derive(Debug)]
struct Running {
    rows: Sender<Vec<f32>>,
    thread: JoinHandle<Option<Graph>>,
}

/// The graph a grower handed over: over the buffer's first `len()` rows.
pub(super) struct Grown {
    /// The graph.
    pub(super) graph: Graph,
    /// The policy it was grown under.
    pub(super) policy: GrowPolicy,
}

impl Grower {
    /// A grower for an empty buffer of `dim`-dimension rows (`policy`
    /// `None`: it never grows anything).
    pub(super) fn new(policy: Option<GrowPolicy>, dim: usize, metric: Metric) -> Self {
        Self {
            policy,
            dim,
            metric,
            sent: 0,
            grown: Arc::new(AtomicUsize::new(0)),
            running: None,
        }
    }

    /// Hands `buffer`'s rows not yet handed over to the thread, in batches
    /// of [`BATCH_ROWS`]; starts the thread with the first batch.
    pub(super) fn offer(&mut self, buffer: &Growing) {
        let Some(policy) = self.policy else {
            return;
        };
        if buffer.rows() < self.sent + BATCH_ROWS {
            return;
        }
        if self.running.is_none() {
            match self.spawn(policy) {
                Ok(running) => self.running = Some(running),
                Err(e) => {
                    warn!(error = %e, "starting the graph grower failed: this buffer is sealed flat");
                    self.policy = None;
                    return;
                }
            }
        }
        let rows = &buffer.vectors()[self.sent * self.dim..];
        if let Some(running) = &self.running {
            if running.rows.send(rows.to_vec()).is_err() {
                // The thread ended (a failed round, logged there).
                self.policy = None;
            }
        }
        self.sent = buffer.rows();
    }

    /// Rows the latest grown graph covers.
    #[cfg(test)]
    pub(super) fn grown_rows(&self) -> usize {
        self.grown.load(Ordering::Acquire)
    }

    /// Stops growing: the thread ends its round under way and hands back
    /// its graph (`None` when it grew none).
    pub(super) fn finish(self) -> Option<Grown> {
        let policy = self.policy?;
        let Running { rows, thread } = self.running?;
        drop(rows);
        match thread.join() {
            Ok(graph) => graph.map(|graph| Grown { graph, policy }),
            Err(_) => {
                warn!("the graph grower panicked: the buffer is sealed flat");
                None
            }
        }
    }

    fn spawn(&self, policy: GrowPolicy) -> std::io::Result<Running> {
        let (tx, rx) = mpsc::channel();
        let (dim, metric, grown) = (self.dim, self.metric, self.grown.clone());
        let thread = std::thread::Builder::new()
            .name("eddy-grow".into())
            .spawn(move || grow(&rx, dim, metric, &policy, &grown))?;
        Ok(Running { rows: tx, thread })
    }
}

/// The thread: takes rows until the sender is dropped, growing the graph
/// in rounds; returns the last round's graph.
fn grow(
    rx: &Receiver<Vec<f32>>,
    dim: usize,
    metric: Metric,
    policy: &GrowPolicy,
    grown: &AtomicUsize,
) -> Option<Graph> {
    let pool = match rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .thread_name(|_| "eddy-grow-round".into())
        .build()
    {
        Ok(pool) => pool,
        Err(e) => {
            warn!(error = %e, "the graph grower's pool failed to start: the buffer is sealed flat");
            return None;
        }
    };
    let mut vectors: Vec<f32> = Vec::new();
    let mut graph: Option<Graph> = None;
    // Set at the first round: whether the rounds' beam runs on SQ8 codes.
    let mut options: Option<BuildOptions> = None;
    loop {
        let have = graph.as_ref().map_or(0, Graph::len);
        let mut next = next_round(vectors.len() / dim, have, policy.first_rows);
        if next.is_none() {
            // Nothing to do until more rows arrive.
            match rx.recv() {
                Ok(rows) => vectors.extend_from_slice(&rows),
                Err(_) => return graph,
            }
        }
        loop {
            match rx.try_recv() {
                Ok(rows) => vectors.extend_from_slice(&rows),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return graph,
            }
        }
        next = next_round(vectors.len() / dim, have, policy.first_rows);
        let Some(rows) = next else {
            continue;
        };
        let data = Vectors::new(&vectors[..rows * dim], dim, metric);
        let options = *options.get_or_insert_with(|| round_options(&data, &policy.params.hnsw));
        match pool.install(|| round(&data, &policy.params.hnsw, &options, graph.as_ref())) {
            Ok(next) => {
                debug!(rows, inserted = rows - have, "graph grown");
                graph = Some(next);
                grown.store(rows, Ordering::Release);
            }
            Err(e) => {
                warn!(error = %e, "growing the buffer's graph failed: the buffer is sealed flat");
                return None;
            }
        }
    }
}

/// The rows the next round's graph covers, given `received` rows and a
/// graph over the first `have`; `None` while no round is due: before
/// `first_rows` rows, or while the new rows are fewer than a share of
/// `have` ([`ROUND_SHARE`], within [`MIN_ROUND_ROWS`]..=[`MAX_ROUND_ROWS`]).
/// A round inserts at most [`MAX_ROUND_ROWS`].
fn next_round(received: usize, have: usize, first_rows: usize) -> Option<usize> {
    let due = (have / ROUND_SHARE).clamp(MIN_ROUND_ROWS, MAX_ROUND_ROWS);
    (received >= first_rows && received - have >= due).then(|| received.min(have + MAX_ROUND_ROWS))
}

/// The rounds' build options: the in-degree and reachability passes are
/// left to the seal's build, and whether SQ8 codes rank these rows well
/// enough for the construction beam is checked once, on the first round's
/// rows, not again every round (the check scores every row 64 times: a
/// third of the rounds' CPU).
fn round_options(first: &Vectors<'_>, params: &HnswParams) -> BuildOptions {
    let sq8_beam = eddy_hnsw::sq8_beam_fidelity(first, params.seed)
        .is_ok_and(|f| f >= eddy_hnsw::SQ8_BEAM_MIN_FIDELITY);
    BuildOptions {
        repair: false,
        min_in_degree: 0,
        sq8_beam,
        sq8_beam_min_fidelity: 0.0,
        ..BuildOptions::default()
    }
}

/// One round: `vectors`' graph, starting from `last` (over its first rows).
fn round(
    vectors: &Vectors<'_>,
    params: &HnswParams,
    options: &BuildOptions,
    last: Option<&Graph>,
) -> eddy_hnsw::Result<Graph> {
    match last {
        None => Graph::build_with(vectors, params, options),
        Some(last) => {
            let rows: Vec<Option<u32>> = (0..last.len() as u32).map(Some).collect();
            let prior = Prior {
                view: last.view(),
                rows: &rows,
            };
            Graph::build_from_prior(vectors, params, options, None, &prior)
        }
    }
}
