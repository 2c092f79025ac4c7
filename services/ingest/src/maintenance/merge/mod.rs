//! The merge job: small segments are combined into larger ones in the
//! background, across partitions, dropping deleted rows, so a collection
//! holds few segments (each query searches every listed segment).
//!
//! A merge reads its inputs as one manifest version lists them, writes the
//! merged segment, and publishes a version that replaces the inputs with it.
//! Deletes that hit an input after the merge read it (another seal's delete
//! file) are carried over through the row map at publish time, so no upsert
//! or tombstone is lost. The merged segment's graph is built before it is
//! published (below the graph threshold it is published flat). Which
//! segments are merged, and when: [`MergePolicy`].

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use eddy_manifest::{Manifest, SegmentEntry, Store};
use eddy_model::CollectionDef;
use eddy_segment::{RowRef, Segment, SegmentWriter};
use roaring::RoaringBitmap;
use tracing::{info, warn};

use super::{Maintenance, MaintenanceError};

mod policy;

pub use policy::MergePolicy;

/// A merged segment written but not yet published.
#[derive(Debug)]
pub struct Merged {
    /// The new segment's id.
    pub id: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Rows written.
    pub rows: u64,
    /// Per partition, the first and last offset of its rows.
    pub offset_ranges: BTreeMap<u32, (i64, i64)>,
    /// Its index file (graph + codes), when built before publishing.
    pub index: Option<String>,
    /// The inputs as the merge read them (their delete file names), and for
    /// each input row the merged row it became (`None`: dropped).
    pub inputs: Vec<(SegmentEntry, Vec<Option<u32>>)>,
}

/// Writes the live rows of `inputs` (as `manifest` lists them) as one new
/// segment (on an object store, uploaded too).
pub fn write_merged(
    store: &Store,
    def: &CollectionDef,
    manifest: &Manifest,
    inputs: &[String],
) -> Result<Merged, MaintenanceError> {
    let mut writer = SegmentWriter::new(def.dimension as usize, def.metric, def.id_type)
        .with_payload_index(&def.payload_fields);
    let mut read = Vec::with_capacity(inputs.len());
    let mut offset_ranges: BTreeMap<u32, (i64, i64)> = BTreeMap::new();
    for id in inputs {
        let entry = manifest
            .segments
            .iter()
            .find(|s| &s.id == id)
            .ok_or_else(|| MaintenanceError::NotListed(id.clone()))?
            .clone();
        let seg = Segment::open(&store.fetch_segment(&def.name, id)?)?;
        let deleted = match &entry.deletes {
            Some(name) => store.read_deletes(&def.name, name)?,
            None => RoaringBitmap::new(),
        };
        let mut map = vec![None; seg.rows()];
        for (row, slot) in map.iter_mut().enumerate() {
            let row = row as u32;
            if deleted.contains(row) || !seg.is_current(row) {
                continue;
            }
            let Some(point) = seg.id(row) else { continue };
            let (partition, offset) = (seg.partition(row), seg.offset(row));
            *slot = Some(writer.rows() as u32);
            writer.push(RowRef {
                id: &point,
                vector: seg.vector(row),
                partition,
                offset,
                payload_json: seg.payload_json(row),
            })?;
            let r = offset_ranges.entry(partition).or_insert((offset, offset));
            r.0 = r.0.min(offset);
            r.1 = r.1.max(offset);
        }
        read.push((entry, map));
    }
    let rows = writer.rows() as u64;
    let (id, path) = store.new_segment(&def.name);
    let written = writer.finish(&path)?;
    // On an object store the merged segment goes up now, with the CRC its
    // writer computed (no pass over the file); the publish then names it.
    store.upload_segment(&def.name, &id, Some(written.crc32))?;
    Ok(Merged {
        id,
        bytes: written.bytes,
        rows,
        offset_ranges,
        index: None,
        inputs: read,
    })
}

