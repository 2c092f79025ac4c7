//! A served collection: the installed snapshot of sealed segments plus the
//! in-memory tail, behind one lock so a query sees both consistently. Its
//! fields are private: the watcher installs snapshots, the tail applies
//! events, and searches read, each through a method here.

mod scroll;
mod search;
mod served;
mod shadow;
mod snapshot;
#[cfg(test)]
mod testing;
mod view;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use eddy_model::CollectionDef;
use eddy_segment::{Growing, SCAN_CODES_FROM_ROWS};
use parking_lot::RwLock;
use tokio::time::Instant;

use crate::fanout::pin::RemotePin;

pub use scroll::{PagePoint, ScrollPage};
pub use search::PointRecord;
pub use served::{LockTimes, Served};
pub use shadow::Shadows;
pub use snapshot::{LoadedSegment, Quarantined, Snapshot};
pub use view::{LiveView, ViewPoint};

/// A collection's state as the HTTP API describes it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Status {
    /// Snapshot installed and tail running.
    pub ready: bool,
    /// The installed manifest version.
    pub manifest_version: u64,
    /// Segments searched per query.
    pub segments: usize,
    /// Segments with a graph.
    pub indexed_segments: usize,
    /// Segments whose payload index lacks a field the collection indexes
    /// (after an alteration, until eddy-ingest has re-indexed them; filters
    /// on those fields read their payloads meanwhile).
    pub payload_index_pending: usize,
    /// Live rows in the segments.
    pub sealed_rows: u64,
    /// Live rows in the tail.
    pub tail_rows: usize,
    /// Live points (segments, tail masking applied).
    pub points: u64,
    /// Per partition, the first offset not reflected yet.
    pub offsets: BTreeMap<u32, i64>,
    /// Segments of the manifest not served, with the reason.
    pub quarantined: Vec<Quarantined>,
    /// Whether the tail is paused at its bound.
    pub tail_paused: bool,
}

/// How a note on shards left out starts.
const PARTIAL: &str = "partial:";

/// The note on shards `missing` left out of an answer, if any.
fn partial_note(missing: &[u32]) -> Option<String> {
    (!missing.is_empty()).then(|| {
        format!(
            "{PARTIAL} shards {missing:?} are not in the answer (no node serving them answered)"
        )
    })
}

/// A collection being served.
#[derive(Debug)]
pub struct Collection {
    name: String,
    /// Its definition: replaced whole when the collection is altered (an
    /// indexed payload field added); name, dimension, metric, id type and
    /// topic never change.
    def: RwLock<Arc<CollectionDef>>,
    /// The shards this node serves (all of them unless `--shards` says
    /// otherwise), ascending: their chains make up the snapshot, their
    /// partitions the tail.
    shards: Vec<u32>,
    served: RwLock<Served>,
    /// Held by whoever changes `served` (the tail's applier, a snapshot's
    /// install), so an install can prepare its tail under the read lock.
    tail_writer: parking_lot::Mutex<()>,
    /// How long a writer of `served` lets new searches in while it waits
    /// for the ones in flight ([`served::WRITER_PATIENCE`]).
    writer_patience: std::time::Duration,
    /// Woken whenever the tail applies events or a snapshot is installed.
    changed: tokio::sync::Notify,
    /// Set once the first snapshot is installed.
    snapshot_ready: AtomicBool,
    /// Taken to announce an installed snapshot to
    /// [`Collection::wait_snapshot_ready`], so none is missed.
    snapshot_lock: parking_lot::Mutex<()>,
    /// Woken when a snapshot is installed.
    snapshot_installed: parking_lot::Condvar,
    /// Set once the tail is assigned its partitions.
    tail_ready: AtomicBool,
    /// Set while the tail holds as much as it may (`--max-tail-rows` /
    /// `--max-tail-bytes`) and reads no further.
    tail_full: AtomicBool,
    /// Set to stop the collection's tail and watcher.
    stop: AtomicBool,
    /// On a pinned snapshot, the pins its peers hold of the shards this
    /// node lacks (reads of those shards go to them alone); `None` on a
    /// live collection.
    remote_pins: Option<Vec<RemotePin>>,
}

impl Collection {
    /// A collection with nothing loaded yet, serving every shard.
    pub fn new(def: CollectionDef) -> Self {
        let all: Vec<u32> = (0..def.shards.max(1)).collect();
        Self::serving(def, all)
    }

