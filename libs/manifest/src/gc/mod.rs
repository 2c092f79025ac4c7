//! Garbage collection of a collection's files: old manifest versions, and the
//! segment, index and delete files no retained manifest names any more
//! (merged away, re-indexed, superseded delete bitmaps, leftovers of crashed
//! writers).
//!
//! Safety rests on three rules. A manifest version is retained while it is
//! one of the newest `keep_versions`, younger than `grace`, or pinned by a
//! valid [lease](crate::Lease), so a reader that has just read an older
//! version still finds every file it names. An unreferenced file is removed
//! only once it is older than `grace` *and* older than every retained
//! manifest *and* older than every valid lease: a writer takes a lease
//! before it writes (a seal, a merge, an index build), so a file written but
//! not yet published is never taken from under it however long the writer
//! stalls, as long as its lease holds. Leases are read after the files are
//! listed, so a lease taken meanwhile covers every listed file its holder
//! wrote; and the manifest versions published since the pass listed them are
//! read after the leases, so a writer that published and let its lease go
//! while the pass ran is found through the version it published (a writer
//! publishes before it releases). A writer whose lease expired checks its
//! files still exist before publishing ([`Store::update`]).

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::{LeaseRecord, Result, Store, LEASE_FORMAT};

/// What a collection keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcPolicy {
    /// Newest manifest versions always kept (at least 1).
    pub keep_versions: usize,
    /// Minimum age before an older manifest or an unreferenced file is removed.
    pub grace: Duration,
}

impl Default for GcPolicy {
    fn default() -> Self {
        Self {
            keep_versions: 16,
            grace: Duration::from_secs(600),
        }
    }
}

/// What one pass removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Manifest versions removed.
    pub manifests: usize,
    /// Segment files (`*.seg`) removed.
    pub segments: usize,
    /// Index files (`*.idx`) removed.
    pub indexes: usize,
    /// Delete bitmaps removed.
    pub deletes: usize,
    /// Other files removed (temporary files of interrupted writes).
    pub other: usize,
    /// Bytes freed.
    pub bytes: u64,
}

impl GcReport {
    /// Files removed in total.
    pub fn files(&self) -> usize {
        self.manifests + self.segments + self.indexes + self.deletes + self.other
    }
}

/// A file in one of the collection's directories.
struct Entry {
    key: String,
    name: String,
    bytes: u64,
    modified: SystemTime,
}

impl Store {
    /// The files under the directory key `dir`.
    fn gc_list(&self, dir: &str) -> Result<Vec<Entry>> {
        Ok(self
            .backend
            .list(dir)?
            .into_iter()
            .map(|f| Entry {
                key: format!("{dir}/{}", f.name),
                name: f.name,
                bytes: f.bytes,
                modified: f.modified,
            })
            .collect())
    }

    /// Removes `entry`, counting its bytes; a file already gone is not an error.
    fn gc_remove(&self, entry: &Entry, report: &mut GcReport) -> Result<bool> {
        let removed = self.backend.remove(&entry.key)?;
        if removed {
            report.bytes += entry.bytes;
        }
        Ok(removed)
    }
}

/// The version a manifest file's name holds (`None` for a temporary file).
fn manifest_version(name: &str) -> Option<u64> {
    name.strip_suffix(".json").and_then(|n| n.parse().ok())
}

fn older_than(entry: &Entry, now: SystemTime, grace: Duration) -> bool {
    // A clock step backwards makes files look young: they are kept.
    now.duration_since(entry.modified)
        .is_ok_and(|age| age >= grace)
}