/// Publishes `merged` in place of its inputs through
/// [`Store::update`], carrying over deletes that hit the inputs since they
/// were read (re-computed on each compare-and-swap retry). Returns the
/// version published, or `None` when an input is no longer listed (another
/// merge won; the merged file is removed).
pub fn publish_merged(
    store: &Store,
    collection: &str,
    merged: &Merged,
) -> Result<Option<u64>, MaintenanceError> {
    let inputs: HashSet<&str> = merged.inputs.iter().map(|(e, _)| e.id.as_str()).collect();
    let updated = store.update::<MaintenanceError>(collection, |latest| {
        let listed: Vec<&SegmentEntry> = latest
            .segments
            .iter()
            .filter(|s| inputs.contains(s.id.as_str()))
            .collect();
        if listed.len() != inputs.len() {
            return Ok(None);
        }
        let carried = carried_deletes(store, collection, merged, &listed)?;
        let mut next = latest.successor();
        next.segments.retain(|s| !inputs.contains(s.id.as_str()));
        if merged.rows == 0 {
            // Nothing of the inputs was live: they go without a successor
            // (the empty file is garbage).
            return Ok(Some(next));
        }
        let deletes = if carried.is_empty() {
            None
        } else {
            Some(store.write_deletes(collection, &merged.id, &carried)?)
        };
        next.segments.push(SegmentEntry {
            id: merged.id.clone(),
            rows: merged.rows,
            bytes: merged.bytes,
            deletes,
            deleted: carried.len(),
            offset_ranges: merged.offset_ranges.clone(),
            index: merged.index.clone(),
        });
        Ok(Some(next))
    })?;
    match updated.published {
        Some(next) => Ok(Some(next.version)),
        None => {
            let index = merged.index.iter().map(|i| store.index_path(collection, i));
            for path in std::iter::once(store.segment_path(collection, &merged.id)).chain(index) {
                if let Err(e) = std::fs::remove_file(&path) {
                    warn!(path = %path.display(), error = %e, "removing an unpublished merge");
                }
            }
            Ok(None)
        }
    }
}

/// The merged rows to delete: rows deleted in an input (as `listed` has
/// it now) since the merge read it, mapped to their merged rows.
fn carried_deletes(
    store: &Store,
    collection: &str,
    merged: &Merged,
    listed: &[&SegmentEntry],
) -> Result<RoaringBitmap, MaintenanceError> {
    let mut carried = RoaringBitmap::new();
    for (read, map) in &merged.inputs {
        let Some(now) = listed.iter().find(|s| s.id == read.id) else {
            continue;
        };
        if now.deletes == read.deletes {
            continue;
        }
        let before = match &read.deletes {
            Some(name) => store.read_deletes(collection, name)?,
            None => RoaringBitmap::new(),
        };
        let after = match &now.deletes {
            Some(name) => store.read_deletes(collection, name)?,
            None => RoaringBitmap::new(),
        };
        for row in after - before {
            if let Some(Some(out)) = map.get(row as usize) {
                carried.insert(*out);
            }
        }
    }
    Ok(carried)
}

impl Maintenance {
    /// Merges `inputs` (picked for `why`: a size tier, ingest idle, or one
    /// segment to re-index), publishes the result, and logs and counts the
    /// outcome.
    pub(super) fn merge_tier(
        &self,
        def: &CollectionDef,
        manifest: &Manifest,
        inputs: &[String],
        why: &str,
    ) {
        let started = Instant::now();
        let outcome = self.merge_under_lease(def, manifest, inputs);
        let label = match &outcome {
            Ok((Some(version), merged)) => {
                info!(collection = %def.name, inputs = inputs.len(), rows = merged.rows, segment = %merged.id, version, took_ms = started.elapsed().as_millis() as u64, why, "segments merged");
                "published"
            }
            Ok((None, _)) => "superseded",
            Err(e) => {
                warn!(collection = %def.name, error = %e, why, "merge failed");
                "failed"
            }
        };
        self.metrics
            .merges
            .with_label_values(&[&def.name, label])
            .inc();
        if label == "failed" {
            // Do not spin on a merge that keeps failing.
            std::thread::sleep(self.poll);
        }
    }

