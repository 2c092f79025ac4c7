//! Query metrics: handles built from a registry that is passed in, and
//! their names as constants (the dashboards in `dashboards/` use exactly
//! these names).

use prometheus::{
    exponential_buckets, GaugeVec, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
};

/// Requests by API and status.
pub const REQUESTS_TOTAL: &str = "eddy_query_requests_total";
/// Request latency by API and status.
pub const LATENCY_SECONDS: &str = "eddy_query_latency_seconds";
/// Query vectors answered, by API.
pub const QUERIES_TOTAL: &str = "eddy_query_queries_total";
/// Sealed segments searched per query.
pub const SEGMENTS_SEARCHED: &str = "eddy_query_segments_searched";
/// Rows in the in-memory tail.
pub const TAIL_ROWS: &str = "eddy_query_tail_rows";
/// 1 while a collection's tail is at its bound and reads no further.
pub const TAIL_PAUSED: &str = "eddy_query_tail_paused";
/// Sealed segments served.
pub const SEGMENTS: &str = "eddy_query_segments";
/// Live rows in sealed segments.
pub const SEALED_ROWS: &str = "eddy_query_sealed_rows";
/// Manifest version served.
pub const MANIFEST_VERSION: &str = "eddy_query_manifest_version";
/// Query vectors admitted and not yet answered.
pub const QUEUED_QUERIES: &str = "eddy_query_queued_queries";
/// Bytes of segment and index files served, by residency.
pub const SERVED_BYTES: &str = "eddy_query_served_bytes";
/// Next offset visible to queries, per partition.
pub const VISIBLE_OFFSET: &str = "eddy_query_visible_offset";
/// Tail consumer lag per partition.
pub const CONSUMER_LAG: &str = "eddy_query_consumer_lag";
/// Event timestamp to searchable in the tail.
pub const INGEST_TO_VISIBLE_SECONDS: &str = "eddy_ingest_to_visible_seconds";
/// Time a request waited for its `min_offsets`.
pub const FRESHNESS_WAIT_SECONDS: &str = "eddy_query_freshness_wait_seconds";
/// Tail events by outcome.
pub const TAIL_EVENTS_TOTAL: &str = "eddy_query_tail_events_total";
/// 1 per partition the tail cannot follow (its offset left the log, or a
/// gap), by reason: queries on the collection are stale there.
pub const PARTITION_STALE: &str = "eddy_query_partition_stale";
/// Events whose id the tail last saw on another partition.
pub const ID_PARTITION_CONFLICTS_TOTAL: &str = "eddy_query_id_partition_conflicts_total";
/// Segment loads by outcome.
pub const SEGMENT_LOADS_TOTAL: &str = "eddy_query_segment_loads_total";
/// Segments of the newest manifest left out of serving (damaged, or
/// written for another dimension, metric or id type).
pub const QUARANTINED_SEGMENTS: &str = "eddy_query_quarantined_segments";
/// Online recall estimate per collection (sampled live queries against an
/// exact search of the same snapshot).
pub const RECALL_ESTIMATE: &str = "eddy_query_recall_estimate";
/// SIMD kernel backend in use.
pub const KERNEL_BACKEND_INFO: &str = "eddy_kernel_backend_info";
/// Fan-out legs sent to peers, by action and outcome.
pub const FANOUT_LEGS_TOTAL: &str = "eddy_query_fanout_legs_total";
/// Fan-out leg latency (to the first answer, hedge included), by action.
pub const FANOUT_LEG_SECONDS: &str = "eddy_query_fanout_leg_seconds";
/// Hedged legs (asked of a second peer), by action and which answered
/// first.
pub const FANOUT_HEDGES_TOTAL: &str = "eddy_query_fanout_hedges_total";
/// Shards a fan-out found no peer to answer for, by action.
pub const FANOUT_MISSING_SHARDS_TOTAL: &str = "eddy_query_fanout_missing_shards_total";

/// Seconds a tail batch waited for the write lock while searches were in
/// flight (`phase` wait) and held it, every search waiting (`phase` hold).
pub const TAIL_LOCK_SECONDS: &str = "eddy_query_tail_lock_seconds";

/// Every metric name eddy-query registers.
pub const NAMES: [&str; 27] = [
    REQUESTS_TOTAL,
    LATENCY_SECONDS,
    QUERIES_TOTAL,
    SEGMENTS_SEARCHED,
    TAIL_ROWS,
    TAIL_PAUSED,
    SEGMENTS,
    SEALED_ROWS,
    MANIFEST_VERSION,
    QUEUED_QUERIES,
    SERVED_BYTES,
    VISIBLE_OFFSET,
    CONSUMER_LAG,
    INGEST_TO_VISIBLE_SECONDS,
    FRESHNESS_WAIT_SECONDS,
    TAIL_EVENTS_TOTAL,
    PARTITION_STALE,
    ID_PARTITION_CONFLICTS_TOTAL,
    SEGMENT_LOADS_TOTAL,
    QUARANTINED_SEGMENTS,
    RECALL_ESTIMATE,
    KERNEL_BACKEND_INFO,
    FANOUT_LEGS_TOTAL,
    FANOUT_LEG_SECONDS,
    FANOUT_HEDGES_TOTAL,
    FANOUT_MISSING_SHARDS_TOTAL,
    TAIL_LOCK_SECONDS,
];

