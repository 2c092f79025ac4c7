//! The seal: the growing buffer becomes a published segment in three named
//! steps — [write the segment](write_stage) (and upload it to an object
//! store), [plan the deletes](CollectionState::plan_deletes) its events make
//! on older segments, and [publish](CollectionState::publish) a manifest
//! version with both and the new offsets, retried on compare-and-swap
//! conflicts.
//!
//! The write runs on a thread of its own, off the consume path: the buffer
//! is frozen and a new one takes events while the old one is written and
//! uploaded ([`CollectionState::start_seal`]); the publish runs on the
//! worker's thread once the write is done ([`CollectionState::poll_seal`]),
//! in order, before the next seal starts. At most one seal is under way per
//! chain, so a buffer that fills while the last one is still being written
//! waits for it: that wait is the write path's backpressure.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use eddy_manifest::{Lease, Manifest, SegmentEntry, Store};
use eddy_model::CollectionDef;
use eddy_segment::Growing;
use roaring::RoaringBitmap;
use tracing::{info, warn};

use super::grow::{write_grown_index, Grower, Handover};
use super::{CollectionState, Owned};
use crate::error::{Error, Result};

/// What one seal published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealOutcome {
    /// The manifest version published.
    pub version: u64,
    /// Per owned, unfenced partition, the offset now covered (for the commit).
    pub committed: BTreeMap<u32, i64>,
}

impl SealOutcome {
    /// `a` and `b` as one outcome to commit: the newer version, and each
    /// partition's offset from the later seal (`b`) where both name it.
    pub fn combine(a: Option<SealOutcome>, b: Option<SealOutcome>) -> Option<SealOutcome> {
        match (a, b) {
            (Some(mut a), Some(b)) => {
                a.version = a.version.max(b.version);
                a.committed.extend(b.committed);
                Some(a)
            }
            (a, b) => a.or(b),
        }
    }
}

/// A segment the seal wrote (and fsynced, and uploaded), not yet published.
#[derive(Debug)]
struct WrittenSegment {
    id: String,
    bytes: u64,
    /// CRC-32 of the file, computed as it was written: the upload's.
    crc32: u32,
    /// The partition of each row, in row order.
    partitions: Vec<u32>,
    /// Per partition, the first and last offset of its rows.
    offset_ranges: BTreeMap<u32, (i64, i64)>,
    /// The index file written with it, from the graph grown while its
    /// events arrived (`None`: published flat, maintenance builds it).
    index: Option<String>,
    /// What became of the grown graph, as `index_builds` counts it
    /// (`None`: no graph was grown).
    grown: Option<&'static str>,
}

/// What the write step hands the publish: the lease that keeps garbage
/// collection away from the written file, and the file (none when every
/// buffered event was a delete).
#[derive(Debug)]
struct Written {
    lease: Lease,
    segment: Option<WrittenSegment>,
}

/// A seal under way: the buffer it froze, the offsets it covers, and its
/// write step (on its own thread until joined; run inline when retried).
#[derive(Debug)]
pub(super) struct InFlight {
    frozen: Arc<Growing>,
    /// The owned partitions as the buffer froze: the offsets it covers.
    owned: BTreeMap<u32, Owned>,
    started: Instant,
    writer: Option<JoinHandle<Result<Written>>>,
    /// What became of the graph grown for it (see [`WrittenSegment`]).
    grown: Option<&'static str>,
}

/// Per segment id, the delete bitmap to publish for it.
type PlannedDeletes = HashMap<String, RoaringBitmap>;

impl CollectionState {
    /// Seals everything consumed so far and waits for it: the seal under
    /// way (if any) is published, then the buffer is written and published.
    /// For when the worker must stand still (giving partitions up,
    /// stopping, restarting a resumed partition).
    pub fn seal(&mut self) -> Result<Option<SealOutcome>> {
        let earlier = self.start_seal()?;
        let this = self.wait_seal()?;
        Ok(SealOutcome::combine(earlier, this))
    }

