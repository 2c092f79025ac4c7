//! Maintenance: the background thread that keeps a collection's segments
//! cheap to search, one module per job, and the loop that schedules them:
//!
//! - `index_build`: builds the graph and SQ8 codes of sealed segments on a
//!   bounded rayon pool and publishes them with a manifest version that names
//!   the segment's index file;
//! - [`merge`]: combines a size tier of small segments into one while
//!   events flow, and once ingest has been idle for `--merge-idle-ms`,
//!   every small segment into one (built with its graph before it replaces
//!   them), so an idle collection is one graph walk per query;
//! - `reindex`: after a collection is altered (indexed payload fields
//!   added), rewrites the segments sealed before so their payload index
//!   covers the new fields;
//! - `gc`: removes old manifest versions and files no retained version
//!   names.
//!
//! A seal publishes its segment with its graph when the graph grown while
//! the buffer filled kept up (`state::grow`), else flat (searchable by exact
//! scan at once), so ingest speed is never capped by graph-build speed; the
//! index build here covers the flat ones. Maintenance works from
//! the manifest alone: after a crash, or for segments another process
//! sealed, it finds every listed segment without an index and builds it.
//! Two processes doing the same job both write (uniquely named) files; the
//! manifest compare-and-swap keeps one and the other is removed.

mod error;
mod gc;
mod index_build;
pub mod merge;
mod reindex;
mod supervised;
#[cfg(test)]
mod testing;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eddy_manifest::Store;
use eddy_model::CollectionDef;
use eddy_segment::IndexParams;
use tracing::warn;

use crate::config::IngestConfig;
use crate::error::{Error, Result};
use crate::metrics::IngestMetrics;

pub use error::MaintenanceError;
pub use gc::GcSchedule;
use merge::MergePolicy;
use supervised::{run_supervised, Backoff};

/// Name of the maintenance thread.
const THREAD_NAME: &str = "eddy-maintenance";
/// The longest the idle loop waits before it looks at its stop flag.
const STOP_CHECK: Duration = Duration::from_secs(1);

/// The maintenance thread's settings and handles.
pub(crate) struct Maintenance {
    store: Store,
    /// How segment indexes are built.
    params: IndexParams,
    /// The pool that builds segment indexes (`--index-threads`).
    pool: rayon::ThreadPool,
    /// Priority steps below the process's of its threads (`--graph-nice`).
    nice: i32,
    metrics: IngestMetrics,
    /// The longest wait after a pass that found nothing to do (a manifest
    /// this process publishes ends it sooner).
    poll: Duration,
    merge: MergePolicy,
    /// Garbage collection of old manifests and unreferenced files (None = off).
    gc: Option<GcSchedule>,
    /// Lease on the files a merge or index build writes until it publishes.
    write_lease: Duration,
}

/// What the loop remembers between passes.
#[derive(Debug, Default)]
struct Progress {
    /// `(collection, segment)` whose index build failed, not retried until
    /// restart (logged and counted; they stay searchable exactly).
    failed_builds: HashSet<(String, String)>,
    /// When garbage was last collected.
    last_gc: Option<Instant>,
    /// Per collection, the partitions' offsets last seen and since when
    /// they have not moved (ingest idle).
    offsets_since: HashMap<String, (BTreeMap<u32, i64>, Instant)>,
    /// The payload fields each segment's index covers (for `reindex`).
    indexed_fields: reindex::IndexedFields,
    /// The manifest chains the last listing named: one no longer listed
    /// was dropped, and the gauges this loop wrote of it are removed.
    listed: HashSet<String>,
}

impl Progress {
    /// How long `manifest`'s offsets have not moved, as this loop saw them.
    fn idle_for(&mut self, manifest: &eddy_manifest::Manifest) -> Duration {
        let offsets: BTreeMap<u32, i64> = manifest
            .partitions
            .iter()
            .map(|(p, s)| (*p, s.next_offset))
            .collect();
        let now = Instant::now();
        let seen = self
            .offsets_since
            .entry(manifest.collection.clone())
            .or_insert_with(|| (offsets.clone(), now));
        if seen.0 != offsets {
            *seen = (offsets, now);
        }
        now.duration_since(seen.1)
    }
}

