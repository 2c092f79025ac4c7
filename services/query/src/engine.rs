//! The engine: the served collections, their manifest watchers and tails,
//! and the async entry point that runs searches on the rayon pool.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use eddy_kafka::KafkaSettings;
use eddy_manifest::Store;
use eddy_model::CollectionDef;
use eddy_segment::Residency;
use parking_lot::RwLock;
use tracing::{error, info, warn};

use crate::admission::Admission;
use crate::collection::{Collection, Snapshot};
use crate::error::ApiError;
use crate::metrics::QueryMetrics;
use crate::search::{prepare_query, BatchResult, SearchParams};
use crate::tail::run_tail;

/// Largest number of query vectors in one request.
pub const MAX_BATCH_QUERIES: usize = 10_000;

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
    /// Tail rows above which the engine reports not ready.
    pub max_tail_rows: usize,
    /// Where segment and index files are held while served.
    pub residency: Residency,
    /// Query vectors admitted at once ([`Admission`]).
    pub max_queued_queries: usize,
}

/// Shared state of the query service.
pub struct Engine {
    store: Store,
    collections: RwLock<HashMap<String, Arc<Collection>>>,
    pool: rayon::ThreadPool,
    /// Metric handles.
    pub metrics: QueryMetrics,
    admission: Admission,
    opts: EngineOptions,
}

