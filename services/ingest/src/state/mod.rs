//! One collection's ingest state: the growing buffer, the partitions this
//! worker owns, and (in [`seal`]) the seal that turns the buffer into a
//! published segment.

mod grow;
mod seal;
mod shards;
mod stop;

use std::collections::BTreeMap;
use std::time::Instant;

use eddy_event::{Reason, Rejection};
use eddy_kafka::{Cursor, Gaps, Outcome, Record};
use eddy_manifest::{Manifest, Store};
use eddy_model::CollectionDef;
use eddy_segment::Growing;
use tracing::{debug, info, warn};

use crate::config::SealPolicy;
use crate::error::Result;
use crate::id_rows::IdRows;
use crate::metrics::IngestMetrics;

pub use seal::SealOutcome;
pub use shards::ShardStates;
pub(crate) use stop::now_ms;
pub use stop::StopReason;
use stop::Stopped;

/// A partition this worker owns.
#[derive(Debug, Clone, Copy)]
struct Owned {
    /// The epoch this worker published when it took the partition over.
    epoch: u64,
    /// Next offset to accept (everything below is in the buffer or sealed).
    next: i64,
    /// Set when reading on would skip events: nothing more is applied
    /// until an operator resumes the partition.
    stopped: Option<Stopped>,
}

/// What applying one record asks of the worker.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// Nothing: applied, redelivered, or not ours.
    Done,
    /// The event is unusable: write it to the dead-letter topic.
    Rejected(Rejection),
    /// The partition stopped (a gap): stop fetching it.
    Stopped(u32),
}

