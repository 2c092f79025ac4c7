//! Pinned snapshots: one manifest version of a collection held for a job
//! that reads for minutes while ingest seals, merges and collects.
//!
//! A pin is the collection as it is served at that moment: one manifest
//! version's sealed segments plus a frozen copy of the tail, so it
//! reflects exactly the events below the pinned offsets and answers the
//! same on every read, while the live tail is sealed and pruned. The
//! copies of the tail count against a byte budget (a pin that would exceed
//! it is refused with 429), so pins cannot hold memory without bound. A store lease
//! naming the version keeps garbage collection away from its files (on
//! this replica and any other that opens the version). Each use extends a
//! pin by the TTL; one unused for the TTL expires, and its lease goes.
//! `GetFlightInfo` pins; tickets, exchange commands and HTTP bodies name
//! the pin by its token (`snapshot`). On a split collection this node does
//! not serve whole, the pin also holds pins peers took of the other shards
//! (see [`crate::fanout::pin`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use eddy_manifest::{Lease, Store};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::collection::Collection;
use crate::error::ApiError;
use crate::fanout::pin::RemotePin;

/// What a job gets back when it pins a collection.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PinInfo {
    /// The token requests pass as `snapshot`.
    pub token: String,
    /// The pinned manifest version.
    pub version: u64,
    /// Per partition, the first offset the snapshot does not reflect
    /// (the sealed segments' offsets, or the tail's beyond them).
    pub offsets: BTreeMap<u32, i64>,
    /// Rows of the tail the pin holds (events not yet sealed when pinned).
    pub tail_rows: usize,
    /// How long an unused pin lives (each use extends it).
    pub ttl_ms: u64,
    /// On a split collection this node does not serve whole, the peers
    /// holding the pins of the other shards (their offsets and tail rows
    /// are in the fields above).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remote: Vec<RemotePin>,
}

struct Pin {
    collection: Arc<Collection>,
    expires: Instant,
    /// One lease per manifest chain the snapshot holds (one per served
    /// shard of a split collection).
    leases: Vec<Lease>,
    /// Bytes of the tail copy it holds.
    tail_bytes: usize,
}

/// The pins of one service.
pub struct Pins {
    pins: Mutex<HashMap<String, Pin>>,
    ttl: Duration,
    /// Pins held at most (each holds a snapshot's files open).
    max: usize,
    /// Bytes of tail copies all pins may hold together.
    max_tail_bytes: usize,
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
    /// Pins that live `ttl` unused, at most `max` at once, their tail
    /// copies holding at most `max_tail_bytes` together.
    pub fn new(ttl: Duration, max: usize, max_tail_bytes: usize) -> Self {
        Self {
            pins: Mutex::new(HashMap::new()),
            ttl,
            max: max.max(1),
            max_tail_bytes,
        }
    }

