//! The index-build job: builds the graph and SQ8 codes of the oldest
//! unindexed segment of a collection on the maintenance pool and publishes
//! a manifest version that names the index file.

use std::collections::HashSet;
use std::time::Instant;

use eddy_manifest::Manifest;
use eddy_segment::{IndexFile, PriorIndex, Segment};
use tracing::{info, warn};

use super::{Maintenance, MaintenanceError};

/// Outcome of trying to index one segment.
enum Built {
    /// Published in this manifest version.
    Published(u64),
    /// The segment left the manifest, or got an index from someone else.
    Superseded,
}

impl Maintenance {
    /// Indexes the oldest unindexed segment of `collection` whose build has
    /// not failed before, and updates the unindexed-rows gauge. Returns
    /// whether a build ran.
    pub(super) fn index_next(
        &self,
        collection: &str,
        manifest: &Manifest,
        failed_builds: &mut HashSet<(String, String)>,
    ) -> bool {
        let pending = pending(manifest, self.params.min_rows);
        self.metrics
            .unindexed_rows
            .with_label_values(&[collection])
            .set(pending.iter().map(|(_, rows)| *rows as i64).sum());
        let Some((segment, _)) = pending
            .into_iter()
            .find(|(id, _)| !failed_builds.contains(&(collection.to_owned(), id.clone())))
        else {
            return false;
        };
        let started = Instant::now();
        match self.index_segment(collection, &segment) {
            Ok(Built::Published(version)) => {
                let took = started.elapsed();
                self.metrics.index_seconds.observe(took.as_secs_f64());
                self.count_build(collection, "published");
                info!(collection, %segment, version, took_ms = took.as_millis() as u64, "segment indexed");
            }
            Ok(Built::Superseded) => self.count_build(collection, "superseded"),
            Err(e) => {
                self.count_build(collection, "failed");
                warn!(collection, %segment, error = %e, "indexing failed; the segment stays exact-scanned");
                failed_builds.insert((collection.to_owned(), segment));
            }
        }
        true
    }

    fn count_build(&self, collection: &str, outcome: &str) {
        self.metrics
            .index_builds
            .with_label_values(&[collection, outcome])
            .inc();
    }

    /// Builds segment `segment`'s graph and codes on the maintenance pool
    /// into a new index file; its name, or `None` below the graph
    /// threshold. Index builds and merges (before they publish) both write
    /// through here; a merge passes `prior`, an input's index file and the
    /// merged row each of that input's rows became, so the build keeps the
    /// links among its surviving rows (an input whose index cannot be read
    /// leaves a fresh build, logged).
    pub(super) fn write_index(
        &self,
        collection: &str,
        segment: &str,
        prior: Option<(&str, &[Option<u32>])>,
    ) -> Result<Option<String>, MaintenanceError> {
        let seg = Segment::open(&self.store.fetch_segment(collection, segment)?)?;
        let prior_index = prior.and_then(|(name, rows)| {
            let opened = self
                .store
                .fetch_file(collection, name)
                .map_err(MaintenanceError::from)
                .and_then(|path| Ok(IndexFile::open(&path, rows.len(), seg.dim())?));
            match opened {
                Ok(index) => Some((index, rows)),
                Err(e) => {
                    warn!(collection, index = name, error = %e, "merge: the input's graph cannot be read; building afresh");
                    None
                }
            }
        });
        let prior = prior_index.as_ref().and_then(|(index, rows)| {
            PriorIndex::of_index(index, rows)
                .inspect_err(|e| warn!(collection, error = %e, "merge: the input's graph cannot be read; building afresh"))
                .ok()
        });
        let name = self.store.new_index_name(segment);
        let path = self.store.index_path(collection, &name);
        let written = self
            .pool
            .install(|| eddy_segment::build_index_from(&seg, &self.params, &path, prior))?;
        Ok(written.map(|_| name))
    }

    /// Builds, writes and publishes the index of one segment.
    fn index_segment(&self, collection: &str, segment: &str) -> Result<Built, MaintenanceError> {
        let mut lease = self
            .store
            .take_lease(collection, "index", self.write_lease, None)?;
        let Some(name) = self.write_index(collection, segment, None)? else {
            return Ok(Built::Superseded);
        };
        let path = self.store.index_path(collection, &name);
        fail::fail_point!("index::before_publish");
        lease.keep_for_publish(self.write_lease)?;
        let updated = self.store.update::<MaintenanceError>(collection, |latest| {
            let Some(pos) = latest
                .segments
                .iter()
                .position(|s| s.id == segment && s.index.is_none())
            else {
                return Ok(None);
            };
            let mut next = latest.successor();
            next.segments[pos].index = Some(name.clone());
            Ok(Some(next))
        });
        match updated {
            Ok(updated) => match updated.published {
                Some(next) => Ok(Built::Published(next.version)),
                None => {
                    crate::remove_unused_file(&path);
                    Ok(Built::Superseded)
                }
            },
            Err(e) => {
                crate::remove_unused_file(&path);
                Err(e)
            }
        }
    }
}

/// Listed segments that should have an index and do not, oldest first.
fn pending(manifest: &Manifest, min_rows: usize) -> Vec<(String, u64)> {
    manifest
        .segments
        .iter()
        .filter(|s| s.index.is_none() && s.rows >= min_rows.max(1) as u64)
        .map(|s| (s.id.clone(), s.rows))
        .collect()
}
