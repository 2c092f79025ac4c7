//! The segment store with compare-and-swap manifests, over a local
//! directory or an S3-compatible object store (see [`crate::backend`]).
//!
//! Layout (keys under the store's root): `collections/<name>/{collection.json,
//! manifests/<version>.json, segments/<id>.seg, segments/<id>-<n>.idx,
//! deletes/<id>.<n>.del, leases/, definitions/}`. Segment and index files are
//! also local files under [`Store::root`]: the store itself for a local
//! directory, the node's cache of an object store (where writers stage them
//! before upload and readers fetch them to map).

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eddy_model::CollectionDef;
use roaring::RoaringBitmap;

use crate::backend::local::create_dirs;
use crate::backend::{Backend, LocalDir, ObjectStore, StoreLocation};
use crate::cache::CacheBound;
use crate::envelope::{COLLECTION_FORMAT, MANIFEST_FORMAT};
use crate::{deletes, Error, Manifest, Result};
use publishes::Publishes;

mod files;
mod publishes;

pub use files::FETCH_STREAMS;

/// Outcome of an idempotent collection create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateOutcome {
    /// The collection was created.
    Created,
    /// An identical definition already existed.
    Exists,
}

/// A segment store: where its files live, and the local directory its
/// segment files are mapped from.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    location: StoreLocation,
    pub(crate) backend: Arc<dyn Backend>,
    /// Keys of local files this process has uploaded (an update retried
    /// after a conflict does not send them again).
    uploaded: Arc<Mutex<HashSet<String>>>,
    /// The byte bound on the local cache of an object store.
    cache: Option<Arc<CacheBound>>,
    /// The manifests this process published through any clone.
    publishes: Arc<Publishes>,
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

fn manifest_file(version: u64) -> String {
    format!("{version:020}.json")
}

/// Key of `rest` within collection `collection`'s directory.
/// The store key of version `version` of `collection`'s manifest.
fn manifest_key(collection: &str, version: u64) -> String {
    collection_key(collection, &format!("manifests/{}", manifest_file(version)))
}

pub(crate) fn collection_key(collection: &str, rest: &str) -> String {
    format!("collections/{collection}/{rest}")
}

/// The sub-directory a data file named by a manifest lives in.
fn data_dir(name: &str) -> &'static str {
    if name.ends_with(".del") {
        "deletes"
    } else {
        "segments"
    }
}

impl Store {
    /// Opens (creating if needed) the store in the local directory `root`,
    /// and checks that it refuses a second exclusive create, without which
    /// manifests are unsafe.
    pub fn open(root: &Path) -> Result<Store> {
        create_dirs(&root.join("collections"))?;
        let backend = LocalDir::new(root);
        let probe = format!(".cas-probe-{}", unique_suffix());
        let first = backend.create(&probe, b"1")?;
        let second = backend.create(&probe, b"2")?;
        backend.remove(&probe).ok();
        if !first || second {
            return Err(Error::NoCompareAndSwap(root.to_owned()));
        }
        Ok(Store {
            root: root.to_owned(),
            location: StoreLocation::Dir(root.to_owned()),
            backend: Arc::new(backend),
            uploaded: Arc::default(),
            cache: None,
            publishes: Arc::default(),
        })
    }

    /// Opens the store at `location`: a local directory (`cache` unused), or
    /// an S3-compatible bucket whose segment files this node keeps in the
    /// local directory `cache`. An object store must prove at once that it
    /// honours exclusive create ([`Error::NoCompareAndSwap`] otherwise).
    pub fn open_location(location: &StoreLocation, cache: &Path) -> Result<Store> {
        Store::open_location_with(location, cache, &[])
    }

    /// [`Store::open_location`] with object-store settings that override the
    /// environment's, named like its variables (`AWS_ENDPOINT`, …): for
    /// tests and tools that reach a store the environment does not name.
    pub fn open_location_with(
        location: &StoreLocation,
        cache: &Path,
        s3_config: &[(&str, String)],
    ) -> Result<Store> {
        match location {
            StoreLocation::Dir(root) => Store::open(root),
            StoreLocation::S3 { bucket, prefix } => {
                create_dirs(&cache.join("collections"))?;
                let backend = ObjectStore::open(bucket, prefix, s3_config)?;
                tracing::info!(store = %location, cache = %cache.display(), "object store opened: exclusive create proven");
                Ok(Store {
                    root: cache.to_owned(),
                    location: location.clone(),
                    backend: Arc::new(backend),
                    uploaded: Arc::default(),
                    cache: Some(Arc::new(CacheBound::scan(cache, u64::MAX))),
                    publishes: Arc::default(),
                })
            }
        }
    }

    /// Bounds this node's cache of an object store to `bytes` (files safe in
    /// the bucket are removed, least recently used first; see
    /// `cache.rs`). No effect on a local store.
    pub fn with_cache_limit(mut self, bytes: u64) -> Store {
        if self.backend.is_remote() {
            self.cache = Some(Arc::new(CacheBound::scan(&self.root, bytes)));
        }
        self
    }

    /// Bytes of bucket-backed files in this node's cache of an object store
    /// (`None` for a local store).
    pub fn cached_bytes(&self) -> Option<u64> {
        self.cache.as_ref().map(|c| c.bytes())
    }

    /// The local directory segment files are written to and mapped from: the
    /// store itself, or this node's cache of an object store.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the store lives.
    pub fn location(&self) -> &StoreLocation {
        &self.location
    }

    /// Whether the store's files live in an object store (segment files
    /// then move between it and [`Store::root`]).
    pub fn is_remote(&self) -> bool {
        self.backend.is_remote()
    }