    /// Starts a seal of the buffer: waits for the seal under way (if any)
    /// and publishes it, returning its outcome, then freezes the buffer
    /// and writes it on a thread of its own while a new buffer takes
    /// events. [`CollectionState::poll_seal`] publishes it once written.
    pub fn start_seal(&mut self) -> Result<Option<SealOutcome>> {
        let earlier = self.wait_seal()?;
        if !self.has_progress() {
            self.first_event = None;
            return Ok(earlier);
        }
        let frozen = Arc::new(std::mem::replace(
            &mut self.buffer,
            Growing::new(
                self.def.dimension as usize,
                self.def.metric,
                self.def.id_type,
            ),
        ));
        let next_grower = self.new_grower();
        let grown = std::mem::replace(&mut self.grower, next_grower).stop(frozen.live_rows());
        self.first_event = None;
        let (store, def, ttl) = (
            self.store.clone(),
            self.def.clone(),
            self.policy.write_lease,
        );
        let buffer = frozen.clone();
        let name = format!("seal-{}", self.def.name);
        let writer = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || write_stage(&store, &def, &buffer, ttl, grown))
            .map_err(|source| Error::Thread { name, source })?;
        self.in_flight = Some(InFlight {
            frozen,
            owned: self.owned.clone(),
            started: Instant::now(),
            writer: Some(writer),
            grown: None,
        });
        self.publish_gauges();
        Ok(earlier)
    }

    /// Publishes the seal under way if its write is done (without waiting).
    pub fn poll_seal(&mut self) -> Result<Option<SealOutcome>> {
        let written = self
            .in_flight
            .as_ref()
            .is_some_and(|f| f.writer.as_ref().is_none_or(JoinHandle::is_finished));
        if written {
            self.wait_seal()
        } else {
            Ok(None)
        }
    }

    /// A grower for a new buffer of this collection (one that grows
    /// nothing while the back-off skips buffers).
    fn new_grower(&mut self) -> Grower {
        let policy = self.policy.grow.filter(|_| self.grow_backoff.grow_next());
        Grower::new(policy, self.def.dimension as usize, self.def.metric)
    }

    /// Whether a seal is under way (written or not, not yet published).
    pub fn seal_in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Waits for the seal under way (if any) and publishes it. On failure
    /// it stays under way: the next call writes it again and retries, as
    /// the consumed offsets it covers are not committed anywhere.
    pub fn wait_seal(&mut self) -> Result<Option<SealOutcome>> {
        let Some(mut flight) = self.in_flight.take() else {
            return Ok(None);
        };
        match self.write_and_publish(&mut flight) {
            Ok(outcome) => {
                fail::fail_point!("seal::before_commit");
                self.published(&flight, &outcome);
                Ok(Some(outcome))
            }
            Err(e) => {
                self.in_flight = Some(flight);
                Err(e)
            }
        }
    }

    /// Takes the write step's result (joining its thread, or writing
    /// inline on a retry) and publishes it under the lease that kept
    /// garbage collection away; a file collected while the seal stalled
    /// past its lease is written again.
    fn write_and_publish(&mut self, flight: &mut InFlight) -> Result<SealOutcome> {
        let ttl = self.policy.write_lease;
        let mut written = match flight.writer.take() {
            Some(thread) => thread.join().map_err(|_| Error::SealWriterPanicked)??,
            None => write_stage(
                &self.store,
                &self.def,
                &flight.frozen,
                ttl,
                Handover::Nothing,
            )?,
        };
        flight.grown = written.segment.as_ref().and_then(|s| s.grown);
        let mut attempt = 1;
        loop {
            fail::fail_point!("seal::before_publish");
            written.lease.keep_for_publish(ttl)?;
            match self.publish(flight, written.segment.as_ref()) {
                Err(Error::Store(eddy_manifest::Error::MissingFile { path })) if attempt < 3 => {
                    warn!(collection = %self.def.name, path = %path.display(), "a file of the seal was collected while it stalled; writing it again");
                    attempt += 1;
                    written = write_stage(
                        &self.store,
                        &self.def,
                        &flight.frozen,
                        ttl,
                        Handover::Nothing,
                    )?;
                }
                other => return other,
            }
        }
    }

    /// Step 2: the delete bits on older segments for every id the frozen
    /// buffer touched on an unfenced partition, on top of each segment's
    /// deletes as `latest` has them (the id → row map must be synced to
    /// `latest`).
    fn plan_deletes(&self, flight: &InFlight, latest: &Manifest) -> PlannedDeletes {
        let mut deletes = PlannedDeletes::new();
        for (id, touch) in flight.frozen.touches() {
            if is_fenced(&flight.owned, latest, touch.partition) {
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
    fn publish(
        &mut self,
        flight: &InFlight,
        written: Option<&WrittenSegment>,
    ) -> Result<SealOutcome> {
        let (store, name) = (self.store.clone(), self.def.name.clone());
        let mut committed = BTreeMap::new();
        let updated = store.update::<crate::Error>(&name, |latest| {
            self.id_rows.sync(&self.store, latest)?;
            let deletes = self.plan_deletes(flight, latest);
            let (next, covered) = self.successor(flight, latest, &deletes, written)?;
            committed = covered;
            Ok(Some(next))
        })?;
        self.count_conflicts(updated.conflicts);
        let next = updated
            .published
            .ok_or_else(|| crate::Error::Unpublished("seal"))?;
        if let Some(segment) = written {
            let rows = flight
                .frozen
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
        flight: &InFlight,
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
            next.segments
                .push(self.segment_entry(&flight.owned, latest, segment)?);
        }
        let committed = self.advance_offsets(&flight.owned, latest, &mut next);
        Ok((next, committed))
    }

    /// The manifest entry of the written segment; rows of fenced partitions
    /// are published deleted.
    fn segment_entry(
        &self,
        owned: &BTreeMap<u32, Owned>,
        latest: &Manifest,
        segment: &WrittenSegment,
    ) -> Result<SegmentEntry> {
        let pre_deleted: RoaringBitmap = segment
            .partitions
            .iter()
            .enumerate()
            .filter(|(_, p)| is_fenced(owned, latest, **p))
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
            index: segment.index.clone(),
        })
    }

    /// Moves `next_offset` of every partition the frozen buffer covers
    /// (`owned`, unfenced) up to what it consumed; returns the offsets now
    /// covered.
    fn advance_offsets(
        &self,
        owned: &BTreeMap<u32, Owned>,
        latest: &Manifest,
        next: &mut Manifest,
    ) -> BTreeMap<u32, i64> {
        let mut committed = BTreeMap::new();
        for (p, o) in owned {
            if is_fenced(owned, latest, *p) {
                warn!(collection = %self.def.name, partition = p, "partition fenced by a newer owner: its rows are published deleted");
                continue;
            }
            let state = next.partitions.entry(*p).or_default();
            state.next_offset = state.next_offset.max(o.next);
            committed.insert(*p, state.next_offset);
        }
        committed
    }

    /// After a publish: drops the partitions it found fenced for good, and
    /// records the seal in metrics and the log.
    fn published(&mut self, flight: &InFlight, outcome: &SealOutcome) {
        for p in flight.owned.keys() {
            if !outcome.committed.contains_key(p) {
                self.owned.remove(p);
            }
        }
        let took = flight.started.elapsed();
        self.metrics.seal_seconds.observe(took.as_secs_f64());
        self.metrics
            .seals
            .with_label_values(&[&self.def.name])
            .inc();
        self.grow_backoff.sealed(flight.grown);
        if let Some(outcome) = flight.grown {
            self.metrics
                .index_builds
                .with_label_values(&[&self.def.name, outcome])
                .inc();
        }
        self.publish_gauges();
        info!(
            collection = %self.def.name,
            version = outcome.version,
            rows = flight.frozen.live_rows(),
            segments = self.manifest.segments.len(),
            took_ms = took.as_millis() as u64,
            "sealed"
        );
    }
}

