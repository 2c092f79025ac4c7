//! Fan-out: a search on a split collection that this node does not serve
//! whole goes, for the shards it lacks, to peers that serve them (the
//! Flight action `search_shards`, see [`leg`]), and their answers are
//! merged with the local one into one top-k; a count likewise
//! (`count_shards`, see [`count`]), the counts added up; a point read and
//! a scroll page too (`get_point_shards`, `scroll_shards`, see [`read`]).
//!
//! Peers (`--peers`, Flight URLs of other eddy-query nodes) are asked every
//! `--peer-refresh-ms` which shards they serve (the action
//! `served_shards`). A leg that fails is asked again of another peer that
//! serves its shards (a replica takes over a dead node's shards at once,
//! and the failed peer is skipped until it answers a refresh again); shards
//! no reachable peer serves are missing: the search fails with 503, or with
//! `allow_partial` answers without them, marked partial. Before it gives a
//! shard up, a search asks every peer again what it serves (searches at
//! the same time share one round of asking), so a node that came up since
//! the last refresh answers at once. With `--peer-discovery` the peers
//! are also found in the store's node registry (see [`discovery`]). A leg
//! slower than most is hedged:
//! asked of a second peer serving its shards, the first answer kept (see
//! [`hedge`]). A pinned snapshot of a split collection holds pins on the
//! peers serving the shards this node lacks, and its reads go to those
//! peers alone (see [`pin`]).

pub mod count;
pub mod discovery;
#[cfg(test)]
mod fake_peer;
pub mod hedge;
pub mod leg;
mod peer;
pub mod pin;
mod plan;
pub mod read;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::RwLock;
use tracing::{debug, info, warn};

use crate::collection::Collection;
use crate::error::ApiError;
use crate::metrics::QueryMetrics;
use crate::prepared::{PreparedSearch, QueryBatch};
use crate::results::Hit;
use hedge::{HedgePolicy, Hedger};
use leg::{LegAnswer, LegRequest};
use peer::{call_peer, Peer, View};

/// The Flight action a node answers with the shards it serves.
pub const SERVED_SHARDS: &str = "served_shards";
/// The Flight action a node answers with a search of some of its shards.
pub const SEARCH_SHARDS: &str = "search_shards";
/// The Flight action a node answers with a count of some of its shards.
pub const COUNT_SHARDS: &str = "count_shards";
/// The Flight action a node answers with a point of some of its shards.
pub const GET_POINT_SHARDS: &str = "get_point_shards";
/// The Flight action a node answers with a scroll page of some of its
/// shards.
pub const SCROLL_SHARDS: &str = "scroll_shards";
/// The Flight action a node answers by pinning its shards (for a pinned
/// snapshot across shards, see [`pin`]).
pub const PIN_SHARDS: &str = "pin_shards";

/// How to reach the peers.
#[derive(Clone, Default)]
pub struct PeerOptions {
    /// Their Flight URLs (`http://host:port`, or `https://` with `ca_pem`).
    pub urls: Vec<String>,
    /// The API key presented to them (a read key), if they want one.
    pub key: Option<String>,
    /// The CA that signed their TLS certificates (PEM).
    pub ca_pem: Option<Vec<u8>>,
    /// How often they are asked which shards they serve.
    pub refresh: Duration,
    /// Longest one call to a peer may take.
    pub timeout: Duration,
    /// When a slow leg is asked of a second peer as well.
    pub hedge: HedgePolicy,
}

impl std::fmt::Debug for PeerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerOptions")
            .field("urls", &self.urls)
            .field("key", &self.key.as_ref().map(|_| "<redacted>"))
            .field("refresh", &self.refresh)
            .field("timeout", &self.timeout)
            .field("hedge", &self.hedge)
            .finish()
    }
}

/// The peers at one moment: legs of one call index into it.
type PeerList = Arc<Vec<Arc<Peer>>>;

/// The other query nodes this one fans searches out to.
#[derive(Debug)]
pub struct Peers {
    /// The current peers: `--peers`, and those found in the store's node
    /// registry (see [`discovery`]).
    peers: RwLock<PeerList>,
    /// How new peers are connected.
    connect: PeerOptions,
    key: Option<String>,
    refresh: Duration,
    /// Rotates the first choice among equal peers, spreading legs.
    next: AtomicUsize,
    /// When the newest refresh of every peer started.
    refreshed: parking_lot::Mutex<Option<Instant>>,
    /// Held by a search's refresh, so concurrent ones share one.
    refreshing: tokio::sync::Mutex<()>,
    /// When legs are hedged.
    hedger: Arc<Hedger>,
    metrics: QueryMetrics,
}