    /// Writes and publishes the merge under a lease that keeps garbage
    /// collection away from its files until they are published.
    fn merge_under_lease(
        &self,
        def: &CollectionDef,
        manifest: &Manifest,
        inputs: &[String],
    ) -> Result<(Option<u64>, Merged), MaintenanceError> {
        let mut lease = self
            .store
            .take_lease(&def.name, "merge", self.write_lease, None)?;
        let mut merged = write_merged(&self.store, def, manifest, inputs)?;
        // The graph is built before publishing, so the inputs (indexed,
        // mostly) are never replaced by a segment queries would scan until
        // a later build. It starts from the graph of the indexed input
        // with the most surviving rows.
        let prior = merged
            .inputs
            .iter()
            .filter_map(|(entry, rows)| Some((entry.index.as_deref()?, rows.as_slice())))
            .max_by_key(|(_, rows)| rows.iter().flatten().count());
        merged.index = self.write_index(&def.name, &merged.id, prior)?;
        fail::fail_point!("merge::before_publish");
        lease.keep_for_publish(self.write_lease)?;
        Ok((publish_merged(&self.store, &def.name, &merged)?, merged))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::maintenance::testing::{
        maintenance, seal, seal_upserts, settle, store_with_collection,
    };
    use crate::maintenance::Progress;

    #[test]
    fn an_idle_collection_converges_to_one_indexed_segment() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = store_with_collection(dir.path());
        for s in 0..3u64 {
            seal(&store, s * 100..s * 100 + 100);
        }
        // Three segments: no tier of four, so the tier policy leaves them;
        // not idle for an hour yet, so they are only indexed.
        let busy = maintenance(&store, "3600000");
        settle(&busy, &mut Progress::default());
        let latest = store.latest_manifest("c").expect("manifest");
        assert_eq!(latest.segments.len(), 3, "not idle yet");
        assert!(latest.segments.iter().all(|s| s.index.is_some()));

        // Idle after 1 ms: the first pass sees the offsets for the first
        // time (idle for 0 ms), a later one merges.
        let m = maintenance(&store, "1");
        let mut progress = Progress::default();
        settle(&m, &mut progress);
        assert_eq!(
            store.latest_manifest("c").expect("manifest").segments.len(),
            3
        );
        std::thread::sleep(Duration::from_millis(5));
        settle(&m, &mut progress);
        let latest = store.latest_manifest("c").expect("manifest");
        assert_eq!(latest.segments.len(), 1, "{latest:?}");
        let merged = &latest.segments[0];
        assert_eq!(merged.rows, 300);
        assert!(merged.index.is_some(), "the merge publishes with its graph");
        let (report, rows) = eddy_manifest::fsck(&store, "c").expect("fsck");
        assert!(report.is_clean(), "{report:?}");
        assert_eq!(rows.len(), 300);
        // The gauges follow the newest manifest while ingest is idle (no
        // seal comes to update them): one segment, the merge's version.
        let segments = m.metrics.segments.with_label_values(&["c"]).get();
        assert_eq!(segments, 1, "eddy_ingest_segments after the idle merge");
        let version = m.metrics.manifest_version.with_label_values(&["c"]).get();
        assert_eq!(
            version, latest.version as i64,
            "eddy_ingest_manifest_version"
        );

        // New events make the collection busy again: no idle merge until
        // the offsets stand still for the idle time.
        seal(&store, 300..400);
        settle(&busy, &mut Progress::default());
        let latest = store.latest_manifest("c").expect("manifest");
        assert_eq!(latest.segments.len(), 2);
    }

