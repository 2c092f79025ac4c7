//! Files a manifest names (segments, index files, delete bitmaps): their
//! keys and local paths, and moving them between this node's cache and the
//! object store — uploaded before a manifest names them, fetched (and
//! checked) when a node needs them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{collection_key, data_dir, Store};
use crate::{Error, Result};

/// Files fetched at once from an object store by [`Store::fetch_files`].
pub const FETCH_STREAMS: usize = 4;

impl Store {
    /// Key of a file a manifest names (see [`Manifest::file_names`]).
    pub(crate) fn file_key(collection: &str, name: &str) -> String {
        collection_key(collection, &format!("{}/{name}", data_dir(name)))
    }

    /// Local path of a file a manifest names (see [`Manifest::file_names`]).
    pub fn file_path(&self, collection: &str, name: &str) -> PathBuf {
        self.dir(collection).join(data_dir(name)).join(name)
    }

    /// Makes sure the new file `name` of `collection` is in the store before
    /// a manifest names it: uploads this node's local copy of a segment or
    /// index file (once), else checks the store has it.
    pub(crate) fn ensure_stored(&self, collection: &str, name: &str) -> Result<()> {
        self.ensure_stored_with(collection, name, None)
    }

    /// [`Store::ensure_stored`], with the file's CRC-32 when its writer
    /// computed it (the upload then reads the file once).
    fn ensure_stored_with(&self, collection: &str, name: &str, crc32: Option<u32>) -> Result<()> {
        let key = Store::file_key(collection, name);
        let local = self.file_path(collection, name);
        if self.backend.is_remote() && !name.ends_with(".del") {
            let uploaded = || self.uploaded.lock().unwrap_or_else(|e| e.into_inner());
            if uploaded().contains(&key) {
                return Ok(());
            }
            if local.is_file() {
                // Not under the lock: other collections' publishes upload
                // meanwhile (a rare second upload of the same file is
                // harmless: the key is unique, the bytes the same).
                let started = std::time::Instant::now();
                self.backend.upload(&key, &local, crc32)?;
                tracing::debug!(key, ms = started.elapsed().as_millis() as u64, "uploaded");
                uploaded().insert(key);
                if let Some(cache) = &self.cache {
                    cache.add(&local);
                }
                return Ok(());
            }
        }
        if self.backend.exists(&key)? {
            Ok(())
        } else {
            Err(Error::MissingFile {
                path: self.backend.describe(&key),
            })
        }
    }

    /// Puts segment `id`, which this node wrote, in the object store now,
    /// before a manifest names it (the publish then finds it there and only
    /// names it): a writer uploads off its publish. `crc32` is the file's
    /// CRC-32 as its writer computed it, which then goes up as the object's
    /// checksum without a pass over the file (and covers the file from the
    /// moment it was written, not from the upload). Nothing to do on a
    /// local directory, where the publish checks the file.
    pub fn upload_segment(&self, collection: &str, id: &str, crc32: Option<u32>) -> Result<()> {
        if !self.backend.is_remote() {
            return Ok(());
        }
        self.ensure_stored_with(collection, &format!("{id}.seg"), crc32)
    }

    /// Bytes of the data files (segments, index files, delete bitmaps) the
    /// latest manifest of `collection` (of each of its shards' chains) names,
    /// as the directory or the bucket holds them: what a node serving the
    /// collection reads, and what a new one downloads. Files awaiting
    /// garbage collection are not counted. 0 for an unknown collection.
    pub fn served_bytes(&self, collection: &str) -> Result<u64> {
        let Some(def) = self.collection(collection)? else {
            return Ok(0);
        };
        let chains = if def.shards > 1 {
            def.chains()
        } else {
            vec![def.name.clone()]
        };
        let mut bytes = 0;
        for chain in &chains {
            let names = self.latest_manifest(chain)?.file_names();
            for dir in ["segments", "deletes"] {
                let listed = self.backend.list(&collection_key(chain, dir))?;
                bytes += listed
                    .iter()
                    .filter(|f| names.contains(&f.name))
                    .map(|f| f.bytes)
                    .sum::<u64>();
            }
        }
        Ok(bytes)
    }