impl Store {
    /// One garbage-collection pass over `collection` (see the module docs for
    /// what is kept). Idempotent, and safe to run from several processes at
    /// once; `now` is a parameter so tests can age files.
    ///
    /// # Errors
    /// I/O errors, or a retained manifest that cannot be read (then nothing is
    /// removed: an unreadable manifest could name any file).
    pub fn collect_garbage(
        &self,
        collection: &str,
        policy: &GcPolicy,
        now: SystemTime,
    ) -> Result<GcReport> {
        let dir = format!("collections/{collection}");
        let mut report = GcReport::default();
        let mut manifests: Vec<(u64, Entry)> = Vec::new();
        let mut tmp_files = Vec::new();
        for entry in self.gc_list(&format!("{dir}/manifests"))? {
            match manifest_version(&entry.name) {
                Some(version) => manifests.push((version, entry)),
                None => tmp_files.push(entry),
            }
        }
        manifests.sort_by_key(|(v, _)| std::cmp::Reverse(*v));
        let newest_listed = manifests.first().map_or(0, |(v, _)| *v);
        let keep = policy.keep_versions.max(1);
        let pinned: HashSet<u64> = self
            .leases(collection)?
            .iter()
            .filter(|l| l.holds_at(now))
            .filter_map(|l| l.manifest)
            .collect();
        let (retained, expired): (Vec<_>, Vec<_>) =
            manifests.into_iter().enumerate().partition(|(i, (v, e))| {
                *i < keep || !older_than(e, now, policy.grace) || pinned.contains(v)
            });
        // Every file a retained version names (read all of them before removing anything).
        let mut referenced: HashSet<String> = HashSet::new();
        for (_, (version, _)) in &retained {
            referenced.extend(self.manifest(collection, *version)?.file_names());
        }
        let segment_files = self.gc_list(&format!("{dir}/segments"))?;
        let delete_files = self.gc_list(&format!("{dir}/deletes"))?;
        fail::fail_point!("gc::before_delete");
        // Read after listing: a lease taken since covers only files written
        // after it, which the listing does not hold.
        let leases = self.leases(collection)?;
        let cutoff = retained
            .iter()
            .map(|(_, (_, e))| e.modified)
            .chain(
                leases
                    .iter()
                    .filter(|l| l.holds_at(now))
                    .map(|l| lease_start(l.since_ms)),
            )
            .min();
        // Read after the leases: a writer that published since the listing
        // and has let its lease go is found through what it published.
        for entry in self.gc_list(&format!("{dir}/manifests"))? {
            let Some(version) = manifest_version(&entry.name).filter(|v| *v > newest_listed) else {
                continue;
            };
            // Gone since the listing: another pass found it expired.
            if let Some(manifest) = self.manifest_if_present(collection, version)? {
                referenced.extend(manifest.file_names());
            }
        }
        for (_, (_, entry)) in &expired {
            if self.gc_remove(entry, &mut report)? {
                report.manifests += 1;
            }
        }
        let stale = |e: &Entry| {
            older_than(e, now, policy.grace)
                && cutoff.is_none_or(|c| e.modified <= c)
                && !referenced.contains(&e.name)
        };
        for entry in tmp_files
            .iter()
            .filter(|e| older_than(e, now, policy.grace))
        {
            if self.gc_remove(entry, &mut report)? {
                report.other += 1;
            }
        }
        for entry in segment_files.iter().filter(|e| stale(e)) {
            if self.gc_remove(entry, &mut report)? {
                if entry.name.ends_with(".seg") {
                    report.segments += 1;
                } else if entry.name.ends_with(".idx") {
                    report.indexes += 1;
                } else {
                    report.other += 1;
                }
            }
        }
        for entry in delete_files.iter().filter(|e| stale(e)) {
            if self.gc_remove(entry, &mut report)? {
                if entry.name.ends_with(".del") {
                    report.deletes += 1;
                } else {
                    report.other += 1;
                }
            }
        }
        self.remove_expired_leases(collection, &leases, now, policy.grace);
        Ok(report)
    }

    /// Removes lease files that expired more than `grace` ago (their holder
    /// crashed; a live holder removes its own), best effort.
    fn remove_expired_leases(
        &self,
        collection: &str,
        leases: &[LeaseRecord],
        now: SystemTime,
        grace: Duration,
    ) {
        if leases.iter().all(|l| l.holds_at(now - grace)) {
            return;
        }
        let Ok(entries) = self.gc_list(&format!("collections/{collection}/leases")) else {
            return;
        };
        for entry in entries {
            let expired = self
                .backend
                .read(&entry.key)
                .ok()
                .flatten()
                .and_then(|b| {
                    LEASE_FORMAT
                        .decode::<LeaseRecord>(&self.backend.describe(&entry.key), &b)
                        .ok()
                })
                .is_some_and(|l| !l.holds_at(now - grace));
            if expired {
                self.backend.remove(&entry.key).ok();
            }
        }
    }
}

/// The start of a lease as a file time, a second early (file times and the
/// clock may round differently).
fn lease_start(since_ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(since_ms.saturating_sub(1_000))
}

#[cfg(test)]
mod tests;
