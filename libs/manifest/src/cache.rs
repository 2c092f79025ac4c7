//! The bound on a node's cache of an object store: segment and index files
//! this node fetched or uploaded, least recently used removed first once
//! their bytes pass the limit.
//!
//! Only files that are safe in the bucket are ever removed: ones fetched
//! from it, ones this process uploaded, and ones found at start-up (a
//! previous run fetched or uploaded them, or staged them for a publish that
//! never happened, which nothing will read). A file staged for a publish
//! still to come is not listed until it is uploaded. A removed file that a
//! running search still maps stays readable (Linux keeps an unlinked
//! file's pages until the last mapping goes); the next load fetches it
//! again.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// What the cache holds, by local path.
#[derive(Debug, Default)]
struct Held {
    /// Size and last use (a tick of `clock`) of each evictable file.
    files: HashMap<PathBuf, (u64, u64)>,
    bytes: u64,
    clock: u64,
}

/// The evictable files of a cache directory and its byte limit.
#[derive(Debug)]
pub(crate) struct CacheBound {
    limit: u64,
    held: Mutex<Held>,
}

impl CacheBound {
    /// A bound of `limit` bytes over the files already under `root`
    /// (`collections/<c>/segments/`), oldest by modification time first.
    pub(crate) fn scan(root: &Path, limit: u64) -> CacheBound {
        let mut found = Vec::new();
        let collections = root.join("collections");
        for collection in fs::read_dir(&collections).into_iter().flatten().flatten() {
            let dir = collection.path().join("segments");
            for file in fs::read_dir(&dir).into_iter().flatten().flatten() {
                let Ok(meta) = file.metadata() else { continue };
                let name = file.file_name();
                if !meta.is_file() || name.to_string_lossy().starts_with('.') {
                    continue;
                }
                let modified = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
                found.push((modified, file.path(), meta.len()));
            }
        }
        found.sort();
        let mut held = Held::default();
        for (_, path, bytes) in found {
            held.clock += 1;
            held.bytes += bytes;
            held.files.insert(path, (bytes, held.clock));
        }
        let bound = CacheBound {
            limit,
            held: Mutex::new(held),
        };
        bound.evict(None);
        bound
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks `path` as just used, if the cache lists it.
    pub(crate) fn touch(&self, path: &Path) {
        let mut held = self.lock();
        held.clock += 1;
        let now = held.clock;
        if let Some((_, used)) = held.files.get_mut(path) {
            *used = now;
        }
    }

    /// Lists `path` (now safe in the bucket) as just used, then removes the
    /// least recently used others while the cache is over its limit.
    pub(crate) fn add(&self, path: &Path) {
        let Ok(bytes) = fs::metadata(path).map(|m| m.len()) else {
            return;
        };
        {
            let mut held = self.lock();
            held.clock += 1;
            let now = held.clock;
            if let Some((old, _)) = held.files.insert(path.to_owned(), (bytes, now)) {
                held.bytes -= old;
            }
            held.bytes += bytes;
        }
        self.evict(Some(path));
    }

    /// Removes least recently used files (never `keep`) until the cache
    /// fits its limit.
    fn evict(&self, keep: Option<&Path>) {
        let mut held = self.lock();
        while held.bytes > self.limit {
            let victim = held
                .files
                .iter()
                .filter(|(p, _)| Some(p.as_path()) != keep)
                .min_by_key(|(_, (_, used))| *used)
                .map(|(p, (bytes, _))| (p.clone(), *bytes));
            let Some((path, bytes)) = victim else { break };
            held.files.remove(&path);
            held.bytes -= bytes;
            match fs::remove_file(&path) {
                Ok(()) => {
                    tracing::debug!(path = %path.display(), bytes, "evicted from the store cache")
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "evicting from the store cache")
                }
            }
        }
    }

    /// Bytes of the evictable files held.
    pub(crate) fn bytes(&self) -> u64 {
        self.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, name: &str, len: usize) -> PathBuf {
        let path = dir.join(name);
        fs::write(&path, vec![7u8; len]).expect("write");
        path
    }

    #[test]
    fn least_recently_used_files_go_first_and_the_newest_stays() {
        let root = tempfile::tempdir().expect("tmp");
        let dir = root.path().join("collections/c/segments");
        fs::create_dir_all(&dir).expect("mkdir");
        let old = file(&dir, "old.seg", 100);
        let staged = file(&dir, ".fetch-x", 50);
        let bound = CacheBound::scan(root.path(), 250);
        assert_eq!(bound.bytes(), 100, "temporary files are not listed");
        let a = file(&dir, "a.seg", 100);
        bound.add(&a);
        bound.touch(&old);
        let b = file(&dir, "b.seg", 100);
        bound.add(&b);
        // a was used least recently (old was touched after it).
        assert!(!a.exists() && old.exists() && b.exists());
        assert_eq!(bound.bytes(), 200);
        let huge = file(&dir, "huge.seg", 1_000);
        bound.add(&huge);
        assert!(huge.exists(), "the file just added is never the victim");
        assert!(!old.exists() && !b.exists());
        assert!(staged.exists());
        // A restart lists what is there, and trims it to the limit.
        let again = CacheBound::scan(root.path(), 500);
        assert_eq!(again.bytes(), 0);
        assert!(!huge.exists());
    }
}