    /// Pins what `live` serves now: its snapshot and a copy of its tail,
    /// with `remote`, the pins peers took of the shards it lacks (and what
    /// they reported).
    pub fn pin(
        &self,
        store: &Store,
        live: &Collection,
        remote: Vec<(RemotePin, PinInfo)>,
    ) -> Result<PinInfo, ApiError> {
        self.expire();
        let def = live.def();
        let mut offsets = BTreeMap::new();
        let mut remote_rows = 0;
        for (pin, info) in &remote {
            // A peer pins every shard it serves; this pin reads the asked ones.
            offsets.extend(
                info.offsets
                    .iter()
                    .filter(|(p, _)| pin.shards.contains(&def.shard_of(**p))),
            );
            remote_rows += info.tail_rows;
        }
        let remote: Vec<RemotePin> = remote.into_iter().map(|(pin, _)| pin).collect();
        let frozen = live.frozen().with_remote_pins(remote.clone());
        let (tail_rows, tail_bytes) = (frozen.tail_rows(), frozen.tail_size().1);
        // Checked and inserted under one lock, so racing pins cannot
        // overshoot the limits together.
        let mut pins = self.pins.lock();
        if pins.len() >= self.max {
            return Err(ApiError::Overloaded(format!(
                "{} snapshots are pinned, the limit; let some expire",
                self.max
            )));
        }
        let held: usize = pins.values().map(|p| p.tail_bytes).sum();
        if held.saturating_add(tail_bytes) > self.max_tail_bytes {
            return Err(ApiError::Overloaded(format!(
                "pinned snapshots hold {held} bytes of tail copies and this one needs {tail_bytes} more, over the {} byte budget; let some expire or pin once ingest has sealed",
                self.max_tail_bytes
            )));
        }
        let snapshot = frozen.snapshot();
        let version = snapshot.version;
        let mut leases = Vec::with_capacity(snapshot.chains.len().max(1));
        let chains: Vec<(&str, u64)> = if snapshot.chains.is_empty() {
            vec![(live.name(), version)]
        } else {
            snapshot
                .chains
                .iter()
                .map(|(c, v)| (c.as_str(), *v))
                .collect()
        };
        for (chain, chain_version) in chains {
            leases.push(
                store
                    .take_lease(chain, "snapshot", self.ttl, Some(chain_version))
                    .map_err(|e| ApiError::Internal(format!("taking the snapshot lease: {e}")))?,
            );
        }
        offsets.extend(frozen.visible_offsets());
        let info = PinInfo {
            token: new_token(),
            version,
            offsets,
            tail_rows: tail_rows + remote_rows,
            ttl_ms: self.ttl.as_millis() as u64,
            remote,
        };
        pins.insert(
            info.token.clone(),
            Pin {
                collection: Arc::new(frozen),
                expires: Instant::now() + self.ttl,
                leases,
                tail_bytes,
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
        for lease in &mut pin.leases {
            if !lease.expires_within(self.ttl / 2) {
                continue;
            }
            if let Err(e) = lease.renew(self.ttl) {
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
    use eddy_model::{CollectionDef, PointId};

    use super::*;
    use crate::collection::Snapshot;

    #[tokio::test(start_paused = true)]
    async fn a_pin_holds_a_lease_until_it_expires_unused() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path()).expect("store");
        let def = CollectionDef::new("p", 2);
        store.create_collection(&def).expect("collection");
        let live = Collection::new(def);
        let pins = Pins::new(Duration::from_secs(60), 2, 1 << 20);
        let info = pins.pin(&store, &live, Vec::new()).expect("pinned");
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
        let second = pins.pin(&store, &live, Vec::new()).expect("second");
        assert_ne!(second.token, info.token);
        assert_eq!(
            pins.pin(&store, &live, Vec::new())
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

    #[tokio::test(start_paused = true)]
    async fn a_pin_holds_the_tail_as_it_was() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path()).expect("store");
        let def = CollectionDef::new("t", 2);
        store.create_collection(&def).expect("collection");
        let live = Collection::new(def);
        live.apply_tail(|served| {
            served
                .tail
                .upsert(PointId::Num(1), &[1.0, 0.0], b"{}", 0, 0);
            served
                .tail
                .upsert(PointId::Num(2), &[0.0, 1.0], b"{}", 0, 1);
            served.applied.insert(0, 2);
        });
        let pins = Pins::new(Duration::from_secs(60), 4, 1 << 20);
        let info = pins.pin(&store, &live, Vec::new()).expect("pinned");
        assert_eq!(info.tail_rows, 2);
        assert_eq!(info.offsets, BTreeMap::from([(0, 2)]));

        // The live collection seals those rows (its tail is pruned) and
        // applies a newer event; the pin still answers as it was.
        live.install(Snapshot {
            version: 1,
            cutoffs: BTreeMap::from([(0, 2)]),
            ..Snapshot::default()
        });
        live.apply_tail(|served| {
            served
                .tail
                .upsert(PointId::Num(3), &[1.0, 1.0], b"{}", 0, 2);
            served.applied.insert(0, 3);
        });
        assert_eq!(live.tail_rows(), 1);
        let pinned = pins.get("t", &info.token).expect("pin");
        assert_eq!(pinned.count(), (2, BTreeMap::from([(0, 2)])));
        assert_eq!(pinned.snapshot().version, 0);

        // Tail copies count against the byte budget.
        let tight = Pins::new(Duration::from_secs(60), 4, 16);
        let err = tight
            .pin(&store, &live, Vec::new())
            .expect_err("over the byte budget");
        assert_eq!(err.status().as_u16(), 429);
        assert!(err.to_string().contains("byte budget"), "{err}");
        assert!(tight.is_empty());
    }

    /// A pin across shards reports the peers' offsets of the shards they
    /// pinned (and only those) with its own, and its tail rows too; its
    /// reads know the peers' pins.
    #[tokio::test(start_paused = true)]
    async fn a_pin_across_shards_holds_its_peers_pins() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path()).expect("store");
        let mut def = CollectionDef::new("s", 2);
        def.shards = 2;
        store.create_collection(&def).expect("collection");
        let live = Collection::serving(def, [0]);
        live.apply_tail(|served| {
            served
                .tail
                .upsert(PointId::Num(1), &[1.0, 0.0], b"{}", 0, 4);
            served.applied.insert(0, 5);
        });
        let remote = RemotePin {
            peer: "http://peer:1".to_owned(),
            shards: vec![1],
            token: "peer-token".to_owned(),
            version: 9,
        };
        let peer_info = PinInfo {
            token: "peer-token".to_owned(),
            version: 9,
            // The peer serves both shards; partition 0 is this node's.
            offsets: BTreeMap::from([(0, 2), (1, 7), (3, 8)]),
            tail_rows: 3,
            ttl_ms: 1_000,
            remote: Vec::new(),
        };
        let pins = Pins::new(Duration::from_secs(60), 4, 1 << 20);
        let info = pins
            .pin(&store, &live, vec![(remote.clone(), peer_info)])
            .expect("pinned");
        assert_eq!(info.offsets, BTreeMap::from([(0, 5), (1, 7), (3, 8)]));
        assert_eq!(info.tail_rows, 4);
        assert_eq!(info.remote, vec![remote.clone()]);
        let shown = serde_json::to_string(&info).expect("json");
        assert!(
            !shown.contains("peer-token"),
            "a peer's token stays here: {shown}"
        );
        let pinned = pins.get("s", &info.token).expect("pin");
        assert_eq!(pinned.remote_pins(), Some(&[remote][..]));
        assert_eq!(
            live.remote_pins(),
            None,
            "the live collection is not pinned"
        );
    }
}
