//! eddy-query: serves every collection's sealed segments plus the fresh
//! tail of its Kafka topic, over Arrow Flight and HTTP, with Prometheus
//! metrics (DESIGN.md, "Query service").
//!
//! - [`engine`]: the served collections, manifest watchers, tails, and the
//!   async search entry point that runs CPU work on a rayon pool;
//! - [`collection`]: one collection's snapshot + tail behind one lock;
//! - [`search`]: masking and merging across segments and the tail;
//! - [`tail`]: the Kafka tail consumer;
//! - [`http`] and [`flight`]: the two APIs, sharing [`error::ApiError`].

pub mod admission;
pub mod collection;
pub mod engine;
pub mod error;
pub mod flight;
pub mod http;
pub mod metrics;
pub mod search;
pub mod tail;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use eddy_config::CommonArgs;
use eddy_manifest::Store;
use prometheus::Registry;
use tracing::info;

pub use eddy_segment::Residency;
pub use engine::{Engine, EngineOptions};
pub use metrics::QueryMetrics;

/// Errors starting the query service.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The segment store failed.
    #[error(transparent)]
    Store(#[from] eddy_manifest::Error),
    /// Binding a listener failed.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// Registering metrics failed.
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// Building the search pool failed.
    #[error("search pool: {0}")]
    Pool(#[from] rayon::ThreadPoolBuildError),
}

/// eddy-query settings.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "eddy-query",
    version,
    about = "Sealed segments + fresh Kafka tail -> Flight and HTTP search"
)]
pub struct QueryConfig {
    /// Shared settings.
    #[command(flatten)]
    pub common: CommonArgs,

    /// TOML config file (keys = flag names); flags and EDDY_* variables win.
    #[arg(long, env = "EDDY_CONFIG")]
    pub config: Option<std::path::PathBuf>,

    /// HTTP listen address.
    #[arg(long, env = "EDDY_HTTP_ADDR", default_value = "127.0.0.1:8080")]
    pub http_addr: SocketAddr,

    /// Arrow Flight (gRPC) listen address.
    #[arg(long, env = "EDDY_FLIGHT_ADDR", default_value = "127.0.0.1:50051")]
    pub flight_addr: SocketAddr,

    /// How often to look for a new manifest version (ms).
    #[arg(long, env = "EDDY_MANIFEST_POLL_MS", default_value_t = 200)]
    pub manifest_poll_ms: u64,

    /// How often to look for new collections in the store (ms).
    #[arg(long, env = "EDDY_COLLECTION_POLL_MS", default_value_t = 1_000)]
    pub collection_poll_ms: u64,

    /// Search threads (0 = one per core).
    #[arg(long, env = "EDDY_SEARCH_THREADS", default_value_t = 0)]
    pub search_threads: usize,

    /// Tail rows above which `/readyz` reports not ready: ingest is not
    /// sealing, so the tail (searched exactly) would grow without bound.
    #[arg(long, env = "EDDY_MAX_TAIL_ROWS", default_value_t = 1_000_000)]
    pub max_tail_rows: usize,

    /// Longest a request waits for its `min_offsets` (ms).
    #[arg(long, env = "EDDY_MAX_WAIT_MS", default_value_t = 5_000)]
    pub max_wait_ms: u64,

    /// How served segment and index files are held: `huge-pages` reads them
    /// into memory backed by transparent huge pages (fewer TLB misses on a
    /// graph walk, measured 1.2-1.4x queries/s), `mapped` memory-maps them
    /// (zero copy, evictable).
    #[arg(long, env = "EDDY_SEGMENT_RESIDENCY", default_value_t = Residency::HugePages)]
    pub segment_residency: Residency,

    /// Query vectors admitted at once (queued on or running in the search
    /// pool); more are refused with HTTP 429 / gRPC RESOURCE_EXHAUSTED.
    #[arg(long, env = "EDDY_MAX_QUEUED_QUERIES", default_value_t = 10_000)]
    pub max_queued_queries: usize,
}

