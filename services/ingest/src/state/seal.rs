//! The seal: the growing buffer becomes a published segment in three named
//! steps — [write the segment](CollectionState::write_segment), [plan the
//! deletes](CollectionState::plan_deletes) its events make on older
//! segments, and [publish](CollectionState::publish) a manifest version with
//! both and the new offsets, retried on compare-and-swap conflicts.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use eddy_manifest::{Manifest, SegmentEntry};
use eddy_segment::Growing;
use roaring::RoaringBitmap;
use tracing::{info, warn};

use super::CollectionState;
use crate::error::Result;

/// What one seal published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealOutcome {
    /// The manifest version published.
    pub version: u64,
    /// Per owned, unfenced partition, the offset now covered (for the commit).
    pub committed: BTreeMap<u32, i64>,
}

/// A segment the seal wrote (and fsynced), not yet published.
#[derive(Debug)]
struct WrittenSegment {
    id: String,
    bytes: u64,
    /// The partition of each row, in row order.
    partitions: Vec<u32>,
    /// Per partition, the first and last offset of its rows.
    offset_ranges: BTreeMap<u32, (i64, i64)>,
}

/// Per segment id, the delete bitmap to publish for it.
type PlannedDeletes = HashMap<String, RoaringBitmap>;

impl CollectionState {
    /// Seals the buffer: writes its live rows as a segment, then publishes a
    /// manifest version with the segment, the delete bits of the sealed rows
    /// its events replaced or removed, and the new offsets. Partitions whose
    /// epoch moved on (another worker took them) are fenced: their rows are
    /// published pre-deleted and their offsets not advanced.
    pub fn seal(&mut self) -> Result<Option<SealOutcome>> {
        if !self.has_progress() {
            self.first_event = None;
            return Ok(None);
        }
        let started = Instant::now();
        let mut attempt = 0;
        let outcome = loop {
            attempt += 1;
            match self.write_and_publish() {
                Err(crate::Error::Store(eddy_manifest::Error::MissingFile { path }))
                    if attempt < 3 =>
                {
                    warn!(collection = %self.def.name, path = %path.display(), "a file of the seal was collected while it stalled; writing it again");
                }
                other => break other?,
            }
        };
        fail::fail_point!("seal::before_commit");
        self.start_new_buffer(&outcome, started);
        Ok(Some(outcome))
    }

    /// Steps 1 to 3 under a lease that keeps garbage collection away from
    /// the files until they are published (or the lease expires: then the
    /// publish finds a file missing and fails instead of naming it).
    fn write_and_publish(&mut self) -> Result<SealOutcome> {
        let ttl = self.policy.write_lease;
        let mut lease = self.store.take_lease(&self.def.name, "seal", ttl, None)?;
        let written = self.write_segment()?;
        fail::fail_point!("seal::before_publish");
        lease.keep_for_publish(ttl)?;
        self.publish(written.as_ref())
    }

    /// Step 1: writes the buffer's live rows as a new segment file (none when
    /// every buffered event was a delete).
    fn write_segment(&self) -> Result<Option<WrittenSegment>> {
        if self.buffer.live_rows() == 0 {
            return Ok(None);
        }
        let (id, path) = self.store.new_segment(&self.def.name);
        let bytes = self
            .buffer
            .write_segment(&path, &self.def.payload_fields)
            .map_err(eddy_manifest::Error::from)?;
        let partitions: Vec<u32> = self.buffer.live_row_refs().map(|r| r.partition).collect();
        let mut offset_ranges: BTreeMap<u32, (i64, i64)> = BTreeMap::new();
        for r in self.buffer.live_row_refs() {
            let range = offset_ranges
                .entry(r.partition)
                .or_insert((r.offset, r.offset));
            range.0 = range.0.min(r.offset);
            range.1 = range.1.max(r.offset);
        }
        Ok(Some(WrittenSegment {
            id,
            bytes,
            partitions,
            offset_ranges,
        }))
    }

    /// Step 2: the delete bits on older segments for every id this buffer
    /// touched on an unfenced partition, on top of each segment's deletes as
    /// `latest` has them (the id → row map must be synced to `latest`).
    fn plan_deletes(&self, latest: &Manifest) -> PlannedDeletes {
        let mut deletes = PlannedDeletes::new();
        for (id, touch) in self.buffer.touches() {
            if self.is_fenced(latest, touch.partition) {
                continue;
            }
            if let Some((segment, row)) = self.id_rows.get(id) {
                deletes
                    .entry(segment.to_owned())
                    .or_insert_with(|| self.id_rows.deleted(segment))
                    .insert(row);
            }
        }
        deletes
    }

