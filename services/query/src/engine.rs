//! The engine: the served collections, their manifest watchers and tails,
//! and the async entry point of every search ([`search`]).

mod search;

pub use search::within;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use eddy_kafka::KafkaSettings;
use eddy_manifest::Store;
use eddy_model::CollectionDef;
use eddy_segment::Residency;
use parking_lot::RwLock;
use tracing::{error, info};

use crate::admission::{Admission, RequestSlots};
use crate::collection::Collection;
use crate::cpu::SearchPool;
use crate::error::ApiError;
use crate::fanout::{PeerOptions, Peers};
use crate::metrics::QueryMetrics;
use crate::pins::{PinInfo, Pins};
use crate::policy::CollectionPolicy;
use crate::recall::RecallEstimator;
use crate::tail::{run_tail, TailLimits};
use crate::watcher::watch_manifests;

/// Requests of at most this many queries (and not exact) run on the task
/// that received them instead of the search pool.
pub const INLINE_MAX_QUERIES: usize = 1;

/// How an [`Engine`] serves: its tail consumer, search pool, polling and limits.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Kafka settings of the tail consumers.
    pub kafka: KafkaSettings,
    /// Search threads (at least one).
    pub search_threads: usize,
    /// How often to look for a new manifest version.
    pub manifest_poll: Duration,
    /// Longest a request waits for its `min_offsets`.
    pub max_wait: Duration,
    /// Rows the tail holds at most; at the bound it stops reading and the
    /// engine reports not ready.
    pub max_tail_rows: usize,
    /// Approximate bytes the tail holds at most (same effect).
    pub max_tail_bytes: usize,
    /// Where segment and index files are held while served.
    pub residency: Residency,
    /// Query vectors admitted at once ([`Admission`]).
    pub max_queued_queries: usize,
    /// Longest a search may take.
    pub request_timeout: Duration,
    /// Requests served at once ([`RequestSlots`]).
    pub max_concurrent_requests: usize,
    /// Longest a DoExchange waits for its client's next batch.
    pub exchange_idle: Duration,
    /// How long an unused pinned snapshot lives.
    pub snapshot_ttl: Duration,
    /// Share of live queries the recall estimate searches again (0 = off).
    pub recall_sample_rate: f64,
    /// Share of one core the recall estimate's searches may take.
    pub recall_cpu_share: f64,
    /// Which collections the APIs may create.
    pub policy: CollectionPolicy,
    /// Shards of each split collection served here (`--shards`); `None` =
    /// all.
    pub shards: Option<Vec<u32>>,
    /// The other query nodes searches fan out to (`--peers`).
    pub peers: PeerOptions,
    /// Whether peers are also found in the store's node registry (a
    /// fan-out is set up even without `--peers`).
    pub peer_discovery: bool,
}

/// Pinned snapshots held at most.
pub const MAX_PINNED_SNAPSHOTS: usize = 1_024;

/// Shared state of the query service.
pub struct Engine {
    store: Store,
    collections: RwLock<HashMap<String, Arc<Collection>>>,
    pool: SearchPool,
    /// Metric handles.
    pub metrics: QueryMetrics,
    admission: Admission,
    /// Requests served at once, over both doors.
    pub requests: RequestSlots,
    /// Pinned snapshots.
    pub pins: Pins,
    /// The online recall estimate.
    pub recall: RecallEstimator,
    /// The nodes serving the shards this one does not (none configured:
    /// no fan-out).
    peers: Option<Arc<Peers>>,
    /// The runtime the engine was made on, where collection watchers run
    /// whichever thread starts serving a collection (an HTTP thread's
    /// runtime ends with the service's HTTP side).
    runtime: Option<tokio::runtime::Handle>,
    opts: EngineOptions,
}

impl Engine {
    /// An engine over `store`; call [`Engine::refresh`] to load collections.
    /// Made within a tokio runtime, it runs its watchers there.
    pub fn new(
        store: Store,
        metrics: QueryMetrics,
        opts: EngineOptions,
    ) -> Result<Arc<Self>, crate::error::Error> {
        let pool = SearchPool::new(opts.search_threads)?;
        let peers = if opts.peers.urls.is_empty() && !opts.peer_discovery {
            None
        } else {
            Some(Arc::new(
                Peers::new(&opts.peers, metrics.clone())
                    .map_err(|e| crate::error::Error::Peers(e.to_string()))?,
            ))
        };
        let admission = Admission::new(
            opts.max_queued_queries,
            metrics.queued_queries.with_label_values::<&str>(&[]),
        );
        let recall = RecallEstimator::start(
            opts.recall_sample_rate,
            opts.recall_cpu_share,
            metrics.clone(),
            metrics.queued_queries.with_label_values::<&str>(&[]),
        );
        Ok(Arc::new(Self {
            store,
            collections: RwLock::new(HashMap::new()),
            pool,
            metrics,
            admission,
            requests: RequestSlots::new(opts.max_concurrent_requests),
            pins: Pins::new(opts.snapshot_ttl, MAX_PINNED_SNAPSHOTS, opts.max_tail_bytes),
            recall,
            peers,
            runtime: tokio::runtime::Handle::try_current().ok(),
            opts,
        }))
    }

