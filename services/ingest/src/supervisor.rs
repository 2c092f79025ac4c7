//! Keeps one worker thread per collection in the store, restarting failed
//! ones (they resume from the manifest), handing altered definitions to
//! running ones, and stopping those whose collection was dropped.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eddy_manifest::Store;
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use crate::config::IngestConfig;
use crate::error::Result;
use crate::metrics::IngestMetrics;
use crate::worker;

/// How long a dropped collection's worker may take to stop before it is
/// logged (and again each time as long).
const SLOW_STOP: Duration = Duration::from_secs(60);

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
    let mut workers: HashMap<String, Running> = HashMap::new();
    // Workers of dropped collections, told to stop, not yet finished.
    let mut stopping: Vec<(String, Running, Instant)> = Vec::new();
    // Dropped collections whose files are not collected yet: their series
    // are forgotten on every pass, since a maintenance pass that listed one
    // before its drop may still write a gauge of it after its worker ended.
    let mut dropped: HashSet<String> = HashSet::new();
    let poll = Duration::from_millis(config.common.collection_poll_ms.max(50));
    while !stop.load(Ordering::Relaxed) {
        let defs = match store.collections() {
            Ok(defs) => defs,
            Err(e) => {
                error!(error = %e, "listing collections");
                tokio::time::sleep(poll).await;
                continue;
            }
        };
        // A collection no longer listed was dropped: stop its worker (its
        // last seal is refused by the store, which is what a drop means).
        // It may take a while (a last seal, the consumer's close); it is
        // collected on a later pass, while the others are supervised.
        let gone: Vec<String> = workers
            .keys()
            .filter(|name| !defs.iter().any(|d| d.name == **name))
            .cloned()
            .collect();
        dropped.retain(|name| {
            let still = store.is_dropped(name) && !workers.contains_key(name);
            if still {
                metrics.forget_collection(name);
            }
            still
        });
        for name in gone {
            if store.is_dropped(&name) {
                dropped.insert(name.clone());
            }
            if let Some(running) = workers.remove(&name) {
                running.stop.store(true, Ordering::Relaxed);
                // Its gauges go at once (the collection is gone), and again
                // on every pass until the worker ends, in case its last turn
                // or seal wrote them.
                metrics.forget_collection(&name);
                stopping.push((name, running, Instant::now()));
            }
        }
        let (finished, still): (Vec<_>, Vec<_>) = stopping
            .into_iter()
            .partition(|(_, running, _)| running.handle.is_finished());
        stopping = still;
        for (name, running, _) in finished {
            log_exit(&name, running.handle.await, "its collection was dropped");
            // Its gauges go, unless a collection of that name is served again.
            if !workers.contains_key(&name) && !stopping.iter().any(|(n, _, _)| *n == name) {
                metrics.forget_collection(&name);
            }
            info!(collection = %name, "collection dropped: its worker stopped");
        }
        for (name, _, since) in &mut stopping {
            // Its last turn or seal may have written gauges again.
            if !workers.contains_key(name.as_str()) {
                metrics.forget_collection(name);
            }
            if since.elapsed() >= SLOW_STOP {
                warn!(collection = %name, waited_s = since.elapsed().as_secs(), "a dropped collection's worker has not stopped yet (its last seal or the consumer's close waits on the broker)");
                *since = Instant::now();
            }
        }
        for def in defs {
            if let Some(running) = workers.get(&def.name) {
                if !running.handle.is_finished() {
                    // An alteration (payload fields added) reaches the
                    // running worker; it takes it at its next turn.
                    running.def.send_if_modified(|current| {
                        let changed = *current != def;
                        if changed {
                            *current = def.clone();
                        }
                        changed
                    });
                    continue;
                }
            }
            if let Some(old) = workers.remove(&def.name) {
                log_exit(&def.name, old.handle.await, "restarting");
            }
            let worker_stop = Arc::new(AtomicBool::new(false));
            // The worker stops on its own flag (a drop) or the service's
            // (shutdown, or the Ingest handle dropped), whatever becomes
            // of this task.
            let flags = worker::StopFlags {
                shutdown: stop.clone(),
                dropped: worker_stop.clone(),
            };
            let (config, store, metrics) = (config.clone(), store.clone(), metrics.clone());
            let name = def.name.clone();
            let (def_tx, def_rx) = tokio::sync::watch::channel(def);
            workers.insert(
                name,
                Running {
                    stop: worker_stop,
                    def: def_tx,
                    handle: tokio::task::spawn_blocking(move || {
                        worker::run_worker(def_rx, store, &config, metrics, &flags)
                    }),
                },
            );
        }
        tokio::time::sleep(poll).await;
    }
    for running in workers.values() {
        running.stop.store(true, Ordering::Relaxed);
    }
    let stopping = stopping
        .into_iter()
        .map(|(name, running, _)| (name, running));
    for (name, running) in workers.into_iter().chain(stopping) {
        log_exit(&name, running.handle.await, "at shutdown");
    }
}

/// A worker thread, the flag that stops it (set at shutdown, or when its
/// collection is dropped) and the channel that hands it an altered
/// definition.
struct Running {
    stop: Arc<AtomicBool>,
    def: tokio::sync::watch::Sender<eddy_model::CollectionDef>,
    handle: JoinHandle<Result<()>>,
}

/// Logs how a worker ended, unless it stopped cleanly.
fn log_exit(collection: &str, exit: Result<Result<()>, tokio::task::JoinError>, then: &str) {
    match exit {
        Ok(Ok(())) => {}
        Ok(Err(e)) => error!(collection, error = %e, "worker failed; {then}"),
        Err(e) => error!(collection, error = %e, "worker panicked; {then}"),
    }
}
