//! The suite's phases around the workloads: ingest of the base (until
//! searchable, indexed and merged) and the query node's cold start.

use std::sync::atomic::AtomicBool;

use anyhow::Context as _;
use eddy_manifest::{Store, StoreLocation};
use tokio::time::Instant;

use super::{
    ColdStart, Ingest, Target, COLLECTION, CONVERGE_TIMEOUT, COUNT_TIMEOUT, INDEX_TIMEOUT,
    READY_TIMEOUT,
};
use crate::dataset::Dataset;
use crate::encode::Format;
use crate::http::{QueryClient, SearchRequest};
use crate::options::SearchOptions;
use crate::produce::{self, ProduceArgs};
use crate::services::{wait_converged, wait_count, wait_indexed, ServiceConfig, Services};

/// Publishes the base flat out and waits until it is all searchable, then
/// until every graph is built and served.
pub(super) async fn ingest(
    ds: &Dataset,
    format: Format,
    target: &Target,
    client: &QueryClient,
    store: &Store,
) -> anyhow::Result<Ingest> {
    let mut p = ProduceArgs::new(&target.brokers, &target.topic);
    p.dataset = ds.dir.clone();
    p.format = format;
    let started = Instant::now();
    let produced = produce::produce(&p, &AtomicBool::new(false)).await?;
    wait_count(client, ds.len() as u64, COUNT_TIMEOUT).await?;
    let all_searchable_s = started.elapsed().as_secs_f64();
    let indexing = wait_indexed(client, store, COLLECTION, INDEX_TIMEOUT).await?;
    // Before the idle merge: after it, the merged inputs stay on disk until
    // garbage collection's grace has passed, and the figure would count both.
    let disk_bytes = served_bytes(store);
    let converged = wait_converged(client, store, COLLECTION, CONVERGE_TIMEOUT).await?;
    Ok(Ingest {
        produce: produced,
        all_searchable_s,
        searchable_per_s: ds.len() as f64 / all_searchable_s.max(1e-9),
        indexed_after_s: indexing.waited.as_secs_f64(),
        segments: indexing.segments,
        converged_after_s: converged.waited.as_secs_f64(),
        converged_segments: converged.segments,
        disk_bytes_per_vector: disk_bytes as f64 / ds.len().max(1) as f64,
    })
}

/// Restarts eddy-query on the store `restarts` times and times each to
/// ready and to a search.
pub(super) async fn cold_start(
    cfg: &ServiceConfig,
    services: &mut Services,
    client: &QueryClient,
    ds: &Dataset,
    restarts: usize,
) -> anyhow::Result<ColdStart> {
    let set = ds.query_set();
    let (mut ready_s, mut first_search_s) = (Vec::new(), Vec::new());
    for _ in 0..restarts.max(1) {
        services.restart_query(cfg)?;
        let started = Instant::now();
        services.wait_ready(client, READY_TIMEOUT).await?;
        ready_s.push(started.elapsed().as_secs_f64());
        client
            .search(&SearchRequest {
                vector: set.vectors.row(0),
                options: &SearchOptions::new(10, false),
                with_payload: false,
                min_offsets: None,
            })
            .await
            .context("the first search after the cold start")?;
        first_search_s.push(started.elapsed().as_secs_f64());
    }
    Ok(ColdStart {
        ready_s,
        first_search_s,
        store_bytes: served_bytes(&cfg.open_store()?),
        object_store: matches!(cfg.store, StoreLocation::S3 { .. }),
    })
}

/// Bytes of the files the collection's latest manifest names (0, logged,
/// where the store cannot be listed: a figure of the report, not a reason
/// to stop).
fn served_bytes(store: &Store) -> u64 {
    store.served_bytes(COLLECTION).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "the store's bytes could not be listed");
        0
    })
}