/// What the fan-out of one search gathered.
#[derive(Debug, Default)]
pub struct Gathered {
    /// Per query, the hits of every leg that answered.
    pub hits: Vec<Vec<Hit>>,
    /// Per partition of the shards that answered, the offsets reflected.
    pub offsets: BTreeMap<u32, i64>,
    /// Shards no peer answered for.
    pub missing: Vec<u32>,
}

impl Peers {
    /// Peers at `opts.urls` (connected lazily); legs are counted in
    /// `metrics`.
    pub fn new(opts: &PeerOptions, metrics: QueryMetrics) -> Result<Self, ApiError> {
        let peers = opts
            .urls
            .iter()
            .map(|url| Peer::connect(url, opts).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            peers: RwLock::new(Arc::new(peers)),
            connect: opts.clone(),
            key: opts.key.clone(),
            refresh: opts.refresh,
            next: AtomicUsize::new(0),
            refreshed: parking_lot::Mutex::new(None),
            refreshing: tokio::sync::Mutex::new(()),
            hedger: Arc::new(Hedger::new(opts.hedge)),
            metrics,
        })
    }

    /// The peers now.
    fn list(&self) -> PeerList {
        self.peers.read().clone()
    }

    /// Asks every peer what it serves, every refresh period, until the
    /// runtime stops (run it as a task).
    pub async fn keep_refreshed(self: Arc<Self>) {
        loop {
            self.refresh_all().await;
            tokio::time::sleep(self.refresh).await;
        }
    }

    /// Asks every peer, at once, what it serves.
    pub async fn refresh_all(&self) {
        let started = Instant::now();
        let peers = self.list();
        let asks = peers.iter().map(|p| self.refresh_one(p));
        futures::future::join_all(asks).await;
        let mut refreshed = self.refreshed.lock();
        if refreshed.is_none_or(|at| at < started) {
            *refreshed = Some(started);
        }
    }

    /// Refreshes every peer's view for a search that began at `began` and
    /// found no peer for a shard, unless a refresh started since it began
    /// (concurrent searches share one).
    async fn refresh_for(&self, began: Instant) {
        let _one = self.refreshing.lock().await;
        if self.refreshed.lock().is_none_or(|at| at < began) {
            self.refresh_all().await;
        }
    }

    async fn refresh_one(&self, peer: &Peer) {
        let answer = self.call(peer, SERVED_SHARDS, Vec::new()).await;
        let served = answer.and_then(|bytes| {
            serde_json::from_slice::<HashMap<String, Vec<u32>>>(&bytes)
                .map_err(|e| ApiError::Internal(format!("a peer's served_shards: {e}")))
        });
        let mut view = peer.view.write();
        match served {
            Ok(served) => {
                debug!(peer = %peer.url, ?served, "peer refreshed");
                if !view.reachable {
                    info!(peer = %peer.url, collections = served.len(), "peer reachable");
                }
                *view = View {
                    reachable: true,
                    served,
                };
            }
            Err(e) => {
                if view.reachable {
                    warn!(peer = %peer.url, error = %e, "peer unreachable: its shards are asked of others");
                } else {
                    debug!(peer = %peer.url, error = %e, "peer still unreachable");
                }
                view.reachable = false;
            }
        }
    }

    /// Calls `action` on `peer` with `body`; its one answer.
    async fn call(&self, peer: &Peer, action: &str, body: Vec<u8>) -> Result<Bytes, ApiError> {
        call_peer(
            peer.channel.clone(),
            self.key.clone(),
            peer.url.clone(),
            action.to_owned(),
            body,
        )
        .await
    }

    /// Searches `shards` of `collection` on peers: each leg asked of a
    /// peer serving its shards, a failed leg asked again of another; the
    /// hits of every answer (unmerged) and the shards nobody answered for.
    /// A leg refused as a bad request fails the whole search.
    pub async fn search(
        &self,
        collection: &Collection,
        shards: &[u32],
        search: &PreparedSearch,
        queries: &QueryBatch,
    ) -> Result<Gathered, ApiError> {
        let mut out = Gathered {
            hits: vec![Vec::new(); queries.len()],
            ..Gathered::default()
        };
        let (name, shard_count) = (collection.name(), collection.def().shards);
        out.missing = self
            .gather(
                collection,
                shards,
                SEARCH_SHARDS,
                |leg_shards, snapshot| {
                    let request = LegRequest::new(name, leg_shards, search, queries, shard_count)
                        .at(snapshot);
                    serde_json::to_vec(&request).map_err(|e| ApiError::Internal(e.to_string()))
                },
                |answer: LegAnswer, _: &str, _: &[u32]| {
                    out.offsets
                        .extend(answer.offsets.iter().map(|(p, o)| (*p, *o)));
                    for (all, hits) in out.hits.iter_mut().zip(answer.into_hits()) {
                        all.extend(hits);
                    }
                },
            )
            .await?;
        Ok(out)
    }

    /// Asks peers `action` for `shards` of `collection`: each leg (body
    /// `body_for(its shards, None)`) asked of a peer serving its shards, a
    /// failed leg asked again of another, every answer handed to `take`
    /// (with the peer's URL and the leg's shards). Returns the shards
    /// nobody answered for. A leg refused as a bad request fails the whole
    /// call. On a pinned snapshot the legs go to the peers holding its
    /// pins instead, naming their tokens ([`Peers::gather_pinned`]).
    async fn gather<A: serde::de::DeserializeOwned>(
        &self,
        collection: &Collection,
        shards: &[u32],
        action: &str,
        body_for: impl Fn(&[u32], Option<&str>) -> Result<Vec<u8>, ApiError>,
        mut take: impl FnMut(A, &str, &[u32]),
    ) -> Result<Vec<u32>, ApiError> {
        if let Some(pins) = collection.remote_pins() {
            return self
                .gather_pinned(pins, shards, action, body_for, take)
                .await;
        }
        let collection = collection.name();
        let began = Instant::now();
        let peers = self.list();
        let mut left: BTreeSet<u32> = shards.iter().copied().collect();
        let mut tried = BTreeSet::new();
        let mut refreshed = false;
        while !left.is_empty() {
            let plan = self.plan(&peers, collection, &left, &tried);
            if plan.is_empty() {
                // The views may be older than a node that came up since:
                // ask again, once, before giving the shards up.
                if refreshed {
                    break;
                }
                self.refresh_for(began).await;
                refreshed = true;
                continue;
            }
            let legs = plan.iter().map(|(peer, leg_shards)| {
                let body = body_for(leg_shards, None);
                // A second pin would only hold memory until it expired.
                let backup = (action != PIN_SHARDS)
                    .then(|| Self::backup(&peers, collection, leg_shards, *peer, &tried))
                    .flatten();
                let peers = &peers;
                async move {
                    let body = match body {
                        Ok(body) => body,
                        Err(e) => return (Err(e), *peer),
                    };
                    let started = Instant::now();
                    let (bytes, by) = self.call_hedged(peers, action, *peer, backup, body).await;
                    let answer = bytes.and_then(|bytes| {
                        serde_json::from_slice::<A>(&bytes).map_err(|e| {
                            ApiError::Unavailable(format!("a peer's {action} answer: {e}"))
                        })
                    });
                    if answer.is_ok() {
                        self.metrics
                            .fanout_leg_latency
                            .with_label_values(&[action])
                            .observe(started.elapsed().as_secs_f64());
                    }
                    (answer, by)
                }
            });
            let answers = futures::future::join_all(legs).await;
            for ((peer, leg_shards), (answer, by)) in plan.into_iter().zip(answers) {
                tried.insert(peer);
                tried.insert(by);
                self.count_leg(action, &answer);
                match answer {
                    Ok(answer) => {
                        for s in &leg_shards {
                            left.remove(s);
                        }
                        take(answer, &peers[by].url, &leg_shards);
                    }
                    Err(e @ ApiError::BadRequest(_)) => return Err(e),
                    Err(e) => {
                        let p = &peers[by];
                        warn!(peer = %p.url, shards = ?leg_shards, error = %e, "a fan-out leg failed: asking another peer");
                        p.view.write().reachable = false;
                    }
                }
            }
        }
        self.count_missing(action, left.len());
        Ok(left.into_iter().collect())
    }

    /// Counts a leg of `action` by its outcome: answered, refused (a bad
    /// request, or an unknown collection or snapshot) or failed.
    fn count_leg<A>(&self, action: &str, answer: &Result<A, ApiError>) {
        let outcome = match answer {
            Ok(_) => "ok",
            Err(ApiError::BadRequest(_) | ApiError::NotFound(_)) => "refused",
            Err(_) => "failed",
        };
        self.metrics
            .fanout_legs
            .with_label_values(&[action, outcome])
            .inc();
    }

    /// Counts `missing` shards no peer answered `action` for.
    fn count_missing(&self, action: &str, missing: usize) {
        if missing > 0 {
            self.metrics
                .fanout_missing_shards
                .with_label_values(&[action])
                .inc_by(missing as u64);
        }
    }
}
