//! Ingest metrics: handles built from a registry that is passed in.

use prometheus::{
    exponential_buckets, Histogram, HistogramOpts, IntCounterVec, IntGaugeVec, Registry,
};

/// Metric handles of eddy-ingest.
#[derive(Debug, Clone)]
pub struct IngestMetrics {
    /// Events consumed, by collection and outcome (upsert, delete, rejected, duplicate).
    pub events: IntCounterVec,
    /// Rejected events, by collection and reason.
    pub rejected: IntCounterVec,
    /// Consumer lag per partition (high watermark minus next offset to read).
    pub lag: IntGaugeVec,
    /// Next offset the manifest covers, per partition.
    pub next_offset: IntGaugeVec,
    /// Rows in the growing buffer.
    pub growing_rows: IntGaugeVec,
    /// Live segments in the newest manifest.
    pub segments: IntGaugeVec,
    /// Newest manifest version published or seen.
    pub manifest_version: IntGaugeVec,
    /// Seals published, by collection.
    pub seals: IntCounterVec,
    /// Manifest compare-and-swap conflicts (another writer published first).
    pub cas_conflicts: IntCounterVec,
    /// Partitions stopped because the log start passed the manifest offset.
    pub stalled_partitions: IntGaugeVec,
    /// Partitions this process currently owns (0 for long = the group
    /// coordinator is not assigning; see the ingest log).
    pub assigned_partitions: IntGaugeVec,
    /// Time to write, fsync and publish one seal.
    pub seal_seconds: Histogram,
    /// Rows in sealed segments whose graph is not built yet (searched by
    /// exact scan meanwhile).
    pub unindexed_rows: IntGaugeVec,
    /// 1 while consumption is paused because too many sealed rows await
    /// their graph.
    pub backpressure: IntGaugeVec,
    /// Dead letters, by outcome (`produced`, `retried`).
    pub dlq: IntCounterVec,
    /// Segment merges, by outcome.
    pub merges: IntCounterVec,
    /// Index builds, by outcome.
    pub index_builds: IntCounterVec,
    /// Time to build, write and publish one segment index.
    pub index_seconds: Histogram,
    /// Files removed by garbage collection, by kind (manifest, segment, index, delete, other).
    pub gc_files: IntCounterVec,
    /// Bytes freed by garbage collection.
    pub gc_bytes: IntCounterVec,
}

impl IngestMetrics {
    /// Registers every ingest metric in `registry`.
    pub fn new(registry: &Registry) -> prometheus::Result<Self> {
        use eddy_config::metrics::{counter as c, gauge as g};
        let counter = |name: &str, help: &str, labels: &[&str]| c(registry, name, help, labels);
        let gauge = |name: &str, help: &str, labels: &[&str]| g(registry, name, help, labels);
        let seal_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "eddy_ingest_seal_duration_seconds",
                "Time to write, fsync and publish one seal",
            )
            .buckets(exponential_buckets(0.001, 2.0, 16)?),
        )?;
        registry.register(Box::new(seal_seconds.clone()))?;
        let index_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "eddy_ingest_index_build_duration_seconds",
                "Time to build, write and publish one segment index (graph + codes)",
            )
            .buckets(exponential_buckets(0.01, 2.0, 16)?),
        )?;
        registry.register(Box::new(index_seconds.clone()))?;
        Ok(Self {
            events: counter(
                "eddy_ingest_events_total",
                "Events consumed, by outcome",
                &["collection", "outcome"],
            )?,
            rejected: counter(
                "eddy_ingest_rejected_total",
                "Events rejected, by reason",
                &["collection", "reason"],
            )?,
            lag: gauge(
                "eddy_ingest_consumer_lag",
                "High watermark minus the next offset to read",
                &["collection", "partition"],
            )?,
            next_offset: gauge(
                "eddy_ingest_next_offset",
                "First offset not covered by the newest manifest",
                &["collection", "partition"],
            )?,
            growing_rows: gauge(
                "eddy_ingest_growing_rows",
                "Rows in the growing buffer",
                &["collection"],
            )?,
            segments: gauge(
                "eddy_ingest_segments",
                "Live segments in the newest manifest",
                &["collection"],
            )?,
            manifest_version: gauge(
                "eddy_ingest_manifest_version",
                "Newest manifest version published",
                &["collection"],
            )?,
            seals: counter(
                "eddy_ingest_seals_total",
                "Seals published",
                &["collection"],
            )?,
            cas_conflicts: counter(
                "eddy_ingest_manifest_conflicts_total",
                "Manifest compare-and-swap conflicts",
                &["collection"],
            )?,
            stalled_partitions: gauge(
                "eddy_ingest_stalled_partitions",
                "Partitions stopped because retention deleted unread data",
                &["collection"],
            )?,
            assigned_partitions: gauge(
                "eddy_ingest_assigned_partitions",
                "Partitions this ingest process owns",
                &["collection"],
            )?,
            seal_seconds,
            unindexed_rows: gauge(
                "eddy_ingest_unindexed_rows",
                "Sealed rows whose segment graph is not built yet",
                &["collection"],
            )?,
            backpressure: gauge(
                "eddy_ingest_backpressure",
                "1 while consumption is paused for the indexer to catch up",
                &["collection"],
            )?,
            dlq: counter(
                "eddy_ingest_dlq_total",
                "Rejected events written to the dead-letter topic, by outcome",
                &["collection", "outcome"],
            )?,
            merges: counter(
                "eddy_ingest_merges_total",
                "Segment merges, by outcome",
                &["collection", "outcome"],
            )?,
            index_builds: counter(
                "eddy_ingest_index_builds_total",
                "Segment index builds, by outcome",
                &["collection", "outcome"],
            )?,
            index_seconds,
            gc_files: counter(
                "eddy_ingest_gc_files_total",
                "Files removed by garbage collection, by kind",
                &["collection", "kind"],
            )?,
            gc_bytes: counter(
                "eddy_ingest_gc_bytes_total",
                "Bytes freed by garbage collection",
                &["collection"],
            )?,
        })
    }
}