    /// A collection with nothing loaded yet, serving `shards` of it (those
    /// past its shard count are ignored).
    pub fn serving(def: CollectionDef, shards: impl IntoIterator<Item = u32>) -> Self {
        let mut shards: Vec<u32> = shards.into_iter().filter(|s| *s < def.shards).collect();
        shards.sort_unstable();
        shards.dedup();
        let tail = Growing::new(def.dimension as usize, def.metric, def.id_type)
            .with_quantized_scan(SCAN_CODES_FROM_ROWS)
            .with_touch_journal();
        Self {
            name: def.name.clone(),
            def: RwLock::new(Arc::new(def)),
            shards,
            tail_writer: parking_lot::Mutex::new(()),
            writer_patience: served::WRITER_PATIENCE,
            served: RwLock::new(Served {
                snapshot: Arc::new(Snapshot::default()),
                tail,
                applied: BTreeMap::new(),
                stale: BTreeMap::new(),
                shadows: Shadows::default(),
            }),
            changed: tokio::sync::Notify::new(),
            snapshot_ready: AtomicBool::new(false),
            snapshot_lock: parking_lot::Mutex::new(()),
            snapshot_installed: parking_lot::Condvar::new(),
            tail_ready: AtomicBool::new(false),
            tail_full: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            remote_pins: None,
        }
    }

    /// A collection frozen at `snapshot`: its sealed segments and no tail,
    /// ready at once, never changing (a pinned snapshot, see `pins`).
    pub fn pinned(def: CollectionDef, shards: &[u32], snapshot: Arc<Snapshot>) -> Self {
        let mut pinned = Self::serving(def, shards.iter().copied());
        pinned.remote_pins = Some(Vec::new());
        pinned.served.write().snapshot = snapshot;
        pinned.snapshot_ready.store(true, Ordering::Release);
        pinned.tail_ready.store(true, Ordering::Release);
        pinned
    }

    /// A copy of what the collection serves now, frozen: its snapshot and
    /// its tail as they are, never changing (a pinned snapshot, see
    /// `pins`). Copying the tail costs its bytes once; the segments are
    /// shared.
    pub fn frozen(&self) -> Self {
        let served = self.served.read();
        let mut frozen = Self::serving(CollectionDef::clone(&self.def()), self.shards.clone());
        frozen.remote_pins = Some(Vec::new());
        *frozen.served.write() = Served {
            snapshot: served.snapshot.clone(),
            tail: served.tail.clone(),
            applied: served.applied.clone(),
            stale: served.stale.clone(),
            shadows: served.shadows.clone(),
        };
        frozen.snapshot_ready.store(true, Ordering::Release);
        frozen.tail_ready.store(true, Ordering::Release);
        frozen
            .tail_full
            .store(self.is_tail_full(), Ordering::Release);
        frozen
    }

    /// This pinned snapshot with `remote`, the pins peers hold of the
    /// shards this node lacks.
    pub fn with_remote_pins(mut self, remote: Vec<RemotePin>) -> Self {
        self.remote_pins = Some(remote);
        self
    }

    /// On a pinned snapshot, the pins peers hold of the shards this node
    /// lacks (reads go to them, naming their tokens); `None` when live.
    pub fn remote_pins(&self) -> Option<&[RemotePin]> {
        self.remote_pins.as_deref()
    }

    /// The shards this node serves, ascending.
    pub fn shards(&self) -> &[u32] {
        &self.shards
    }

    /// The shards of the collection this node does not serve (a search
    /// asks other nodes for them).
    pub fn missing_shards(&self) -> Vec<u32> {
        let all = self.def().shards;
        (0..all).filter(|s| !self.shards.contains(s)).collect()
    }

    /// Whether this node serves `partition` (its shard is one it serves).
    pub fn serves_partition(&self, partition: u32) -> bool {
        self.shards.contains(&self.def.read().shard_of(partition))
    }

    /// Its definition now.
    pub fn def(&self) -> Arc<CollectionDef> {
        self.def.read().clone()
    }

    /// Takes the altered definition `def` (see `eddy_manifest::Altered`):
    /// requests from now on parse filters against its payload fields.
    /// Returns whether it changed anything. A definition that differs in
    /// more than its payload fields is refused (logged): those never
    /// change for a live collection.
    pub fn set_def(&self, def: CollectionDef) -> bool {
        let mut current = self.def.write();
        if **current == def {
            return false;
        }
        if !current.same_but_payload_fields(&def) {
            tracing::error!(collection = %self.name, "the store's definition changed more than its payload fields; keeping the one served");
            return false;
        }
        tracing::info!(collection = %self.name, fields = ?def.payload_fields.keys().collect::<Vec<_>>(), "collection altered: indexed payload fields now");
        *current = Arc::new(def);
        true
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The installed snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.served.read().snapshot.clone()
    }

    /// Per partition, the first offset a query does not reflect yet.
    pub fn visible_offsets(&self) -> BTreeMap<u32, i64> {
        self.served.read().visible_offsets()
    }

