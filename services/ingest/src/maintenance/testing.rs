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
    let mut rows = Growing::new(2, Metric::Cosine, IdType::U64);
    for id in ids.clone() {
        rows.upsert(
            PointId::Num(id),
            &[1.0, id as f32],
            &payload(id),
            0,
            id as i64,
        );
    }
    let (id, path) = store.new_segment("c");
    let bytes = rows
        .write_segment(&path, &BTreeMap::new())
        .expect("segment")
        .bytes;
    let updated = store
        .update::<eddy_manifest::Error>("c", |latest| {
            let mut next = latest.successor();
            next.segments.push(SegmentEntry {
                id: id.clone(),
                rows: ids.end - ids.start,
                bytes,
                deletes: None,
                deleted: 0,
                offset_ranges: BTreeMap::from([(0, (ids.start as i64, ids.end as i64 - 1))]),
                index: None,
            });
            next.partitions.entry(0).or_default().next_offset = ids.end as i64;
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
