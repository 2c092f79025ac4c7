//! Ingest metrics: handles built from a registry that is passed in, and
//! their names as constants (the dashboards in `dashboards/` use exactly
//! these names).

use prometheus::{
    exponential_buckets, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGaugeVec, Registry,
};

/// Events consumed, by collection and outcome.
pub const EVENTS_TOTAL: &str = "eddy_ingest_events_total";
/// Events rejected, by collection and reason.
pub const REJECTED_TOTAL: &str = "eddy_ingest_rejected_total";
/// Consumer lag per partition.
pub const CONSUMER_LAG: &str = "eddy_ingest_consumer_lag";
/// First offset not covered by the newest manifest, per partition.
pub const NEXT_OFFSET: &str = "eddy_ingest_next_offset";
/// Rows in the growing buffer.
pub const GROWING_ROWS: &str = "eddy_ingest_growing_rows";
/// Segments the newest manifest lists.
pub const SEGMENTS: &str = "eddy_ingest_segments";
/// Newest manifest version published or seen.
pub const MANIFEST_VERSION: &str = "eddy_ingest_manifest_version";
/// Seals published.
pub const SEALS_TOTAL: &str = "eddy_ingest_seals_total";
/// Manifest compare-and-swap conflicts.
pub const MANIFEST_CONFLICTS_TOTAL: &str = "eddy_ingest_manifest_conflicts_total";
/// Partitions stopped because reading on would skip or misread events.
pub const STALLED_PARTITIONS: &str = "eddy_ingest_stalled_partitions";
/// 1 per stopped partition, labelled with why it stopped.
pub const PARTITION_STOPPED: &str = "eddy_ingest_partition_stopped";
/// High watermark minus the manifest's `next_offset`, per partition.
pub const MANIFEST_LAG: &str = "eddy_ingest_manifest_lag";
/// When the manifest last moved a partition's `next_offset` (Unix seconds).
pub const PARTITION_PROGRESS: &str = "eddy_ingest_partition_progress_timestamp_seconds";
/// Events whose id was last seen on another partition.
pub const ID_PARTITION_CONFLICTS_TOTAL: &str = "eddy_ingest_id_partition_conflicts_total";
/// 1 while consumption is paused because dead letters cannot be written.
pub const DEAD_LETTERS_BLOCKED: &str = "eddy_ingest_dead_letters_blocked";
/// Dead letters not yet acknowledged by the broker.
pub const DEAD_LETTERS_PENDING: &str = "eddy_ingest_dead_letters_pending";
/// Partitions this process owns.
pub const ASSIGNED_PARTITIONS: &str = "eddy_ingest_assigned_partitions";
/// Time to write, fsync and publish one seal.
pub const SEAL_DURATION_SECONDS: &str = "eddy_ingest_seal_duration_seconds";
/// Sealed rows whose segment graph is not built yet.
pub const UNINDEXED_ROWS: &str = "eddy_ingest_unindexed_rows";
/// 1 while consumption is paused for graph building to catch up.
pub const BACKPRESSURE: &str = "eddy_ingest_backpressure";
/// Dead letters, by outcome.
pub const DLQ_TOTAL: &str = "eddy_ingest_dlq_total";
/// Segment merges, by outcome.
pub const MERGES_TOTAL: &str = "eddy_ingest_merges_total";
/// Segment index builds, by outcome.
pub const INDEX_BUILDS_TOTAL: &str = "eddy_ingest_index_builds_total";
/// Time to build, write and publish one segment index.
pub const INDEX_BUILD_DURATION_SECONDS: &str = "eddy_ingest_index_build_duration_seconds";
/// Files removed by garbage collection, by kind.
pub const GC_FILES_TOTAL: &str = "eddy_ingest_gc_files_total";
/// Bytes freed by garbage collection.
pub const GC_BYTES_TOTAL: &str = "eddy_ingest_gc_bytes_total";

/// Restarts of the maintenance thread after a panic.
pub const MAINTENANCE_RESTARTS_TOTAL: &str = "eddy_ingest_maintenance_restarts_total";