    /// Live points and the offsets that count reflects.
    pub fn count(&self) -> (u64, BTreeMap<u32, i64>) {
        let served = self.served.read();
        (served.count(), served.visible_offsets())
    }

    /// Live rows in the tail.
    pub fn tail_rows(&self) -> usize {
        self.served.read().tail.live_rows()
    }

    /// Segments a query searches now.
    pub fn segment_count(&self) -> usize {
        self.served.read().snapshot.segments.len()
    }

    /// The state the HTTP API describes.
    pub fn status(&self) -> Status {
        let def = self.def();
        let served = self.served.read();
        let segments = &served.snapshot.segments;
        Status {
            ready: self.is_ready(),
            manifest_version: served.snapshot.version,
            segments: segments.len(),
            indexed_segments: segments.iter().filter(|s| s.index.is_some()).count(),
            payload_index_pending: segments.iter().filter(|s| !s.covers(&def)).count(),
            sealed_rows: served.snapshot.sealed_rows(),
            tail_rows: served.tail.live_rows(),
            points: served.count(),
            offsets: served.visible_offsets(),
            quarantined: served.snapshot.quarantined.clone(),
            tail_paused: self.is_tail_full(),
        }
    }

    /// Waits until every `(partition, offset)` in `min` is visible; false
    /// if `deadline` passes first.
    pub async fn wait_for(&self, min: &BTreeMap<u32, i64>, deadline: Instant) -> bool {
        loop {
            let notified = self.changed.notified();
            if self.served.read().reflects(min) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return false;
            }
        }
    }

    /// Why the collection serves only part of its data (quarantined
    /// segments), if it does.
    pub fn degraded(&self) -> Option<String> {
        let served = self.served.read();
        let q = &served.snapshot.quarantined;
        (!q.is_empty()).then(|| {
            let ids: Vec<&str> = q.iter().map(|q| q.segment.as_str()).collect();
            format!("{} segment(s) quarantined: {}", q.len(), ids.join(", "))
        })
    }

    /// Whether the collection serves queries (snapshot installed, tail running).
    pub fn is_ready(&self) -> bool {
        self.snapshot_ready() && self.tail_ready.load(Ordering::Acquire)
    }

    /// Whether the first snapshot is installed.
    pub fn snapshot_ready(&self) -> bool {
        self.snapshot_ready.load(Ordering::Acquire)
    }

    /// Waits (blocking) until the first snapshot is installed, at most
    /// `timeout`; whether it is. The tail waits here at start, woken the
    /// moment the watcher installs it rather than at its next poll.
    pub fn wait_snapshot_ready(&self, timeout: std::time::Duration) -> bool {
        let mut guard = self.snapshot_lock.lock();
        if !self.snapshot_ready() {
            self.snapshot_installed.wait_for(&mut guard, timeout);
        }
        self.snapshot_ready()
    }

    /// Records that the tail holds its partitions.
    pub fn set_tail_ready(&self) {
        self.tail_ready.store(true, Ordering::Release);
    }

    /// Rows (replaced ones included) and approximate bytes the tail holds:
    /// what its bound counts.
    pub fn tail_size(&self) -> (usize, usize) {
        let served = self.served.read();
        (served.tail.rows(), served.tail.approx_bytes())
    }

    /// Records whether the tail is at its bound; returns whether that
    /// changed.
    pub fn set_tail_full(&self, full: bool) -> bool {
        self.tail_full.swap(full, Ordering::AcqRel) != full
    }

    /// Whether the tail is at its bound and reads no further.
    pub fn is_tail_full(&self) -> bool {
        self.tail_full.load(Ordering::Acquire)
    }

    /// Why answers may miss published events, if they may: the tail is
    /// paused at its bound, or partitions are stale. Every answer carries
    /// this (`stale` in HTTP responses).
    pub fn staleness(&self) -> Vec<String> {
        let mut why = Vec::new();
        if self.is_tail_full() {
            why.push(
                "the tail is at its bound and reads no further until eddy-ingest seals".to_owned(),
            );
        }
        for (p, reason) in &self.served.read().stale {
            why.push(format!("partition {p} is stale: {}", reason.as_str()));
        }
        why.extend(partial_note(&self.missing_shards()));
        why
    }

    /// Why a search answer may miss published events: the collection's
    /// reasons but for shards it does not serve, plus the shards the
    /// answer left out (`missing`: those no node serving them answered).
    pub fn search_staleness(&self, missing: &[u32]) -> Vec<String> {
        let mut why = self.staleness();
        why.retain(|w| !w.starts_with(PARTIAL));
        why.extend(partial_note(missing));
        why
    }

    /// Asks the tail and the watcher to stop.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Whether [`Collection::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}