    /// A merge starts from the graph of its largest indexed input; when
    /// that graph cannot be read (damaged on disk, or gone from the
    /// store), the merge builds its graph afresh and publishes it instead
    /// of failing (a merge that kept failing would leave the collection
    /// unmerged for good).
    #[test]
    fn a_merge_whose_input_graph_cannot_be_read_builds_its_graph_afresh() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = store_with_collection(dir.path());
        seal(&store, 0..300);
        seal(&store, 300..400);
        seal(&store, 400..450);
        settle(&maintenance(&store, "3600000"), &mut Progress::default());
        let indexed = store.latest_manifest("c").expect("manifest");
        let largest = indexed
            .segments
            .iter()
            .max_by_key(|s| s.rows)
            .expect("segments");
        let name = largest
            .index
            .clone()
            .expect("the largest input has a graph");
        std::fs::write(store.index_path("c", &name), b"not an index").expect("damage");

        let m = maintenance(&store, "1");
        let mut progress = Progress::default();
        settle(&m, &mut progress);
        std::thread::sleep(Duration::from_millis(5));
        settle(&m, &mut progress);
        let latest = store.latest_manifest("c").expect("manifest");
        assert_eq!(latest.segments.len(), 1, "{latest:?}");
        let merged = &latest.segments[0];
        assert_eq!(merged.rows, 450);
        let index = merged.index.as_deref().expect("published with its graph");
        let graph = eddy_segment::IndexFile::open(&store.index_path("c", index), 450, 2)
            .expect("the merged graph opens");
        let bytes = graph
            .section(eddy_segment::IndexSection::Graph)
            .expect("a graph section");
        let view = eddy_hnsw::GraphView::from_bytes(bytes).expect("a valid graph");
        assert_eq!(view.len() + view.duplicate_count(), 450);
        let failed = m.metrics.merges.with_label_values(&["c", "failed"]).get();
        assert_eq!(failed, 0, "the merge did not fail");
        let (report, rows) = eddy_manifest::fsck(&store, "c").expect("fsck");
        assert!(report.is_clean(), "{report:?}");
        assert_eq!(rows.len(), 450);
    }

    /// Under upserts a segment's live rows fall, so the tiers (by live
    /// rows) scatter and never fill while the graphs fill with deleted
    /// nodes, which a walk still visits (a query walked 2-3 times the nodes
    /// for the same hits under a 2,000 upserts/s writer). A segment whose
    /// deleted rows reach the policy's share is merged while ingest is
    /// busy, its deletes dropped; a segment with no live row left goes
    /// without a successor.
    #[test]
    fn mostly_deleted_segments_are_compacted_while_ingest_is_busy() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = store_with_collection(dir.path());
        seal(&store, 0..4_000);
        seal(&store, 4_000..5_000);
        // Upserts replace three quarters of the first segment, then the
        // whole second one.
        seal_upserts(&store, 0..3_000);
        seal_upserts(&store, 4_000..5_000);
        let before = store.latest_manifest("c").expect("manifest");
        let shares: Vec<(u64, u64)> = before
            .segments
            .iter()
            .map(|s| (s.deleted, s.rows))
            .collect();
        assert_eq!(
            shares,
            [(3_000, 4_000), (1_000, 1_000), (0, 3_000), (0, 1_000)]
        );
        let tiers_only = MergePolicy {
            deleted_share: None,
            ..MergePolicy::default()
        };
        assert_eq!(tiers_only.pick(&before), None, "no tier holds four");

        let busy = maintenance(&store, "3600000");
        settle(&busy, &mut Progress::default());
        let latest = store.latest_manifest("c").expect("manifest");
        for s in &latest.segments {
            assert!(
                s.deleted * 2 < s.rows,
                "{} still has {} of {} rows deleted: {latest:?}",
                s.id,
                s.deleted,
                s.rows
            );
        }
        assert!(
            latest.segments.iter().all(|s| s.rows > 0),
            "no empty segment is listed: {latest:?}"
        );
        assert_eq!(latest.live_rows(), 5_000);
        let (report, rows) = eddy_manifest::fsck(&store, "c").expect("fsck");
        assert!(report.is_clean(), "{report:?}");
        assert_eq!(rows.len(), 5_000);
    }
}
