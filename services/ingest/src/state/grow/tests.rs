//! Tests of growing a buffer's graph, through `CollectionState`.

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
        nice: 0,
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
            eddy_segment::search_sealed(&seg, Some(&index), None, None, mask, &query, how, &|_| {
                true
            })
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
    assert!(super::finish::finishes(10, 20));
    assert!(!super::finish::finishes(9, 20));
    assert!(super::finish::finishes(
        40_000,
        40_000 + super::finish::MAX_FINISH_ROWS
    ));
    assert!(!super::finish::finishes(
        40_000,
        40_001 + super::finish::MAX_FINISH_ROWS
    ));
    assert!(super::finish::finishes(0, 0));
}

/// Seals whose graphs fell behind skip growing for 1, 2, 4 … (at most
/// 16) buffers; a graph that kept up resets the back-off.
#[test]
fn buffers_skip_growing_after_graphs_fell_behind() {
    let mut backoff = super::finish::GrowBackoff::default();
    assert!(backoff.grow_next());
    let skipped_after_behind = |backoff: &mut super::finish::GrowBackoff| {
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

/// A gate the grower's thread passes before each round: a test closes it
/// to hold the thread at a known point.
#[derive(Debug, Default, Clone)]
pub(in crate::state) struct Gate(std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>);

impl Gate {
    /// Closes (`true`) or opens the gate.
    pub(in crate::state) fn set_closed(&self, closed: bool) {
        let (lock, opened) = &*self.0;
        *lock.lock().expect("gate") = closed;
        opened.notify_all();
    }

    /// Waits while the gate is closed.
    pub(super) fn pass(&self) {
        let (lock, opened) = &*self.0;
        let mut closed = lock.lock().expect("gate");
        while *closed {
            closed = opened.wait(closed).expect("gate");
        }
    }
}

/// A seal whose grown graph cannot keep up, even with the round under
/// way, does not wait for that round: the buffer is sealed flat at once
/// (counted `grown_behind`) and the grower's thread is left to end on its
/// own. Here the thread is held before its next round while 11,000 rows
/// arrive (too few for it to give up by itself); a seal that joined it
/// would wait until the watchdog opens it.
#[test]
fn a_seal_does_not_wait_for_a_graph_that_fell_behind() {
    let dir = tempfile::tempdir().expect("tmp");
    let (mut state, metrics) = state(dir.path(), policy(300));
    let store = state.store.clone();
    for id in 0..1_000 {
        upsert(&mut state, id, id, id as i64);
    }
    wait_grown(&state, 700);
    let gate = state.grower.gate.clone();
    gate.set_closed(true);
    for id in 1_000..12_000 {
        upsert(&mut state, id, id, id as i64);
    }
    let (sealed, done) = std::sync::mpsc::channel::<()>();
    let watchdog = {
        let gate = gate.clone();
        std::thread::spawn(move || {
            let opened = matches!(
                done.recv_timeout(PATIENCE),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout)
            );
            gate.set_closed(false);
            opened
        })
    };
    state.seal().expect("seal").expect("progress");
    drop(sealed);
    let opened_by_watchdog = watchdog.join().expect("watchdog");
    assert!(
        !opened_by_watchdog,
        "the seal waited for the grower's round"
    );
    assert_sealed_behind(&store, &metrics, 12_000);
}

/// A grower whose backlog grew beyond what a seal could finish gives up
/// by itself while the buffer still fills, instead of spending rounds on a
/// graph the seal would throw away; the seal then publishes flat, counted
/// `grown_behind`. Here its thread is held while 20,000 rows arrive.
#[test]
fn a_grower_that_fell_behind_gives_up_before_the_seal() {
    let dir = tempfile::tempdir().expect("tmp");
    let (mut state, metrics) = state(dir.path(), policy(300));
    let store = state.store.clone();
    let gate = state.grower.gate.clone();
    gate.set_closed(true);
    for id in 0..20_000 {
        upsert(&mut state, id, id, id as i64);
    }
    gate.set_closed(false);
    let since = Instant::now();
    while !state.grower.gave_up() {
        assert!(since.elapsed() < PATIENCE, "the grower did not give up");
        std::thread::sleep(Duration::from_millis(5));
    }
    state.seal().expect("seal").expect("progress");
    assert_sealed_behind(&store, &metrics, 20_000);
}

/// The only segment holds `rows` rows, published flat, and one grown graph
/// was counted as fallen behind.
fn assert_sealed_behind(store: &Store, metrics: &IngestMetrics, rows: u64) {
    let entry = sealed_segment(store);
    assert_eq!(entry.rows, rows);
    assert_eq!(entry.index, None, "sealed flat");
    let behind = metrics
        .index_builds
        .with_label_values(&["g", "grown_behind"])
        .get();
    assert_eq!(behind, 1);
}
