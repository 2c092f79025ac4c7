//! Merges: the tiered policy picks a tier, the merged segment holds every
//! live row exactly once, deletes that hit an input while the merge was
//! held before its commit are carried over, and a merge racing seals of the
//! same id through the real ingest state leaves it once with its last value
//! (checked with `fsck`).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use eddy_event::Message;
use eddy_ingest::maintenance::merge::{publish_merged, write_merged, MergePolicy};
use eddy_ingest::{Applied, CollectionState, IngestMetrics, SealPolicy};
use eddy_manifest::{fsck, GcPolicy, SegmentEntry, Store};
use eddy_model::{CollectionDef, FieldType, IdType, Metric, PointId};
use eddy_segment::{Growing, Segment};

fn def() -> CollectionDef {
    let mut def = CollectionDef::new("m", 2);
    def.metric = Metric::L2;
    def.id_type = IdType::U64;
    def.payload_fields = BTreeMap::from([("kind".to_owned(), FieldType::Keyword)]);
    def.validated().expect("valid")
}

/// Seals rows `ids` (partition 0, offsets from `first_offset`) as a segment
/// and publishes it, deleting `replaced` rows of older segments.
fn seal(store: &Store, ids: std::ops::Range<u64>, first_offset: i64) -> String {
    let def = def();
    let mut g = Growing::new(2, Metric::L2, IdType::U64);
    for (i, id) in ids.clone().enumerate() {
        let payload = format!(r#"{{"kind":"k{}"}}"#, id % 2);
        g.upsert(
            PointId::Num(id),
            &[id as f32, 1.0],
            payload.as_bytes(),
            0,
            first_offset + i as i64,
        );
    }
    let (seg_id, path) = store.new_segment(&def.name);
    let bytes = g
        .write_segment(&path, &def.payload_fields)
        .expect("segment")
        .bytes;
    let latest = store.latest_manifest(&def.name).expect("manifest");
    let mut next = latest.successor();
    next.segments.push(SegmentEntry {
        id: seg_id.clone(),
        rows: ids.end - ids.start,
        bytes,
        deletes: None,
        deleted: 0,
        offset_ranges: BTreeMap::from([(0, (first_offset, first_offset + 99))]),
        index: None,
    });
    next.partitions.entry(0).or_default().next_offset = first_offset + (ids.end - ids.start) as i64;
    store.publish(&next).expect("publish");
    seg_id
}

/// Marks `rows` of segment `id` deleted in a new manifest version.
fn delete_rows(store: &Store, id: &str, rows: &[u32]) {
    let latest = store.latest_manifest("m").expect("manifest");
    let mut next = latest.successor();
    let entry = next
        .segments
        .iter_mut()
        .find(|s| s.id == id)
        .expect("segment live");
    let mut bits = match &entry.deletes {
        Some(name) => store.read_deletes("m", name).expect("deletes"),
        None => Default::default(),
    };
    bits.extend(rows.iter().copied());
    entry.deletes = Some(store.write_deletes("m", id, &bits).expect("write deletes"));
    entry.deleted = bits.len();
    store.publish(&next).expect("publish");
}

#[test]
fn held_merge_carries_over_deletes_that_hit_its_inputs() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("store");
    store.create_collection(&def()).expect("collection");
    let segs: Vec<String> = (0..4u64)
        .map(|s| seal(&store, s * 100..s * 100 + 100, (s * 100) as i64))
        .collect();
    // A row deleted before the merge reads its input: dropped.
    delete_rows(&store, &segs[0], &[5]);

    let policy = MergePolicy::default();
    let manifest = store.latest_manifest("m").expect("manifest");
    let mut picked = policy.pick(&manifest).expect("a tier of 4 is due");
    picked.sort();
    let mut want = segs.clone();
    want.sort();
    assert_eq!(picked, want);

    let merged = write_merged(&store, &def(), &manifest, &picked).expect("merge written");
    assert_eq!(merged.rows, 399, "the deleted row is dropped");

    // Held at its commit: a seal deletes row 7 of the third input.
    delete_rows(&store, &segs[2], &[7]);

    let version = publish_merged(&store, "m", &merged)
        .expect("publish")
        .expect("inputs still live");
    let latest = store.latest_manifest("m").expect("manifest");
    assert_eq!(latest.version, version);
    assert_eq!(latest.segments.len(), 1);
    assert_eq!(
        latest.segments[0].deleted, 1,
        "the late delete carried over"
    );

    let (report, counts) = fsck(&store, "m").expect("fsck");
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.live_rows, 398);
    assert_eq!(counts.get(&PointId::Num(5)), None);
    assert_eq!(counts.get(&PointId::Num(207)), None);
    assert_eq!(counts.get(&PointId::Num(208)).map(Vec::len), Some(1));

    // The merged segment keeps payloads and has a payload index.
    let seg = Segment::open(&store.segment_path("m", &merged.id)).expect("merged");
    let row = seg.row_of(&PointId::Num(301)).expect("row");
    assert_eq!(seg.payload_json(row), br#"{"kind":"k1"}"#);
    assert!(seg.payload_index().is_some());

    // A second merge of the same (now gone) inputs publishes nothing.
    let again = write_merged(&store, &def(), &manifest, &picked).expect("written");
    assert_eq!(publish_merged(&store, "m", &again).expect("publish"), None);
    assert!(
        !store.segment_path("m", &again.id).exists(),
        "loser removed"
    );

    // Garbage collection: once past the grace, the merged-away inputs and their
    // delete files go, the merged segment stays and fsck still finds every row.
    let keep_latest = GcPolicy {
        keep_versions: 1,
        grace: Duration::from_secs(60),
    };
    let now = SystemTime::now();
    let early = store.collect_garbage("m", &keep_latest, now).expect("gc");
    assert_eq!(early.segments, 0, "inputs are younger than the grace");
    let later = now + Duration::from_secs(61);
    let report = store.collect_garbage("m", &keep_latest, later).expect("gc");
    assert_eq!(report.segments, 4, "{report:?}");
    assert_eq!(report.deletes, 2, "{report:?}");
    assert!(report.manifests >= 5, "{report:?}");
    for id in &segs {
        assert!(!store.segment_path("m", id).exists(), "{id} removed");
    }
    assert!(store.segment_path("m", &merged.id).exists());
    let (after, _) = fsck(&store, "m").expect("fsck");
    assert!(after.is_clean(), "{after:?}");
    assert_eq!(after.live_rows, 398);
}

