//! eddy-ingest: consumes each collection's Kafka topic in a consumer group,
//! buffers events, seals them into immutable segments and publishes manifest
//! versions with compare-and-swap; Kafka offsets are committed only once a
//! durable manifest covers them (DESIGN.md, "Segments and manifests").
//!
//! - [`config`]: the flags and the policies derived from them;
//! - `supervisor` and `worker`: one worker thread per collection polls its
//!   consumer (librdkafka is blocking) and hands events to its
//!   [`CollectionState`], which seals (`state::seal`); rejected events go to
//!   the [`dlq`];
//! - `id_rows`: where the current sealed row of every id is, so a seal
//!   deletes the rows its events replace;
//! - [`resume_partition`]: the operator's way to restart a partition that
//!   stopped because reading on would skip events;
//! - [`maintenance`]: the background thread that builds segment indexes,
//!   merges segments and collects garbage;
//! - `http` and [`metrics`]: `/metrics` and `/healthz` on the tokio runtime.

pub mod config;
pub mod dlq;
mod error;
#[cfg(feature = "failpoints")]
pub mod failpoints;
mod http;
mod id_rows;
pub mod maintenance;
pub mod metrics;
mod priority;
mod resume;
mod state;
mod supervisor;
mod worker;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use prometheus::Registry;
use tracing::{error, info, warn};

pub use config::{IngestConfig, QuietSeal, SealPolicy};
pub use error::{Error, Result};
pub use metrics::IngestMetrics;
pub use resume::resume_partition;
pub use state::{Applied, CollectionState, SealOutcome, ShardStates, StopReason};

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
/// serves metrics, starts the maintenance thread and a worker per collection
/// (new collections are picked up as they appear in the store).
pub async fn start(mut config: IngestConfig) -> Result<Ingest> {
    config.common.kafka.load_secrets()?;
    // Refuse offset-unsafe Kafka properties before anything starts.
    config.kafka()?;
    let registry = Registry::new();
    let metrics = IngestMetrics::new(&registry)?;
    eddy_segment::set_write_mode(config.segment_writes);
    let store = config.common.store.open()?;
    for def in &config.common.collections {
        let outcome = store.create_collection(def)?;
        info!(collection = %def.name, ?outcome, "collection declared");
    }
    let (metrics_addr, server) = http::serve(config.metrics_addr, registry).await?;
    info!(%metrics_addr, store = %config.common.store.location, brokers = %config.common.brokers, "eddy-ingest started");
    let stop = Arc::new(AtomicBool::new(false));
    maintenance::Maintenance::new(&config, store.clone(), metrics.clone())?.spawn(stop.clone())?;
    let supervisor = tokio::spawn(supervisor::supervise(config, store, metrics, stop.clone()));
    Ok(Ingest {
        metrics_addr,
        stop,
        supervisor,
        server,
    })
}

/// Removes a file written for a publish that did not happen (an index file
/// a lost compare-and-swap or a failed build left); a failure is logged, a
/// file that was never created is not.
pub(crate) fn remove_unused_file(path: &std::path::Path) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            warn!(path = %path.display(), error = %e, "removing an unused file");
        }
    }
}