/// Metric handles of eddy-query.
#[derive(Debug, Clone)]
pub struct QueryMetrics {
    /// Requests by API (http_search, http_batch, flight_get, flight_exchange, ...), status and collection.
    pub requests: IntCounterVec,
    /// Request latency by API, status and collection.
    pub latency: HistogramVec,
    /// Queries answered (a batch counts each query), by API.
    pub queries: IntCounterVec,
    /// Segments searched per query.
    pub segments_searched: HistogramVec,
    /// Rows in the in-memory tail.
    pub tail_rows: IntGaugeVec,
    /// Sealed segments served (those the served manifest lists).
    pub segments: IntGaugeVec,
    /// Live rows in sealed segments (deletes applied, tail masking not).
    pub sealed_rows: IntGaugeVec,
    /// Manifest version served.
    pub manifest_version: IntGaugeVec,
    /// Query vectors admitted and not yet answered (see `--max-queued-queries`).
    pub queued_queries: IntGaugeVec,
    /// Bytes of segment and index files served, by residency (huge-pages, mapped).
    pub served_bytes: IntGaugeVec,
    /// Next offset visible to queries, per partition.
    pub visible_offset: IntGaugeVec,
    /// Tail consumer lag per partition.
    pub lag: IntGaugeVec,
    /// Event timestamp to searchable in the tail.
    pub ingest_to_visible: HistogramVec,
    /// Time requests waited for `min_offsets` (read-your-writes).
    pub freshness_wait: HistogramVec,
    /// Tail events by outcome (upsert, delete, rejected, skipped).
    pub tail_events: IntCounterVec,
    /// 1 per partition the tail cannot follow, by reason (`below_log_start`,
    /// `above_high_watermark`, `offset_gap`).
    pub partition_stale: IntGaugeVec,
    /// Events whose id the tail last saw on another partition.
    pub id_partition_conflicts: IntCounterVec,
    /// Snapshot loads by outcome (ok, quarantined: installed without some
    /// segments, error: the manifest could not be read).
    pub segment_loads: IntCounterVec,
    /// A tail batch's wait for the write lock and its hold of it, by
    /// collection and phase (wait, hold): how much searches and the tail
    /// hold each other up under mixed load.
    pub tail_lock: HistogramVec,
    /// 1 while the tail is paused at its bound, per collection.
    pub tail_paused: IntGaugeVec,
    /// Quarantined segments per collection.
    pub quarantined_segments: IntGaugeVec,
    /// Online recall estimate per collection.
    pub recall_estimate: GaugeVec,
    /// Kernel backend in use (value 1, label = backend).
    pub kernel_backend: IntGaugeVec,
    /// Fan-out legs by action and outcome (ok, failed: asked again of
    /// another peer or given up, refused: a bad request).
    pub fanout_legs: IntCounterVec,
    /// Fan-out leg latency by action.
    pub fanout_leg_latency: HistogramVec,
    /// Hedged legs by action and `won` (hedge, first).
    pub fanout_hedges: IntCounterVec,
    /// Shards no peer answered for, by action.
    pub fanout_missing_shards: IntCounterVec,
}

/// Latency buckets: 50 µs to ~3 s.
fn latency_buckets() -> Vec<f64> {
    exponential_buckets(50e-6, 2.0, 17).unwrap_or_default()
}

