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
//! speed is never capped by graph-build speed. A thread whose backlog
//! outgrew what a seal could finish gives up at once
//! ([`GIVE_UP_BACKLOG`]), and a seal does not wait for the round under way
//! of a graph it would not finish ([`Grower::stop`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

/// Rows received and not yet grown beyond which the thread gives up: a
/// seal could then finish the graph only if ingest paused for seconds
/// (the seal inserts at most [`finish::MAX_FINISH_ROWS`] rows itself,
/// and the round under way at most [`MAX_ROUND_ROWS`]).
const GIVE_UP_BACKLOG: usize = finish::MAX_FINISH_ROWS + MAX_ROUND_ROWS;

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
    /// Set when the thread gave up: its graph fell behind the buffer.
    gave_up: Arc<AtomicBool>,
    running: Option<Running>,
    /// Holds the thread before each round while a test closes it.
    #[cfg(test)]
    pub(super) gate: tests::Gate,
}

#[derive(Debug)]
struct Running {
    rows: Sender<Vec<f32>>,
    thread: JoinHandle<Option<Graph>>,
}

/// What a grower hands the seal when its buffer freezes.
pub(super) enum Handover {
    /// No graph: none was grown, or none is due for the buffer's rows.
    Nothing,
    /// The graph fell behind the buffer (`grown_behind`): the segment is
    /// published flat, for maintenance to index. `grown`: the rows the
    /// graph covered when it was left.
    Behind {
        /// Rows the graph covered.
        grown: usize,
    },
    /// The graph, once the round under way ends.
    Pending(Pending),
}

/// A grower's thread ending its round under way, for the seal to join.
pub(super) struct Pending {
    policy: GrowPolicy,
    thread: JoinHandle<Option<Graph>>,
}

impl Pending {
    /// Waits for the thread's last round and takes its graph (`None` when
    /// it grew none or panicked).
    pub(super) fn join(self) -> Option<Grown> {
        let policy = self.policy;
        match self.thread.join() {
            Ok(graph) => graph.map(|graph| Grown { graph, policy }),
            Err(_) => {
                warn!("the graph grower panicked: the buffer is sealed flat");
                None
            }
        }
    }
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
            gave_up: Arc::new(AtomicBool::new(false)),
            running: None,
            #[cfg(test)]
            gate: tests::Gate::default(),
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

    /// Whether the thread gave up (its graph fell behind the buffer).
    #[cfg(test)]
    pub(super) fn gave_up(&self) -> bool {
        self.gave_up.load(Ordering::Acquire)
    }

    /// Rows the latest grown graph covers.
    #[cfg(test)]
    pub(super) fn grown_rows(&self) -> usize {
        self.grown.load(Ordering::Acquire)
    }

    /// Stops growing, at the freeze of the buffer it grew for, which holds
    /// `live_rows` live rows. The thread ends after its round under way;
    /// the seal waits for that round only when the graph can still be
    /// finished ([`finish::finishes`]) once it ends: a graph that cannot,
    /// even with a whole further round ([`MAX_ROUND_ROWS`]), is left
    /// behind at once, so fast ingest never waits for a graph it would
    /// throw away.
    pub(super) fn stop(self, live_rows: usize) -> Handover {
        let grown = self.grown.load(Ordering::Acquire);
        if self.gave_up.load(Ordering::Acquire) {
            return Handover::Behind { grown };
        }
        let (Some(policy), Some(Running { rows, thread })) = (self.policy, self.running) else {
            return Handover::Nothing;
        };
        // With the sender gone, the thread grows no further than the
        // round under way, which started from the graph `grown` counts.
        drop(rows);
        if live_rows < policy.params.min_rows.max(1) || self.sent < policy.first_rows {
            // No graph is due for so few rows.
            return Handover::Nothing;
        }
        // Read again: the round under way may have ended meanwhile.
        let grown = self.grown.load(Ordering::Acquire);
        let reach = (grown + MAX_ROUND_ROWS).min(self.sent).min(live_rows);
        if !finish::finishes(reach, live_rows) {
            return Handover::Behind { grown };
        }
        Handover::Pending(Pending { policy, thread })
    }

    fn spawn(&self, policy: GrowPolicy) -> std::io::Result<Running> {
        let (tx, rx) = mpsc::channel();
        let (dim, metric) = (self.dim, self.metric);
        let progress = Progress {
            grown: self.grown.clone(),
            gave_up: self.gave_up.clone(),
        };
        #[cfg(test)]
        let gate = self.gate.clone();
        let thread = std::thread::Builder::new()
            .name("eddy-grow".into())
            .spawn(move || {
                crate::priority::lower_this_thread(policy.nice);
                grow(&rx, dim, metric, &policy, &progress, || {
                    #[cfg(test)]
                    gate.pass();
                })
            })?;
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
    progress: &Progress,
    before_round: impl Fn(),
) -> Option<Graph> {
    let pool = match rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .thread_name(|_| "eddy-grow-round".into())
        .start_handler({
            let nice = policy.nice;
            move |_| crate::priority::lower_this_thread(nice)
        })
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
        if vectors.len() / dim - have > GIVE_UP_BACKLOG {
            debug!(
                grown = have,
                rows = vectors.len() / dim,
                "the graph fell behind the buffer: growing stops"
            );
            progress.gave_up.store(true, Ordering::Release);
            return None;
        }
        next = next_round(vectors.len() / dim, have, policy.first_rows);
        let Some(rows) = next else {
            continue;
        };
        before_round();
        let data = Vectors::new(&vectors[..rows * dim], dim, metric);
        let options = *options.get_or_insert_with(|| round_options(&data, &policy.params.hnsw));
        match pool.install(|| round(&data, &policy.params.hnsw, &options, graph.as_ref())) {
            Ok(next) => {
                debug!(rows, inserted = rows - have, "graph grown");
                graph = Some(next);
                progress.grown.store(rows, Ordering::Release);
            }
            Err(e) => {
                warn!(error = %e, "growing the buffer's graph failed: the buffer is sealed flat");
                return None;
            }
        }
    }
}

/// What the grower's thread tells its buffer.
struct Progress {
    /// Rows the latest graph covers.
    grown: Arc<AtomicUsize>,
    /// Set when the thread gave up ([`GIVE_UP_BACKLOG`]).
    gave_up: Arc<AtomicBool>,
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
