//! Dropping a collection: a marker first, the files later.
//!
//! [`Store::drop_collection`] writes `dropped.json` into the collection's
//! directory. From then on the collection is gone for every reader
//! ([`Store::collection`] and [`Store::collections`] skip it, so ingest
//! stops its worker and eddy-query its tail), no manifest is published for
//! it any more (a worker still sealing cannot resurrect it), and a create
//! of the same name is refused until the files are collected:
//! [`Store::collect_dropped`] removes the directory once the drop is older
//! than the grace period and no lease (a pinned snapshot) still holds it.

use std::time::{Duration, SystemTime};

use eddy_format::Versions;
use serde::{Deserialize, Serialize};

use crate::lease::millis;
use crate::store::collection_key;
use crate::{Error, JsonFormat, Result, Store};

/// The drop marker (`dropped.json`).
pub const DROPPED_FORMAT: JsonFormat = JsonFormat {
    kind: "dropped",
    what: "drop marker",
    versions: Versions::new(1, 1),
};

/// File name of the drop marker in a collection's directory.
pub(crate) const DROPPED_FILE: &str = "dropped.json";

/// What the marker records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropRecord {
    /// When, in ms since the Unix epoch.
    pub dropped_ms: u64,
    /// Who asked, for operators.
    pub by: String,
}

impl Store {
    /// Whether `collection` (or the collection a shard's chain belongs to)
    /// has a drop marker (an unreadable store counts as not dropped; the
    /// reader then meets the error on its next call).
    pub fn is_dropped(&self, collection: &str) -> bool {
        let collection = eddy_model::collection_of_chain(collection);
        match self
            .backend
            .exists(&collection_key(collection, DROPPED_FILE))
        {
            Ok(dropped) => dropped,
            Err(e) => {
                tracing::warn!(collection, error = %e, "checking for a drop marker");
                false
            }
        }
    }

    /// Drops `collection` (see the module), recording `by`: `Ok(true)` when
    /// this call dropped it, `Ok(false)` when it was dropped already,
    /// [`Error::UnknownCollection`] when there is no such collection.
    pub fn drop_collection(&self, collection: &str, by: &str) -> Result<bool> {
        if eddy_model::validate_name(collection).is_err()
            || !self
                .backend
                .exists(&collection_key(collection, "collection.json"))?
        {
            return Err(Error::UnknownCollection(collection.to_owned()));
        }
        let key = collection_key(collection, DROPPED_FILE);
        let record = DropRecord {
            dropped_ms: millis(SystemTime::now()),
            by: by.to_owned(),
        };
        let bytes = DROPPED_FORMAT.encode(&self.backend.describe(&key), &record)?;
        self.backend.create(&key, &bytes)
    }

    /// Removes the files of collections dropped more than `grace` ago that
    /// no unexpired lease holds, each on its own: one whose marker cannot be
    /// read is kept (and reported), the others collected.
    pub fn collect_dropped(&self, grace: Duration) -> Result<DroppedCollected> {
        let now = SystemTime::now();
        let mut out = DroppedCollected::default();
        let dirs = self.backend.list_dirs("collections")?;
        // A shard's chain goes with its collection, never on its own.
        for name in dirs.iter().filter(|d| eddy_model::validate_name(d).is_ok()) {
            let chains: Vec<&str> = dirs
                .iter()
                .filter(|d| {
                    d.strip_prefix(name.as_str())
                        .and_then(|rest| rest.strip_prefix(eddy_model::SHARD_SEPARATOR))
                        .is_some_and(|shard| shard.parse::<u32>().is_ok())
                })
                .map(String::as_str)
                .collect();
            match self.collect_one_dropped(name, &chains, grace, now) {
                Ok(true) => out.removed.push(name.clone()),
                Ok(false) => {}
                Err(e) => out.refused.push((name.clone(), e.to_string())),
            }
        }
        Ok(out)
    }

    /// Removes the files of collection `name` and of its shards' `chains`
    /// if it is dropped, the drop older than `grace` and no lease holds it
    /// or one of its chains; whether it did.
    fn collect_one_dropped(
        &self,
        name: &str,
        chains: &[&str],
        grace: Duration,
        now: SystemTime,
    ) -> Result<bool> {
        let marker = collection_key(name, DROPPED_FILE);
        let Some(bytes) = self.backend.read(&marker)? else {
            return Ok(false);
        };
        let record: DropRecord = DROPPED_FORMAT.decode(&self.backend.describe(&marker), &bytes)?;
        if millis(now).saturating_sub(record.dropped_ms) < grace.as_millis() as u64 {
            return Ok(false);
        }
        for held in std::iter::once(name).chain(chains.iter().copied()) {
            if self.leases(held)?.iter().any(|l| l.holds_at(now)) {
                return Ok(false);
            }
        }
        for chain in chains {
            for sub in ["manifests", "segments", "deletes", "leases"] {
                self.backend.remove_all(&collection_key(chain, sub))?;
            }
            self.backend.remove_all(&format!("collections/{chain}"))?;
            self.forget_local(chain);
        }
        // The marker goes last, so a collection half removed stays dropped.
        for sub in ["manifests", "segments", "deletes", "definitions", "leases"] {
            self.backend.remove_all(&collection_key(name, sub))?;
        }
        self.backend
            .remove(&collection_key(name, "collection.json"))?;
        self.backend.remove_all(&format!("collections/{name}"))?;
        self.forget_local(name);
        Ok(true)
    }
}

/// What [`Store::collect_dropped`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DroppedCollected {
    /// Collections whose files were removed.
    pub removed: Vec<String>,
    /// Dropped collections left alone because their marker or leases could
    /// not be read (damaged, or written by a newer eddy), with the reason:
    /// files nobody can vouch for are kept, and the others collected.
    pub refused: Vec<(String, String)>,
}