impl Maintenance {
    /// Maintenance as `config` says, over `store`.
    pub(crate) fn new(config: &IngestConfig, store: Store, metrics: IngestMetrics) -> Result<Self> {
        let nice = config.graph_nice;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(config.index_threads.max(1))
            .thread_name(|i| format!("eddy-index-{i}"))
            .start_handler(move |_| crate::priority::lower_this_thread(nice))
            .build()?;
        Ok(Self {
            store,
            params: config.index_params(),
            pool,
            nice,
            metrics,
            poll: Duration::from_millis(config.index_poll_ms.max(10)),
            merge: config.merge_policy(),
            gc: config.gc_schedule(),
            write_lease: config.write_lease(),
        })
    }

    /// Runs [`Maintenance::run`] on its own thread until `stop` is set,
    /// restarted after a panic (counted in
    /// `eddy_ingest_maintenance_restarts_total`).
    pub(crate) fn spawn(self, stop: Arc<AtomicBool>) -> Result<()> {
        std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || {
                crate::priority::lower_this_thread(self.nice);
                self.run_supervised(&stop, Backoff::default());
            })
            .map_err(|source| Error::Thread {
                name: THREAD_NAME.into(),
                source,
            })?;
        Ok(())
    }

    /// [`Maintenance::run`], restarted after a panic once `backoff` passed.
    pub(crate) fn run_supervised(&self, stop: &AtomicBool, backoff: Backoff) {
        let restarts = &self.metrics.maintenance_restarts;
        run_supervised(
            THREAD_NAME,
            stop,
            backoff,
            || restarts.inc(),
            || self.run(stop),
        );
    }

    /// Runs passes until `stop` is set. After a pass that found nothing to
    /// do it waits for the next manifest this process publishes (a seal:
    /// its segment's graph is built at once) or for `--index-poll-ms`
    /// (segments other processes sealed, idle merges), whichever comes
    /// first, looking at `stop` at least every `STOP_CHECK`.
    pub(crate) fn run(&self, stop: &AtomicBool) {
        let mut progress = Progress::default();
        while !stop.load(Ordering::Relaxed) {
            let seen = self.store.publishes();
            if !self.pass(&mut progress, stop) {
                self.wait_idle(seen, stop);
            }
        }
    }

    /// Waits until this process publishes a manifest after the count
    /// `seen`, `poll` elapses or `stop` is set (looked at every `STOP_CHECK`).
    fn wait_idle(&self, seen: u64, stop: &AtomicBool) {
        let until = Instant::now() + self.poll;
        while !stop.load(Ordering::Relaxed) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || self.store.wait_for_publish(seen, left.min(STOP_CHECK)) > seen {
                return;
            }
        }
    }

    /// One pass: garbage collection when due, then for each collection's
    /// manifest chain a merge if one is due, else the index of its oldest
    /// unindexed segment.
    /// Returns whether any job ran.
    fn pass(&self, progress: &mut Progress, stop: &AtomicBool) -> bool {
        fail::fail_point!("maintenance::pass");
        // Each manifest chain (a split collection has one per shard) has
        // its own merges, index builds and garbage.
        let collections: Vec<CollectionDef> = match self.store.collections() {
            Ok(c) => {
                let chains: Vec<CollectionDef> =
                    c.iter().flat_map(CollectionDef::chain_defs).collect();
                self.forget_unlisted(&chains, &mut progress.listed);
                chains
            }
            Err(e) => {
                warn!(error = %e, "maintenance: listing collections");
                Vec::new()
            }
        };
        self.collect_garbage_if_due(&collections, &mut progress.last_gc);
        let mut worked = false;
        for def in &collections {
            if self.maintain(def, progress) {
                worked = true;
                if stop.load(Ordering::Relaxed) {
                    break;
                }
            }
        }
        worked
    }

    /// Removes the series of every chain `listed` by the last listing and
    /// missing from `chains` (its collection was dropped), then remembers
    /// `chains`. A pass that listed a collection just before its drop may
    /// write its gauges after the supervisor forgot them, and even after
    /// its files were collected; the next pass removes them here.
    fn forget_unlisted(&self, chains: &[CollectionDef], listed: &mut HashSet<String>) {
        let now: HashSet<String> = chains.iter().map(|d| d.name.clone()).collect();
        for gone in listed.difference(&now) {
            self.metrics.forget_collection(gone);
        }
        *listed = now;
    }

    /// Runs the next due job of one collection: a tier merge, else a merge
    /// of mostly deleted segments, else a payload re-index, else an index
    /// build, else (ingest idle long enough) a merge of every small
    /// segment. Returns whether one ran. Compactions come before index
    /// builds: a compaction builds its output's graph, and a build for a
    /// segment that upserts are emptying is mostly wasted (under a 2,000
    /// upserts/s writer, queries ran 10-15 % faster this way than with
    /// builds first).
    fn maintain(&self, def: &CollectionDef, progress: &mut Progress) -> bool {
        let manifest = match self.store.latest_manifest(&def.name) {
            Ok(m) => m,
            Err(e) => {
                warn!(collection = %def.name, error = %e, "maintenance: reading the manifest");
                return false;
            }
        };
        self.metrics
            .observe_manifest(&def.name, manifest.version, manifest.segments.len());
        let idle_for = progress.idle_for(&manifest);
        if let Some(inputs) = self.merge.pick(&manifest) {
            self.merge_tier(def, &manifest, &inputs, "tier");
            return true;
        }
        if let Some(inputs) = self.merge.pick_deleted(&manifest) {
            self.merge_tier(def, &manifest, &inputs, "deleted");
            return true;
        }
        if let Some(segment) = self.next_to_reindex(def, &manifest, &mut progress.indexed_fields) {
            self.merge_tier(def, &manifest, &[segment], "payload re-index");
            return true;
        }
        if self.index_next(&def.name, &manifest, &mut progress.failed_builds) {
            return true;
        }
        match (self.merge.idle, self.merge.pick_idle(&manifest)) {
            (Some(idle), Some(inputs)) if idle_for >= idle => {
                self.merge_tier(def, &manifest, &inputs, "idle");
                true
            }
            _ => false,
        }
    }
}

