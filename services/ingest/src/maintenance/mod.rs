//! The background indexer: builds the graph and SQ8 codes of sealed
//! segments on a bounded rayon pool and publishes them with a manifest
//! version that names the segment's index file.
//!
//! Segments are published flat first (searchable by exact scan at once), so
//! ingest speed is never capped by graph-build speed. The indexer works
//! from the manifest alone: after a crash, or for segments another process
//! sealed, it finds every live segment without an index and builds it.
//! Two processes indexing the same segment both write (uniquely named)
//! files; the manifest compare-and-swap keeps one and the other is removed.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use eddy_manifest::{GcPolicy, Manifest, Store};
use eddy_segment::{IndexParams, Segment};
use tracing::{info, warn};

use crate::merge::{publish_merged, write_merged, MergePolicy};
use crate::metrics::IngestMetrics;

/// What the indexer needs.
pub(crate) struct Indexer {
    pub(crate) store: Store,
    pub(crate) params: IndexParams,
    pub(crate) pool: rayon::ThreadPool,
    pub(crate) metrics: IngestMetrics,
    pub(crate) poll: Duration,
    pub(crate) merge: MergePolicy,
    /// Garbage collection of old manifests and unreferenced files (None = off).
    pub(crate) gc: Option<GcSchedule>,
}

/// When and what the indexer's garbage collection removes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GcSchedule {
    /// Time between passes.
    pub(crate) every: Duration,
    /// What each collection keeps.
    pub(crate) policy: GcPolicy,
}

/// Outcome of trying to index one segment.
enum Built {
    /// Published in this manifest version.
    Published(u64),
    /// The segment left the manifest, or got an index from someone else.
    Superseded,
}

impl Indexer {
    /// Runs until `stop` is set: indexes the oldest unindexed segment of
    /// each collection, one at a time.
    pub(crate) fn run(self, stop: Arc<AtomicBool>) {
        // Segments whose build failed, not retried until restart (logged and
        // counted; they stay searchable exactly).
        let mut failed: HashSet<(String, String)> = HashSet::new();
        let mut last_gc: Option<Instant> = None;
        while !stop.load(Ordering::Relaxed) {
            let mut worked = false;
            let collections = match self.store.collections() {
                Ok(c) => c,
                Err(e) => {
                    warn!(error = %e, "indexer: listing collections");
                    Vec::new()
                }
            };
            if let Some(gc) = &self.gc {
                if last_gc.is_none_or(|t| t.elapsed() >= gc.every) {
                    last_gc = Some(Instant::now());
                    for def in &collections {
                        self.collect_garbage(&def.name, &gc.policy);
                    }
                }
            }
            for def in collections {
                let manifest = match self.store.latest_manifest(&def.name) {
                    Ok(m) => m,
                    Err(e) => {
                        warn!(collection = %def.name, error = %e, "indexer: reading the manifest");
                        continue;
                    }
                };
                if let Some(inputs) = self.merge.pick(&manifest) {
                    worked = true;
                    self.merge_one(&def, &manifest, &inputs);
                    continue;
                }
                let name = def.name;
                let pending = pending(&manifest, self.params.min_rows);
                self.metrics
                    .unindexed_rows
                    .with_label_values(&[&name])
                    .set(pending.iter().map(|(_, rows)| *rows as i64).sum());
                let Some((segment, _)) = pending
                    .into_iter()
                    .find(|(id, _)| !failed.contains(&(name.clone(), id.clone())))
                else {
                    continue;
                };
                worked = true;
                let started = Instant::now();
                match self.index_one(&name, &segment) {
                    Ok(Built::Published(version)) => {
                        let took = started.elapsed();
                        self.metrics.index_seconds.observe(took.as_secs_f64());
                        self.count(&name, "published");
                        info!(collection = %name, %segment, version, took_ms = took.as_millis() as u64, "segment indexed");
                    }
                    Ok(Built::Superseded) => self.count(&name, "superseded"),
                    Err(e) => {
                        self.count(&name, "failed");
                        warn!(collection = %name, %segment, error = %e, "indexing failed; the segment stays exact-scanned");
                        failed.insert((name.clone(), segment));
                    }
                }
                if stop.load(Ordering::Relaxed) {
                    return;
                }
            }
            if !worked {
                std::thread::sleep(self.poll);
            }
        }
    }

