//! In-process crash-point tests (built with `--features failpoints`): a
//! seal that stalls between writing its segment and publishing while the
//! garbage collector runs with the clock far past its grace.

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

/// Seals ten events while the seal is held between writing its segment and
/// publishing; meanwhile another writer publishes and the collector runs
/// `gc_after` later with a one-minute grace. Returns the segment files the
/// collector removed.
fn stalled_seal(write_lease: Duration, gc_after: Duration) -> usize {
    let scenario = FailScenario::setup();
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("store");
    store.create_collection(&def()).expect("collection");
    let policy = SealPolicy {
        max_rows: usize::MAX,
        max_bytes: usize::MAX,
        max_age: Duration::from_secs(3600),
        write_lease,
    };
    let metrics = IngestMetrics::new(&prometheus::Registry::new()).expect("metrics");
    let mut state = CollectionState::new(def(), store.clone(), policy, metrics).expect("state");
    state
        .assign(&[0], &std::collections::BTreeMap::new())
        .expect("assign");
    for id in 0..10u64 {
        let key = id.to_string();
        let value = format!(r#"{{"id":{id},"vector":[{id},1]}}"#);
        let msg = Message {
            key: Some(key.as_bytes()),
            value: Some(value.as_bytes()),
            content_type: None,
        };
        let record = eddy_kafka::Record {
            message: msg,
            partition: 0,
            offset: id as i64,
            timestamp_ms: 0,
        };
        assert_eq!(state.apply(record), Applied::Done);
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