/// Every metric name eddy-ingest registers.
pub const NAMES: [&str; 27] = [
    EVENTS_TOTAL,
    REJECTED_TOTAL,
    CONSUMER_LAG,
    NEXT_OFFSET,
    GROWING_ROWS,
    SEGMENTS,
    MANIFEST_VERSION,
    SEALS_TOTAL,
    MANIFEST_CONFLICTS_TOTAL,
    STALLED_PARTITIONS,
    PARTITION_STOPPED,
    MANIFEST_LAG,
    PARTITION_PROGRESS,
    ID_PARTITION_CONFLICTS_TOTAL,
    DEAD_LETTERS_BLOCKED,
    DEAD_LETTERS_PENDING,
    ASSIGNED_PARTITIONS,
    SEAL_DURATION_SECONDS,
    UNINDEXED_ROWS,
    BACKPRESSURE,
    DLQ_TOTAL,
    MERGES_TOTAL,
    INDEX_BUILDS_TOTAL,
    INDEX_BUILD_DURATION_SECONDS,
    GC_FILES_TOTAL,
    GC_BYTES_TOTAL,
    MAINTENANCE_RESTARTS_TOTAL,
];

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
    /// Segments the newest manifest lists.
    pub segments: IntGaugeVec,
    /// Newest manifest version published or seen.
    pub manifest_version: IntGaugeVec,
    /// Seals published, by collection.
    pub seals: IntCounterVec,
    /// Manifest compare-and-swap conflicts (another writer published first).
    pub cas_conflicts: IntCounterVec,
    /// Partitions stopped (offset outside the log, or a gap), per collection.
    pub stalled_partitions: IntGaugeVec,
    /// 1 per stopped partition, by collection, partition and reason
    /// (`below_log_start`, `above_high_watermark`, `offset_gap`).
    pub partition_stopped: IntGaugeVec,
    /// High watermark minus the manifest's `next_offset`: what a crash now
    /// would re-read (consumer lag only counts what is not yet read).
    pub manifest_lag: IntGaugeVec,
    /// When the manifest last moved a partition's `next_offset`, in Unix
    /// seconds (an alert fires when it stands still while there is lag).
    pub partition_progress: IntGaugeVec,
    /// Events whose id the buffer last saw on another partition (the id
    /// affinity contract broken), resolved by timestamp, partition, offset.
    pub id_partition_conflicts: IntCounterVec,
    /// 1 while consumption is paused because dead letters cannot be written.
    pub dead_letters_blocked: IntGaugeVec,
    /// Dead letters not yet acknowledged by the broker.
    pub dead_letters_pending: IntGaugeVec,
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
    /// Restarts of the maintenance thread after a panic (indexing, merging
    /// and GC stop while it is down).
    pub maintenance_restarts: IntCounter,
}

/// Label names of per-collection metrics.
const BY_COLLECTION: &[&str] = &["collection"];
/// Label names of per-partition metrics.
const BY_PARTITION: &[&str] = &["collection", "partition"];
/// Label names of metrics counted by outcome.
const BY_OUTCOME: &[&str] = &["collection", "outcome"];

/// Registers an unlabelled histogram.
fn histogram(
    registry: &Registry,
    name: &str,
    help: &str,
    buckets: Vec<f64>,
) -> prometheus::Result<Histogram> {
    let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))?;
    registry.register(Box::new(h.clone()))?;
    Ok(h)
}

/// Removes the series of `vec` whose `collection` label is `collection`
/// or one of its manifest chains (`collection.<shard>`), whatever its
/// other labels.
fn remove_series_of<T: prometheus::core::MetricVecBuilder>(
    vec: &prometheus::core::MetricVec<T>,
    collection: &str,
) {
    use prometheus::core::Collector as _;
    for family in vec.collect() {
        for metric in family.get_metric() {
            let labels: std::collections::HashMap<&str, &str> = metric
                .get_label()
                .iter()
                .map(|l| (l.name(), l.value()))
                .collect();
            let of_collection = labels.get("collection").is_some_and(|label| {
                *label == collection || eddy_model::collection_of_chain(label) == collection
            });
            if of_collection {
                // Gone already if a concurrent call removed it.
                let _ = vec.remove(&labels);
            }
        }
    }
}

