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
/// The most rows the seal inserts itself to finish a grown graph; with
/// more left (or under half of the rows grown) it publishes flat.
pub(super) const MAX_FINISH_ROWS: usize = 8_192;

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

/// Whether the seal finishes a graph grown over `carried` of the segment's
/// `rows` rows: when it holds at least half of them and at most
/// [`MAX_FINISH_ROWS`] are left to insert.
pub(super) fn finishes(carried: usize, rows: usize) -> bool {
    carried * 2 >= rows && rows - carried.min(rows) <= MAX_FINISH_ROWS
}

/// Whether buffers grow their graphs, after how the last seals went: a
/// seal whose grown graph fell behind (ingest faster than graph building)
/// means the next buffers are sealed flat without growing one, 1, 2, 4 …
/// up to [`GrowBackoff::MAX_SKIPPED`] of them, so sustained fast ingest
/// does not pay for graphs it then throws away; a graph published with its
/// seal resets it.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct GrowBackoff {
    /// Buffers to skip after the next fall behind.
    skip_next: u32,
    /// Buffers still to skip.
    skipping: u32,
}

impl GrowBackoff {
    /// The most buffers skipped in a row.
    const MAX_SKIPPED: u32 = 16;

    /// Records what became of a seal's grown graph (its `index_builds`
    /// outcome).
    pub(super) fn sealed(&mut self, outcome: Option<&str>) {
        match outcome {
            Some("grown_behind") => {
                self.skip_next = self.skip_next.clamp(1, Self::MAX_SKIPPED);
                self.skipping = self.skip_next;
                self.skip_next = (self.skip_next * 2).min(Self::MAX_SKIPPED);
            }
            Some("grown") => *self = Self::default(),
            _ => {}
        }
    }

    /// Whether a new buffer grows its graph (counting a skipped one).
    pub(super) fn grow_next(&mut self) -> bool {
        if self.skipping == 0 {
            return true;
        }
        self.skipping -= 1;
        false
    }
}