    /// A local path holding file `name` of `collection` (a segment or index
    /// file a manifest names), fetched from the object store into this
    /// node's cache if it is not there yet.
    pub fn fetch_file(&self, collection: &str, name: &str) -> Result<PathBuf> {
        let path = self.file_path(collection, name);
        if !self.backend.is_remote() {
            return Ok(path);
        }
        if path.is_file() {
            if let Some(cache) = &self.cache {
                cache.touch(&path);
            }
            return Ok(path);
        }
        let key = Store::file_key(collection, name);
        let started = std::time::Instant::now();
        self.backend.fetch(&key, &path)?;
        tracing::debug!(key, ms = started.elapsed().as_millis() as u64, "fetched");
        if let Some(cache) = &self.cache {
            cache.add(&path);
        }
        Ok(path)
    }

    /// Fetches files `names` of `collection` into this node's cache (see
    /// [`Store::fetch_file`]), up to [`FETCH_STREAMS`] at once, one stream
    /// per file: a node catching up on many files is then bound by its
    /// link and disk, not by one stream's round trips. Each file's outcome,
    /// in the order of `names`.
    pub fn fetch_files(&self, collection: &str, names: &[String]) -> Vec<Result<PathBuf>> {
        if !self.backend.is_remote() || names.len() < 2 {
            return names
                .iter()
                .map(|n| self.fetch_file(collection, n))
                .collect();
        }
        let next = AtomicUsize::new(0);
        let mut fetched: Vec<(usize, Result<PathBuf>)> = std::thread::scope(|scope| {
            let streams: Vec<_> = (0..FETCH_STREAMS.min(names.len()))
                .map(|_| {
                    scope.spawn(|| {
                        let mut mine = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(name) = names.get(i) else { break mine };
                            mine.push((i, self.fetch_file(collection, name)));
                        }
                    })
                })
                .collect();
            streams
                .into_iter()
                .flat_map(|s| s.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        fetched.sort_by_key(|(i, _)| *i);
        fetched.into_iter().map(|(_, outcome)| outcome).collect()
    }

    /// A local path holding segment `id` (see [`Store::fetch_file`]).
    pub fn fetch_segment(&self, collection: &str, id: &str) -> Result<PathBuf> {
        self.fetch_file(collection, &format!("{id}.seg"))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::fs;

    use eddy_model::CollectionDef;

    use super::*;
    use crate::SegmentEntry;

    /// Served bytes are those of the files the latest manifest names (its
    /// segment, index and delete file), not a left-over segment awaiting
    /// garbage collection.
    #[test]
    fn served_bytes_count_what_the_latest_manifest_names() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path()).expect("open");
        assert_eq!(store.served_bytes("c").expect("unknown"), 0);
        store
            .create_collection(&CollectionDef::new("c", 4))
            .expect("create");
        let (named, path) = store.new_segment("c");
        fs::write(&path, vec![1u8; 1000]).expect("segment");
        let index = store.new_index_name(&named);
        fs::write(store.index_path("c", &index), vec![2u8; 300]).expect("index");
        let deletes = store
            .write_deletes("c", &named, &[3u32].into_iter().collect())
            .expect("deletes");
        let deletes_len = fs::metadata(dir.path().join("collections/c/deletes").join(&deletes))
            .expect("stat")
            .len();
        let (_, left_over) = store.new_segment("c");
        fs::write(&left_over, vec![4u8; 5000]).expect("left-over segment");
        let mut next = store.latest_manifest("c").expect("latest").successor();
        next.segments.push(SegmentEntry {
            id: named,
            rows: 1,
            bytes: 1000,
            deletes: Some(deletes),
            deleted: 1,
            offset_ranges: BTreeMap::new(),
            index: Some(index),
        });
        store.publish(&next).expect("publish");
        assert_eq!(
            store.served_bytes("c").expect("served"),
            1000 + 300 + deletes_len
        );
    }
}
