//! `fsck`: checks a collection over the stored files themselves (query
//! results deduplicate, so they cannot prove it): every retained manifest
//! version reads back with its checksum and follows its predecessor, every
//! file the newest version names is present and passes its checks, and
//! every point is stored live at most once. The rows it returns (with their
//! source partition and offset) let a caller with broker access account for
//! every offset (`eddy fsck --brokers`, in `services/admin`).

use std::collections::HashMap;

use eddy_model::PointId;
use eddy_segment::{IndexFile, Segment};
use roaring::RoaringBitmap;
use serde::Serialize;

use crate::{Error, Manifest, Result, SegmentEntry, Store};

/// A live row of the newest manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveRow {
    /// The segment holding it.
    pub segment: String,
    /// Its row in the segment.
    pub row: u32,
    /// Partition of the event that wrote it.
    pub partition: u32,
    /// Offset of the event that wrote it.
    pub offset: i64,
}

/// Live rows of every id.
pub type LiveRows = HashMap<PointId, Vec<LiveRow>>;

/// What [`fsck`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FsckReport {
    /// Manifest version checked.
    pub version: u64,
    /// Retained manifest versions read back.
    pub versions_checked: usize,
    /// Segments checked.
    pub segments: usize,
    /// Live rows over all segments.
    pub live_rows: u64,
    /// Ids with more than one live row, and how many.
    pub duplicates: Vec<(PointId, u32)>,
    /// Segments whose delete count disagrees with their delete file.
    pub delete_count_mismatches: Vec<String>,
    /// Files the newest manifest names that are missing or fail their
    /// checks, with the error.
    pub damaged_files: Vec<String>,
    /// Retained manifest versions that are unreadable, name another version
    /// or collection, or move a partition's offset or owner epoch backwards.
    pub chain_errors: Vec<String>,
    /// Live rows from an offset the manifest does not cover yet (a fenced
    /// writer's rows must be published deleted), as (id, partition, offset).
    pub rows_beyond_offsets: Vec<(PointId, u32, i64)>,
}

impl FsckReport {
    /// Whether nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.duplicates.is_empty()
            && self.delete_count_mismatches.is_empty()
            && self.damaged_files.is_empty()
            && self.chain_errors.is_empty()
            && self.rows_beyond_offsets.is_empty()
    }
}

/// Checks `collection` (see the module docs) and returns the report with
/// the live rows of every id in the newest manifest.
///
/// # Errors
/// Only when the store cannot be listed or the newest manifest cannot be
/// read; damaged files and versions are findings in the report.
pub fn fsck(store: &Store, collection: &str) -> Result<(FsckReport, LiveRows)> {
    let manifest = store.latest_manifest(collection)?;
    let mut report = FsckReport {
        version: manifest.version,
        segments: manifest.segments.len(),
        ..FsckReport::default()
    };
    check_chain(store, collection, &mut report)?;
    let mut rows = LiveRows::new();
    for entry in &manifest.segments {
        if let Err(e) = check_segment(store, &manifest, entry, &mut report, &mut rows) {
            report.damaged_files.push(format!("{}: {e}", entry.id));
        }
    }
    report.duplicates = rows
        .iter()
        .filter(|(_, r)| r.len() > 1)
        .map(|(id, r)| (id.clone(), r.len() as u32))
        .collect();
    report.duplicates.sort();
    report.rows_beyond_offsets.sort();
    report.damaged_files.sort();
    Ok((report, rows))
}

/// Reads every retained version back and checks each follows the one
/// before: the same collection, no partition's `next_offset` or owner epoch
/// moving backwards (except where the version records an operator's
/// resume). Gaps between retained versions are legitimate (a
/// pinned version outlives its collected successors).
fn check_chain(store: &Store, collection: &str, report: &mut FsckReport) -> Result<()> {
    let mut previous: Option<Manifest> = None;
    for version in store.manifest_versions(collection)? {
        let manifest = match store.manifest(collection, version) {
            Ok(m) => m,
            Err(e) => {
                report.chain_errors.push(format!("version {version}: {e}"));
                previous = None;
                continue;
            }
        };
        report.versions_checked += 1;
        if manifest.version != version || manifest.collection != collection {
            report.chain_errors.push(format!(
                "file of version {version} holds version {} of {}",
                manifest.version, manifest.collection
            ));
        }
        if let Some(prev) = &previous {
            for (p, before) in &prev.partitions {
                let after = manifest.partitions.get(p).copied().unwrap_or_default();
                // An operator's resume (recorded in this version) may move
                // an offset back, e.g. onto a re-created topic.
                let resumed_here = manifest.resumes.get(p).is_some_and(|r| {
                    prev.resumes.get(p) != Some(r) && r.offset == after.next_offset
                });
                if (after.next_offset < before.next_offset && !resumed_here)
                    || after.owner_epoch < before.owner_epoch
                {
                    report.chain_errors.push(format!(
                        "version {version}: partition {p} went back from {before:?} to {after:?}"
                    ));
                }
            }
        }
        previous = Some(manifest);
    }
    Ok(())
}