/// Whether `partition` is not the frozen buffer's in `latest`: not owned
/// as it froze (`owned`), or its owner epoch moved on since (another worker
/// took it over).
fn is_fenced(owned: &BTreeMap<u32, Owned>, latest: &Manifest, partition: u32) -> bool {
    owned.get(&partition).is_none_or(|o| {
        latest
            .partitions
            .get(&partition)
            .map_or(0, |s| s.owner_epoch)
            != o.epoch
    })
}

/// Step 1, on the seal's own thread: takes the lease, writes the frozen
/// buffer's live rows as a new segment file (none when every buffered
/// event was a delete) and puts it in the object store, so the publish
/// that follows only names it; then finishes the graph grown while the
/// buffer filled (`grown`), as the segment's index file.
fn write_stage(
    store: &Store,
    def: &CollectionDef,
    buffer: &Growing,
    ttl: Duration,
    grown: Handover,
) -> Result<Written> {
    let lease = store.take_lease(&def.name, "seal", ttl, None)?;
    let mut segment = write_segment(store, def, buffer)?;
    if let Some(segment) = &segment {
        store.upload_segment(&def.name, &segment.id, Some(segment.crc32))?;
    }
    if let Some(segment) = &mut segment {
        match grown {
            Handover::Nothing => {}
            Handover::Behind { grown } => {
                info!(collection = %def.name, segment = %segment.id, grown, rows = buffer.live_rows(), "the grown graph fell behind: the segment is published flat");
                segment.grown = Some("grown_behind");
            }
            Handover::Pending(pending) => {
                if let Some(grown) = pending.join() {
                    let (index, outcome) =
                        write_grown_index(store, def, buffer, &segment.id, &grown);
                    segment.index = index;
                    segment.grown = outcome;
                }
            }
        }
    }
    Ok(Written { lease, segment })
}

/// Writes `buffer`'s live rows as a new segment file of `def`.
fn write_segment(
    store: &Store,
    def: &CollectionDef,
    buffer: &Growing,
) -> Result<Option<WrittenSegment>> {
    if buffer.live_rows() == 0 {
        return Ok(None);
    }
    let (id, path) = store.new_segment(&def.name);
    let written = buffer
        .write_segment(&path, &def.payload_fields)
        .map_err(eddy_manifest::Error::from)?;
    let partitions: Vec<u32> = buffer.live_row_refs().map(|r| r.partition).collect();
    let mut offset_ranges: BTreeMap<u32, (i64, i64)> = BTreeMap::new();
    for r in buffer.live_row_refs() {
        let range = offset_ranges
            .entry(r.partition)
            .or_insert((r.offset, r.offset));
        range.0 = range.0.min(r.offset);
        range.1 = range.1.max(r.offset);
    }
    Ok(Some(WrittenSegment {
        id,
        bytes: written.bytes,
        crc32: written.crc32,
        partitions,
        offset_ranges,
        index: None,
        grown: None,
    }))
}
