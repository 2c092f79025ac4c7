//! One collection's ingest state: the growing buffer, the partitions this
//! worker owns, and (in [`seal`]) the seal that turns the buffer into a
//! published segment.

mod seal;

use std::collections::BTreeMap;
use std::time::Instant;

use eddy_event::{Event, Message, Reason, Rejection};
use eddy_manifest::{Manifest, Store};
use eddy_model::CollectionDef;
use eddy_segment::Growing;
use tracing::{debug, info, warn};

use crate::config::SealPolicy;
use crate::error::Result;
use crate::id_rows::IdRows;
use crate::metrics::IngestMetrics;

pub use seal::SealOutcome;

/// A partition this worker owns.
#[derive(Debug, Clone, Copy)]
struct Owned {
    /// The epoch this worker published when it took the partition over.
    epoch: u64,
    /// Next offset to accept (everything below is in the buffer or sealed).
    next: i64,
    /// Set when retention deleted unread data: the partition is stopped.
    stalled: bool,
}

/// The ingest state of one collection on one worker.
#[derive(Debug)]
pub struct CollectionState {
    def: CollectionDef,
    store: Store,
    policy: SealPolicy,
    metrics: IngestMetrics,
    buffer: Growing,
    owned: BTreeMap<u32, Owned>,
    /// Newest manifest this worker knows.
    manifest: Manifest,
    /// Where the current sealed row of every id is.
    id_rows: IdRows,
    /// When the first event of the current buffer arrived.
    first_event: Option<Instant>,
}

impl CollectionState {
    /// State for `def`, synced to the newest manifest in `store`.
    pub fn new(
        def: CollectionDef,
        store: Store,
        policy: SealPolicy,
        metrics: IngestMetrics,
    ) -> Result<Self> {
        let manifest = store.latest_manifest(&def.name)?;
        let mut id_rows = IdRows::default();
        id_rows.sync(&store, &manifest)?;
        let buffer = Growing::new(def.dimension as usize, def.metric, def.id_type);
        let state = Self {
            def,
            store,
            policy,
            metrics,
            buffer,
            owned: BTreeMap::new(),
            manifest,
            id_rows,
            first_event: None,
        };
        state.publish_gauges();
        Ok(state)
    }

    /// The collection definition.
    pub fn def(&self) -> &CollectionDef {
        &self.def
    }

    /// Takes partitions over: bumps their owner epochs in a new manifest
    /// (fencing any previous owner) and returns the offset to start each at.
    pub fn assign(&mut self, partitions: &[u32]) -> Result<BTreeMap<u32, i64>> {
        if partitions.is_empty() {
            return Ok(BTreeMap::new());
        }
        let updated = self
            .store
            .update::<crate::Error>(&self.def.name, |latest| {
                let mut next = latest.successor();
                for p in partitions {
                    next.partitions.entry(*p).or_default().owner_epoch += 1;
                }
                Ok(Some(next))
            })?;
        self.count_conflicts(updated.conflicts);
        let Some(next) = updated.published else {
            return Ok(BTreeMap::new());
        };
        let mut starts = BTreeMap::new();
        for p in partitions {
            let state = next.partitions[p];
            self.owned.insert(
                *p,
                Owned {
                    epoch: state.owner_epoch,
                    next: state.next_offset,
                    stalled: false,
                },
            );
            starts.insert(*p, state.next_offset);
        }
        info!(collection = %self.def.name, ?starts, version = next.version, "partitions assigned");
        self.id_rows.sync(&self.store, &next)?;
        self.manifest = next;
        self.publish_gauges();
        Ok(starts)
    }

    /// Gives partitions up (after the caller sealed what it had).
    pub fn revoke(&mut self, partitions: &[u32]) {
        for p in partitions {
            self.owned.remove(p);
        }
        info!(collection = %self.def.name, ?partitions, "partitions revoked");
    }

