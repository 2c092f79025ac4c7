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
mod tests {
    use std::collections::BTreeMap;
    use std::fs::{self, File};
    use std::path::Path;

    use eddy_model::CollectionDef;

    use super::*;
    use crate::{Error, Manifest, SegmentEntry};

    fn entry(id: &str, index: Option<&str>, deletes: Option<&str>) -> SegmentEntry {
        SegmentEntry {
            id: id.to_owned(),
            rows: 1,
            bytes: 1,
            deletes: deletes.map(str::to_owned),
            deleted: 0,
            offset_ranges: BTreeMap::new(),
            index: index.map(str::to_owned),
        }
    }

    fn touch(path: &Path, modified: SystemTime) {
        let f = File::create(path).expect("create");
        f.set_modified(modified).expect("set mtime");
    }

    fn age(path: &Path, modified: SystemTime) {
        let f = File::options().write(true).open(path).expect("open");
        f.set_modified(modified).expect("set mtime");
    }

    /// A store in a temporary directory (kept alive by the guard) with collection `c`.
    fn store_with_collection() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path()).expect("open");
        store
            .create_collection(&CollectionDef::new("c", 1))
            .expect("create");
        (dir, store)
    }

    fn exists(store: &Store, rel: &str) -> bool {
        store.root().join("collections/c").join(rel).exists()
    }

    #[test]
    fn removes_what_no_retained_manifest_names_once_past_the_grace() {
        let (_dir, store) = store_with_collection();
        let now = SystemTime::now();
        let old = now - Duration::from_secs(3600);
        let seg = store.root().join("collections/c/segments");
        let del = store.root().join("collections/c/deletes");
        fs::create_dir_all(&seg).expect("mkdir");
        fs::create_dir_all(&del).expect("mkdir");
        for name in ["a.seg", "a-1.idx", "b.seg", "m.seg", "m-2.idx", "x.seg.tmp"] {
            touch(&seg.join(name), old);
        }
        touch(&seg.join("young.seg"), now);
        touch(&del.join("a.1.del"), old);
        touch(&del.join("m.2.del"), old);
        // v1: a (indexed, with deletes) and b; v2: merged into m; v3: m re-deleted.
        let mut m = Manifest::empty("c").successor();
        m.segments = vec![
            entry("a", Some("a-1.idx"), Some("a.1.del")),
            entry("b", None, None),
        ];
        store.publish(&m).expect("v1");
        let mut m = m.successor();
        m.segments = vec![entry("m", Some("m-2.idx"), None)];
        store.publish(&m).expect("v2");
        let mut m = m.successor();
        m.segments = vec![entry("m", Some("m-2.idx"), Some("m.2.del"))];
        store.publish(&m).expect("v3");
        let manifests = store.root().join("collections/c/manifests");
        for v in 1..=3u64 {
            age(&manifests.join(format!("{v:020}.json")), old);
        }
        let policy = GcPolicy {
            keep_versions: 2,
            grace: Duration::from_secs(600),
        };
        let v1_bytes = fs::metadata(manifests.join(format!("{:020}.json", 1)))
            .expect("v1")
            .len();
        let report = store.collect_garbage("c", &policy, now).expect("gc");
        // v1 expired: a, its index and deletes, b and the old temporary file go;
        // v2 and v3 are the newest two; the young file may be an unpublished write.
        assert_eq!(
            report,
            GcReport {
                manifests: 1,
                segments: 2,
                indexes: 1,
                deletes: 1,
                other: 1,
                // The data files are empty here: only the manifest has bytes.
                bytes: v1_bytes,
            }
        );
        for gone in [
            "segments/a.seg",
            "segments/a-1.idx",
            "segments/b.seg",
            "deletes/a.1.del",
        ] {
            assert!(!exists(&store, gone), "{gone} should be removed");
        }
        for kept in [
            "segments/m.seg",
            "segments/m-2.idx",
            "deletes/m.2.del",
            "segments/young.seg",
        ] {
            assert!(exists(&store, kept), "{kept} should be kept");
        }
        assert!(store.manifest("c", 1).is_err());
        assert_eq!(store.latest_manifest("c").expect("latest").version, 3);
        // A second pass finds nothing more.
        let again = store.collect_garbage("c", &policy, now).expect("gc");
        assert_eq!(again.files(), 0);
    }

    #[test]
    fn young_manifests_are_retained_with_their_files() {
        let (_dir, store) = store_with_collection();
        let now = SystemTime::now();
        let seg = store.root().join("collections/c/segments");
        fs::create_dir_all(&seg).expect("mkdir");
        touch(&seg.join("a.seg"), now - Duration::from_secs(3600));
        let mut m = Manifest::empty("c").successor();
        m.segments = vec![entry("a", None, None)];
        store.publish(&m).expect("v1");
        let mut m = m.successor();
        m.segments.clear();
        store.publish(&m).expect("v2");
        // v1 was published just now: a reader may still be loading it.
        let policy = GcPolicy {
            keep_versions: 1,
            grace: Duration::from_secs(600),
        };
        let report = store.collect_garbage("c", &policy, now).expect("gc");
        assert_eq!(report.files(), 0);
        assert!(exists(&store, "segments/a.seg"));
        // Past the grace, both go.
        let later = now + Duration::from_secs(601);
        let report = store.collect_garbage("c", &policy, later).expect("gc");
        assert_eq!((report.manifests, report.segments), (1, 1));
        assert!(!exists(&store, "segments/a.seg"));
    }

    #[test]
    fn leases_protect_files_written_since_and_pinned_versions() {
        let (_dir, store) = store_with_collection();
        let now = SystemTime::now();
        let seg = store.root().join("collections/c/segments");
        let mut m = Manifest::empty("c").successor();
        touch(&seg.join("a.seg"), now - Duration::from_secs(3600));
        m.segments = vec![entry("a", None, None)];
        store.publish(&m).expect("v1");
        let mut m = m.successor();
        m.segments.clear();
        store.publish(&m).expect("v2");
        let manifests = store.root().join("collections/c/manifests");
        for v in 1..=2u64 {
            age(
                &manifests.join(format!("{v:020}.json")),
                now - Duration::from_secs(1800),
            );
        }
        // A reader pinned v1; a writer took a lease, then wrote w.seg.
        let pin = store
            .take_lease("c", "snapshot", Duration::from_secs(3600), Some(1))
            .expect("pin");
        let writer = store
            .take_lease("c", "seal", Duration::from_secs(3600), None)
            .expect("lease");
        touch(&seg.join("w.seg"), now);
        let policy = GcPolicy {
            keep_versions: 1,
            grace: Duration::ZERO,
        };
        let later = now + Duration::from_secs(60);
        let report = store.collect_garbage("c", &policy, later).expect("gc");
        assert_eq!(report.files(), 0, "{report:?}");
        assert!(exists(&store, "segments/a.seg") && exists(&store, "segments/w.seg"));
        // Released, v1 and a go; w stays while it is younger than the
        // oldest retained version.
        drop(pin);
        drop(writer);
        let report = store.collect_garbage("c", &policy, later).expect("gc");
        assert_eq!((report.manifests, report.segments), (1, 1), "{report:?}");
        assert!(exists(&store, "segments/w.seg"));
        // A crashed writer's lease expires and protects nothing.
        let expired = store
            .take_lease("c", "crashed", Duration::from_secs(1), None)
            .expect("lease");
        std::mem::forget(expired);
        touch(&seg.join("x.seg"), now + Duration::from_secs(1));
        let m = m.successor();
        store.publish(&m).expect("v3");
        age(
            &manifests.join(format!("{:020}.json", 3)),
            now + Duration::from_secs(10),
        );
        let report = store
            .collect_garbage("c", &policy, now + Duration::from_secs(3600))
            .expect("gc");
        assert_eq!((report.manifests, report.segments), (1, 2), "{report:?}");
        assert!(
            store.leases("c").expect("leases").is_empty(),
            "and is removed"
        );
    }

    /// A writer that publishes and releases its lease while a pass runs
    /// (after the pass listed the manifests, before it read the leases) keeps
    /// its files: the pass finds them through the version it published.
    #[cfg(feature = "failpoints")]
    #[test]
    fn a_lease_released_during_the_pass_still_protects_its_files() {
        let _scenario = fail::FailScenario::setup();
        let (_dir, store) = store_with_collection();
        let now = SystemTime::now();
        let del = store.root().join("collections/c/deletes");
        fs::create_dir_all(&del).expect("mkdir");
        let manifests = store.root().join("collections/c/manifests");
        let mut m = Manifest::empty("c").successor();
        store.publish(&m).expect("v1");
        // A seal takes its lease and writes its delete file; two other
        // versions are published while it works.
        let lease = store
            .take_lease("c", "seal", Duration::from_secs(3600), None)
            .expect("lease");
        touch(&del.join("s.1.del"), now);
        for _ in 0..2 {
            m = m.successor();
            store.publish(&m).expect("publish");
        }
        age(
            &manifests.join(format!("{:020}.json", 1)),
            now - Duration::from_secs(1800),
        );
        for v in 2..=3u64 {
            age(
                &manifests.join(format!("{v:020}.json")),
                now + Duration::from_secs(5),
            );
        }
        // Between the listing and the lease read, the seal publishes v4
        // naming its file and drops its lease.
        let held = std::sync::Mutex::new(Some(lease));
        let (publisher, published) = (store.clone(), m.clone());
        fail::cfg_callback("gc::before_delete", move || {
            if let Some(lease) = held.lock().expect("lock").take() {
                let mut next = published.successor();
                next.segments = vec![entry("s", None, Some("s.1.del"))];
                publisher.publish(&next).expect("v4");
                drop(lease);
            }
        })
        .expect("failpoint");
        let policy = GcPolicy {
            keep_versions: 1,
            grace: Duration::ZERO,
        };
        store
            .collect_garbage("c", &policy, now + Duration::from_secs(60))
            .expect("gc");
        fail::remove("gc::before_delete");
        assert_eq!(store.latest_manifest("c").expect("latest").version, 4);
        assert!(
            exists(&store, "deletes/s.1.del"),
            "v4 names the delete file: it must stay"
        );
    }

    #[test]
    fn an_unreadable_retained_manifest_stops_the_pass() {
        let (_dir, store) = store_with_collection();
        let seg = store.root().join("collections/c/segments");
        fs::create_dir_all(&seg).expect("mkdir");
        let now = SystemTime::now();
        touch(&seg.join("a.seg"), now - Duration::from_secs(3600));
        let manifests = store.root().join("collections/c/manifests");
        fs::create_dir_all(&manifests).expect("mkdir");
        fs::write(manifests.join(format!("{:020}.json", 1)), b"{not json").expect("write");
        let err = store
            .collect_garbage("c", &GcPolicy::default(), now)
            .expect_err("corrupt manifest");
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        assert!(exists(&store, "segments/a.seg"));
    }
}
