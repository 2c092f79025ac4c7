//! eddy-ingest: consumes each collection's Kafka topic in a consumer group,
//! buffers events, seals them into immutable segments and publishes manifest
//! versions with compare-and-swap; Kafka offsets are committed only once a
//! durable manifest covers them (DESIGN.md, "Segments and manifests").
//!
//! One worker thread per collection polls its consumer (librdkafka is
//! blocking); the tokio runtime serves `/metrics` and `/healthz` and watches
//! the store for collections created through the query service's API.

mod consumer;
pub mod dlq;
mod http;
mod index;
mod indexer;
pub mod merge;
mod metrics;
mod state;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use eddy_config::CommonArgs;
use eddy_manifest::Store;
use prometheus::Registry;
use tracing::{error, info};

pub use metrics::IngestMetrics;
pub use state::{CollectionState, SealOutcome};

/// Errors of the ingest service.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The segment store failed.
    #[error(transparent)]
    Store(#[from] eddy_manifest::Error),
    /// The Kafka client failed.
    #[error("kafka: {0}")]
    Kafka(String),
    /// Binding or serving the metrics endpoint failed.
    #[error("metrics endpoint: {0}")]
    Io(#[from] std::io::Error),
    /// Registering metrics failed.
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// eddy-ingest settings.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "eddy-ingest",
    version,
    about = "Kafka topic -> sealed segments -> manifests"
)]
pub struct IngestConfig {
    /// Shared settings.
    #[command(flatten)]
    pub common: CommonArgs,

    /// TOML config file (keys = flag names); flags and EDDY_* variables win.
    #[arg(long, env = "EDDY_CONFIG")]
    pub config: Option<std::path::PathBuf>,

    /// Seal the growing buffer at this many live rows.
    #[arg(long, env = "EDDY_SEAL_ROWS", default_value_t = 50_000)]
    pub seal_rows: usize,

    /// Seal the growing buffer at this many bytes.
    #[arg(long, env = "EDDY_SEAL_BYTES", default_value_t = 256 << 20)]
    pub seal_bytes: usize,

    /// Seal the growing buffer this long after its first event (ms).
    #[arg(long, env = "EDDY_SEAL_AGE_MS", default_value_t = 10_000)]
    pub seal_age_ms: u64,

