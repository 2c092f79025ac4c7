//! In-process crash-point tests (built with `--features failpoints`): a
//! seal that stalls between writing its segment and publishing while the
//! garbage collector runs with the clock far past its grace, and a seal
//! whose segment write is held while events keep arriving.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use eddy_event::Message;
use eddy_ingest::{Applied, CollectionState, IngestMetrics, SealPolicy};
use eddy_manifest::{fsck, GcPolicy, Store};
use eddy_model::{CollectionDef, IdType, Metric};
use fail::FailScenario;

fn def() -> CollectionDef {
    let mut def = CollectionDef::new("m", 2);
    def.metric = Metric::L2;
    def.id_type = IdType::U64;
    def.validated().expect("valid")
}

/// Applies an upsert of `id` (vector `[id, 1]`) at `offset` of partition 0.
fn apply(state: &mut CollectionState, id: u64, offset: i64) {
    let key = id.to_string();
    let value = format!(r#"{{"id":{id},"vector":[{id},1]}}"#);
    let record = eddy_kafka::Record {
        message: Message {
            key: Some(key.as_bytes()),
            value: Some(value.as_bytes()),
            content_type: None,
        },
        place: eddy_kafka::Place {
            partition: 0,
            offset,
            timestamp_ms: 0,
        },
    };
    assert_eq!(state.apply(record), Applied::Done, "offset {offset}");
}

/// A collection state of [`def`] owning partition 0 of a new store in
/// `dir`, sealing only when asked.
fn state_in(dir: &std::path::Path, write_lease: Duration) -> (Store, CollectionState) {
    let store = Store::open(dir).expect("store");
    store.create_collection(&def()).expect("collection");
    let policy = SealPolicy {
        max_rows: usize::MAX,
        max_bytes: usize::MAX,
        max_age: Duration::from_secs(3600),
        write_lease,
        quiet: None,
        grow: None,
    };
    let metrics = IngestMetrics::new(&prometheus::Registry::new()).expect("metrics");
    let mut state = CollectionState::new(def(), store.clone(), policy, metrics).expect("state");
    state
        .assign(&[0], &std::collections::BTreeMap::new())
        .expect("assign");
    (store, state)
}

/// Seals ten events while the seal is held between writing its segment and
/// publishing; meanwhile another writer publishes and the collector runs
/// `gc_after` later with a one-minute grace. Returns the segment files the
/// collector removed.
fn stalled_seal(write_lease: Duration, gc_after: Duration) -> usize {
    let scenario = FailScenario::setup();
    let dir = tempfile::tempdir().expect("tmp");
    let (store, mut state) = state_in(dir.path(), write_lease);
    for id in 0..10u64 {
        apply(&mut state, id, id as i64);
    }
    let removed = Arc::new(AtomicUsize::new(0));
    let hits = Arc::new(AtomicUsize::new(0));
    let (gc_store, gc_removed) = (store.clone(), removed.clone());
    fail::cfg_callback("seal::before_publish", move || {
        if hits.fetch_add(1, Ordering::SeqCst) > 0 {
            return;
        }
        let other = gc_store
            .update::<eddy_manifest::Error>("m", |latest| {
                let mut next = latest.successor();
                next.partitions.entry(9).or_default().owner_epoch += 1;
                Ok(Some(next))
            })
            .expect("another writer publishes");
        assert!(other.published.is_some());
        let policy = GcPolicy {
            keep_versions: 1,
            grace: Duration::from_secs(60),
        };
        let report = gc_store
            .collect_garbage("m", &policy, SystemTime::now() + gc_after)
            .expect("gc");
        gc_removed.store(report.segments, Ordering::SeqCst);
    })
    .expect("failpoint");
    let outcome = state.seal().expect("seal").expect("published");
    fail::remove("seal::before_publish");
    let (report, rows) = fsck(&store, "m").expect("fsck");
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.live_rows, 10, "{report:?}");
    assert_eq!(rows.len(), 10);
    assert_eq!(
        store.latest_manifest("m").expect("latest").version,
        outcome.version
    );
    scenario.teardown();
    removed.load(Ordering::SeqCst)
}

#[test]
fn a_seal_stalled_past_the_grace_keeps_its_segment_under_its_lease() {
    assert_eq!(
        stalled_seal(Duration::from_secs(600), Duration::from_secs(120)),
        0,
        "the lease holds: nothing removed"
    );
}

#[test]
fn a_seal_stalled_past_its_lease_writes_again_instead_of_naming_a_deleted_file() {
    assert_eq!(
        stalled_seal(Duration::from_secs(1), Duration::from_secs(3600)),
        1,
        "the collector removed the stalled segment"
    );
}

/// A seal's segment is written off the consume path: while its write is
/// held (at `segment::before_fsync`, on the seal's thread), events keep
/// being applied into a new buffer and nothing is published; once the
/// write goes on, the seal publishes exactly what it froze, and the next
/// seal the rest, deleting the sealed rows of the ids it upserted again.
#[test]
fn events_apply_while_a_seal_writes_and_each_publish_covers_what_it_froze() {
    let scenario = FailScenario::setup();
    let dir = tempfile::tempdir().expect("tmp");
    let (store, mut state) = state_in(dir.path(), Duration::from_secs(600));
    for id in 0..10u64 {
        apply(&mut state, id, id as i64);
    }
    let before = store.latest_manifest("m").expect("latest").version;
    fail::cfg("segment::before_fsync", "pause").expect("failpoint");
    assert_eq!(state.start_seal().expect("start"), None, "no earlier seal");
    assert!(state.seal_in_flight());
    // Ids 5..15 at offsets 10..20: 5..10 upsert rows the held seal holds.
    for id in 5..15u64 {
        apply(&mut state, id, id as i64 + 5);
    }
    assert_eq!(state.poll_seal().expect("poll"), None, "the write is held");
    assert_eq!(
        store.latest_manifest("m").expect("latest").version,
        before,
        "nothing published while the write is held"
    );
    fail::remove("segment::before_fsync");
    let first = state
        .wait_seal()
        .expect("first seal")
        .expect("first published");
    assert_eq!(first.committed, [(0, 10)].into(), "the frozen events only");
    assert!(!state.seal_in_flight());
    let second = state.seal().expect("second seal").expect("published");
    assert_eq!(second.committed, [(0, 20)].into());
    let (report, rows) = fsck(&store, "m").expect("fsck");
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.live_rows, 15, "{report:?}");
    for id in 0..15u64 {
        let live = &rows[&eddy_model::PointId::Num(id)];
        assert_eq!(live.len(), 1, "id {id}: {live:?}");
        let offset = if id < 5 { id as i64 } else { id as i64 + 5 };
        assert_eq!(live[0].offset, offset, "id {id}: the newest write");
    }
    scenario.teardown();
}