/// For each of the first `grown` rows of `buffer`, its row in the segment
/// the buffer seals into (its live rows in order); `None` for a row a
/// later event replaced or deleted.
pub(super) fn segment_rows(buffer: &Growing, grown: usize) -> Vec<Option<u32>> {
    let mut next = 0u32;
    (0..buffer.rows() as u32)
        .map(|row| {
            buffer.is_live(row).then(|| {
                next += 1;
                next - 1
            })
        })
        .take(grown)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::{Duration, Instant};

    use eddy_hnsw::HnswParams;
    use eddy_manifest::{SegmentEntry, Store};
    use eddy_model::CollectionDef;
    use eddy_segment::{IndexFile, IndexParams, RowMask, SealedQuery, Segment};

    use crate::config::{GrowPolicy, SealPolicy};
    use crate::metrics::IngestMetrics;
    use crate::state::{test_policy, test_record, Applied, CollectionState};

    const DIM: usize = 16;
    /// The longest a test waits for the grower's rounds (a bound, not a
    /// measurement: the rounds take well under a second).
    const PATIENCE: Duration = Duration::from_secs(120);

    fn policy(first_rows: usize) -> GrowPolicy {
        GrowPolicy {
            params: IndexParams {
                hnsw: HnswParams {
                    m: 8,
                    ef_construction: 64,
                    ..HnswParams::default()
                },
                sq8: true,
                min_rows: 500,
            },
            threads: 1,
            first_rows,
        }
    }

    /// A state owning partition 0 of a new 16-dimension collection `g` in
    /// `dir`, growing its buffers' graphs under `grow`; and its metrics.
    fn state(dir: &std::path::Path, grow: GrowPolicy) -> (CollectionState, IngestMetrics) {
        let store = Store::open(dir).expect("store");
        let def = CollectionDef::new("g", DIM as u32);
        store.create_collection(&def).expect("collection");
        let metrics = IngestMetrics::new(&prometheus::Registry::new()).expect("metrics");
        let policy = SealPolicy {
            max_rows: usize::MAX,
            max_bytes: usize::MAX,
            max_age: Duration::from_secs(3600),
            grow: Some(grow),
            ..test_policy()
        };
        let mut state = CollectionState::new(def, store, policy, metrics.clone()).expect("state");
        state
            .assign(&[0], &BTreeMap::from([(0, 0)]))
            .expect("assign");
        (state, metrics)
    }

    /// A deterministic vector for `seed`, components in [-1, 1).
    fn vector(seed: u64) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1);
        (0..DIM)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    /// Upserts point `id` with the vector of `seed` at offset `offset`.
    fn upsert(state: &mut CollectionState, id: u64, seed: u64, offset: i64) {
        let values: Vec<String> = vector(seed).iter().map(f32::to_string).collect();
        let event = format!(r#"{{"id": {id}, "vector": [{}]}}"#, values.join(","));
        assert_eq!(
            state.apply(test_record(event.as_bytes(), 0, offset)),
            Applied::Done
        );
    }

    /// Waits until the grower's graph covers at least `rows` rows.
    fn wait_grown(state: &CollectionState, rows: usize) {
        let since = Instant::now();
        while state.grower.grown_rows() < rows {
            assert!(
                since.elapsed() < PATIENCE,
                "the grower covers {} of {rows} rows",
                state.grower.grown_rows()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The only segment of collection `g`'s latest manifest.
    fn sealed_segment(store: &Store) -> SegmentEntry {
        let latest = store.latest_manifest("g").expect("manifest");
        assert_eq!(latest.segments.len(), 1, "{latest:?}");
        latest.segments[0].clone()
    }

    /// A buffer whose graph was grown while its events arrived is sealed
    /// into a segment published with its index at once (no maintenance
    /// pass), whose graph covers exactly the segment's rows (rows replaced
    /// inside the buffer are left out) and finds what an exact scan finds.
    #[test]
    fn a_seal_publishes_the_graph_grown_while_its_events_arrived() {
        let dir = tempfile::tempdir().expect("tmp");
        let (mut state, metrics) = state(dir.path(), policy(300));
        let store = state.store.clone();
        for id in 0..2_600 {
            upsert(&mut state, id, id, id as i64);
        }
        // The first 300 ids again, with new vectors: their first rows die.
        for id in 0..300 {
            upsert(&mut state, id, 10_000 + id, 2_600 + id as i64);
        }
        wait_grown(&state, 2_500);
        state.seal().expect("seal").expect("progress");
        assert_eq!(state.grower.grown_rows(), 0, "the new buffer grows afresh");

        let entry = sealed_segment(&store);
        assert_eq!(entry.rows, 2_600);
        let index = entry.index.as_deref().expect("published with its index");
        let seg = Segment::open(&store.segment_path("g", &entry.id)).expect("segment");
        let index =
            IndexFile::open(&store.index_path("g", index), seg.rows(), DIM).expect("index file");
        eddy_segment::check_index(&seg, &index).expect("the graph covers the segment");
        let built = metrics
            .index_builds
            .with_label_values(&["g", "grown"])
            .get();
        assert_eq!(built, 1);

        let exact = SealedQuery {
            exact: true,
            ..SealedQuery::default()
        };
        let walk = SealedQuery {
            ef: 64,
            ..SealedQuery::default()
        };
        let mask = RowMask {
            refused: None,
            masked: 0,
        };
        let (mut found, mut wanted) = (0, 0);
        for q in 0..50 {
            let query = vector(20_000 + q);
            let search = |how: &SealedQuery<'_>| {
                eddy_segment::search_sealed(
                    &seg,
                    Some(&index),
                    None,
                    None,
                    mask,
                    &query,
                    how,
                    &|_| true,
                )
            };
            let truth: Vec<u32> = search(&exact).iter().map(|n| n.row).collect();
            let got = search(&walk);
            wanted += truth.len();
            found += got.iter().filter(|n| truth.contains(&n.row)).count();
        }
        let recall = found as f64 / wanted as f64;
        assert!(recall >= 0.95, "recall@10 {recall}");
    }

    /// A buffer whose grower did not keep up (here: never reached its first
    /// round) is sealed flat, for maintenance to index, as without one.
    #[test]
    fn a_buffer_whose_graph_fell_behind_is_sealed_flat() {
        let dir = tempfile::tempdir().expect("tmp");
        let (mut state, metrics) = state(dir.path(), policy(100_000));
        let store = state.store.clone();
        for id in 0..1_000 {
            upsert(&mut state, id, id, id as i64);
        }
        state.seal().expect("seal").expect("progress");
        let entry = sealed_segment(&store);
        assert_eq!(entry.rows, 1_000);
        assert_eq!(entry.index, None, "sealed flat");
        let counted = |outcome: &str| {
            metrics
                .index_builds
                .with_label_values(&["g", outcome])
                .get()
        };
        assert_eq!(counted("grown"), 0);
        assert_eq!(counted("grown_behind"), 0, "no graph was grown at all");
    }

    /// A seal finishes a grown graph holding at least half of the rows
    /// with at most `MAX_FINISH_ROWS` left to insert.
    #[test]
    fn a_seal_finishes_only_a_graph_that_kept_up() {
        assert!(super::finishes(10, 20));
        assert!(!super::finishes(9, 20));
        assert!(super::finishes(40_000, 40_000 + super::MAX_FINISH_ROWS));
        assert!(!super::finishes(40_000, 40_001 + super::MAX_FINISH_ROWS));
        assert!(super::finishes(0, 0));
    }

    /// Seals whose graphs fell behind skip growing for 1, 2, 4 … (at most
    /// 16) buffers; a graph that kept up resets the back-off.
    #[test]
    fn buffers_skip_growing_after_graphs_fell_behind() {
        let mut backoff = super::GrowBackoff::default();
        assert!(backoff.grow_next());
        let skipped_after_behind = |backoff: &mut super::GrowBackoff| {
            backoff.sealed(Some("grown_behind"));
            let mut skipped = 0;
            while !backoff.grow_next() {
                skipped += 1;
            }
            skipped
        };
        let runs: Vec<u32> = (0..7).map(|_| skipped_after_behind(&mut backoff)).collect();
        assert_eq!(runs, [1, 2, 4, 8, 16, 16, 16]);
        backoff.sealed(Some("grown"));
        assert_eq!(skipped_after_behind(&mut backoff), 1, "reset");
        backoff.sealed(None);
        backoff.sealed(Some("grown_failed"));
        assert!(backoff.grow_next(), "only falling behind backs off");
    }
}