/// A running query service.
pub struct Query {
    /// The engine (for in-process tests and tools).
    pub engine: Arc<Engine>,
    http_addr: SocketAddr,
    flight_addr: SocketAddr,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Query {
    /// Bound HTTP address.
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// Bound Flight address.
    pub fn flight_addr(&self) -> SocketAddr {
        self.flight_addr
    }

    /// Stops serving.
    pub async fn shutdown(self) {
        drop(self);
    }
}

impl Drop for Query {
    fn drop(&mut self) {
        self.engine.stop();
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Starts the service: opens the store, declares configured collections,
/// starts watchers and tails, and binds HTTP and Flight.
pub async fn start(config: QueryConfig) -> Result<Query, Error> {
    let registry = Registry::new();
    let metrics = QueryMetrics::new(&registry)?;
    let store = Store::open(&config.common.store)?;
    for def in &config.common.collections {
        let outcome = store.create_collection(def)?;
        info!(collection = %def.name, ?outcome, "collection declared");
    }
    let threads = match config.search_threads {
        0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
        n => n,
    };
    let engine = Engine::new(
        store,
        metrics,
        EngineOptions {
            tail: tail::TailConfig {
                brokers: config.common.brokers.clone(),
                properties: config.common.kafka_client_properties(),
            },
            search_threads: threads,
            manifest_poll: Duration::from_millis(config.manifest_poll_ms.max(10)),
            max_wait: Duration::from_millis(config.max_wait_ms),
            max_tail_rows: config.max_tail_rows,
            residency: config.segment_residency,
            max_queued_queries: config.max_queued_queries,
        },
    )?;
    engine.refresh();

    let http_listener = tokio::net::TcpListener::bind(config.http_addr)
        .await
        .map_err(|source| Error::Bind {
            addr: config.http_addr,
            source,
        })?;
    let http_addr = http_listener.local_addr().map_err(|source| Error::Bind {
        addr: config.http_addr,
        source,
    })?;
    let flight_listener = tokio::net::TcpListener::bind(config.flight_addr)
        .await
        .map_err(|source| Error::Bind {
            addr: config.flight_addr,
            source,
        })?;
    let flight_addr = flight_listener.local_addr().map_err(|source| Error::Bind {
        addr: config.flight_addr,
        source,
    })?;

    let app = http::router(http::HttpState {
        engine: engine.clone(),
        registry,
    });
    let http_listener = axum::serve::ListenerExt::tap_io(http_listener, |tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY");
        }
    });
    let mut tasks = vec![tokio::spawn(async move {
        if let Err(e) = axum::serve(http_listener, app).await {
            tracing::error!(error = %e, "HTTP server stopped");
        }
    })];
    let flight = flight::make_server(engine.clone());
    tasks.push(tokio::spawn(async move {
        // No Nagle: small result messages would otherwise wait for the
        // client's delayed ACK (~40 ms per DoGet).
        let incoming =
            tonic::transport::server::TcpIncoming::from(flight_listener).with_nodelay(Some(true));
        if let Err(e) = tonic::transport::Server::builder()
            .add_service(flight)
            .serve_with_incoming(incoming)
            .await
        {
            tracing::error!(error = %e, "Flight server stopped");
        }
    }));
    let refresher = engine.clone();
    let poll = Duration::from_millis(config.collection_poll_ms.max(50));
    tasks.push(tokio::spawn(async move {
        loop {
            tokio::time::sleep(poll).await;
            let engine = refresher.clone();
            // Listing the store is file I/O: keep it off the async workers.
            if let Err(e) = tokio::task::spawn_blocking(move || engine.refresh()).await {
                tracing::error!(error = %e, "collection refresh panicked");
            }
        }
    }));
    info!(%http_addr, %flight_addr, kernels = eddy_kernels::backend_name(), "eddy-query started");
    Ok(Query {
        engine,
        http_addr,
        flight_addr,
        tasks,
    })
}