    /// The peers searches fan out to, if any are configured.
    pub fn peers(&self) -> Option<&Arc<Peers>> {
        self.peers.as_ref()
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// How it serves.
    pub fn options(&self) -> &EngineOptions {
        &self.opts
    }

    /// The served collection `name`.
    pub fn collection(&self, name: &str) -> Result<Arc<Collection>, ApiError> {
        self.collections
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| ApiError::NotFound(format!("collection {name:?} does not exist")))
    }

    /// The collection `name` as a request reads it: live, or the pinned
    /// snapshot `snapshot` names.
    pub fn collection_at(
        &self,
        name: &str,
        snapshot: Option<&str>,
    ) -> Result<Arc<Collection>, ApiError> {
        match snapshot {
            None => self.collection(name),
            Some(token) => self.pins.get(name, token),
        }
    }

    /// Pins what collection `name` serves now (see [`crate::pins`]); on a
    /// split collection this node does not serve whole, with pins of the
    /// other shards on peers serving them (see [`crate::fanout::pin`]).
    /// Refused with 503 when a shard has no peer to pin it.
    pub async fn pin(self: &Arc<Self>, name: &str) -> Result<(PinInfo, Arc<Collection>), ApiError> {
        let live = self.collection(name)?;
        let missing = live.missing_shards();
        let remote = match (&self.peers, missing.is_empty()) {
            (Some(peers), false) => {
                let (remote, unpinned) = peers.pin(&live, &missing).await?;
                if !unpinned.is_empty() {
                    return Err(self.shards_unreachable(&live, &unpinned));
                }
                remote
            }
            // Without peers the pin holds this node's shards; its reads
            // name the others missing (503, or partial when allowed).
            _ => Vec::new(),
        };
        let info = self.pin_here(live, remote).await?;
        let pinned = self.pins.get(name, &info.token)?;
        Ok((info, pinned))
    }

    /// Pins what `live` serves on this node, with `remote`, the pins peers
    /// took of the shards it lacks. The tail copy and the store lease run
    /// off the async workers.
    pub async fn pin_here(
        self: &Arc<Self>,
        live: Arc<Collection>,
        remote: Vec<(crate::fanout::pin::RemotePin, PinInfo)>,
    ) -> Result<PinInfo, ApiError> {
        let engine = self.clone();
        store_io(move || engine.pins.pin(&engine.store, &live, remote)).await
    }

    /// Every served collection, by name.
    pub fn collections(&self) -> Vec<Arc<Collection>> {
        let mut all: Vec<_> = self.collections.read().values().cloned().collect();
        all.sort_by(|a, b| a.name().cmp(b.name()));
        all
    }

    /// Collections that do not serve well, with the reason: still loading,
    /// or a tail at its bound (ingest is not sealing).
    pub fn not_ready(&self) -> Vec<(String, String)> {
        self.collections()
            .iter()
            .filter_map(|c| {
                let reason = if !c.is_ready() {
                    "loading: first snapshot or tail assignment pending".to_owned()
                } else if c.is_tail_full() {
                    let (rows, bytes) = c.tail_size();
                    format!(
                        "the tail holds {rows} rows / {bytes} bytes, at its bound (--max-tail-rows {}, --max-tail-bytes {}) and reads no further: is eddy-ingest sealing?",
                        self.opts.max_tail_rows, self.opts.max_tail_bytes
                    )
                } else {
                    return None;
                };
                Some((c.name().to_owned(), reason))
            })
            .collect()
    }

    /// Collections that serve only part of their data, with the reason
    /// (quarantined segments).
    pub fn degraded(&self) -> Vec<(String, String)> {
        self.collections()
            .iter()
            .filter_map(|c| c.degraded().map(|why| (c.name().to_owned(), why)))
            .collect()
    }

    /// A collection's definition, status and online recall estimate (null
    /// until sampled queries have been measured), as both APIs describe it.
    pub fn collection_info(&self, c: &Collection) -> serde_json::Value {
        let def = c.def();
        serde_json::json!({
            "name": def.name,
            "topic": def.topic,
            "dimension": def.dimension,
            "metric": def.metric,
            "id_type": def.id_type,
            "payload_fields": def.payload_fields,
            "shards": def.shards,
            "format": def.format,
            "served_shards": c.shards(),
            "status": c.status(),
            "recall_estimate": self.recall.estimate(&def.name),
        })
    }