    /// Step 3: publishes the successor of the newest manifest with the
    /// planned deletes, the written segment and the new offsets, through
    /// [`Store::update`](eddy_manifest::Store::update): on a compare-and-swap
    /// conflict it re-reads, re-plans and tries again.
    fn publish(&mut self, written: Option<&WrittenSegment>) -> Result<SealOutcome> {
        let (store, name) = (self.store.clone(), self.def.name.clone());
        let mut committed = BTreeMap::new();
        let updated = store.update::<crate::Error>(&name, |latest| {
            self.id_rows.sync(&self.store, latest)?;
            let deletes = self.plan_deletes(latest);
            let (next, covered) = self.successor(latest, &deletes, written)?;
            committed = covered;
            Ok(Some(next))
        })?;
        self.count_conflicts(updated.conflicts);
        let next = updated
            .published
            .ok_or_else(|| crate::Error::Unpublished("seal"))?;
        if let Some(segment) = written {
            let rows = self
                .buffer
                .live_row_refs()
                .map(|r| (r.id.clone(), (r.partition, r.offset)));
            self.id_rows.add_segment(&segment.id, rows);
        }
        // Only the delete files this seal wrote are read back.
        self.id_rows.sync(&self.store, &next)?;
        let version = next.version;
        self.manifest = next;
        Ok(SealOutcome { version, committed })
    }

    /// The version a seal publishes on top of `latest`: the planned delete
    /// files written, the new segment appended, the offsets advanced; with
    /// the offsets it commits per partition.
    fn successor(
        &self,
        latest: &Manifest,
        deletes: &PlannedDeletes,
        written: Option<&WrittenSegment>,
    ) -> Result<(Manifest, BTreeMap<u32, i64>)> {
        let mut next = latest.successor();
        for entry in &mut next.segments {
            if let Some(bits) = deletes.get(&entry.id) {
                entry.deletes = Some(self.store.write_deletes(&self.def.name, &entry.id, bits)?);
                entry.deleted = bits.len();
            }
        }
        if let Some(segment) = written {
            next.segments.push(self.segment_entry(latest, segment)?);
        }
        let committed = self.advance_offsets(latest, &mut next);
        Ok((next, committed))
    }

    /// The manifest entry of the written segment; rows of fenced partitions
    /// are published deleted.
    fn segment_entry(&self, latest: &Manifest, segment: &WrittenSegment) -> Result<SegmentEntry> {
        let pre_deleted: RoaringBitmap = segment
            .partitions
            .iter()
            .enumerate()
            .filter(|(_, p)| self.is_fenced(latest, **p))
            .map(|(row, _)| row as u32)
            .collect();
        let deletes = if pre_deleted.is_empty() {
            None
        } else {
            Some(
                self.store
                    .write_deletes(&self.def.name, &segment.id, &pre_deleted)?,
            )
        };
        Ok(SegmentEntry {
            id: segment.id.clone(),
            rows: segment.partitions.len() as u64,
            bytes: segment.bytes,
            deletes,
            deleted: pre_deleted.len(),
            offset_ranges: segment.offset_ranges.clone(),
            index: None,
        })
    }

    /// Moves `next_offset` of every owned, unfenced partition up to what the
    /// buffer consumed; returns the offsets now covered.
    fn advance_offsets(&self, latest: &Manifest, next: &mut Manifest) -> BTreeMap<u32, i64> {
        let mut committed = BTreeMap::new();
        for (p, o) in &self.owned {
            if self.is_fenced(latest, *p) {
                warn!(collection = %self.def.name, partition = p, "partition fenced by a newer owner: its rows are published deleted");
                continue;
            }
            let state = next.partitions.entry(*p).or_default();
            state.next_offset = state.next_offset.max(o.next);
            committed.insert(*p, state.next_offset);
        }
        committed
    }

    /// Whether `partition` is not ours in `latest`: not owned, or its owner
    /// epoch moved on (another worker took it over).
    fn is_fenced(&self, latest: &Manifest, partition: u32) -> bool {
        self.owned.get(&partition).is_none_or(|o| {
            latest
                .partitions
                .get(&partition)
                .map_or(0, |s| s.owner_epoch)
                != o.epoch
        })
    }

    /// After a publish: drops fenced partitions for good, empties the
    /// buffer, and records the seal in metrics and the log.
    fn start_new_buffer(&mut self, outcome: &SealOutcome, started: Instant) {
        self.owned.retain(|p, _| outcome.committed.contains_key(p));
        let rows = self.buffer.live_rows();
        self.buffer = Growing::new(
            self.def.dimension as usize,
            self.def.metric,
            self.def.id_type,
        );
        self.first_event = None;
        self.metrics
            .seal_seconds
            .observe(started.elapsed().as_secs_f64());
        self.metrics
            .seals
            .with_label_values(&[&self.def.name])
            .inc();
        self.publish_gauges();
        info!(
            collection = %self.def.name,
            version = outcome.version,
            rows,
            segments = self.manifest.segments.len(),
            took_ms = started.elapsed().as_millis() as u64,
            "sealed"
        );
    }
}
