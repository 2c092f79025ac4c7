//! Leases: what keeps the garbage collector away from files a writer has
//! written but not published yet, and from a manifest version a reader
//! pinned.
//!
//! A lease is a small record in `<collection>/leases/<name>.json` (the JSON
//! envelope of kind `lease`) with the time it was taken and an expiry.
//! While it is valid the collector removes no unreferenced file younger
//! than the lease (a writer takes its lease before writing, so everything
//! it writes is covered without naming it) and keeps the pinned manifest
//! version, if any, with every file it names (issue 12's pinned snapshots).
//! A writer that stalls past its lease's expiry may lose its files; before
//! publishing it renews the lease, and [`Store::update`] refuses to publish
//! a version naming a file that is gone, so the writer fails cleanly and
//! writes again instead of publishing a manifest that names a deleted file.

use std::io;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use eddy_format::Versions;
use serde::{Deserialize, Serialize};
use tracing::warn;

use crate::backend::Backend;
use crate::store::{collection_key, unique_suffix};
use crate::{Error, JsonFormat, Result, Store};

/// Lease records (`leases/<name>.json`).
pub const LEASE_FORMAT: JsonFormat = JsonFormat {
    kind: "lease",
    what: "lease",
    versions: Versions::new(1, 1),
};

/// The stored record of one lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// Who holds it, for operators (e.g. `seal`, `merge`, `snapshot`).
    pub holder: String,
    /// When it was taken, in ms since the Unix epoch: files written since
    /// are protected.
    pub since_ms: u64,
    /// When it expires, in ms since the Unix epoch.
    pub expires_ms: u64,
    /// A pinned manifest version, kept with its files while the lease holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<u64>,
}

impl LeaseRecord {
    /// Whether the lease still holds at `now`.
    pub fn holds_at(&self, now: SystemTime) -> bool {
        millis(now) < self.expires_ms
    }
}

/// A lease this process holds; removed from the store when released or
/// dropped.
#[derive(Debug)]
pub struct Lease {
    backend: Arc<dyn Backend>,
    key: String,
    record: LeaseRecord,
}

/// Milliseconds since the Unix epoch (0 before it).
pub(crate) fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Store {
    /// Takes a lease on `collection` for `ttl`: until it expires, garbage
    /// collection removes no file written after now, and keeps manifest
    /// version `pin` (if given) with its files.
    pub fn take_lease(
        &self,
        collection: &str,
        holder: &str,
        ttl: Duration,
        pin: Option<u64>,
    ) -> Result<Lease> {
        let now = SystemTime::now();
        let record = LeaseRecord {
            holder: holder.to_owned(),
            since_ms: millis(now),
            expires_ms: millis(now + ttl),
            manifest: pin,
        };
        let key = collection_key(collection, &format!("leases/{}.json", unique_suffix()));
        let bytes = LEASE_FORMAT.encode(&self.backend.describe(&key), &record)?;
        if !self.backend.create(&key, &bytes)? {
            return Err(Error::Io {
                path: self.backend.describe(&key),
                source: io::Error::from(io::ErrorKind::AlreadyExists),
            });
        }
        Ok(Lease {
            backend: self.backend.clone(),
            key,
            record,
        })
    }

    /// Every lease record of `collection` (expired ones included).
    ///
    /// # Errors
    /// A lease file that cannot be read: a collector must then remove
    /// nothing, since the lease could protect any file.
    pub fn leases(&self, collection: &str) -> Result<Vec<LeaseRecord>> {
        let mut out = Vec::new();
        for file in self.backend.list(&collection_key(collection, "leases"))? {
            if !file.name.ends_with(".json") {
                continue;
            }
            let key = collection_key(collection, &format!("leases/{}", file.name));
            // None: released meanwhile.
            if let Some(bytes) = self.backend.read(&key)? {
                out.push(LEASE_FORMAT.decode(&self.backend.describe(&key), &bytes)?);
            }
        }
        Ok(out)
    }
}

impl Lease {
    /// The lease as stored.
    pub fn record(&self) -> &LeaseRecord {
        &self.record
    }

    /// Whether less than `margin` is left before the lease expires.
    pub fn expires_within(&self, margin: Duration) -> bool {
        !self.record.holds_at(SystemTime::now() + margin)
    }

    /// Extends the lease to `ttl` from now (files written before the
    /// renewal stay covered: `since` does not move).
    pub fn renew(&mut self, ttl: Duration) -> Result<()> {
        let mut record = self.record.clone();
        record.expires_ms = millis(SystemTime::now() + ttl);
        let bytes = LEASE_FORMAT.encode(&self.backend.describe(&self.key), &record)?;
        self.backend.replace(&self.key, &bytes)?;
        self.record = record;
        Ok(())
    }

    /// Renews the lease for `ttl` if less than half of `ttl` is left: what a
    /// writer calls right before publishing.
    pub fn keep_for_publish(&mut self, ttl: Duration) -> Result<()> {
        if self.expires_within(ttl / 2) {
            self.renew(ttl)?;
        }
        Ok(())
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Err(e) = self.backend.remove(&self.key) {
            warn!(lease = %self.key, error = %e, "releasing a lease");
        }
    }
}

#[cfg(test)]
mod tests {
    use eddy_model::CollectionDef;

    use super::*;

    #[test]
    fn leases_are_listed_until_released_and_renewals_keep_their_start() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path()).expect("open");
        store
            .create_collection(&CollectionDef::new("c", 4))
            .expect("create");
        let mut lease = store
            .take_lease("c", "seal", Duration::from_secs(60), Some(3))
            .expect("lease");
        let listed = store.leases("c").expect("leases");
        assert_eq!(listed, vec![lease.record().clone()]);
        assert!(listed[0].holds_at(SystemTime::now()));
        assert!(!listed[0].holds_at(SystemTime::now() + Duration::from_secs(61)));
        assert!(lease.expires_within(Duration::from_secs(120)));
        let since = lease.record().since_ms;
        lease.renew(Duration::from_secs(600)).expect("renew");
        assert!(!lease.expires_within(Duration::from_secs(120)));
        let listed = store.leases("c").expect("leases");
        assert_eq!(listed[0].since_ms, since);
        assert_eq!(listed[0].manifest, Some(3));
        drop(lease);
        assert!(store.leases("c").expect("leases").is_empty());
    }
}
