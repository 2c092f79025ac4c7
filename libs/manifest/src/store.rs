//! The local-directory segment store with compare-and-swap manifests.
//!
//! Layout: `<root>/collections/<name>/{collection.json, manifests/<version>.json,
//! segments/<id>.seg, deletes/<id>.<version>.del}`.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use eddy_model::CollectionDef;
use roaring::RoaringBitmap;

use crate::envelope::{COLLECTION_FORMAT, MANIFEST_FORMAT};
use crate::{deletes, Error, Manifest, Result};

/// Outcome of an idempotent collection create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateOutcome {
    /// The collection was created.
    Created,
    /// An identical definition already existed.
    Exists,
}

/// A segment store rooted at a local directory.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

static UNIQUE: AtomicU64 = AtomicU64::new(0);

/// A name no other file of this or any other process will take.
pub(crate) fn unique_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{nanos:x}-{:x}-{:x}",
        std::process::id(),
        UNIQUE.fetch_add(1, Ordering::Relaxed)
    )
}

/// fsyncs a directory, so entries created or renamed in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(Error::io(dir))
}

/// Creates `dir` and its missing parents, fsyncing the parent of each one
/// created so the new entries survive a crash.
pub(crate) fn create_dirs(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dirs(parent)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => {
            return Err(Error::Io {
                path: dir.to_owned(),
                source: e,
            })
        }
    }
    match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => sync_dir(parent),
        _ => Ok(()),
    }
}

/// Writes `bytes` to `path` only if `path` does not exist: the data goes to a
/// temporary file that is fsynced, then hard-linked to `path` (link never
/// replaces), then the directory is fsynced. Returns false if `path` existed.
pub(crate) fn create_exclusive(path: &Path, bytes: &[u8]) -> Result<bool> {
    let dir = path.parent().ok_or_else(|| Error::Io {
        path: path.to_owned(),
        source: io::Error::other("no parent directory"),
    })?;
    let tmp = dir.join(format!(".tmp-{}", unique_suffix()));
    let result = (|| {
        let mut f = File::create(&tmp).map_err(Error::io(&tmp))?;
        f.write_all(bytes).map_err(Error::io(&tmp))?;
        f.sync_all().map_err(Error::io(&tmp))?;
        match fs::hard_link(&tmp, path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(Error::Io {
                path: path.to_owned(),
                source: e,
            }),
        }
    })();
    fs::remove_file(&tmp).ok();
    if let Ok(true) = result {
        sync_dir(dir)?;
    }
    result
}

/// Writes `bytes` to `path`, replacing it: a temporary file, fsynced, is
/// renamed over it and the directory is fsynced. For files only their
/// owner writes (leases), never for manifests.
pub(crate) fn replace_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().ok_or_else(|| Error::Io {
        path: path.to_owned(),
        source: io::Error::other("no parent directory"),
    })?;
    let tmp = dir.join(format!(".tmp-{}", unique_suffix()));
    let result = (|| {
        let mut f = File::create(&tmp).map_err(Error::io(&tmp))?;
        f.write_all(bytes).map_err(Error::io(&tmp))?;
        f.sync_all().map_err(Error::io(&tmp))?;
        fs::rename(&tmp, path).map_err(Error::io(path))
    })();
    if result.is_err() {
        fs::remove_file(&tmp).ok();
    }
    result?;
    sync_dir(dir)
}

fn manifest_file(version: u64) -> String {
    format!("{version:020}.json")
}