    /// Creates a collection in the store (idempotent) if the policy allows
    /// it (topic allow-list, collection cap) and starts serving it; returns
    /// whether it was created.
    pub fn create_collection(self: &Arc<Self>, def: CollectionDef) -> Result<bool, ApiError> {
        let existing = self.collections();
        let exists = existing.iter().any(|e| e.def().name == def.name);
        self.opts.policy.check(&def, existing.len(), exists)?;
        let outcome = self.store.create_collection(&def)?;
        self.refresh();
        Ok(outcome == eddy_manifest::CreateOutcome::Created)
    }

    /// Drops collection `name` from the store (see `eddy_manifest`'s drop:
    /// ingest stops its worker, every query replica its tail, the files go
    /// after the GC grace) and stops serving it here. A collection that
    /// does not exist, or was dropped already, is not found.
    pub fn drop_collection(self: &Arc<Self>, name: &str, by: &str) -> Result<(), ApiError> {
        let not_found = |why: &str| ApiError::NotFound(format!("collection {name:?} {why}"));
        match self.store.drop_collection(name, by) {
            Ok(true) => {}
            Ok(false) => return Err(not_found("was dropped already")),
            Err(eddy_manifest::Error::UnknownCollection(_)) => {
                return Err(not_found("does not exist"))
            }
            Err(other) => return Err(ApiError::from(other)),
        }
        self.refresh();
        Ok(())
    }

    /// Adds indexed payload fields to collection `name` (admin): the store
    /// writes the next definition generation, this replica takes it at
    /// once (filters on the new fields are accepted from the answer on),
    /// the others at their next refresh, and eddy-ingest indexes the new
    /// fields in new segments and, in the background, in the old ones.
    /// Returns the collection's info and whether anything changed.
    pub fn alter_collection(
        self: &Arc<Self>,
        name: &str,
        fields: &BTreeMap<String, eddy_model::FieldType>,
    ) -> Result<(serde_json::Value, bool), ApiError> {
        let collection = self.collection(name)?;
        let altered = match self.store.add_payload_fields(name, fields) {
            Ok(altered) => altered,
            Err(eddy_manifest::Error::UnknownCollection(_) | eddy_manifest::Error::Dropped(_)) => {
                return Err(ApiError::NotFound(format!(
                    "collection {name:?} does not exist"
                )))
            }
            Err(other) => return Err(ApiError::from(other)),
        };
        collection.set_def(altered.def);
        Ok((self.collection_info(&collection), altered.changed))
    }

    /// Starts serving collections that appeared in the store and stops
    /// serving those that left it (dropped).
    pub fn refresh(self: &Arc<Self>) {
        let defs = match self.store.collections() {
            Ok(defs) => defs,
            Err(e) => {
                error!(error = %e, "listing collections");
                return;
            }
        };
        let gone: Vec<Arc<Collection>> = self
            .collections
            .read()
            .values()
            .filter(|c| !defs.iter().any(|d| d.name == c.name()))
            .cloned()
            .collect();
        for c in gone {
            c.stop();
            self.collections.write().remove(c.name());
            info!(collection = %c.name(), "collection dropped: no longer served");
        }
        for def in defs {
            let served = self.collections.read().get(&def.name).cloned();
            if let Some(served) = served {
                // An alteration (payload fields added) takes effect here.
                served.set_def(def);
                continue;
            }
            let collection = Arc::new(match &self.opts.shards {
                None => Collection::new(def.clone()),
                Some(shards) => Collection::serving(def.clone(), shards.iter().copied()),
            });
            self.collections
                .write()
                .insert(def.name.clone(), collection.clone());
            info!(collection = %def.name, "serving collection");
            let (tail_collection, kafka, metrics) = (
                collection.clone(),
                self.opts.kafka.clone(),
                self.metrics.clone(),
            );
            let limits = TailLimits {
                rows: self.opts.max_tail_rows,
                bytes: self.opts.max_tail_bytes,
            };
            let spawned = std::thread::Builder::new()
                .name(format!("eddy-tail-{}", def.name))
                .spawn(move || run_tail(tail_collection, &kafka, metrics, limits));
            if let Err(e) = spawned {
                error!(collection = %def.name, error = %e, "starting the tail thread");
            }
            let watcher = watch_manifests(self.clone(), collection);
            match &self.runtime {
                Some(runtime) => drop(runtime.spawn(watcher)),
                None => drop(tokio::spawn(watcher)),
            }
        }
    }

    /// Stops every tail and watcher.
    pub fn stop(&self) {
        for c in self.collections.read().values() {
            c.stop();
        }
    }
}

/// Runs store I/O (`f`, blocking) off the async workers, for handlers.
pub async fn store_io<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
}
