//! Pinned snapshots: one manifest version of a collection held for a job
//! that reads for minutes while ingest seals, merges and collects.
//!
//! A pin is the collection as of one manifest version: its sealed segments
//! and nothing of the tail, so it reflects exactly the events below that
//! version's offsets and answers the same on every read. A store lease
//! naming the version keeps garbage collection away from its files (on
//! this replica and any other that opens the version). Each use extends a
//! pin by the TTL; one unused for the TTL expires, and its lease goes.
//! `GetFlightInfo` pins; tickets, exchange commands and HTTP bodies name
//! the pin by its token (`snapshot`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use eddy_manifest::{Lease, Store};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::collection::Collection;
use crate::error::ApiError;

/// What a job gets back when it pins a collection.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PinInfo {
    /// The token requests pass as `snapshot`.
    pub token: String,
    /// The pinned manifest version.
    pub version: u64,
    /// Per partition, the first offset the snapshot does not reflect.
    pub offsets: BTreeMap<u32, i64>,
    /// How long an unused pin lives (each use extends it).
    pub ttl_ms: u64,
}

struct Pin {
    collection: Arc<Collection>,
    expires: Instant,
    lease: Lease,
}

/// The pins of one service.
pub struct Pins {
    pins: Mutex<HashMap<String, Pin>>,
    ttl: Duration,
    /// Pins held at most (each holds a snapshot's files open).
    max: usize,
}

impl std::fmt::Debug for Pins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pins")
            .field("held", &self.pins.lock().len())
            .field("ttl", &self.ttl)
            .finish()
    }
}

/// A token nobody can guess from another: 128 random bits, hex.
fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

impl Pins {
    /// Pins that live `ttl` unused, at most `max` at once.
    pub fn new(ttl: Duration, max: usize) -> Self {
        Self {
            pins: Mutex::new(HashMap::new()),
            ttl,
            max: max.max(1),
        }
    }

    /// Pins the snapshot `live` serves now.
    pub fn pin(&self, store: &Store, live: &Collection) -> Result<PinInfo, ApiError> {
        self.expire();
        if self.pins.lock().len() >= self.max {
            return Err(ApiError::Overloaded(format!(
                "{} snapshots are pinned, the limit; let some expire",
                self.max
            )));
        }
        let snapshot = live.snapshot();
        let lease = store
            .take_lease(live.name(), "snapshot", self.ttl, Some(snapshot.version))
            .map_err(|e| ApiError::Internal(format!("taking the snapshot lease: {e}")))?;
        let info = PinInfo {
            token: new_token(),
            version: snapshot.version,
            offsets: snapshot.cutoffs.clone(),
            ttl_ms: self.ttl.as_millis() as u64,
        };
        let pinned = Arc::new(Collection::pinned(live.def().clone(), snapshot));
        self.pins.lock().insert(
            info.token.clone(),
            Pin {
                collection: pinned,
                expires: Instant::now() + self.ttl,
                lease,
            },
        );
        Ok(info)
    }

    /// The pinned collection `token` names (extending it), if it is one of
    /// `collection`'s and has not expired.
    pub fn get(&self, collection: &str, token: &str) -> Result<Arc<Collection>, ApiError> {
        self.expire();
        let mut pins = self.pins.lock();
        let pin = pins
            .get_mut(token)
            .filter(|p| p.collection.name() == collection)
            .ok_or_else(|| {
                ApiError::NotFound(format!(
                    "snapshot {token:?} of {collection:?} is unknown or expired: pin a new one (GetFlightInfo)"
                ))
            })?;
        pin.expires = Instant::now() + self.ttl;
        if pin.lease.expires_within(self.ttl / 2) {
            if let Err(e) = pin.lease.renew(self.ttl) {
                tracing::warn!(collection, error = %e, "renewing a snapshot lease");
            }
        }
        Ok(pin.collection.clone())
    }

    /// Drops pins unused for the TTL (and with them their leases).
    pub fn expire(&self) {
        let now = Instant::now();
        self.pins.lock().retain(|_, p| p.expires > now);
    }

    /// Pins held now.
    pub fn len(&self) -> usize {
        self.pins.lock().len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use eddy_model::CollectionDef;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_pin_holds_a_lease_until_it_expires_unused() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path()).expect("store");
        let def = CollectionDef::new("p", 2);
        store.create_collection(&def).expect("collection");
        let live = Collection::new(def);
        let pins = Pins::new(Duration::from_secs(60), 2);
        let info = pins.pin(&store, &live).expect("pinned");
        assert_eq!(info.token.len(), 32);
        let leases = store.leases("p").expect("leases");
        assert_eq!(leases.len(), 1);
        assert_eq!(leases[0].manifest, Some(info.version));

        // A use extends it; the wrong collection or token finds nothing.
        tokio::time::advance(Duration::from_secs(50)).await;
        assert!(pins.get("p", &info.token).is_ok());
        tokio::time::advance(Duration::from_secs(50)).await;
        assert!(pins.get("p", &info.token).is_ok(), "extended by the use");
        assert!(pins.get("other", &info.token).is_err());
        assert!(pins.get("p", "nope").is_err());

        // At the limit, a third is refused.
        let second = pins.pin(&store, &live).expect("second");
        assert_ne!(second.token, info.token);
        assert_eq!(
            pins.pin(&store, &live)
                .expect_err("over the limit")
                .status()
                .as_u16(),
            429
        );

        tokio::time::advance(Duration::from_secs(61)).await;
        pins.expire();
        assert!(pins.is_empty());
        assert!(
            store.leases("p").expect("leases").is_empty(),
            "leases go with their pins"
        );
        let err = pins.get("p", &info.token).expect_err("expired");
        assert_eq!(err.status().as_u16(), 404);
    }
}
