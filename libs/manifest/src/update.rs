//! The one write path of manifests: [`Store::update`] re-reads the newest
//! version, lets the caller build its successor (or decline), checks that
//! the files it adds exist, and publishes with compare-and-swap, retrying on
//! conflicts.

use crate::{Error, Manifest, Result, Store};

/// What [`Store::update`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Updated {
    /// The version published, or `None` when the closure declined.
    pub published: Option<Manifest>,
    /// Compare-and-swap conflicts met on the way (another writer published
    /// first; each one re-read the newest version and tried again).
    pub conflicts: u32,
}

impl Store {
    /// Publishes the successor of the newest manifest of `collection` with
    /// compare-and-swap, retrying on conflicts: the one write path of every
    /// manifest change (seal, assign, merge, index build).
    ///
    /// `successor` is called with the newest version (re-read after each
    /// conflict) and returns the version to publish on top of it (built with
    /// [`Manifest::successor`]), or `None` to publish nothing. Before the
    /// link, every file the successor names that `latest` did not is checked
    /// to exist, so a publisher whose file was collected meanwhile fails with
    /// [`Error::MissingFile`] instead of publishing a manifest naming it.
    pub fn update<E>(
        &self,
        collection: &str,
        mut successor: impl FnMut(&Manifest) -> Result<Option<Manifest>, E>,
    ) -> Result<Updated, E>
    where
        E: From<Error>,
    {
        let mut conflicts = 0;
        loop {
            let latest = self.latest_manifest(collection)?;
            let Some(next) = successor(&latest)? else {
                return Ok(Updated {
                    published: None,
                    conflicts,
                });
            };
            if next.version != latest.version + 1 || next.collection != collection {
                return Err(Error::NotASuccessor {
                    collection: collection.to_owned(),
                    latest: latest.version,
                    version: next.version,
                }
                .into());
            }
            self.check_new_files(&latest, &next)?;
            match self.publish(&next) {
                Ok(()) => {
                    return Ok(Updated {
                        published: Some(next),
                        conflicts,
                    })
                }
                Err(Error::Conflict { .. }) => conflicts += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Every file `next` names that `latest` does not must be in the store
    /// (uploaded now if this node wrote it; see [`Store::ensure_stored`]).
    fn check_new_files(&self, latest: &Manifest, next: &Manifest) -> Result<()> {
        let known = latest.file_names();
        for name in next.file_names().difference(&known) {
            self.ensure_stored(&next.collection, name)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use eddy_model::CollectionDef;

    use super::*;
    use crate::SegmentEntry;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path()).expect("open");
        store
            .create_collection(&CollectionDef::new("c", 4))
            .expect("create");
        (dir, store)
    }

    #[test]
    fn racing_updates_all_land_and_count_their_conflicts() {
        let (_dir, store) = store();
        let conflicts: u32 = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4u32)
                .map(|w| {
                    let store = store.clone();
                    s.spawn(move || {
                        let mut conflicts = 0;
                        for _ in 0..10 {
                            let updated = store
                                .update::<Error>("c", |latest| {
                                    let mut next = latest.successor();
                                    next.partitions.entry(w).or_default().next_offset += 1;
                                    Ok(Some(next))
                                })
                                .expect("update");
                            assert!(updated.published.is_some());
                            conflicts += updated.conflicts;
                        }
                        conflicts
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("join")).sum()
        });
        let latest = store.latest_manifest("c").expect("latest");
        assert_eq!(latest.version, 40, "every update landed once");
        assert!((0..4).all(|w| latest.next_offset(w) == 10));
        // Each conflict cost one extra attempt; they cannot outnumber the
        // versions the others published.
        assert!(conflicts <= 40 * 3, "{conflicts}");
    }

    #[test]
    fn a_declined_update_publishes_nothing() {
        let (_dir, store) = store();
        let updated = store.update::<Error>("c", |_| Ok(None)).expect("update");
        assert_eq!(updated.published, None);
        assert_eq!(store.latest_manifest("c").expect("latest").version, 0);
        let err = store
            .update::<Error>("c", |latest| Ok(Some(latest.clone())))
            .expect_err("not a successor");
        assert!(matches!(err, Error::NotASuccessor { .. }), "{err}");
    }

    #[test]
    fn a_version_naming_a_missing_file_is_not_published() {
        let (_dir, store) = store();
        let entry = |id: &str| SegmentEntry {
            id: id.to_owned(),
            rows: 1,
            bytes: 1,
            deletes: None,
            deleted: 0,
            offset_ranges: Default::default(),
            index: None,
        };
        let err = store
            .update::<Error>("c", |latest| {
                let mut next = latest.successor();
                next.segments.push(entry("gone"));
                Ok(Some(next))
            })
            .expect_err("missing segment");
        assert!(matches!(err, Error::MissingFile { .. }), "{err}");
        assert_eq!(store.latest_manifest("c").expect("latest").version, 0);
        std::fs::write(store.segment_path("c", "here"), b"x").expect("write");
        let updated = store
            .update::<Error>("c", |latest| {
                let mut next = latest.successor();
                next.segments.push(entry("here"));
                Ok(Some(next))
            })
            .expect("published");
        assert_eq!(updated.published.map(|m| m.version), Some(1));
    }
}