    /// Address of the /metrics and /healthz endpoint.
    #[arg(
        long,
        env = "EDDY_INGEST_METRICS_ADDR",
        default_value = "127.0.0.1:9101"
    )]
    pub metrics_addr: SocketAddr,

    /// Consumer group id prefix; the group of a collection is `<prefix>.<name>`.
    #[arg(long, env = "EDDY_GROUP_PREFIX", default_value = "eddy-ingest")]
    pub group_prefix: String,

    /// Static consumer-group member id of this process (`group.instance.id`):
    /// a restarted process with the same id takes its partitions back at once
    /// instead of waiting for the group to expire its old member. Must be
    /// unique per process; defaults to `eddy-ingest-<hostname>`.
    #[arg(long, env = "EDDY_INSTANCE_ID")]
    pub instance_id: Option<String>,

    /// Threads building segment graphs in the background (the rayon pool of
    /// the indexer; consumption never waits for it).
    #[arg(long, env = "EDDY_INDEX_THREADS", default_value_t = 1)]
    pub index_threads: usize,

    /// HNSW links per node (level 0 keeps twice as many).
    #[arg(long, env = "EDDY_HNSW_M", default_value_t = 16)]
    pub hnsw_m: usize,

    /// HNSW candidate list size while building.
    #[arg(long, env = "EDDY_HNSW_EF_CONSTRUCTION", default_value_t = 100)]
    pub hnsw_ef_construction: usize,

    /// Also store SQ8 codes (graph walks over 1-byte codes, rescored in f32).
    #[arg(long, env = "EDDY_SQ8", default_value_t = true, action = clap::ArgAction::Set)]
    pub sq8: bool,

    /// Segments with fewer rows get no graph (an exact scan of them is as
    /// fast).
    #[arg(long, env = "EDDY_MIN_GRAPH_ROWS", default_value_t = eddy_segment::MIN_GRAPH_ROWS)]
    pub min_graph_rows: usize,

    /// Pause consumption while more sealed rows than this wait for their
    /// graph (resume below half); 0 = unbounded.
    #[arg(long, env = "EDDY_MAX_UNINDEXED_ROWS", default_value_t = 1_000_000)]
    pub max_unindexed_rows: u64,

    /// Merge a size tier once it holds this many segments (0 = never merge).
    #[arg(long, env = "EDDY_MERGE_MIN_SEGMENTS", default_value_t = 4)]
    pub merge_min_segments: usize,

    /// Segments with this many live rows or more are never merged again.
    #[arg(long, env = "EDDY_MERGE_MAX_ROWS", default_value_t = 2_000_000)]
    pub merge_max_rows: u64,

    /// How often the indexer looks for unindexed segments when idle (ms).
    #[arg(long, env = "EDDY_INDEX_POLL_MS", default_value_t = 500)]
    pub index_poll_ms: u64,

    /// Garbage collection: how often the indexer removes old manifest versions
    /// and files no retained version names (ms; 0 = never).
    #[arg(long, env = "EDDY_GC_INTERVAL_MS", default_value_t = 60_000)]
    pub gc_interval_ms: u64,

    /// Garbage collection: minimum age of a removed manifest or file (s); a
    /// reader that loaded an older version has this long to open its files.
    #[arg(long, env = "EDDY_GC_GRACE_SECS", default_value_t = 600)]
    pub gc_grace_secs: u64,

    /// Garbage collection: newest manifest versions always kept.
    #[arg(long, env = "EDDY_GC_KEEP_VERSIONS", default_value_t = 16)]
    pub gc_keep_versions: usize,

    /// How often to look for new collections in the store (ms).
    #[arg(long, env = "EDDY_COLLECTION_POLL_MS", default_value_t = 1_000)]
    pub collection_poll_ms: u64,
}

/// When the growing buffer is sealed.
#[derive(Debug, Clone, Copy)]
pub struct SealPolicy {
    /// Live rows.
    pub max_rows: usize,
    /// Approximate bytes.
    pub max_bytes: usize,
    /// Age of the oldest unsealed event.
    pub max_age: Duration,
}

impl IngestConfig {
    /// The static group member id: `--instance-id`, else from the host name.
    pub fn instance_id(&self) -> String {
        self.instance_id.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .or_else(|| std::env::var("HOSTNAME").ok())
                .unwrap_or_default();
            let host = host.trim();
            if host.is_empty() {
                "eddy-ingest".to_owned()
            } else {
                format!("eddy-ingest-{host}")
            }
        })
    }

    /// The seal limits.
    pub fn seal_policy(&self) -> SealPolicy {
        SealPolicy {
            max_rows: self.seal_rows.max(1),
            max_bytes: self.seal_bytes.max(1),
            max_age: Duration::from_millis(self.seal_age_ms),
        }
    }
}

/// A running ingest service.
pub struct Ingest {
    metrics_addr: SocketAddr,
    stop: Arc<AtomicBool>,
    supervisor: tokio::task::JoinHandle<()>,
    server: tokio::task::JoinHandle<()>,
}

impl Ingest {
    /// The bound address of the metrics endpoint.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
    }

    /// Stops every worker (each seals and commits what it holds) and the server.
    pub async fn shutdown(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let supervisor = std::mem::replace(&mut self.supervisor, tokio::spawn(async {}));
        if let Err(e) = supervisor.await {
            error!(error = %e, "ingest supervisor panicked");
        }
    }
}

impl Drop for Ingest {
    fn drop(&mut self) {
        // Workers poll this flag; without it a dropped handle (a failed test,
        // an aborted task) would leave their threads running forever.
        self.stop.store(true, Ordering::Relaxed);
        self.server.abort();
    }
}