impl IngestMetrics {
    /// Sets the segment count and manifest version of `chain` from
    /// `manifest`, unless a newer version was recorded already: the worker
    /// records what it publishes, maintenance what it reads on every pass
    /// (merges and index builds publish while no seal comes), and neither
    /// takes the gauges back to an older manifest.
    pub fn observe_manifest(&self, chain: &str, version: u64, segments: usize) {
        let shown = self.manifest_version.with_label_values(&[chain]);
        if (version as i64) < shown.get() {
            return;
        }
        shown.set(version as i64);
        self.segments
            .with_label_values(&[chain])
            .set(segments as i64);
    }

    /// Removes every series of a dropped collection (per-collection and
    /// per-partition gauges, and its counters), so no stale value
    /// (backpressure, blocked dead letters, lag) lingers in dashboards or
    /// alerts once its worker stopped.
    pub fn forget_collection(&self, collection: &str) {
        for gauge in [
            &self.lag,
            &self.next_offset,
            &self.growing_rows,
            &self.segments,
            &self.manifest_version,
            &self.stalled_partitions,
            &self.partition_stopped,
            &self.manifest_lag,
            &self.partition_progress,
            &self.dead_letters_blocked,
            &self.dead_letters_pending,
            &self.assigned_partitions,
            &self.unindexed_rows,
            &self.backpressure,
        ] {
            remove_series_of(gauge, collection);
        }
        for counter in [
            &self.events,
            &self.rejected,
            &self.seals,
            &self.cas_conflicts,
            &self.id_partition_conflicts,
            &self.dlq,
            &self.merges,
            &self.index_builds,
            &self.gc_files,
            &self.gc_bytes,
        ] {
            remove_series_of(counter, collection);
        }
    }