#[cfg(all(test, feature = "failpoints"))]
mod tests {
    use clap::Parser as _;

    use super::*;

    /// A store with collection `c` holding one flat segment of 64 rows.
    fn store_with_a_flat_segment(dir: &std::path::Path) -> Store {
        let store = super::testing::store_with_collection(dir);
        super::testing::seal(&store, 0..64);
        store
    }

    #[test]
    fn a_panic_in_a_pass_restarts_the_thread_and_indexing_continues() {
        let scenario = fail::FailScenario::setup();
        let dir = tempfile::tempdir().expect("tmp");
        let store = store_with_a_flat_segment(dir.path());
        let config = IngestConfig::parse_from([
            "eddy-ingest",
            "--min-graph-rows",
            "8",
            "--index-poll-ms",
            "10",
            "--gc-interval-ms",
            "0",
        ]);
        let metrics = IngestMetrics::new(&prometheus::Registry::new()).expect("metrics");
        let maintenance = Maintenance::new(&config, store.clone(), metrics.clone()).expect("new");
        fail::cfg("maintenance::pass", "1*panic").expect("failpoint");
        let stop = AtomicBool::new(false);
        let backoff = Backoff {
            min: Duration::from_millis(1),
            max: Duration::from_millis(10),
        };
        std::thread::scope(|s| {
            s.spawn(|| maintenance.run_supervised(&stop, backoff));
            let deadline = Instant::now() + Duration::from_secs(60);
            while store.latest_manifest("c").expect("latest").segments[0]
                .index
                .is_none()
            {
                assert!(Instant::now() < deadline, "the segment never got its index");
                std::thread::sleep(Duration::from_millis(20));
            }
            stop.store(true, Ordering::Relaxed);
        });
        assert_eq!(metrics.maintenance_restarts.get(), 1);
        scenario.teardown();
    }
}

