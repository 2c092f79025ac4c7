//! Helpers for the maintenance jobs' tests: flat segments sealed by hand,
//! a maintenance loop over a store, and passes run until nothing is due.

use std::collections::BTreeMap;

use clap::Parser as _;
use eddy_manifest::{SegmentEntry, Store};
use eddy_model::{IdType, Metric, PointId};
use eddy_segment::Growing;

use super::{Maintenance, Progress};
use crate::config::IngestConfig;
use crate::metrics::IngestMetrics;

/// A store in `dir` holding collection `c` (2 dimensions), which the
/// other helpers seal into.
pub(crate) fn store_with_collection(dir: &std::path::Path) -> Store {
    let store = Store::open(dir).expect("store");
    store
        .create_collection(&eddy_model::CollectionDef::new("c", 2))
        .expect("collection");
    store
}

/// Seals rows `ids` of partition 0 (offsets = ids) as one flat segment.
pub(crate) fn seal(store: &Store, ids: std::ops::Range<u64>) {
    seal_with(store, ids, |_| Vec::new());
}

/// Seals rows `ids` as [`seal`] does, each with the payload `payload(id)`.
pub(crate) fn seal_with(
    store: &Store,
    ids: std::ops::Range<u64>,
    payload: impl Fn(u64) -> Vec<u8>,
) {
    seal_at(store, ids.clone(), ids.start as i64, payload, |_| Ok(()));
}

/// Seals `ids` again as a new segment at the next offsets of partition 0,
/// as upserts do: the rows of those ids in older segments are deleted in
/// the same version.
pub(crate) fn seal_upserts(store: &Store, ids: std::ops::Range<u64>) {
    let next = store.latest_manifest("c").expect("manifest").next_offset(0);
    seal_at(
        store,
        ids.clone(),
        next,
        |_| Vec::new(),
        |older| {
            for entry in older {
                let segment = eddy_segment::Segment::open(&store.segment_path("c", &entry.id))?;
                let mut deleted = match &entry.deletes {
                    Some(name) => store.read_deletes("c", name)?,
                    None => roaring::RoaringBitmap::new(),
                };
                deleted.extend(
                    ids.clone()
                        .filter_map(|id| segment.row_of(&PointId::Num(id))),
                );
                entry.deletes = Some(store.write_deletes("c", &entry.id, &deleted)?);
                entry.deleted = deleted.len();
            }
            Ok(())
        },
    );
}

/// Seals rows `ids` of partition 0 from offset `first` as one flat
/// segment, `on_older` changing the segments listed before it in the same
/// version.
fn seal_at(
    store: &Store,
    ids: std::ops::Range<u64>,
    first: i64,
    payload: impl Fn(u64) -> Vec<u8>,
    on_older: impl Fn(&mut [SegmentEntry]) -> eddy_manifest::Result<()>,
) {
    let mut rows = Growing::new(2, Metric::Cosine, IdType::U64);
    for (i, id) in ids.clone().enumerate() {
        rows.upsert(
            PointId::Num(id),
            &[1.0, id as f32],
            &payload(id),
            0,
            first + i as i64,
        );
    }
    let (id, path) = store.new_segment("c");
    let bytes = rows
        .write_segment(&path, &BTreeMap::new())
        .expect("segment")
        .bytes;
    let count = ids.end - ids.start;
    let last = first + count as i64 - 1;
    let updated = store
        .update::<eddy_manifest::Error>("c", |latest| {
            let mut next = latest.successor();
            on_older(&mut next.segments)?;
            next.segments.push(SegmentEntry {
                id: id.clone(),
                rows: count,
                bytes,
                deletes: None,
                deleted: 0,
                offset_ranges: BTreeMap::from([(0, (first, last))]),
                index: None,
            });
            next.partitions.entry(0).or_default().next_offset = last + 1;
            Ok(Some(next))
        })
        .expect("published");
    assert!(updated.published.is_some());
}

pub(crate) fn maintenance(store: &Store, idle_ms: &str) -> Maintenance {
    let config = IngestConfig::parse_from([
        "eddy-ingest",
        "--min-graph-rows",
        "8",
        "--gc-interval-ms",
        "0",
        "--merge-idle-ms",
        idle_ms,
    ]);
    let metrics = IngestMetrics::new(&prometheus::Registry::new()).expect("metrics");
    Maintenance::new(&config, store.clone(), metrics).expect("maintenance")
}

/// Runs passes until one finds nothing to do (bounded).
pub(crate) fn settle(m: &Maintenance, progress: &mut Progress) {
    let stop = std::sync::atomic::AtomicBool::new(false);
    for _ in 0..32 {
        if !m.pass(progress, &stop) {
            return;
        }
    }
    panic!("maintenance never settled");
}
