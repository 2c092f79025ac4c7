//! Query metrics: handles built from a registry that is passed in.

use prometheus::{exponential_buckets, HistogramVec, IntCounterVec, IntGaugeVec, Registry};

/// Metric handles of eddy-query.
#[derive(Debug, Clone)]
pub struct QueryMetrics {
    /// Requests by API (http_search, http_batch, flight_get, flight_exchange, ...) and status.
    pub requests: IntCounterVec,
    /// Request latency by API and status.
    pub latency: HistogramVec,
    /// Queries answered (a batch counts each query), by API.
    pub queries: IntCounterVec,
    /// Segments searched per query.
    pub segments_searched: HistogramVec,
    /// Rows in the in-memory tail.
    pub tail_rows: IntGaugeVec,
    /// Live sealed segments served.
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
    /// Segment loads by outcome (ok, error).
    pub segment_loads: IntCounterVec,
    /// Kernel backend in use (value 1, label = backend).
    pub kernel_backend: IntGaugeVec,
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
                "eddy_query_requests_total",
                "Requests by API and status",
                &["api", "status"],
            )?,
            latency: histogram(
                "eddy_query_latency_seconds",
                "Request latency by API and status",
                &["api", "status"],
                latency_buckets(),
            )?,
            queries: counter(
                "eddy_query_queries_total",
                "Query vectors answered",
                &["api"],
            )?,
            segments_searched: histogram(
                "eddy_query_segments_searched",
                "Sealed segments searched per query",
                &["collection"],
                vec![0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0],
            )?,
            tail_rows: gauge(
                "eddy_query_tail_rows",
                "Rows in the in-memory tail",
                &["collection"],
            )?,
            segments: gauge(
                "eddy_query_segments",
                "Live sealed segments served",
                &["collection"],
            )?,
            sealed_rows: gauge(
                "eddy_query_sealed_rows",
                "Live rows in sealed segments",
                &["collection"],
            )?,
            manifest_version: gauge(
                "eddy_query_manifest_version",
                "Manifest version served",
                &["collection"],
            )?,
            queued_queries: gauge(
                "eddy_query_queued_queries",
                "Query vectors admitted and not yet answered",
                &[],
            )?,
            served_bytes: gauge(
                "eddy_query_served_bytes",
                "Bytes of segment and index files served, by residency",
                &["collection", "residency"],
            )?,
            visible_offset: gauge(
                "eddy_query_visible_offset",
                "Next offset visible to queries",
                &["collection", "partition"],
            )?,
            lag: gauge(
                "eddy_query_consumer_lag",
                "Tail consumer lag (high watermark minus visible offset)",
                &["collection", "partition"],
            )?,
            ingest_to_visible: histogram(
                "eddy_ingest_to_visible_seconds",
                "Event timestamp to searchable in the tail",
                &["collection"],
                exponential_buckets(0.001, 2.0, 16)?,
            )?,
            freshness_wait: histogram(
                "eddy_query_freshness_wait_seconds",
                "Time a request waited for its min_offsets",
                &["collection"],
                latency_buckets(),
            )?,
            tail_events: counter(
                "eddy_query_tail_events_total",
                "Tail events by outcome",
                &["collection", "outcome"],
            )?,
            segment_loads: counter(
                "eddy_query_segment_loads_total",
                "Segment loads by outcome",
                &["outcome"],
            )?,
            kernel_backend: gauge(
                "eddy_kernel_backend_info",
                "SIMD kernel backend in use",
                &["backend"],
            )?,
        };
        metrics
            .kernel_backend
            .with_label_values(&[eddy_kernels::backend_name()])
            .set(1);
        Ok(metrics)
    }
}