    /// One garbage-collection pass over `collection`, logged and counted.
    fn collect_garbage(&self, collection: &str, policy: &GcPolicy) {
        match self
            .store
            .collect_garbage(collection, policy, SystemTime::now())
        {
            Ok(report) => {
                for (kind, n) in [
                    ("manifest", report.manifests),
                    ("segment", report.segments),
                    ("index", report.indexes),
                    ("delete", report.deletes),
                    ("other", report.other),
                ] {
                    self.metrics
                        .gc_files
                        .with_label_values(&[collection, kind])
                        .inc_by(n as u64);
                }
                self.metrics
                    .gc_bytes
                    .with_label_values(&[collection])
                    .inc_by(report.bytes);
                if report.files() > 0 {
                    info!(collection, ?report, "garbage collected");
                }
            }
            Err(e) => warn!(collection, error = %e, "garbage collection failed"),
        }
    }

    /// Merges `inputs` (a tier the policy picked) and publishes the result.
    fn merge_one(&self, def: &eddy_model::CollectionDef, manifest: &Manifest, inputs: &[String]) {
        let started = Instant::now();
        let outcome = write_merged(&self.store, def, manifest, inputs)
            .and_then(|merged| Ok((publish_merged(&self.store, &def.name, &merged)?, merged)));
        let label = match &outcome {
            Ok((Some(version), merged)) => {
                info!(collection = %def.name, inputs = inputs.len(), rows = merged.rows, segment = %merged.id, version, took_ms = started.elapsed().as_millis() as u64, "segments merged");
                "published"
            }
            Ok((None, _)) => "superseded",
            Err(e) => {
                warn!(collection = %def.name, error = %e, "merge failed");
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

    fn count(&self, collection: &str, outcome: &str) {
        self.metrics
            .index_builds
            .with_label_values(&[collection, outcome])
            .inc();
    }

    /// Builds, writes and publishes the index of one segment.
    fn index_one(&self, collection: &str, segment: &str) -> Result<Built, String> {
        let seg = Segment::open(&self.store.segment_path(collection, segment))
            .map_err(|e| e.to_string())?;
        let name = self.store.new_index_name(segment);
        let path = self.store.index_path(collection, &name);
        let written = self
            .pool
            .install(|| eddy_segment::build_index(&seg, &self.params, &path))
            .map_err(|e| e.to_string())?;
        if written.is_none() {
            return Ok(Built::Superseded);
        }
        loop {
            let latest = self
                .store
                .latest_manifest(collection)
                .map_err(|e| e.to_string())?;
            let Some(pos) = latest
                .segments
                .iter()
                .position(|s| s.id == segment && s.index.is_none())
            else {
                remove_quietly(&path);
                return Ok(Built::Superseded);
            };
            let mut next = latest.successor();
            next.segments[pos].index = Some(name.clone());
            match self.store.publish(&next) {
                Ok(()) => return Ok(Built::Published(next.version)),
                Err(eddy_manifest::Error::Conflict { .. }) => continue,
                Err(e) => {
                    remove_quietly(&path);
                    return Err(e.to_string());
                }
            }
        }
    }
}

/// Live segments that should have an index and do not, oldest first.
fn pending(manifest: &Manifest, min_rows: usize) -> Vec<(String, u64)> {
    manifest
        .segments
        .iter()
        .filter(|s| s.index.is_none() && s.rows >= min_rows.max(1) as u64)
        .map(|s| (s.id.clone(), s.rows))
        .collect()
}

fn remove_quietly(path: &std::path::Path) {
    if let Err(e) = std::fs::remove_file(path) {
        warn!(path = %path.display(), error = %e, "removing an unused index file");
    }
}