    /// The local directory of `collection`'s files.
    pub(crate) fn dir(&self, collection: &str) -> PathBuf {
        self.root.join("collections").join(collection)
    }

    /// Creates a collection, or confirms an identical one exists.
    pub fn create_collection(&self, def: &CollectionDef) -> Result<CreateOutcome> {
        let def = def.clone().validated()?;
        if self.is_dropped(&def.name) {
            return Err(Error::Dropped(def.name));
        }
        create_dirs(&self.dir(&def.name).join("segments"))?;
        if def.shards > 1 {
            for chain in def.chains() {
                create_dirs(&self.dir(&chain).join("segments"))?;
            }
        }
        let key = collection_key(&def.name, "collection.json");
        let bytes = COLLECTION_FORMAT.encode(&self.backend.describe(&key), &def)?;
        if self.backend.create(&key, &bytes)? {
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
        let mut out = Vec::new();
        for name in self.backend.list_dirs("collections")? {
            if let Some(def) = self.collection(&name)? {
                out.push(def);
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
        let mut versions: Vec<u64> = self
            .backend
            .list(&collection_key(collection, "manifests"))?
            .iter()
            .filter_map(|f| f.name.strip_suffix(".json")?.parse().ok())
            .collect();
        versions.sort_unstable();
        Ok(versions)
    }

    /// Manifest version `version` of `collection`.
    pub fn manifest(&self, collection: &str, version: u64) -> Result<Manifest> {
        self.manifest_if_present(collection, version)?
            .ok_or_else(|| Error::Io {
                path: self.backend.describe(&manifest_key(collection, version)),
                source: io::Error::from(io::ErrorKind::NotFound),
            })
    }

    /// Version `version` of `collection`'s manifest, or `None` when that
    /// version does not exist (never published, or collected since).
    pub fn manifest_if_present(&self, collection: &str, version: u64) -> Result<Option<Manifest>> {
        let key = manifest_key(collection, version);
        let path = self.backend.describe(&key);
        match self.backend.read(&key)? {
            Some(bytes) => MANIFEST_FORMAT.decode(&path, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Publishes `manifest` as its version, only if that version does not
    /// exist yet ([`Error::Conflict`] otherwise). Durable on return.
    pub fn publish(&self, manifest: &Manifest) -> Result<()> {
        if self.is_dropped(&manifest.collection) {
            return Err(Error::Dropped(manifest.collection.clone()));
        }
        let key = manifest_key(&manifest.collection, manifest.version);
        let bytes = MANIFEST_FORMAT.encode(&self.backend.describe(&key), manifest)?;
        if self.backend.create(&key, &bytes)? {
            self.publishes.note();
            Ok(())
        } else {
            Err(Error::Conflict {
                collection: manifest.collection.clone(),
                version: manifest.version,
            })
        }
    }

    /// How many manifests this process has published through this store
    /// (any clone): pass it to [`Store::wait_for_publish`].
    pub fn publishes(&self) -> u64 {
        self.publishes.count()
    }

    /// Waits until this process publishes a manifest after the count `seen`
    /// ([`Store::publishes`]) or `timeout` elapses; returns the count then.
    /// A loop that looks for work after each publish (maintenance after a
    /// seal) waits here instead of sleeping out a poll interval.
    pub fn wait_for_publish(&self, seen: u64, timeout: Duration) -> u64 {
        self.publishes.wait_past(seen, timeout)
    }

    /// A fresh segment id and the local path to write it at (uploaded when a
    /// manifest first names it).
    pub fn new_segment(&self, collection: &str) -> (String, PathBuf) {
        let id = unique_suffix();
        let path = self.segment_path(collection, &id);
        if let Some(dir) = path.parent() {
            // A failure here surfaces as the writer's own error on the path.
            create_dirs(dir).ok();
        }
        (id, path)
    }

    /// Local path of segment `id` (written here, or fetched by
    /// [`Store::fetch_segment`]).
    pub fn segment_path(&self, collection: &str, id: &str) -> PathBuf {
        self.file_path(collection, &format!("{id}.seg"))
    }

    /// A fresh, unique name for an index file of segment `segment` (unique so
    /// two processes indexing the same segment never write the same file).
    pub fn new_index_name(&self, segment: &str) -> String {
        format!("{segment}-{}.idx", unique_suffix())
    }

    /// Local path of an index file named `name` (see `SegmentEntry::index`).
    pub fn index_path(&self, collection: &str, name: &str) -> PathBuf {
        self.file_path(collection, name)
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
        let key = Store::file_key(collection, &name);
        let path = self.backend.describe(&key);
        let bytes = deletes::encode(deleted).map_err(Error::io(&path))?;
        if !self.backend.create(&key, &bytes)? {
            return Err(Error::Io {
                path,
                source: io::Error::from(io::ErrorKind::AlreadyExists),
            });
        }
        Ok(name)
    }

    /// Reads a delete file written by [`Store::write_deletes`].
    pub fn read_deletes(&self, collection: &str, name: &str) -> Result<RoaringBitmap> {
        let key = Store::file_key(collection, name);
        let path = self.backend.describe(&key);
        let bytes = self.backend.read(&key)?.ok_or_else(|| Error::Io {
            path: path.clone(),
            source: io::Error::from(io::ErrorKind::NotFound),
        })?;
        deletes::decode(&path, &bytes)
    }

    /// Removes this node's local copy of `collection`'s files (the cache of
    /// an object store; a local store's files are removed with its keys).
    pub(crate) fn forget_local(&self, collection: &str) {
        if self.backend.is_remote() {
            let dir = self.dir(collection);
            if let Err(e) = fs::remove_dir_all(&dir) {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::warn!(dir = %dir.display(), error = %e, "removing a dropped collection's cache");
                }
            }
        }
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
