//! The manifest watcher of a collection: polls the store, loads a newer
//! version's files and installs the snapshot, all off the runtime. A split
//! collection is watched over the chains of the shards this node serves:
//! a newer version of any of them loads a snapshot of all of them.

use std::sync::Arc;

use eddy_segment::Residency;
use tracing::{error, info, warn};

use crate::collection::{Collection, Snapshot};
use crate::engine::Engine;

/// Polls the store for new manifest versions of `collection` and installs them.
pub(crate) async fn watch_manifests(engine: Arc<Engine>, collection: Arc<Collection>) {
    let name = collection.name().to_owned();
    let (residency, poll) = (engine.options().residency, engine.options().manifest_poll);
    let mut failures = 0u32;
    while !collection.is_stopped() {
        let (store, current) = (engine.store().clone(), collection.snapshot());
        let ready = collection.snapshot_ready();
        let load_as = load_residency(residency, ready);
        let held_otherwise = current.segments.iter().any(|s| s.residency != load_as);
        let def = collection.def().clone();
        let shards = collection.shards().to_vec();
        let loaded =
            tokio::task::spawn_blocking(move || -> eddy_manifest::Result<Option<Snapshot>> {
                let mut manifests = Vec::with_capacity(shards.len());
                for shard in shards {
                    manifests.push((shard, store.latest_manifest(&def.chain(shard))?));
                }
                let unchanged = manifests.iter().all(|(_, m)| {
                    current
                        .chains
                        .get(&m.collection)
                        .is_some_and(|v| m.version <= *v)
                });
                if ready && unchanged && !held_otherwise {
                    return Ok(None);
                }
                let manifests: Vec<_> = manifests.iter().map(|(s, m)| (*s, m)).collect();
                Ok(Some(Snapshot::load_shards(
                    &store, &def, &manifests, &current, load_as,
                )?))
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
                    .with_label_values(&[&name, &residency.to_string()])
                    .set(snapshot.file_bytes() as i64);
                m.quarantined_segments
                    .with_label_values(&[&name])
                    .set(snapshot.quarantined.len() as i64);
                let outcome = if snapshot.quarantined.is_empty() {
                    "ok"
                } else {
                    "quarantined"
                };
                m.segment_loads.with_label_values(&[outcome]).inc();
                if snapshot.version > 0 {
                    info!(collection = %name, version = snapshot.version, segments = snapshot.segments.len(), residency = %load_as, "snapshot installed");
                }
                // Installing prunes the tail and rebuilds which sealed rows
                // it shadows (work in the tail's size), under the write lock:
                // off the runtime too.
                let target = collection.clone();
                if let Err(e) = tokio::task::spawn_blocking(move || target.install(snapshot)).await
                {
                    error!(collection = %name, error = %e, "installing a snapshot panicked");
                }
                if load_as != residency {
                    // Served from mapped files: now hold them as asked.
                    continue;
                }
            }
            Ok(Ok(None)) => {}
            Ok(Err(e @ eddy_manifest::Error::Superseded { .. })) => {
                // Not a failure: the newest version is loaded at once.
                engine
                    .metrics
                    .segment_loads
                    .with_label_values(&["superseded"])
                    .inc();
                info!(collection = %name, reason = %e, "a version superseded while it loaded is skipped");
                continue;
            }
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
        tokio::time::sleep(poll).await;
    }
}

/// How the next load holds new files: as configured, except that until a
/// node serves its first snapshot it maps them (serving as soon as they
/// are there and verified), and the load after moves them into huge pages
/// while it serves. A cold start skips the zeroing and copying of the huge
/// pages (most of a local cold start's CPU, by `perf`).
fn load_residency(configured: Residency, ready: bool) -> Residency {
    if ready {
        configured
    } else {
        Residency::Mapped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_maps_files_until_it_serves_then_holds_them_as_configured() {
        assert_eq!(
            load_residency(Residency::HugePages, false),
            Residency::Mapped
        );
        assert_eq!(
            load_residency(Residency::HugePages, true),
            Residency::HugePages
        );
        assert_eq!(load_residency(Residency::Mapped, false), Residency::Mapped);
        assert_eq!(load_residency(Residency::Mapped, true), Residency::Mapped);
    }
}
