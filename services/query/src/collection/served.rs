//! What a collection serves, and the two writers that change it: a new
//! snapshot's install and the tail's applier, each preparing what it can
//! before it takes the write lock searches wait on.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use eddy_segment::{Growing, RowMask};

use super::{Collection, Shadows, Snapshot};

/// What a collection serves: the installed snapshot plus the tail;
/// everything a query reads, changed only under the write lock.
#[derive(Debug)]
pub struct Served {
    /// The installed snapshot.
    pub snapshot: Arc<Snapshot>,
    /// Fresh events not yet in the snapshot's segments.
    pub tail: Growing,
    /// Per partition, the next offset the tail will apply.
    pub applied: BTreeMap<u32, i64>,
    /// Partitions the tail cannot follow (their offset left the log, or a
    /// gap): queries there see the sealed segments only, and the
    /// `eddy_query_partition_stale` metric says so.
    pub stale: BTreeMap<u32, eddy_kafka::StopReason>,
    /// The snapshot's rows the tail shadows, kept by [`Served::sync_shadows`]
    /// and [`Collection::install`].
    pub shadows: Shadows,
}

impl Served {
    /// Marks the sealed rows of the ids the tail touched since the last
    /// call as shadowed.
    pub fn sync_shadows(&mut self) {
        for id in self.tail.take_touched_since() {
            self.shadows.mark(&self.snapshot, &id);
        }
    }

    /// What a search of segment `i` of the snapshot refuses: its deleted
    /// rows and the rows the tail shadows, so the search can scan the
    /// accepted rows' codes where a walk would route through mostly
    /// refused nodes.
    pub fn row_mask(&self, i: usize) -> RowMask<'_> {
        RowMask {
            refused: self.shadows.bits(i),
            masked: self.shadows.count(i),
        }
    }

    /// Per partition, the first offset a query does not reflect yet.
    pub fn visible_offsets(&self) -> BTreeMap<u32, i64> {
        let mut out = self.snapshot.cutoffs.clone();
        for (p, off) in &self.applied {
            let e = out.entry(*p).or_insert(*off);
            *e = (*e).max(*off);
        }
        out
    }

    /// Whether every `(partition, offset)` in `min` is visible.
    pub fn reflects(&self, min: &BTreeMap<u32, i64>) -> bool {
        let visible = self.visible_offsets();
        min.iter()
            .all(|(p, off)| visible.get(p).is_some_and(|v| v > off))
    }

    /// Live rows: sealed rows not masked by the tail, plus the tail's rows.
    pub fn count(&self) -> u64 {
        let masked = self
            .tail
            .touches()
            .filter(|(id, _)| self.snapshot.find(id).is_some())
            .count() as u64;
        self.snapshot.sealed_rows() - masked + self.tail.live_rows() as u64
    }
}

impl Collection {
    /// Installs a newer snapshot and drops the tail rows it now covers, in
    /// one step, so no query sees a row twice or misses one. The pruned
    /// tail and the snapshot's shadows are prepared under the read lock,
    /// while searches go on (tens of milliseconds for a tail of ~20k rows
    /// beside a writer); the write lock only swaps them in. No tail event
    /// is applied in between: [`Collection::apply_tail`] waits on the same
    /// `tail_writer`.
    pub fn install(&self, snapshot: Snapshot) {
        let _writer = self.tail_writer.lock();
        let (tail, shadows) = {
            let served = self.served.read();
            if snapshot.version < served.snapshot.version {
                return;
            }
            let tail = served.tail.pruned_below(&snapshot.cutoffs);
            let shadows = Shadows::of(&snapshot, tail.as_ref().unwrap_or(&served.tail));
            (tail, shadows)
        };
        let mut served = self.served.write();
        if let Some(tail) = tail {
            served.tail = tail;
        }
        // Every touch is in the new shadows: none is left to sync.
        served.tail.take_touched_since();
        served.shadows = shadows;
        served.snapshot = Arc::new(snapshot);
        drop(served);
        self.snapshot_ready.store(true, Ordering::Release);
        {
            let _announcing = self.snapshot_lock.lock();
            self.snapshot_installed.notify_all();
        }
        self.changed.notify_waiters();
    }

    /// Applies tail events under the write lock, then wakes requests
    /// waiting for offsets.
    pub fn apply_tail<R>(&self, apply: impl FnOnce(&mut Served) -> R) -> R {
        let _writer = self.tail_writer.lock();
        let mut served = self.served.write();
        let out = apply(&mut served);
        served.sync_shadows();
        drop(served);
        self.changed.notify_waiters();
        out
    }
}
