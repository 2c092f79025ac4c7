//! A manifest that lists a damaged segment and one written for another
//! dimension: the engine's watcher installs the version without them, the
//! rest is searched, and status, `degraded` and the metric say which were
//! left out. No broker: the tail is never assigned, which leaves the
//! sealed segments (what this checks) searchable.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use eddy_manifest::{SegmentEntry, Store};
use eddy_model::{CollectionDef, Metric, PointId};
use eddy_query::prepared::{PreparedSearch, QueryBatch};
use eddy_query::request::{SearchRequest, Vectors};
use eddy_segment::Growing;

/// Writes rows `ids` (vectors of `dim`; offsets of partition 0 = ids) as
/// a segment and lists it, as ingest's seal would.
pub fn seal(store: &Store, def: &CollectionDef, dim: usize, ids: std::ops::Range<u64>) -> String {
    let rows: Vec<(u64, Vec<f32>)> = ids
        .map(|id| (id, (0..dim).map(|d| (id + d as u64) as f32).collect()))
        .collect();
    seal_rows(store, def, dim, &rows, false)
}

/// Writes `rows` (id = offset on partition 0, ids ascending) as a segment,
/// with its graph and codes when `indexed`, and lists it.
pub fn seal_rows(
    store: &Store,
    def: &CollectionDef,
    dim: usize,
    rows: &[(u64, Vec<f32>)],
    indexed: bool,
) -> String {
    let mut growing = Growing::new(dim, def.metric, def.id_type);
    for (id, v) in rows {
        growing.upsert(PointId::Num(*id), v, b"", 0, *id as i64);
    }
    let (segment, path) = store.new_segment(&def.name);
    let bytes = growing
        .write_segment(&path, &BTreeMap::new())
        .expect("segment")
        .bytes;
    let index = indexed.then(|| {
        let seg = eddy_segment::Segment::open(&path).expect("open");
        let name = store.new_index_name(&segment);
        let params = eddy_segment::IndexParams {
            min_rows: 1,
            ..Default::default()
        };
        eddy_segment::build_index(&seg, &params, &store.index_path(&def.name, &name))
            .expect("index");
        name
    });
    let (first, last) = (rows[0].0, rows[rows.len() - 1].0);
    let updated = store
        .update::<eddy_manifest::Error>(&def.name, |latest| {
            let mut next = latest.successor();
            next.segments.push(SegmentEntry {
                id: segment.clone(),
                rows: rows.len() as u64,
                bytes,
                deletes: None,
                deleted: 0,
                offset_ranges: BTreeMap::from([(0, (first as i64, last as i64))]),
                index: index.clone(),
            });
            next.partitions.entry(0).or_default().next_offset = last as i64 + 1;
            Ok(Some(next))
        })
        .expect("published");
    assert!(updated.published.is_some());
    segment
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_and_mismatched_segments_are_quarantined_and_the_rest_served() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("store");
    let def = CollectionDef {
        metric: Metric::L2,
        ..CollectionDef::new("q", 2)
    };
    store.create_collection(&def).expect("collection");
    seal(&store, &def, 2, 0..10);
    let other_dim = seal(&store, &def, 3, 10..20);
    let damaged = seal(&store, &def, 2, 20..30);
    let path = store.segment_path(&def.name, &damaged);
    let mut bytes = std::fs::read(&path).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&path, bytes).expect("damage");

    let registry = prometheus::Registry::new();
    let metrics = eddy_query::QueryMetrics::new(&registry).expect("metrics");
    let config = <eddy_query::QueryConfig as clap::Parser>::parse_from([
        "eddy-query",
        "--brokers",
        "127.0.0.1:1",
        "--manifest-poll-ms",
        "20",
    ]);
    let engine = eddy_query::Engine::new(store, metrics, config.engine_options().expect("options"))
        .expect("engine");
    engine.refresh();
    let collection = engine.collection("q").expect("served");
    let deadline = Instant::now() + Duration::from_secs(30);
    while collection.status().manifest_version < 3 {
        assert!(Instant::now() < deadline, "snapshot not installed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let status = collection.status();
    assert_eq!(status.segments, 1, "{status:?}");
    let left_out: Vec<&str> = status
        .quarantined
        .iter()
        .map(|q| q.segment.as_str())
        .collect();
    assert_eq!(left_out, [other_dim.as_str(), damaged.as_str()]);
    assert!(
        status.quarantined[0].reason.contains("dimension 3"),
        "{:?}",
        status.quarantined[0]
    );
    let degraded = engine.degraded();
    assert_eq!(degraded.len(), 1);
    assert!(
        degraded[0].1.contains("2 segment(s) quarantined"),
        "{degraded:?}"
    );
    let gauge = engine
        .metrics
        .quarantined_segments
        .with_label_values(&["q"])
        .get();
    assert_eq!(gauge, 2);

    // The good segment answers.
    let search =
        Arc::new(PreparedSearch::new(&collection.def(), SearchRequest::default()).expect("search"));
    let queries =
        QueryBatch::new(&collection.def(), Vectors::Rows(vec![vec![3.0, 4.0]])).expect("queries");
    let result = engine
        .search(&collection, &search, queries)
        .await
        .expect("searched");
    let ids: Vec<String> = result.hits[0].iter().map(|h| h.id.to_string()).collect();
    assert_eq!(ids.first().map(String::as_str), Some("3"), "{ids:?}");
    assert!(result.hits[0].len() <= 10);
    engine.stop();
}