impl QueryMetrics {
    /// Registers every query metric in `registry`.
    pub fn new(registry: &Registry) -> prometheus::Result<Self> {
        use eddy_config::metrics::{counter as c, gauge as g, histogram as h};
        let counter = |name: &str, help: &str, labels: &[&str]| c(registry, name, help, labels);
        let gauge = |name: &str, help: &str, labels: &[&str]| g(registry, name, help, labels);
        let histogram = |name: &str, help: &str, labels: &[&str], buckets: Vec<f64>| {
            h(registry, name, help, labels, buckets)
        };
        let metrics = Self {
            requests: counter(
                REQUESTS_TOTAL,
                "Requests by API, status and collection (empty: none)",
                &["api", "status", "collection"],
            )?,
            latency: histogram(
                LATENCY_SECONDS,
                "Request latency by API, status and collection (empty: none)",
                &["api", "status", "collection"],
                latency_buckets(),
            )?,
            queries: counter(QUERIES_TOTAL, "Query vectors answered", &["api"])?,
            segments_searched: histogram(
                SEGMENTS_SEARCHED,
                "Sealed segments searched per query",
                &["collection"],
                vec![0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0],
            )?,
            tail_rows: gauge(TAIL_ROWS, "Rows in the in-memory tail", &["collection"])?,
            segments: gauge(SEGMENTS, "Live sealed segments served", &["collection"])?,
            sealed_rows: gauge(SEALED_ROWS, "Live rows in sealed segments", &["collection"])?,
            manifest_version: gauge(MANIFEST_VERSION, "Manifest version served", &["collection"])?,
            queued_queries: gauge(
                QUEUED_QUERIES,
                "Query vectors admitted and not yet answered",
                &[],
            )?,
            served_bytes: gauge(
                SERVED_BYTES,
                "Bytes of segment and index files served, by residency",
                &["collection", "residency"],
            )?,
            visible_offset: gauge(
                VISIBLE_OFFSET,
                "Next offset visible to queries",
                &["collection", "partition"],
            )?,
            lag: gauge(
                CONSUMER_LAG,
                "Tail consumer lag (high watermark minus visible offset)",
                &["collection", "partition"],
            )?,
            ingest_to_visible: histogram(
                INGEST_TO_VISIBLE_SECONDS,
                "Event timestamp to searchable in the tail, by the timestamp's clock (log_append: the broker's append time; create: the producer's)",
                &["collection", "clock"],
                exponential_buckets(0.001, 2.0, 16)?,
            )?,
            freshness_wait: histogram(
                FRESHNESS_WAIT_SECONDS,
                "Time a request waited for its min_offsets",
                &["collection"],
                latency_buckets(),
            )?,
            tail_events: counter(
                TAIL_EVENTS_TOTAL,
                "Tail events by outcome",
                &["collection", "outcome"],
            )?,
            partition_stale: gauge(
                PARTITION_STALE,
                "1 per partition the tail cannot follow, by reason",
                &["collection", "partition", "reason"],
            )?,
            id_partition_conflicts: counter(
                ID_PARTITION_CONFLICTS_TOTAL,
                "Events whose id the tail last saw on another partition",
                &["collection"],
            )?,
            segment_loads: counter(
                SEGMENT_LOADS_TOTAL,
                "Segment loads by outcome",
                &["outcome"],
            )?,
            tail_lock: histogram(
                TAIL_LOCK_SECONDS,
                "Tail batch: waiting for the write lock while searches are in flight (wait), holding it while every search waits (hold)",
                &["collection", "phase"],
                latency_buckets(),
            )?,
            tail_paused: gauge(
                TAIL_PAUSED,
                "1 while the tail is at its bound (--max-tail-rows/--max-tail-bytes) and reads no further",
                &["collection"],
            )?,
            quarantined_segments: gauge(
                QUARANTINED_SEGMENTS,
                "Segments of the newest manifest left out of serving (damaged or mismatched)",
                &["collection"],
            )?,
            recall_estimate: {
                let g = GaugeVec::new(
                    Opts::new(
                        RECALL_ESTIMATE,
                        "Recall@k of sampled live queries against an exact search of the same snapshot (mean of the last 1,000)",
                    ),
                    &["collection"],
                )?;
                registry.register(Box::new(g.clone()))?;
                g
            },
            kernel_backend: gauge(
                KERNEL_BACKEND_INFO,
                "SIMD kernel backend in use",
                &["backend"],
            )?,
            fanout_legs: counter(
                FANOUT_LEGS_TOTAL,
                "Fan-out legs sent to peers, by action and outcome",
                &["action", "outcome"],
            )?,
            fanout_leg_latency: histogram(
                FANOUT_LEG_SECONDS,
                "Fan-out leg latency to the first answer (a hedge's included), by action",
                &["action"],
                latency_buckets(),
            )?,
            fanout_hedges: counter(
                FANOUT_HEDGES_TOTAL,
                "Fan-out legs asked of a second peer after the hedge delay, by action and which answered first",
                &["action", "won"],
            )?,
            fanout_missing_shards: counter(
                FANOUT_MISSING_SHARDS_TOTAL,
                "Shards a fan-out found no peer to answer for, by action",
                &["action"],
            )?,
        };
        metrics
            .kernel_backend
            .with_label_values(&[eddy_kernels::backend_name()])
            .set(1);
        Ok(metrics)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn every_registered_metric_is_named_by_a_constant() {
        let registry = Registry::new();
        let m = QueryMetrics::new(&registry).expect("registered");
        m.recall_estimate.with_label_values(&["x"]).set(0.5);
        let registered = eddy_config::metrics::gathered_names(
            &registry,
            &[
                &m.requests,
                &m.queries,
                &m.tail_events,
                &m.segment_loads,
                &m.id_partition_conflicts,
                &m.fanout_legs,
                &m.fanout_hedges,
                &m.fanout_missing_shards,
            ],
            &[
                &m.tail_rows,
                &m.segments,
                &m.sealed_rows,
                &m.manifest_version,
                &m.queued_queries,
                &m.served_bytes,
                &m.visible_offset,
                &m.lag,
                &m.partition_stale,
                &m.quarantined_segments,
                &m.tail_paused,
            ],
            &[
                &m.latency,
                &m.segments_searched,
                &m.ingest_to_visible,
                &m.freshness_wait,
                &m.fanout_leg_latency,
                &m.tail_lock,
            ],
        );
        let named: BTreeSet<String> = NAMES.iter().map(|n| (*n).to_owned()).collect();
        assert_eq!(registered, named);
        assert!(NAMES.iter().all(|n| n.starts_with("eddy_")));
    }
}
