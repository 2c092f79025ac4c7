//! What a collection serves, and the two writers that change it: a new
//! snapshot's install and the tail's applier, each preparing what it can
//! before it takes the write lock searches wait on.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use eddy_segment::{Growing, RowMask};
use parking_lot::RwLockWriteGuard;

use super::{Collection, Shadows, Snapshot};

/// How long a writer of [`Served`] (the tail's applier, a snapshot's
/// install) lets new searches take the read lock while it waits for the
/// searches in flight to leave; then it queues for the lock, and new
/// searches wait behind it. A writer that queued at once shut every
/// search out for as long as the slowest one in flight took: beside a
/// 2,000 events/s writer on 2 shared cores, a preempted search held the
/// tail's applier 2–7 ms, ~40 times a second, with every other search
/// waiting behind it. The bound keeps searches that never pause from
/// holding a tail batch off for good.
pub(super) const WRITER_PATIENCE: Duration = Duration::from_millis(5);

/// How long a writer of [`Served`] waited for the write lock (searches in
/// flight) and then held it (every search waiting).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockTimes {
    /// From asking for the lock to taking it.
    pub waited: Duration,
    /// From taking the lock to releasing it.
    pub held: Duration,
}

/// First and longest pause between a patient writer's tries.
const WRITER_PAUSES: (Duration, Duration) = (Duration::from_micros(20), Duration::from_micros(200));

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
        let mut served = self.write_served();
        let old_tail = tail.map(|tail| std::mem::replace(&mut served.tail, tail));
        // Every touch is in the new shadows: none is left to sync.
        served.tail.take_touched_since();
        let old_shadows = std::mem::replace(&mut served.shadows, shadows);
        let old_snapshot = std::mem::replace(&mut served.snapshot, Arc::new(snapshot));
        drop(served);
        // Freed outside the lock: a merged-away segment's memory, a tail's
        // buffers.
        drop((old_tail, old_shadows, old_snapshot));
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
        self.apply_tail_timed(apply).0
    }

    /// [`Collection::apply_tail`], also saying how long it waited for the
    /// write lock and held it.
    pub fn apply_tail_timed<R>(&self, apply: impl FnOnce(&mut Served) -> R) -> (R, LockTimes) {
        let _writer = self.tail_writer.lock();
        let asked = Instant::now();
        let mut served = self.write_served();
        let taken = Instant::now();
        let out = apply(&mut served);
        served.sync_shadows();
        drop(served);
        let times = LockTimes {
            waited: taken - asked,
            held: taken.elapsed(),
        };
        self.changed.notify_waiters();
        (out, times)
    }

    /// The write lock on `served`, taken patiently: for up to
    /// `writer_patience` it is only tried, between short pauses, so
    /// searches keep coming in until none is in flight; then it is queued
    /// for ([`WRITER_PATIENCE`]).
    fn write_served(&self) -> RwLockWriteGuard<'_, Served> {
        let start = Instant::now();
        let mut pause = WRITER_PAUSES.0;
        loop {
            if let Some(served) = self.served.try_write() {
                return served;
            }
            if start.elapsed() >= self.writer_patience {
                return self.served.write();
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(WRITER_PAUSES.1);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use eddy_model::{CollectionDef, PointId};

    use super::*;

    /// While a search holds the read lock and the tail waits to apply
    /// events, other searches still get in: a waiting writer does not shut
    /// them out (on shared cores, a search preempted mid-walk would
    /// otherwise stall every search behind the tail's next batch).
    /// A collection whose writers are patient for `patience`.
    fn collection(patience: Duration) -> Arc<Collection> {
        let mut c = Collection::new(CollectionDef::new("c", 2));
        c.writer_patience = patience;
        Arc::new(c)
    }

    /// Starts applying one upsert to `c`'s tail on a thread of its own once
    /// the caller holds a read lock; returns the thread and whether the
    /// upsert was applied.
    fn apply_one(c: &Arc<Collection>) -> (std::thread::JoinHandle<()>, Arc<AtomicBool>) {
        let trying = Arc::new(AtomicBool::new(false));
        let applied = Arc::new(AtomicBool::new(false));
        let writer = {
            let (c, trying, applied) = (c.clone(), trying.clone(), applied.clone());
            std::thread::spawn(move || {
                trying.store(true, Ordering::Release);
                c.apply_tail(|served| {
                    served
                        .tail
                        .upsert(PointId::Num(1), &[1.0, 0.0], b"{}", 0, 0);
                    applied.store(true, Ordering::Release);
                });
            })
        };
        while !trying.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        (writer, applied)
    }

    #[test]
    fn searches_get_in_while_the_tail_waits_for_one_in_flight() {
        let c = collection(Duration::from_secs(600));
        let in_flight = c.served.read();
        let (writer, applied) = apply_one(&c);
        // Long enough for the writer to be waiting, short against its
        // patience with searches in flight.
        for _ in 0..200 {
            let other = c.served.try_read();
            assert!(
                other.is_some(),
                "a search was shut out while the tail waited for the one in flight"
            );
            drop(other);
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            !applied.load(Ordering::Acquire),
            "applied under a read lock"
        );
        drop(in_flight);
        writer.join().expect("writer");
        assert!(applied.load(Ordering::Acquire));
        assert_eq!(c.tail_rows(), 1);
    }

    /// Past its patience the writer queues for the lock: new searches wait
    /// behind it, so a tail batch is applied even when searches never
    /// stop coming.
    #[test]
    fn the_tail_queues_for_the_lock_once_its_patience_is_spent() {
        let c = collection(Duration::from_millis(20));
        let in_flight = c.served.read();
        let (writer, applied) = apply_one(&c);
        let mut shut_out = false;
        for _ in 0..10_000 {
            if c.served.try_read().is_none() {
                shut_out = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(shut_out, "the writer never queued for the lock");
        assert!(
            !applied.load(Ordering::Acquire),
            "applied under a read lock"
        );
        drop(in_flight);
        writer.join().expect("writer");
        assert_eq!(c.tail_rows(), 1);
    }
}