#[test]
fn policy_merges_only_full_tiers_below_the_size_cap() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("store");
    store.create_collection(&def()).expect("collection");
    for s in 0..3u64 {
        seal(&store, s * 100..s * 100 + 100, (s * 100) as i64);
    }
    let policy = MergePolicy::default();
    let manifest = store.latest_manifest("m").expect("manifest");
    assert_eq!(policy.pick(&manifest), None, "3 < min_segments");
    let capped = MergePolicy {
        min_segments: 2,
        max_rows: 50,
        ..MergePolicy::default()
    };
    assert_eq!(capped.pick(&manifest), None, "all above max_rows");
    let off = MergePolicy {
        min_segments: 0,
        ..MergePolicy::default()
    };
    assert_eq!(off.pick(&manifest), None, "disabled");
}

/// One worker's ingest state over `store`, owning partition 0, with seal
/// limits high enough that only explicit seals seal.
fn worker(store: &Store) -> CollectionState {
    let policy = SealPolicy {
        max_rows: usize::MAX,
        max_bytes: usize::MAX,
        max_age: Duration::from_secs(3600),
        write_lease: Duration::from_secs(600),
        quiet: None,
        grow: None,
    };
    let metrics = IngestMetrics::new(&prometheus::Registry::new()).expect("metrics");
    let mut state = CollectionState::new(def(), store.clone(), policy, metrics).expect("state");
    state.assign(&[0], &BTreeMap::new()).expect("assign");
    state
}

/// Applies an upsert of `id` carrying version `v` (or a tombstone) at
/// `offset` of partition 0.
fn event(state: &mut CollectionState, id: u64, offset: i64, v: Option<u64>) {
    let key = id.to_string();
    let value = v.map(|v| format!(r#"{{"id":{id},"vector":[{id},{v}],"payload":{{"v":{v}}}}}"#));
    let msg = Message {
        key: Some(key.as_bytes()),
        value: value.as_deref().map(str::as_bytes),
        content_type: None,
    };
    let record = eddy_kafka::Record {
        message: msg,
        place: eddy_kafka::Place {
            partition: 0,
            offset,
            timestamp_ms: 0,
        },
    };
    assert_eq!(state.apply(record), Applied::Done, "event accepted");
}

/// Checks with `fsck` that `id` is stored once with version `v`, or not
/// at all (`None`), and that nothing else is wrong.
fn assert_stored(store: &Store, id: u64, v: Option<u64>) {
    let (report, rows) = fsck(store, "m").expect("fsck");
    assert!(report.is_clean(), "{report:?}");
    let live = rows.get(&PointId::Num(id)).cloned().unwrap_or_default();
    match v {
        None => assert!(live.is_empty(), "deleted id {id} is live: {live:?}"),
        Some(v) => {
            assert_eq!(live.len(), 1, "id {id}: {live:?}");
            let seg = Segment::open(&store.segment_path("m", &live[0].segment)).expect("segment");
            let payload = String::from_utf8_lossy(seg.payload_json(live[0].row)).into_owned();
            assert!(
                payload.contains(&format!(r#""v":{v}"#)),
                "id {id}: {payload}"
            );
        }
    }
}

/// The merge/seal race of issue 10: a merge reads segments holding X and
/// writes its output; a seal upserts X; the merge publishes; a second seal
/// upserts (or deletes) X again. X must be stored once with its last value
/// (or be gone), and a restarted worker must rebuild the same state.
#[test]
fn a_merge_racing_seals_leaves_each_id_once_with_its_last_value() {
    for last in [Some(2), None] {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path()).expect("store");
        store.create_collection(&def()).expect("collection");
        let mut state = worker(&store);
        for s in 0..4u64 {
            for id in s * 100..s * 100 + 100 {
                event(&mut state, id, id as i64, Some(0));
            }
            state.seal().expect("seal").expect("published");
        }
        const X: u64 = 150;
        let manifest = store.latest_manifest("m").expect("manifest");
        let inputs = MergePolicy::default().pick(&manifest).expect("a tier of 4");
        let merged = write_merged(&store, &def(), &manifest, &inputs).expect("merge written");

        event(&mut state, X, 400, Some(1));
        state.seal().expect("seal").expect("published");
        publish_merged(&store, "m", &merged)
            .expect("merge publish")
            .expect("inputs still listed");
        assert_stored(&store, X, Some(1));

        event(&mut state, X, 401, last);
        state.seal().expect("seal").expect("published");
        assert_stored(&store, X, last);

        // A restart rebuilds the id → row map from the store alone.
        drop(state);
        let mut restarted = worker(&store);
        event(&mut restarted, X, 402, Some(3));
        restarted.seal().expect("seal").expect("published");
        assert_stored(&store, X, Some(3));
        assert_stored(&store, X - 1, Some(0));
    }
}