#[cfg(test)]
mod tests {
    use std::fs;

    use eddy_model::CollectionDef;

    use super::*;

    #[test]
    fn a_dropped_collection_is_gone_then_collected() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path()).expect("store");
        let def = CollectionDef::new("d", 2);
        store.create_collection(&def).expect("created");
        assert!(matches!(
            store.drop_collection("nope", "test"),
            Err(Error::UnknownCollection(_))
        ));
        assert!(store.drop_collection("d", "test").expect("dropped"));
        assert!(!store.drop_collection("d", "test").expect("again"));
        assert!(store.is_dropped("d"));
        assert_eq!(store.collection("d").expect("read"), None);
        assert!(store.collections().expect("list").is_empty());
        // No manifest is published for it, and its name is not free yet.
        let next = store.latest_manifest("d").expect("latest").successor();
        assert!(matches!(store.publish(&next), Err(Error::Dropped(_))));
        assert!(matches!(
            store.create_collection(&def),
            Err(Error::Dropped(_))
        ));

        // A lease (a pinned snapshot) holds the files past the grace.
        let lease = store
            .take_lease("d", "snapshot", Duration::from_secs(60), Some(0))
            .expect("lease");
        assert_eq!(
            store.collect_dropped(Duration::ZERO).expect("gc"),
            DroppedCollected::default()
        );
        drop(lease);
        assert_eq!(
            store
                .collect_dropped(Duration::from_secs(3600))
                .expect("gc"),
            DroppedCollected::default()
        );
        assert_eq!(
            store.collect_dropped(Duration::ZERO).expect("gc").removed,
            ["d"]
        );
        assert!(!dir.path().join("collections/d").exists());
        // Now the name is free again.
        store.create_collection(&def).expect("created again");
    }

    /// A split collection's shards are dropped with it: no shard's chain
    /// takes a publish once it is dropped, a lease on one shard holds the
    /// whole collection, and collecting it removes every chain.
    #[test]
    fn a_dropped_split_collection_takes_its_shards_along() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path()).expect("store");
        let def = CollectionDef {
            shards: 2,
            ..CollectionDef::new("s", 2)
        };
        store.create_collection(&def).expect("created");
        let first = store.latest_manifest("s.1").expect("latest").successor();
        store.publish(&first).expect("a shard publishes");
        assert_eq!(store.collections().expect("list"), vec![def.clone()]);
        assert!(store.drop_collection("s", "test").expect("dropped"));
        assert!(store.is_dropped("s.1"));
        let next = first.successor();
        assert!(matches!(store.publish(&next), Err(Error::Dropped(_))));
        let lease = store
            .take_lease("s.1", "snapshot", Duration::from_secs(60), Some(1))
            .expect("lease");
        assert!(store
            .collect_dropped(Duration::ZERO)
            .expect("gc")
            .removed
            .is_empty());
        drop(lease);
        assert_eq!(
            store.collect_dropped(Duration::ZERO).expect("gc").removed,
            ["s"]
        );
        for gone in ["s", "s.0", "s.1"] {
            assert!(
                !dir.path().join("collections").join(gone).exists(),
                "{gone}"
            );
        }
    }

    /// The golden marker of format version 1 still reads; a marker of a
    /// newer version, or a damaged one, keeps its collection's files (with
    /// the reason) instead of removing files it cannot vouch for, and does
    /// not hold back the collection of other dropped collections.
    #[test]
    fn the_marker_format_is_fixed_and_checked() {
        let golden = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/dropped-v1.json");
        let record = DropRecord {
            dropped_ms: 1_764_547_200_000,
            by: "http".into(),
        };
        if std::env::var_os("EDDY_WRITE_GOLDEN").is_some() {
            let bytes = DROPPED_FORMAT
                .encode(std::path::Path::new(golden), &record)
                .expect("encode");
            fs::write(golden, bytes).expect("write golden");
        }
        let bytes = fs::read(golden).expect("golden marker");
        let read: DropRecord = DROPPED_FORMAT
            .decode(std::path::Path::new(golden), &bytes)
            .expect("v1 reads");
        assert_eq!(read, record);
        let again = DROPPED_FORMAT
            .encode(std::path::Path::new(golden), &record)
            .expect("encode");
        assert_eq!(again, bytes, "encoding is stable");

        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path()).expect("store");
        for name in ["d", "e"] {
            store
                .create_collection(&CollectionDef::new(name, 2))
                .expect("created");
        }
        let marker = dir.path().join("collections/d").join(DROPPED_FILE);
        let newer = String::from_utf8(bytes.clone())
            .expect("utf-8")
            .replace("\"format_version\":1", "\"format_version\":2");
        fs::write(&marker, newer).expect("write");
        let collected = store.collect_dropped(Duration::ZERO).expect("gc");
        assert!(collected.removed.is_empty());
        assert_eq!(collected.refused.len(), 1, "{collected:?}");
        assert!(
            collected.refused[0].1.contains("version 2"),
            "{collected:?}"
        );
        let damaged = String::from_utf8(bytes)
            .expect("utf-8")
            .replace("http", "htpp");
        fs::write(&marker, damaged).expect("write");
        assert!(store.drop_collection("e", "test").expect("dropped"));
        let collected = store.collect_dropped(Duration::ZERO).expect("gc");
        assert_eq!(collected.removed, ["e"], "the sound one is collected");
        assert_eq!(collected.refused.len(), 1, "{collected:?}");
        assert_eq!(collected.refused[0].0, "d");
        assert!(collected.refused[0].1.contains("checksum"), "{collected:?}");
        assert!(dir.path().join("collections/d").exists(), "nothing removed");
        assert!(!dir.path().join("collections/e").exists());
    }
}