    /// Marks a partition stopped: retention deleted offsets the manifest has
    /// not covered, so continuing would silently lose events.
    pub fn stall(&mut self, partition: u32, log_start: i64) {
        if let Some(o) = self.owned.get_mut(&partition) {
            o.stalled = true;
            tracing::error!(
                collection = %self.def.name,
                partition,
                next_offset = o.next,
                log_start,
                "retention deleted unread events: partition stopped (re-create the collection or restore the data)"
            );
        }
        let stalled = self.owned.values().filter(|o| o.stalled).count() as i64;
        self.metrics
            .stalled_partitions
            .with_label_values(&[&self.def.name])
            .set(stalled);
    }

    /// Partitions owned now, with the next offset each expects.
    pub fn owned_offsets(&self) -> BTreeMap<u32, i64> {
        self.owned.iter().map(|(p, o)| (*p, o.next)).collect()
    }

    /// Applies one consumed message; returns the rejection of a bad event
    /// (for the dead-letter topic). Messages below the expected offset
    /// (redelivered after a restart or a seek) are dropped: the manifest and
    /// the buffer already hold their effect.
    pub fn apply(&mut self, partition: u32, offset: i64, msg: Message<'_>) -> Option<Rejection> {
        let name = self.def.name.clone();
        let Some(owned) = self.owned.get_mut(&partition) else {
            debug!(collection = %name, partition, offset, "message for a partition not owned: dropped");
            return None;
        };
        if owned.stalled || offset < owned.next {
            self.metrics
                .events
                .with_label_values(&[&name, "duplicate"])
                .inc();
            return None;
        }
        owned.next = offset + 1;
        self.first_event.get_or_insert_with(Instant::now);
        match eddy_event::decode(&self.def, msg) {
            Ok(Event::Upsert(point)) => {
                let payload = if point.payload.is_empty() {
                    Vec::new()
                } else {
                    serde_json::to_vec(&point.payload).unwrap_or_default()
                };
                self.buffer
                    .upsert(point.id, &point.vector, &payload, partition, offset);
                self.metrics
                    .events
                    .with_label_values(&[&name, "upsert"])
                    .inc();
            }
            Ok(Event::Delete(id)) => {
                self.buffer.delete(id, partition, offset);
                self.metrics
                    .events
                    .with_label_values(&[&name, "delete"])
                    .inc();
            }
            Err(rejection) => {
                warn!(collection = %name, partition, offset, reason = rejection.reason.as_str(), detail = %rejection.detail, "event rejected");
                self.reject(rejection.reason);
                return Some(rejection);
            }
        }
        self.metrics
            .growing_rows
            .with_label_values(&[&name])
            .set(self.buffer.live_rows() as i64);
        None
    }

    fn reject(&self, reason: Reason) {
        self.metrics
            .events
            .with_label_values(&[&self.def.name, "rejected"])
            .inc();
        self.metrics
            .rejected
            .with_label_values(&[&self.def.name, reason.as_str()])
            .inc();
    }

    /// Whether the buffer reached a seal limit (rows, bytes or age).
    pub fn should_seal(&self) -> bool {
        let Some(first) = self.first_event else {
            return false;
        };
        self.buffer.live_rows() >= self.policy.max_rows
            || self.buffer.approx_bytes() >= self.policy.max_bytes
            || first.elapsed() >= self.policy.max_age
    }

    /// Whether anything consumed is not yet covered by a manifest.
    pub fn has_progress(&self) -> bool {
        self.owned
            .iter()
            .any(|(p, o)| o.next > self.manifest.next_offset(*p))
    }

    /// Counts manifest compare-and-swap conflicts (another writer
    /// published first; the update retried on the newer version).
    fn count_conflicts(&self, conflicts: u32) {
        if conflicts > 0 {
            self.metrics
                .cas_conflicts
                .with_label_values(&[&self.def.name])
                .inc_by(u64::from(conflicts));
        }
    }

    fn publish_gauges(&self) {
        let name = &self.def.name;
        self.metrics
            .growing_rows
            .with_label_values(&[name])
            .set(self.buffer.live_rows() as i64);
        self.metrics
            .segments
            .with_label_values(&[name])
            .set(self.manifest.segments.len() as i64);
        self.metrics
            .manifest_version
            .with_label_values(&[name])
            .set(self.manifest.version as i64);
        for (p, s) in &self.manifest.partitions {
            self.metrics
                .next_offset
                .with_label_values(&[name, &p.to_string()])
                .set(s.next_offset);
        }
    }
}