impl Engine {
    /// An engine over `store`; call [`Engine::refresh`] to load collections.
    pub fn new(
        store: Store,
        metrics: QueryMetrics,
        opts: EngineOptions,
    ) -> Result<Arc<Self>, rayon::ThreadPoolBuildError> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(opts.search_threads.max(1))
            .thread_name(|i| format!("eddy-search-{i}"))
            .build()?;
        let admission = Admission::new(
            opts.max_queued_queries,
            metrics.queued_queries.with_label_values::<&str>(&[]),
        );
        Ok(Arc::new(Self {
            store,
            collections: RwLock::new(HashMap::new()),
            pool,
            metrics,
            admission,
            opts,
        }))
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The served collection `name`.
    pub fn collection(&self, name: &str) -> Result<Arc<Collection>, ApiError> {
        self.collections
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| ApiError::NotFound(format!("collection {name:?} does not exist")))
    }

    /// Every served collection, by name.
    pub fn collections(&self) -> Vec<Arc<Collection>> {
        let mut all: Vec<_> = self.collections.read().values().cloned().collect();
        all.sort_by(|a, b| a.def.name.cmp(&b.def.name));
        all
    }

    /// Collections that do not serve well, with the reason: still loading,
    /// or a tail past `--max-tail-rows` (ingest is not sealing).
    pub fn not_ready(&self) -> Vec<(String, String)> {
        self.collections()
            .iter()
            .filter_map(|c| {
                let tail = c.served.read().tail.live_rows();
                let reason = if !c.is_ready() {
                    "loading: first snapshot or tail assignment pending".to_owned()
                } else if tail > self.opts.max_tail_rows {
                    format!(
                        "tail holds {tail} rows, over the limit of {}: is eddy-ingest sealing?",
                        self.opts.max_tail_rows
                    )
                } else {
                    return None;
                };
                Some((c.def.name.clone(), reason))
            })
            .collect()
    }

    /// Creates a collection in the store (idempotent) and starts serving it.
    pub fn create_collection(self: &Arc<Self>, def: CollectionDef) -> Result<bool, ApiError> {
        let outcome = self.store.create_collection(&def)?;
        self.refresh();
        Ok(outcome == eddy_manifest::CreateOutcome::Created)
    }

    /// Starts serving collections that appeared in the store.
    pub fn refresh(self: &Arc<Self>) {
        let defs = match self.store.collections() {
            Ok(defs) => defs,
            Err(e) => {
                error!(error = %e, "listing collections");
                return;
            }
        };
        for def in defs {
            if self.collections.read().contains_key(&def.name) {
                continue;
            }
            let collection = Arc::new(Collection::new(def.clone()));
            self.collections
                .write()
                .insert(def.name.clone(), collection.clone());
            info!(collection = %def.name, "serving collection");
            let (tail_collection, kafka, metrics) = (
                collection.clone(),
                self.opts.kafka.clone(),
                self.metrics.clone(),
            );
            let spawned = std::thread::Builder::new()
                .name(format!("eddy-tail-{}", def.name))
                .spawn(move || run_tail(tail_collection, &kafka, metrics));
            if let Err(e) = spawned {
                error!(collection = %def.name, error = %e, "starting the tail thread");
            }
            tokio::spawn(watch_manifests(self.clone(), collection));
        }
    }

    /// Stops every tail and watcher.
    pub fn stop(&self) {
        for c in self.collections.read().values() {
            c.stop.store(true, Ordering::Relaxed);
        }
    }

    /// Validates and runs a batch of queries: waits for `min_offsets` (up to
    /// the configured limit), then searches on the rayon pool.
    pub async fn search(
        &self,
        name: &str,
        queries: Vec<Vec<f32>>,
        params: SearchParams,
        min_offsets: BTreeMap<u32, i64>,
    ) -> Result<BatchResult, ApiError> {
        let collection = self.collection(name)?;
        params.validate()?;
        let filter = Arc::new(params.parse_filter(&collection.def)?);
        if queries.is_empty() {
            return Err(ApiError::BadRequest("no query vectors given".into()));
        }
        if queries.len() > MAX_BATCH_QUERIES {
            return Err(ApiError::BadRequest(format!(
                "{} queries in one request; at most {MAX_BATCH_QUERIES}",
                queries.len()
            )));
        }
        let queries = queries
            .into_iter()
            .enumerate()
            .map(|(i, q)| {
                prepare_query(&collection.def, q).map_err(|e| match e {
                    ApiError::BadRequest(m) if i > 0 => {
                        ApiError::BadRequest(format!("query {i}: {m}"))
                    }
                    other => other,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if !min_offsets.is_empty() {
            self.wait_for(&collection, &min_offsets).await?;
        }
        let n = queries.len();
        let _admitted = self.admission.admit(n)?;
        let segments = collection.segment_count() as f64;
        let chunk = n.div_ceil(self.pool.current_num_threads()).max(1);
        let queries = Arc::new(queries);
        let mut parts = Vec::new();
        for start in (0..n).step_by(chunk) {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let (collection, queries, params, filter) = (
                collection.clone(),
                queries.clone(),
                params.clone(),
                filter.clone(),
            );
            self.pool.spawn(move || {
                let end = (start + chunk).min(queries.len());
                let _ = tx.send(collection.search(
                    &queries[start..end],
                    &params,
                    filter.as_ref().as_ref(),
                ));
            });
            parts.push(rx);
        }
        let mut result = BatchResult {
            hits: Vec::with_capacity(n),
            offsets: BTreeMap::new(),
        };
        for rx in parts {
            let part = rx
                .await
                .map_err(|_| ApiError::Internal("a search task was dropped".into()))?;
            result.hits.extend(part.hits);
            for (p, off) in part.offsets {
                let e = result.offsets.entry(p).or_insert(off);
                *e = (*e).min(off);
            }
        }
        let hist = self.metrics.segments_searched.with_label_values(&[name]);
        for _ in 0..n {
            hist.observe(segments);
        }
        Ok(result)
    }

    async fn wait_for(
        &self,
        collection: &Collection,
        min: &BTreeMap<u32, i64>,
    ) -> Result<(), ApiError> {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + self.opts.max_wait;
        loop {
            let notified = collection.changed.notified();
            if collection.served.read().reflects(min) {
                break;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(ApiError::Timeout(format!(
                    "offsets {min:?} were not searchable within {} ms",
                    self.opts.max_wait.as_millis()
                )));
            }
        }
        self.metrics
            .freshness_wait
            .with_label_values(&[&collection.def.name])
            .observe(started.elapsed().as_secs_f64());
        Ok(())
    }
}

/// Polls the store for new manifest versions of `collection` and installs them.
async fn watch_manifests(engine: Arc<Engine>, collection: Arc<Collection>) {
    let name = collection.def.name.clone();
    let mut failures = 0u32;
    while !collection.stop.load(Ordering::Relaxed) {
        let (store, current) = (
            engine.store.clone(),
            collection.served.read().snapshot.clone(),
        );
        let ready = collection.snapshot_ready.load(Ordering::Acquire);
        let name_for_load = name.clone();
        let residency = engine.opts.residency;
        let loaded =
            tokio::task::spawn_blocking(move || -> eddy_manifest::Result<Option<Snapshot>> {
                let manifest = store.latest_manifest(&name_for_load)?;
                if ready && manifest.version <= current.version {
                    return Ok(None);
                }
                Snapshot::load(&store, &manifest, &current, residency).map(Some)
            })
            .await;
        match loaded {
            Ok(Ok(Some(snapshot))) => {
                failures = 0;
                let m = &engine.metrics;
                m.segments
                    .with_label_values(&[&name])
                    .set(snapshot.segments.len() as i64);
                m.sealed_rows
                    .with_label_values(&[&name])
                    .set(snapshot.sealed_rows() as i64);
                m.manifest_version
                    .with_label_values(&[&name])
                    .set(snapshot.version as i64);
                m.served_bytes
                    .with_label_values(&[&name, &engine.opts.residency.to_string()])
                    .set(snapshot.file_bytes() as i64);
                m.segment_loads.with_label_values(&["ok"]).inc();
                if snapshot.version > 0 {
                    info!(collection = %name, version = snapshot.version, segments = snapshot.segments.len(), "snapshot installed");
                }
                collection.install(snapshot);
            }
            Ok(Ok(None)) => {}
            Ok(Err(e)) => {
                failures += 1;
                engine
                    .metrics
                    .segment_loads
                    .with_label_values(&["error"])
                    .inc();
                if failures < 5 || failures.is_multiple_of(100) {
                    warn!(collection = %name, error = %e, "loading the newest manifest");
                }
            }
            Err(e) => error!(collection = %name, error = %e, "manifest loader panicked"),
        }
        tokio::time::sleep(engine.opts.manifest_poll).await;
    }
}