    /// Registers every ingest metric in `registry`.
    pub fn new(registry: &Registry) -> prometheus::Result<Self> {
        use eddy_config::metrics::{counter as c, gauge as g};
        let counter = |name: &str, help: &str, labels: &[&str]| c(registry, name, help, labels);
        let gauge = |name: &str, help: &str, labels: &[&str]| g(registry, name, help, labels);
        let maintenance_restarts = IntCounter::new(
            MAINTENANCE_RESTARTS_TOTAL,
            "Restarts of the maintenance thread after a panic",
        )?;
        registry.register(Box::new(maintenance_restarts.clone()))?;
        Ok(Self {
            maintenance_restarts,
            seal_seconds: histogram(
                registry,
                SEAL_DURATION_SECONDS,
                "Time to write, fsync and publish one seal",
                exponential_buckets(0.001, 2.0, 16)?,
            )?,
            index_seconds: histogram(
                registry,
                INDEX_BUILD_DURATION_SECONDS,
                "Time to build, write and publish one segment index (graph + codes)",
                exponential_buckets(0.01, 2.0, 16)?,
            )?,
            events: counter(EVENTS_TOTAL, "Events consumed, by outcome", BY_OUTCOME)?,
            rejected: counter(
                REJECTED_TOTAL,
                "Events rejected, by reason",
                &["collection", "reason"],
            )?,
            lag: gauge(
                CONSUMER_LAG,
                "High watermark minus the next offset to read",
                BY_PARTITION,
            )?,
            next_offset: gauge(
                NEXT_OFFSET,
                "First offset not covered by the newest manifest",
                BY_PARTITION,
            )?,
            growing_rows: gauge(GROWING_ROWS, "Rows in the growing buffer", BY_COLLECTION)?,
            segments: gauge(
                SEGMENTS,
                "Live segments in the newest manifest",
                BY_COLLECTION,
            )?,
            manifest_version: gauge(
                MANIFEST_VERSION,
                "Newest manifest version published",
                BY_COLLECTION,
            )?,
            seals: counter(SEALS_TOTAL, "Seals published", BY_COLLECTION)?,
            cas_conflicts: counter(
                MANIFEST_CONFLICTS_TOTAL,
                "Manifest compare-and-swap conflicts",
                BY_COLLECTION,
            )?,
            stalled_partitions: gauge(
                STALLED_PARTITIONS,
                "Partitions stopped because reading on would skip events",
                BY_COLLECTION,
            )?,
            partition_stopped: gauge(
                PARTITION_STOPPED,
                "1 per stopped partition, by reason (resume with an operator command)",
                &["collection", "partition", "reason"],
            )?,
            manifest_lag: gauge(
                MANIFEST_LAG,
                "High watermark minus the manifest's next_offset",
                BY_PARTITION,
            )?,
            partition_progress: gauge(
                PARTITION_PROGRESS,
                "When the manifest last moved the partition's next_offset (Unix seconds)",
                BY_PARTITION,
            )?,
            id_partition_conflicts: counter(
                ID_PARTITION_CONFLICTS_TOTAL,
                "Events whose id was last seen on another partition",
                BY_COLLECTION,
            )?,
            dead_letters_blocked: gauge(
                DEAD_LETTERS_BLOCKED,
                "1 while consumption is paused because dead letters cannot be written",
                BY_COLLECTION,
            )?,
            dead_letters_pending: gauge(
                DEAD_LETTERS_PENDING,
                "Dead letters not yet acknowledged by the broker",
                BY_COLLECTION,
            )?,
            assigned_partitions: gauge(
                ASSIGNED_PARTITIONS,
                "Partitions this ingest process owns",
                BY_COLLECTION,
            )?,
            unindexed_rows: gauge(
                UNINDEXED_ROWS,
                "Sealed rows whose segment graph is not built yet",
                BY_COLLECTION,
            )?,
            backpressure: gauge(
                BACKPRESSURE,
                "1 while consumption is paused for the indexer to catch up",
                BY_COLLECTION,
            )?,
            dlq: counter(
                DLQ_TOTAL,
                "Rejected events written to the dead-letter topic, by outcome",
                BY_OUTCOME,
            )?,
            merges: counter(MERGES_TOTAL, "Segment merges, by outcome", BY_OUTCOME)?,
            index_builds: counter(
                INDEX_BUILDS_TOTAL,
                "Segment index builds, by outcome",
                BY_OUTCOME,
            )?,
            gc_files: counter(
                GC_FILES_TOTAL,
                "Files removed by garbage collection, by kind",
                &["collection", "kind"],
            )?,
            gc_bytes: counter(
                GC_BYTES_TOTAL,
                "Bytes freed by garbage collection",
                BY_COLLECTION,
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn every_registered_metric_is_named_by_a_constant() {
        let registry = Registry::new();
        let m = IngestMetrics::new(&registry).expect("registered");
        let registered = eddy_config::metrics::gathered_names(
            &registry,
            &[
                &m.events,
                &m.rejected,
                &m.seals,
                &m.cas_conflicts,
                &m.id_partition_conflicts,
                &m.dlq,
                &m.merges,
                &m.index_builds,
                &m.gc_files,
                &m.gc_bytes,
            ],
            &[
                &m.lag,
                &m.next_offset,
                &m.growing_rows,
                &m.segments,
                &m.manifest_version,
                &m.stalled_partitions,
                &m.partition_stopped,
                &m.manifest_lag,
                &m.partition_progress,
                &m.dead_letters_blocked,
                &m.dead_letters_pending,
                &m.assigned_partitions,
                &m.unindexed_rows,
                &m.backpressure,
            ],
            &[],
        );
        let named: BTreeSet<String> = NAMES.iter().map(|n| (*n).to_owned()).collect();
        assert_eq!(registered, named);
        assert!(NAMES.iter().all(|n| n.starts_with("eddy_ingest_")));
    }

    /// A dropped collection's series go, per-partition, counters and its
    /// shards' chains included; another collection's stay.
    #[test]
    fn forgetting_a_collection_removes_all_its_series() {
        let registry = Registry::new();
        let m = IngestMetrics::new(&registry).expect("metrics");
        for c in ["gone", "gone.1", "kept", "kept.0"] {
            m.lag.with_label_values(&[c, "0"]).set(5);
            m.events.with_label_values(&[c, "upsert"]).inc();
            m.growing_rows.with_label_values(&[c]).set(3);
            m.partition_stopped
                .with_label_values(&[c, "1", "offset_gap"])
                .set(1);
        }
        m.forget_collection("gone");
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .expect("text");
        assert!(!text.contains("\"gone"), "{text}");
        for series in [
            "eddy_ingest_consumer_lag{collection=\"kept\"",
            "eddy_ingest_events_total{collection=\"kept\"",
            "eddy_ingest_growing_rows{collection=\"kept.0\"}",
        ] {
            assert!(text.contains(series), "{series} missing:\n{text}");
        }
    }
}