#[cfg(test)]
mod wake_tests {
    use std::time::Duration;

    use clap::Parser as _;

    use super::*;

    /// Whether segment `nth` of `c`'s latest manifest has an index.
    fn indexed(store: &Store, nth: usize) -> bool {
        store
            .latest_manifest("c")
            .expect("latest")
            .segments
            .get(nth)
            .is_some_and(|s| s.index.is_some())
    }

    /// Sets the flag when dropped, so a failed assertion stops the loop
    /// instead of leaving the test waiting for it.
    struct StopOnDrop<'a>(&'a AtomicBool);

    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }

    /// Waits (bounded) until segment `nth` of `c` is indexed.
    fn wait_indexed(store: &Store, nth: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !indexed(store, nth) {
            assert!(
                Instant::now() < deadline,
                "segment {nth} never got its index: the idle loop slept through its seal"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A loop that found nothing to do sleeps for `--index-poll-ms`, but a
    /// manifest published meanwhile in this process (a seal) wakes it: the
    /// poll interval here is an hour, so the second segment is indexed only
    /// if the seal woke the loop.
    #[test]
    fn a_seal_wakes_the_idle_loop_before_its_poll_interval() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = testing::store_with_collection(dir.path());
        testing::seal(&store, 0..64);
        let config = IngestConfig::parse_from([
            "eddy-ingest",
            "--min-graph-rows",
            "8",
            "--index-poll-ms",
            "3600000",
            "--gc-interval-ms",
            "0",
            "--merge-idle-ms",
            "0",
        ]);
        let metrics = IngestMetrics::new(&prometheus::Registry::new()).expect("metrics");
        let maintenance = Maintenance::new(&config, store.clone(), metrics).expect("new");
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| maintenance.run(&stop));
            let _stop = StopOnDrop(&stop);
            wait_indexed(&store, 0);
            // The pass after the build finds nothing due and the loop waits.
            std::thread::sleep(Duration::from_millis(50));
            testing::seal(&store, 64..128);
            wait_indexed(&store, 1);
        });
    }
}

#[cfg(test)]
mod dropped_series_tests {
    use std::time::Duration;

    use prometheus::core::Collector as _;

    use super::*;

    /// Whether the unindexed-rows gauge has a series labelled `chain`.
    fn has_gauge(m: &Maintenance, chain: &str) -> bool {
        m.metrics
            .unindexed_rows
            .collect()
            .iter()
            .flat_map(|family| family.get_metric())
            .any(|metric| metric.get_label().iter().any(|l| l.value() == chain))
    }

    /// A pass that wrote a collection's gauges before its drop is followed
    /// by one that removes them, even when the drop's files were collected
    /// in between (the supervisor, which forgets a collection while it is
    /// dropped, no longer sees it then).
    #[test]
    fn the_pass_after_a_drop_removes_the_dropped_collections_gauges() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = testing::store_with_collection(dir.path());
        testing::seal(&store, 0..4);
        let m = testing::maintenance(&store, "3600000");
        let mut progress = Progress::default();
        testing::settle(&m, &mut progress);
        assert!(has_gauge(&m, "c"), "a pass reports the collection");
        assert!(store.drop_collection("c", "test").expect("drop"));
        store.collect_dropped(Duration::ZERO).expect("collect");
        assert!(!store.is_dropped("c"), "its files are collected");
        testing::settle(&m, &mut progress);
        assert!(!has_gauge(&m, "c"), "its gauge went with the next pass");
    }
}