/// The ingest state of one collection on one worker.
#[derive(Debug)]
pub struct CollectionState {
    def: CollectionDef,
    store: Store,
    policy: SealPolicy,
    metrics: IngestMetrics,
    buffer: Growing,
    /// Grows the buffer's graph while its events arrive.
    grower: grow::Grower,
    /// Whether new buffers grow their graphs, after how the last seals went.
    grow_backoff: grow::GrowBackoff,
    owned: BTreeMap<u32, Owned>,
    /// Newest manifest this worker knows.
    manifest: Manifest,
    /// Where the current sealed row of every id is.
    id_rows: IdRows,
    /// When the first event of the current buffer arrived.
    first_event: Option<Instant>,
    /// When the newest event arrived (for a quiet buffer's early seal).
    last_event: Option<Instant>,
    /// The seal under way: a frozen buffer being written, then published.
    in_flight: Option<seal::InFlight>,
    /// Whether the topic's compaction explains gaps in its offsets.
    gaps: Gaps,
    /// Per partition, the manifest `next_offset` last seen (to date the
    /// manifest's progress).
    progress: BTreeMap<u32, i64>,
    /// Per partition assigned to this worker (until revoked, even once
    /// fenced), when it took it over, in ms since the Unix epoch: a resume
    /// recorded later makes it take the partition over again.
    taken_at: BTreeMap<u32, u64>,
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
        let grower = grow::Grower::new(policy.grow, def.dimension as usize, def.metric);
        let mut state = Self {
            def,
            store,
            policy,
            metrics,
            buffer,
            grower,
            grow_backoff: grow::GrowBackoff::default(),
            owned: BTreeMap::new(),
            manifest,
            id_rows,
            first_event: None,
            last_event: None,
            in_flight: None,
            gaps: Gaps::Refused,
            progress: BTreeMap::new(),
            taken_at: BTreeMap::new(),
        };
        state.publish_gauges();
        Ok(state)
    }

    /// Sets how offset gaps are judged (from the topic's `cleanup.policy`).
    pub fn set_gaps(&mut self, gaps: Gaps) {
        self.gaps = gaps;
    }

    /// The collection definition.
    pub fn def(&self) -> &CollectionDef {
        &self.def
    }

    /// Takes an altered definition: events are checked against, and
    /// segments sealed from now on index, its payload fields (segments
    /// sealed before are re-indexed by maintenance). Anything but the
    /// payload fields differing is refused and logged: those never change.
    pub fn set_def(&mut self, def: CollectionDef) {
        if !self.def.same_but_payload_fields(&def) {
            warn!(collection = %self.def.name, "the store's definition changed more than its payload fields; keeping the one in use");
            return;
        }
        info!(collection = %self.def.name, fields = ?def.payload_fields.keys().collect::<Vec<_>>(), "collection altered: indexing these payload fields from now on");
        self.def = def;
    }

    /// Takes partitions over: bumps their owner epochs in a new manifest
    /// (fencing any previous owner) and returns the offset to start each at.
    /// A partition the manifest has never seen starts at its log start
    /// (`log_starts`), recorded in that manifest, so every later start is
    /// checked against the log the same way.
    pub fn assign(
        &mut self,
        partitions: &[u32],
        log_starts: &BTreeMap<u32, i64>,
    ) -> Result<BTreeMap<u32, i64>> {
        if partitions.is_empty() {
            return Ok(BTreeMap::new());
        }
        let updated = self
            .store
            .update::<crate::Error>(&self.def.name, |latest| {
                let mut next = latest.successor();
                for p in partitions {
                    let state = next.partitions.entry(*p).or_insert_with(|| {
                        eddy_manifest::PartitionState {
                            next_offset: log_starts.get(p).copied().unwrap_or(0),
                            owner_epoch: 0,
                        }
                    });
                    state.owner_epoch += 1;
                }
                Ok(Some(next))
            })?;
        self.count_conflicts(updated.conflicts);
        let Some(next) = updated.published else {
            return Ok(BTreeMap::new());
        };
        let mut starts = BTreeMap::new();
        let now = stop::now_ms();
        for p in partitions {
            self.taken_at.insert(*p, now);
            let state = next.partitions[p];
            self.owned.insert(
                *p,
                Owned {
                    epoch: state.owner_epoch,
                    next: state.next_offset,
                    stopped: None,
                },
            );
            starts.insert(*p, state.next_offset);
        }
        debug!(chain = %self.def.name, ?starts, version = next.version, "chain's partitions assigned");
        self.id_rows.sync(&self.store, &next)?;
        self.manifest = next;
        self.publish_gauges();
        Ok(starts)
    }

    /// Gives partitions up (after the caller sealed what it had).
    pub fn revoke(&mut self, partitions: &[u32]) {
        for p in partitions {
            self.taken_at.remove(p);
            if let Some(owned) = self.owned.remove(p) {
                if let Some(stopped) = owned.stopped {
                    self.clear_stop_gauge(*p, stopped.reason);
                }
            }
        }
        self.publish_stopped_count();
        debug!(chain = %self.def.name, ?partitions, "chain's partitions revoked");
    }

    /// Partitions owned now, with the next offset each expects.
    pub fn owned_offsets(&self) -> BTreeMap<u32, i64> {
        self.owned.iter().map(|(p, o)| (*p, o.next)).collect()
    }

    /// The newest manifest in the store (not only the one this worker knows).
    pub fn latest_manifest(&self) -> Result<Manifest> {
        Ok(self.store.latest_manifest(&self.def.name)?)
    }

    /// Partitions an operator resumed (in `latest`) after this worker took
    /// them over: they are to be taken over again from the resumed offset.
    pub fn resumed_since_taken(&self, latest: &Manifest) -> Vec<u32> {
        self.taken_at
            .iter()
            .filter(|(p, at)| latest.resumes.get(p).is_some_and(|r| r.at_ms >= **at))
            .map(|(p, _)| *p)
            .collect()
    }

    /// Per owned partition, the newest manifest's `next_offset`.
    pub fn manifest_offsets(&self) -> BTreeMap<u32, i64> {
        self.owned
            .keys()
            .map(|p| (*p, self.manifest.next_offset(*p)))
            .collect()
    }

    /// Applies one consumed record through the one shared
    /// [`eddy_kafka::apply`]: records below the expected offset (redelivered
    /// after a restart or a seek) are dropped, since the manifest and the
    /// buffer already hold their effect; a gap the topic's compaction does
    /// not explain stops the partition.
    pub fn apply(&mut self, record: Record<'_>) -> Applied {
        let (partition, offset) = (record.place.partition, record.place.offset);
        let Some(owned) = self.owned.get_mut(&partition) else {
            debug!(collection = %self.def.name, partition, offset, "message for a partition not owned: dropped");
            return Applied::Done;
        };
        if owned.stopped.is_some() {
            self.count_event("stopped", 1);
            return Applied::Done;
        }
        let mut cursor = Cursor {
            next: owned.next,
            gaps: self.gaps,
        };
        let outcome = eddy_kafka::apply(&self.def, &mut self.buffer, &mut cursor, record);
        owned.next = cursor.next;
        match outcome {
            Outcome::Applied {
                upserts,
                deletes,
                conflicts,
            } => {
                self.note_event();
                self.grower.offer(&self.buffer);
                self.count_event("upsert", upserts);
                self.count_event("delete", deletes);
                if conflicts > 0 {
                    warn!(collection = %self.def.name, partition, offset, conflicts, "an id arrived on a second partition (id affinity broken); resolved by timestamp, partition, offset");
                    self.metrics
                        .id_partition_conflicts
                        .with_label_values(&[&self.def.name])
                        .inc_by(conflicts as u64);
                }
                self.metrics
                    .growing_rows
                    .with_label_values(&[&self.def.name])
                    .set(self.buffer.live_rows() as i64);
                Applied::Done
            }
            Outcome::Duplicate => {
                self.count_event("duplicate", 1);
                Applied::Done
            }
            Outcome::Rejected(rejection) => {
                self.note_event();
                warn!(collection = %self.def.name, partition, offset, reason = rejection.reason.as_str(), detail = %rejection.detail, "event rejected");
                self.reject(rejection.reason);
                Applied::Rejected(rejection)
            }
            Outcome::Gap { expected, got } => {
                self.stop(partition, StopReason::OffsetGap, expected, got);
                Applied::Stopped(partition)
            }
        }
    }

    /// Dates an event taken into the buffer (the buffer's age starts at
    /// its first).
    fn note_event(&mut self) {
        let now = Instant::now();
        self.first_event.get_or_insert(now);
        self.last_event = Some(now);
    }

    fn count_event(&self, outcome: &str, n: usize) {
        if n > 0 {
            self.metrics
                .events
                .with_label_values(&[&self.def.name, outcome])
                .inc_by(n as u64);
        }
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

    /// Whether the buffer reached a seal limit (rows, bytes or age), or its
    /// events stopped arriving while it holds rows enough for a graph.
    pub fn should_seal(&self) -> bool {
        let Some(first) = self.first_event else {
            return false;
        };
        let rows = self.buffer.live_rows();
        let quiet = self.policy.quiet.is_some_and(|quiet| {
            rows >= quiet.min_rows
                && self
                    .last_event
                    .is_some_and(|last| last.elapsed() >= quiet.after)
        });
        rows >= self.policy.max_rows
            || self.buffer.approx_bytes() >= self.policy.max_bytes
            || first.elapsed() >= self.policy.max_age
            || quiet
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

    fn publish_gauges(&mut self) {
        let name = &self.def.name;
        self.metrics
            .growing_rows
            .with_label_values(&[name])
            .set(self.buffer.live_rows() as i64);
        self.metrics
            .observe_manifest(name, self.manifest.version, self.manifest.segments.len());
        for (p, s) in &self.manifest.partitions {
            let partition = p.to_string();
            self.metrics
                .next_offset
                .with_label_values(&[name, &partition])
                .set(s.next_offset);
            if self.progress.insert(*p, s.next_offset) != Some(s.next_offset) {
                self.metrics
                    .partition_progress
                    .with_label_values(&[name, &partition])
                    .set((self.manifest.published_ms / 1000) as i64);
            }
        }
    }
}

/// Seal limits no test reaches unless it means to, for tests.
#[cfg(test)]
pub(crate) fn test_policy() -> crate::config::SealPolicy {
    crate::config::SealPolicy {
        max_rows: 1_000,
        max_bytes: 1 << 20,
        max_age: std::time::Duration::from_secs(60),
        write_lease: std::time::Duration::from_secs(60),
        quiet: None,
        grow: None,
    }
}

/// The state of a new 2-dimension collection `c` in a store at `dir`, and
/// its metrics, for tests.
#[cfg(test)]
pub(crate) fn test_state(
    dir: &std::path::Path,
    policy: crate::config::SealPolicy,
) -> (CollectionState, IngestMetrics) {
    let store = Store::open(dir).expect("store");
    let def = CollectionDef::new("c", 2);
    store.create_collection(&def).expect("collection");
    let metrics = IngestMetrics::new(&prometheus::Registry::new()).expect("metrics");
    let state = CollectionState::new(def, store, policy, metrics.clone()).expect("state");
    (state, metrics)
}

/// A record of a JSON event `value` at `partition`/`offset`, for tests.
#[cfg(test)]
pub(crate) fn test_record(value: &[u8], partition: u32, offset: i64) -> Record<'_> {
    Record {
        message: eddy_event::Message {
            key: None,
            value: Some(value),
            content_type: None,
        },
        place: eddy_kafka::Place {
            partition,
            offset,
            timestamp_ms: 0,
        },
    }
}

#[cfg(test)]
mod tests;
