//! eddy-query: serves every collection's sealed segments plus the fresh
//! tail of its Kafka topic, over Arrow Flight and HTTP, with Prometheus
//! metrics (DESIGN.md, "Query service").
//!
//! - [`config`]: the flags and the engine options derived from them;
//! - [`engine`]: the served collections, manifest watchers, tails, and the
//!   async search entry point that runs CPU work on a rayon pool;
//! - [`collection`]: one collection's snapshot + tail behind one lock, and
//!   the search over both (masking, merging, one score conversion);
//! - [`request`]: the one search request every door parses (defaults and
//!   caps), made ready per collection in [`prepared`] (filter parsed once,
//!   query vectors flat) and answered as [`results`];
//! - [`cpu`]: the one way CPU work leaves the runtime;
//! - [`tail`]: the Kafka tail consumer;
//! - [`http`] and [`flight`]: the two APIs, sharing [`error::ApiError`];
//!   `server` binds and runs them, HTTP on threads of its own
//!   (`http_threads`);
//! - [`auth`] (API keys and scopes), [`tls`] (both doors' TLS) and
//!   [`policy`] (which collections the API may create): what makes the
//!   service safe to expose.

pub mod admin_request;
pub mod admission;
pub mod auth;
pub mod collection;
pub mod config;
pub mod cpu;
pub mod engine;
pub mod error;
pub mod fanout;
pub mod flight;
pub mod http;
mod http_threads;
pub mod metrics;
pub mod pins;
pub mod policy;
pub mod prepared;
pub mod recall;
pub mod request;
pub mod results;
mod server;
pub mod tail;
pub mod tls;
mod watcher;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus::Registry;
use tracing::{info, warn};

pub use config::QueryConfig;
pub use eddy_segment::Residency;
pub use engine::{Engine, EngineOptions};
pub use error::Error;
pub use metrics::QueryMetrics;

/// A running query service.
pub struct Query {
    /// The engine (for in-process tests and tools).
    pub engine: Arc<Engine>,
    http_addr: SocketAddr,
    flight_addr: SocketAddr,
    tls: bool,
    /// Aborted on drop.
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The HTTP threads (stopped on drop, closing their connections).
    http: Option<http_threads::HttpThreads>,
    /// Stops the Flight server, which closes its connections.
    stop_flight: Arc<tokio::sync::Notify>,
    /// The Flight server (stopped, not aborted, on drop).
    flight: Option<tokio::task::JoinHandle<()>>,
    /// This node's place in the node registry (withdrawn on shutdown).
    discovery: Option<fanout::discovery::Discovery>,
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

    /// Whether both doors speak TLS.
    pub fn tls(&self) -> bool {
        self.tls
    }

    /// Stops serving; returns once the Flight server has stopped taking
    /// connections and closed its idle ones (in-flight calls get up to
    /// five seconds).
    pub async fn shutdown(mut self) {
        if let Some(discovery) = self.discovery.take() {
            discovery.withdraw().await;
        }
        self.stop_flight.notify_one();
        if let Some(flight) = self.flight.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), flight).await;
        }
        drop(self);
    }
}

impl Drop for Query {
    fn drop(&mut self) {
        self.engine.stop();
        self.http.take();
        self.stop_flight.notify_one();
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Starts the service: opens the store, declares configured collections,
/// starts watchers and tails, and binds HTTP and Flight.
pub async fn start(mut config: QueryConfig) -> Result<Query, Error> {
    config.common.kafka.load_secrets()?;
    let keys = Arc::new(config.api_keys()?);
    keys.check_exposure(
        &[config.http_addr, config.flight_addr],
        config.insecure_no_auth,
    )?;
    let tls = match (&config.tls_cert, &config.tls_key) {
        (Some(cert), Some(key)) => {
            Some(tls::TlsIdentity::load(cert, key).map_err(|e| Error::Tls(e.to_string()))?)
        }
        _ => None,
    };
    let registry = Registry::new();
    let metrics = QueryMetrics::new(&registry)?;
    let store = config.common.store.open()?;
    for def in &config.common.collections {
        let outcome = store.create_collection(def)?;
        info!(collection = %def.name, ?outcome, "collection declared");
    }
    let engine = Engine::new(store, metrics, config.engine_options()?)?;
    engine.refresh();
    let (http_listener, http_addr) = server::bind("HTTP", config.http_addr).await?;
    let (flight_listener, flight_addr) = server::bind("Flight", config.flight_addr).await?;
    let http_state = http::HttpState {
        engine: engine.clone(),
        registry,
        keys: keys.clone(),
    };
    let stop_flight = Arc::new(tokio::sync::Notify::new());
    // Not aborted on drop but stopped: it ends once its connections close.
    let flight = server::serve_flight(
        flight_listener,
        engine.clone(),
        keys.clone(),
        tls.as_ref(),
        stop_flight.clone(),
    )?;
    let http = server::serve_http(
        http_listener,
        http_state,
        tls.as_ref(),
        config.http_threads(),
    )?;
    let mut tasks = vec![server::refresh_collections(
        engine.clone(),
        config.collection_poll(),
    )];
    let discovery = config.discovery(engine.store(), flight_addr, tls.is_some())?;
    if let Some(peers) = engine.peers() {
        tasks.push(tokio::spawn(peers.clone().keep_refreshed()));
        if let Some(discovery) = &discovery {
            // Announced before start returns, so peers find it at once.
            if let Err(e) = discovery.announce().await {
                warn!(error = %e, "peer discovery: the first announcement failed; retrying");
            }
            tasks.push(tokio::spawn(
                peers.clone().keep_discovering(discovery.clone()),
            ));
        }
    }
    info!(%http_addr, %flight_addr, tls = tls.is_some(), api_keys = keys.enabled(), kernels = eddy_kernels::backend_name(), "eddy-query started");
    Ok(Query {
        engine,
        http_addr,
        flight_addr,
        tls: tls.is_some(),
        tasks,
        http: Some(http),
        stop_flight,
        flight: Some(flight),
        discovery,
    })
}