/// Opens one segment (checking its checksum), its index file and its delete
/// file, and records its live rows.
fn check_segment(
    store: &Store,
    manifest: &Manifest,
    entry: &SegmentEntry,
    report: &mut FsckReport,
    rows: &mut LiveRows,
) -> Result<()> {
    let collection = &manifest.collection;
    let seg = Segment::open(&store.fetch_segment(collection, &entry.id)?)?;
    if seg.rows() as u64 != entry.rows {
        report.damaged_files.push(format!(
            "{}: {} rows, the manifest says {}",
            entry.id,
            seg.rows(),
            entry.rows
        ));
    }
    if let Some(name) = &entry.index {
        let checked = store.fetch_file(collection, name).and_then(|path| {
            IndexFile::open(&path, seg.rows(), seg.dim())
                .and_then(|index| eddy_segment::check_index(&seg, &index))
                .map_err(Error::from)
        });
        if let Err(e) = checked {
            report.damaged_files.push(format!("{name}: {e}"));
        }
    }
    let deleted = match &entry.deletes {
        Some(name) => store.read_deletes(collection, name)?,
        None => RoaringBitmap::new(),
    };
    if deleted.len() != entry.deleted {
        report.delete_count_mismatches.push(entry.id.clone());
    }
    for row in 0..seg.rows() as u32 {
        if deleted.contains(row) || !seg.is_current(row) {
            continue;
        }
        let Some(id) = seg.id(row) else { continue };
        let (partition, offset) = (seg.partition(row), seg.offset(row));
        if offset >= offset_bound(manifest, partition) {
            report
                .rows_beyond_offsets
                .push((id.clone(), partition, offset));
        }
        report.live_rows += 1;
        rows.entry(id).or_default().push(LiveRow {
            segment: entry.id.clone(),
            row,
            partition,
            offset,
        });
    }
    Ok(())
}

/// The first offset no row of `partition` may carry: its `next_offset`, or
/// the offset it had before an operator resumed it further back (rows
/// sealed before the resume keep the offsets they were read at).
fn offset_bound(manifest: &Manifest, partition: u32) -> i64 {
    let next = manifest.next_offset(partition);
    manifest
        .resumes
        .get(&partition)
        .map_or(next, |r| next.max(r.previous_offset))
}

#[cfg(test)]
mod tests {
    use eddy_model::CollectionDef;

    use super::*;

    #[test]
    fn a_partition_going_backwards_breaks_the_chain() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path()).expect("open");
        store
            .create_collection(&CollectionDef::new("c", 4))
            .expect("create");
        let mut m = Manifest::empty("c").successor();
        m.partitions.entry(0).or_default().next_offset = 5;
        store.publish(&m).expect("v1");
        let (report, _) = fsck(&store, "c").expect("fsck");
        assert!(report.is_clean(), "{report:?}");
        let mut m = m.successor();
        m.partitions.entry(0).or_default().next_offset = 3;
        store.publish(&m).expect("v2");
        let (report, _) = fsck(&store, "c").expect("fsck");
        assert_eq!(report.versions_checked, 2);
        assert_eq!(report.chain_errors.len(), 1, "{report:?}");
        assert!(report.chain_errors[0].contains("partition 0 went back"));

        // An operator's resume recorded in the version may move it back.
        let mut m = m.successor();
        m.partitions.entry(0).or_default().next_offset = 1;
        m.resumes.insert(
            0,
            crate::PartitionResume {
                offset: 1,
                previous_offset: 3,
                by: "ops".into(),
                reason: "topic re-created".into(),
                at_ms: 0,
            },
        );
        store.publish(&m).expect("v3");
        let (report, _) = fsck(&store, "c").expect("fsck");
        assert_eq!(report.versions_checked, 3);
        assert_eq!(report.chain_errors.len(), 1, "only v2 is wrong: {report:?}");
    }
}