impl Store {
    /// Opens (creating if needed) the store at `root`, and checks that it
    /// refuses a second exclusive create, without which manifests are unsafe.
    pub fn open(root: &Path) -> Result<Store> {
        let collections = root.join("collections");
        create_dirs(&collections)?;
        let probe = root.join(format!(".cas-probe-{}", unique_suffix()));
        let first = create_exclusive(&probe, b"1")?;
        let second = create_exclusive(&probe, b"2")?;
        fs::remove_file(&probe).ok();
        if !first || second {
            return Err(Error::NoCompareAndSwap(root.to_owned()));
        }
        Ok(Store {
            root: root.to_owned(),
        })
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn dir(&self, collection: &str) -> PathBuf {
        self.root.join("collections").join(collection)
    }

    /// Creates a collection, or confirms an identical one exists.
    pub fn create_collection(&self, def: &CollectionDef) -> Result<CreateOutcome> {
        let def = def.clone().validated()?;
        if self.is_dropped(&def.name) {
            return Err(Error::Dropped(def.name));
        }
        let dir = self.dir(&def.name);
        for sub in ["manifests", "segments", "deletes", "leases"] {
            create_dirs(&dir.join(sub))?;
        }
        let path = dir.join("collection.json");
        let bytes = COLLECTION_FORMAT.encode(&path, &def)?;
        if create_exclusive(&path, &bytes)? {
            return Ok(CreateOutcome::Created);
        }
        match self.collection(&def.name)? {
            Some(existing) if existing == def => Ok(CreateOutcome::Exists),
            _ => Err(Error::CollectionConflict(def.name)),
        }
    }

    /// The definition of `name` in force (its newest generation, see
    /// `alter`), if the collection exists.
    pub fn collection(&self, name: &str) -> Result<Option<CollectionDef>> {
        if eddy_model::validate_name(name).is_err() {
            return Ok(None);
        }
        if self.is_dropped(name) {
            return Ok(None);
        }
        Ok(self.definition(name)?.map(|(_, def)| def))
    }

    /// Every collection in the store, by name.
    pub fn collections(&self) -> Result<Vec<CollectionDef>> {
        let dir = self.root.join("collections");
        let mut out = Vec::new();
        for entry in fs::read_dir(&dir).map_err(Error::io(&dir))? {
            let entry = entry.map_err(Error::io(&dir))?;
            if let Some(name) = entry.file_name().to_str() {
                if let Some(def) = self.collection(name)? {
                    out.push(def);
                }
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The newest manifest version of `collection`, or version 0 (empty).
    pub fn latest_manifest(&self, collection: &str) -> Result<Manifest> {
        match self.manifest_versions(collection)?.last() {
            None => Ok(Manifest::empty(collection)),
            Some(&v) => self.manifest(collection, v),
        }
    }

    /// The manifest versions of `collection` in the store, oldest first.
    pub fn manifest_versions(&self, collection: &str) -> Result<Vec<u64>> {
        let dir = self.dir(collection).join("manifests");
        let mut versions = Vec::new();
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(versions),
            Err(e) => {
                return Err(Error::Io {
                    path: dir,
                    source: e,
                })
            }
        };
        for entry in entries {
            let entry = entry.map_err(Error::io(&dir))?;
            let name = entry.file_name();
            let version = name
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|n| n.parse::<u64>().ok());
            versions.extend(version);
        }
        versions.sort_unstable();
        Ok(versions)
    }

    /// Manifest version `version` of `collection`.
    pub fn manifest(&self, collection: &str, version: u64) -> Result<Manifest> {
        let path = self
            .dir(collection)
            .join("manifests")
            .join(manifest_file(version));
        let bytes = fs::read(&path).map_err(Error::io(&path))?;
        MANIFEST_FORMAT.decode(&path, &bytes)
    }

    /// Publishes `manifest` as its version, only if that version does not
    /// exist yet ([`Error::Conflict`] otherwise). Durable on return.
    pub fn publish(&self, manifest: &Manifest) -> Result<()> {
        if self.is_dropped(&manifest.collection) {
            return Err(Error::Dropped(manifest.collection.clone()));
        }
        let path = self
            .dir(&manifest.collection)
            .join("manifests")
            .join(manifest_file(manifest.version));
        let bytes = MANIFEST_FORMAT.encode(&path, manifest)?;
        if create_exclusive(&path, &bytes)? {
            Ok(())
        } else {
            Err(Error::Conflict {
                collection: manifest.collection.clone(),
                version: manifest.version,
            })
        }
    }

    /// Path of a file a manifest names (see [`Manifest::file_names`]).
    pub fn file_path(&self, collection: &str, name: &str) -> PathBuf {
        let sub = if name.ends_with(".del") {
            "deletes"
        } else {
            "segments"
        };
        self.dir(collection).join(sub).join(name)
    }

    /// A fresh segment id and the path to write it at.
    pub fn new_segment(&self, collection: &str) -> (String, PathBuf) {
        let id = unique_suffix();
        let path = self.segment_path(collection, &id);
        (id, path)
    }

    /// Path of segment `id`.
    pub fn segment_path(&self, collection: &str, id: &str) -> PathBuf {
        self.dir(collection)
            .join("segments")
            .join(format!("{id}.seg"))
    }

    /// A fresh, unique name for an index file of segment `segment` (unique so
    /// two processes indexing the same segment never write the same file).
    pub fn new_index_name(&self, segment: &str) -> String {
        format!("{segment}-{}.idx", unique_suffix())
    }

    /// Path of an index file named `name` (see `SegmentEntry::index`).
    pub fn index_path(&self, collection: &str, name: &str) -> PathBuf {
        self.dir(collection).join("segments").join(name)
    }

    /// Writes the delete bitmap of segment `segment` as a new file and
    /// returns its name (to be referenced by the next manifest).
    pub fn write_deletes(
        &self,
        collection: &str,
        segment: &str,
        deleted: &RoaringBitmap,
    ) -> Result<String> {
        let name = format!("{segment}.{}.del", unique_suffix());
        let path = self.dir(collection).join("deletes").join(&name);
        let bytes = deletes::encode(deleted).map_err(Error::io(&path))?;
        if !create_exclusive(&path, &bytes)? {
            return Err(Error::Io {
                path,
                source: io::Error::from(io::ErrorKind::AlreadyExists),
            });
        }
        Ok(name)
    }

    /// Reads a delete file written by [`Store::write_deletes`].
    pub fn read_deletes(&self, collection: &str, name: &str) -> Result<RoaringBitmap> {
        let path = self.dir(collection).join("deletes").join(name);
        let bytes = fs::read(&path).map_err(Error::io(&path))?;
        deletes::decode(&path, &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_publish_with_compare_and_swap() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path()).expect("open");
        let def = CollectionDef::new("c", 4);
        assert_eq!(
            store.create_collection(&def).expect("create"),
            CreateOutcome::Created
        );
        assert_eq!(
            store.create_collection(&def).expect("again"),
            CreateOutcome::Exists
        );
        let other = CollectionDef::new("c", 8);
        assert!(matches!(
            store.create_collection(&other),
            Err(Error::CollectionConflict(_))
        ));

        let m0 = store.latest_manifest("c").expect("latest");
        assert_eq!(m0.version, 0);
        let mut m1 = m0.successor();
        m1.partitions.entry(0).or_default().next_offset = 5;
        store.publish(&m1).expect("publish v1");
        let mut rival = m0.successor();
        rival.partitions.entry(0).or_default().next_offset = 9;
        assert!(matches!(
            store.publish(&rival),
            Err(Error::Conflict { version: 1, .. })
        ));
        assert_eq!(store.latest_manifest("c").expect("latest"), m1);
        assert_eq!(store.collections().expect("list").len(), 1);
    }

    #[test]
    fn racing_writers_never_share_a_version() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path()).expect("open");
        store
            .create_collection(&CollectionDef::new("c", 4))
            .expect("create");
        let wins: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|w| {
                    let store = store.clone();
                    s.spawn(move || {
                        let mut wins = 0;
                        for _ in 0..20 {
                            let mut m = store.latest_manifest("c").expect("latest").successor();
                            m.partitions.entry(w).or_default().next_offset += 1;
                            if store.publish(&m).is_ok() {
                                wins += 1;
                            }
                        }
                        wins
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("join")).sum()
        });
        assert_eq!(
            store.latest_manifest("c").expect("latest").version as usize,
            wins
        );
    }

    #[test]
    fn delete_files_round_trip_and_detect_damage() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path()).expect("open");
        store
            .create_collection(&CollectionDef::new("c", 4))
            .expect("create");
        let bits: RoaringBitmap = [1u32, 5, 900].into_iter().collect();
        let name = store.write_deletes("c", "s1", &bits).expect("write");
        assert_eq!(store.read_deletes("c", &name).expect("read"), bits);
        let path = dir.path().join("collections/c/deletes").join(&name);
        let mut bytes = fs::read(&path).expect("read");
        bytes[0] ^= 1;
        fs::write(&path, bytes).expect("write");
        let err = store.read_deletes("c", &name).expect_err("damaged");
        assert!(matches!(err, Error::Format { .. }), "{err}");
        assert!(err.to_string().contains(&name), "{err}");
    }
}