/// Starts the service: opens the store, declares configured collections,
/// serves metrics and starts a worker per collection (new collections are
/// picked up as they appear in the store).
pub async fn start(config: IngestConfig) -> Result<Ingest> {
    let registry = Registry::new();
    let metrics = IngestMetrics::new(&registry)?;
    let store = Store::open(&config.common.store)?;
    for def in &config.common.collections {
        let outcome = store.create_collection(def)?;
        info!(collection = %def.name, ?outcome, "collection declared");
    }
    let (metrics_addr, server) = http::serve(config.metrics_addr, registry).await?;
    info!(%metrics_addr, store = %config.common.store.display(), brokers = %config.common.brokers, "eddy-ingest started");
    let stop = Arc::new(AtomicBool::new(false));
    let indexer = indexer::Indexer {
        store: store.clone(),
        params: eddy_segment::IndexParams {
            hnsw: eddy_hnsw::HnswParams {
                m: config.hnsw_m.max(2),
                ef_construction: config.hnsw_ef_construction.max(1),
                ..eddy_hnsw::HnswParams::default()
            },
            sq8: config.sq8,
            min_rows: config.min_graph_rows,
        },
        pool: rayon::ThreadPoolBuilder::new()
            .num_threads(config.index_threads.max(1))
            .thread_name(|i| format!("eddy-index-{i}"))
            .build()
            .map_err(|e| Error::Io(std::io::Error::other(e)))?,
        metrics: metrics.clone(),
        poll: Duration::from_millis(config.index_poll_ms.max(10)),
        merge: merge::MergePolicy {
            min_segments: config.merge_min_segments,
            max_rows: config.merge_max_rows.max(1),
            ..merge::MergePolicy::default()
        },
        gc: (config.gc_interval_ms > 0).then(|| indexer::GcSchedule {
            every: Duration::from_millis(config.gc_interval_ms),
            policy: eddy_manifest::GcPolicy {
                keep_versions: config.gc_keep_versions.max(1),
                grace: Duration::from_secs(config.gc_grace_secs),
            },
        }),
    };
    let indexer_stop = stop.clone();
    std::thread::Builder::new()
        .name("eddy-indexer".into())
        .spawn(move || indexer.run(indexer_stop))?;
    let supervisor = tokio::spawn(supervise(config, store, metrics, stop.clone()));
    Ok(Ingest {
        metrics_addr,
        stop,
        supervisor,
        server,
    })
}

/// Keeps one worker thread per collection, restarting failed ones after a
/// back-off (they resume from the manifest), until `stop` is set.
async fn supervise(
    config: IngestConfig,
    store: Store,
    metrics: IngestMetrics,
    stop: Arc<AtomicBool>,
) {
    let config = Arc::new(config);
    let mut workers: HashMap<String, tokio::task::JoinHandle<Result<()>>> = HashMap::new();
    let poll = Duration::from_millis(config.collection_poll_ms.max(50));
    while !stop.load(Ordering::Relaxed) {
        let defs = match store.collections() {
            Ok(defs) => defs,
            Err(e) => {
                error!(error = %e, "listing collections");
                Vec::new()
            }
        };
        for def in defs {
            let finished = workers.get(&def.name).is_none_or(|h| h.is_finished());
            if !finished {
                continue;
            }
            if let Some(handle) = workers.remove(&def.name) {
                match handle.await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        error!(collection = %def.name, error = %e, "worker failed; restarting")
                    }
                    Err(e) => {
                        error!(collection = %def.name, error = %e, "worker panicked; restarting")
                    }
                }
            }
            let (config, store, metrics, stop) =
                (config.clone(), store.clone(), metrics.clone(), stop.clone());
            let name = def.name.clone();
            workers.insert(
                name,
                tokio::task::spawn_blocking(move || {
                    consumer::run_worker(def, store, &config, metrics, stop)
                }),
            );
        }
        tokio::time::sleep(poll).await;
    }
    for (name, handle) in workers {
        match handle.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => error!(collection = %name, error = %e, "worker failed at shutdown"),
            Err(e) => error!(collection = %name, error = %e, "worker panicked"),
        }
    }
}
