//! Keeps one worker thread per collection in the store, restarting failed
//! ones (they resume from the manifest).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use eddy_manifest::Store;
use tokio::task::JoinHandle;
use tracing::error;

use crate::config::IngestConfig;
use crate::error::Result;
use crate::metrics::IngestMetrics;
use crate::worker;

/// Keeps one worker thread per collection, restarting failed ones after a
/// back-off (they resume from the manifest), until `stop` is set; then waits
/// for every worker to seal and stop.
pub(crate) async fn supervise(
    config: IngestConfig,
    store: Store,
    metrics: IngestMetrics,
    stop: Arc<AtomicBool>,
) {
    let config = Arc::new(config);
    let mut workers: HashMap<String, JoinHandle<Result<()>>> = HashMap::new();
    let poll = Duration::from_millis(config.common.collection_poll_ms.max(50));
    while !stop.load(Ordering::Relaxed) {
        let defs = match store.collections() {
            Ok(defs) => defs,
            Err(e) => {
                error!(error = %e, "listing collections");
                Vec::new()
            }
        };
        for def in defs {
            let running = workers.get(&def.name).is_some_and(|h| !h.is_finished());
            if running {
                continue;
            }
            if let Some(handle) = workers.remove(&def.name) {
                log_exit(&def.name, handle.await, "restarting");
            }
            let (config, store, metrics, stop) =
                (config.clone(), store.clone(), metrics.clone(), stop.clone());
            let name = def.name.clone();
            workers.insert(
                name,
                tokio::task::spawn_blocking(move || {
                    worker::run_worker(def, store, &config, metrics, stop)
                }),
            );
        }
        tokio::time::sleep(poll).await;
    }
    for (name, handle) in workers {
        log_exit(&name, handle.await, "at shutdown");
    }
}

/// Logs how a worker ended, unless it stopped cleanly.
fn log_exit(collection: &str, exit: Result<Result<()>, tokio::task::JoinError>, then: &str) {
    match exit {
        Ok(Ok(())) => {}
        Ok(Err(e)) => error!(collection, error = %e, "worker failed; {then}"),
        Err(e) => error!(collection, error = %e, "worker panicked; {then}"),
    }
}
