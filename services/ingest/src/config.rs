//! eddy-ingest's settings: its clap flags (each with an `EDDY_*` variable)
//! and the policies derived from them.

use std::net::SocketAddr;
use std::time::Duration;

use eddy_config::CommonArgs;
use eddy_kafka::{KafkaSettings, ProtectedProperty};

use crate::maintenance::merge::MergePolicy;
use crate::maintenance::GcSchedule;

/// eddy-ingest settings.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "eddy-ingest",
    version,
    about = "Kafka topic -> sealed segments -> manifests"
)]
pub struct IngestConfig {
    /// Shared settings.
    #[command(flatten)]
    pub common: CommonArgs,

    /// Seal the growing buffer at this many live rows.
    #[arg(long, env = "EDDY_SEAL_ROWS", default_value_t = 50_000)]
    pub seal_rows: usize,

    /// Seal the growing buffer at this many bytes.
    #[arg(long, env = "EDDY_SEAL_BYTES", default_value_t = 256 << 20)]
    pub seal_bytes: usize,

    /// Seal the growing buffer this long after its first event (ms).
    #[arg(long, env = "EDDY_SEAL_AGE_MS", default_value_t = 10_000)]
    pub seal_age_ms: u64,

    /// Seal the growing buffer once no event has arrived for this long (ms)
    /// and it holds enough rows for a graph (`--min-graph-rows`), so rows
    /// published in a burst get their graph seconds after it ends instead of
    /// being scanned by every query until `--seal-age-ms` (0 = never).
    #[arg(long, env = "EDDY_SEAL_QUIET_MS", default_value_t = 1_000)]
    pub seal_quiet_ms: u64,

    /// How segment and index files are written: `direct` (`O_DIRECT`,
    /// bypassing the page cache, which a file fsynced before it is published
    /// gains nothing from; falls back to buffered where the filesystem
    /// refuses it) or `buffered`. Direct measured 1.8-3x the Arrow ingest
    /// rate of buffered on the test host (`services/ingest/README.md`).
    #[arg(long, env = "EDDY_SEGMENT_WRITES", default_value_t = eddy_segment::WriteMode::Direct)]
    pub segment_writes: eddy_segment::WriteMode,

    /// Address of the /metrics and /healthz endpoint.
    #[arg(
        long,
        env = "EDDY_INGEST_METRICS_ADDR",
        default_value = "127.0.0.1:9101"
    )]
    pub metrics_addr: SocketAddr,

    /// Consumer group id prefix; the group of a collection is `<prefix>.<name>`.
    #[arg(long, env = "EDDY_GROUP_PREFIX", default_value = "eddy-ingest")]
    pub group_prefix: String,

    /// Static consumer-group member id of this process (`group.instance.id`):
    /// a restarted process with the same id takes its partitions back at once
    /// instead of waiting for the group to expire its old member. Must be
    /// unique per process; defaults to `eddy-ingest-<hostname>`.
    #[arg(long, env = "EDDY_INSTANCE_ID")]
    pub instance_id: Option<String>,

    /// Threads building segment graphs in the background (the rayon pool of
    /// the maintenance thread; consumption never waits for it).
    #[arg(long, env = "EDDY_INDEX_THREADS", default_value_t = 1)]
    pub index_threads: usize,

    /// HNSW links per node (level 0 keeps twice as many).
    #[arg(long, env = "EDDY_HNSW_M", default_value_t = 16)]
    pub hnsw_m: usize,

    /// HNSW candidate list size while building.
    #[arg(long, env = "EDDY_HNSW_EF_CONSTRUCTION", default_value_t = 100)]
    pub hnsw_ef_construction: usize,

    /// Also store SQ8 codes (graph walks over 1-byte codes, rescored in f32).
    #[arg(long, env = "EDDY_SQ8", default_value_t = true, action = clap::ArgAction::Set)]
    pub sq8: bool,

    /// Segments with fewer rows get no graph (an exact scan of them is as
    /// fast).
    #[arg(long, env = "EDDY_MIN_GRAPH_ROWS", default_value_t = eddy_segment::MIN_GRAPH_ROWS)]
    pub min_graph_rows: usize,

    /// Grow each buffer's graph on a thread of its own while its events
    /// arrive, so a seal publishes its segment with its graph instead of
    /// leaving it to be scanned row by row until maintenance builds it
    /// (a buffer whose graph fell behind is still sealed flat).
    #[arg(long, env = "EDDY_GROW_GRAPHS", default_value_t = true, action = clap::ArgAction::Set)]
    pub grow_graphs: bool,

    /// How many steps lower than the process the threads that build graphs
    /// (growing buffers' graphs, index builds, merges) run (0: the same
    /// priority; Linux `nice` steps, up to 19), so queries and events on
    /// shared cores come first and graphs take the CPU they leave idle.
    #[arg(long, env = "EDDY_GRAPH_NICE", default_value_t = 10)]
    pub graph_nice: i32,

    /// Pause consumption while more sealed rows than this wait for their
    /// graph (resume below half); 0 = unbounded.
    #[arg(long, env = "EDDY_MAX_UNINDEXED_ROWS", default_value_t = 1_000_000)]
    pub max_unindexed_rows: u64,

    /// Create each collection's dead-letter topic `<topic>.dlq` at start-up
    /// if missing (turn off where ingest may not create topics: while the
    /// topic is missing, consumption pauses at the first rejected event).
    #[arg(
        long,
        env = "EDDY_CREATE_DEAD_LETTER_TOPIC",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub create_dead_letter_topic: bool,

    /// Merge a size tier once it holds this many segments (0 = never merge).
    #[arg(long, env = "EDDY_MERGE_MIN_SEGMENTS", default_value_t = 4)]
    pub merge_min_segments: usize,

    /// Segments with this many live rows or more are never merged again.
    #[arg(long, env = "EDDY_MERGE_MAX_ROWS", default_value_t = 2_000_000)]
    pub merge_max_rows: u64,

    /// A segment whose deleted rows reach this percentage of its rows is
    /// merged, its deletes dropped, even while events flow (0 = never):
    /// under upserts live rows fall, the size tiers never fill, and a walk
    /// visits the deleted nodes of a graph too.
    #[arg(long, env = "EDDY_MERGE_DELETED_PCT", default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub merge_deleted_pct: u8,

    /// Once no partition's offset has advanced for this long (ms), the
    /// segments below `--merge-max-rows` are merged into one (its graph built
    /// before it replaces them), so an idle collection is searched in one
    /// walk instead of one per segment (0 = never). After a burst of writes
    /// the queries run at the one-segment rate about 20 s sooner at 10 s
    /// than at 30 s; a writer that pauses longer than this between bursts
    /// pays a merge per pause.
    #[arg(long, env = "EDDY_MERGE_IDLE_MS", default_value_t = 10_000)]
    pub merge_idle_ms: u64,

    /// How often the maintenance thread looks for work when idle (ms): for
    /// segments other processes sealed, and whether an idle merge is due.
    /// A seal (any manifest) this process publishes wakes it at once.
    #[arg(long, env = "EDDY_INDEX_POLL_MS", default_value_t = 500)]
    pub index_poll_ms: u64,

    /// Garbage collection: how often the maintenance thread removes old
    /// manifest versions and files no retained version names (ms; 0 = never).
    #[arg(long, env = "EDDY_GC_INTERVAL_MS", default_value_t = 60_000)]
    pub gc_interval_ms: u64,

    /// Garbage collection: minimum age of a removed manifest or file (s); a
    /// reader that loaded an older version has this long to open its files.
    #[arg(long, env = "EDDY_GC_GRACE_SECS", default_value_t = 600)]
    pub gc_grace_secs: u64,

    /// Lease a seal, merge or index build holds on the files it writes until
    /// it publishes them (s): garbage collection never removes them meanwhile;
    /// a writer stalled longer rewrites them.
    #[arg(long, env = "EDDY_WRITE_LEASE_SECS", default_value_t = 600)]
    pub write_lease_secs: u64,

    /// Garbage collection: newest manifest versions always kept.
    #[arg(long, env = "EDDY_GC_KEEP_VERSIONS", default_value_t = 16)]
    pub gc_keep_versions: usize,
}

/// When the growing buffer is sealed.
#[derive(Debug, Clone, Copy)]
pub struct SealPolicy {
    /// Live rows.
    pub max_rows: usize,
    /// Approximate bytes.
    pub max_bytes: usize,
    /// Age of the oldest unsealed event.
    pub max_age: Duration,
    /// Lease on the files a seal writes until it publishes them.
    pub write_lease: Duration,
    /// Sealing once events stop arriving (`None`: only at the limits above).
    pub quiet: Option<QuietSeal>,
    /// Growing each buffer's graph while its events arrive, so its seal
    /// publishes the segment with its index (`None`: sealed flat).
    pub grow: Option<GrowPolicy>,
}

/// Sealing a buffer early once its events stop arriving: a burst's rows are
/// otherwise scanned by every query until the buffer's age limit, while a
/// sealed segment gets its graph.
#[derive(Debug, Clone, Copy)]
pub struct QuietSeal {
    /// How long no event has arrived.
    pub after: Duration,
    /// The fewest live rows worth sealing early: below this a segment gets no
    /// graph, and scanning it costs a query what scanning the buffer does.
    pub min_rows: usize,
}

/// How buffers grow their graphs (`--grow-graphs`).
#[derive(Debug, Clone, Copy)]
pub struct GrowPolicy {
    /// How the segment's index is built (the same as maintenance's).
    pub params: eddy_segment::IndexParams,
    /// Threads of the seal's final build (`--index-threads`); the rounds
    /// run on one.
    pub threads: usize,
    /// The rows a buffer holds before its first round.
    pub first_rows: usize,
    /// Priority steps below the process's of the rounds (`--graph-nice`).
    pub nice: i32,
}

impl IngestConfig {
    /// The static group member id: `--instance-id`, else from the host name.
    pub fn instance_id(&self) -> String {
        self.instance_id.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .or_else(|| std::env::var("HOSTNAME").ok())
                .unwrap_or_default();
            let host = host.trim();
            if host.is_empty() {
                "eddy-ingest".to_owned()
            } else {
                format!("eddy-ingest-{host}")
            }
        })
    }

    /// The consumer group of collection `name`.
    pub fn group_id(&self, name: &str) -> String {
        format!("{}.{name}", self.group_prefix)
    }

    /// The Kafka connection settings (`--brokers`, `--kafka-property`);
    /// an error names a property eddy refuses (it would make offsets jump).
    pub fn kafka(&self) -> Result<KafkaSettings, ProtectedProperty> {
        KafkaSettings::new(
            self.common.brokers.clone(),
            self.common.kafka.client_properties(),
        )
    }

    /// The seal limits.
    pub fn seal_policy(&self) -> SealPolicy {
        SealPolicy {
            max_rows: self.seal_rows.max(1),
            max_bytes: self.seal_bytes.max(1),
            max_age: Duration::from_millis(self.seal_age_ms),
            write_lease: self.write_lease(),
            quiet: (self.seal_quiet_ms > 0).then(|| QuietSeal {
                after: Duration::from_millis(self.seal_quiet_ms),
                min_rows: self.min_graph_rows.max(1),
            }),
            grow: self.grow_graphs.then(|| GrowPolicy {
                params: self.index_params(),
                threads: self.index_threads.max(1),
                first_rows: self.min_graph_rows.max(1) / 2,
                nice: self.graph_nice,
            }),
        }
    }

    /// Lease on the files a writer (seal, merge, index build) has written
    /// and not yet published (at least a second).
    pub fn write_lease(&self) -> Duration {
        Duration::from_secs(self.write_lease_secs.max(1))
    }

    /// How segment indexes (graph, codes) are built.
    pub fn index_params(&self) -> eddy_segment::IndexParams {
        eddy_segment::IndexParams {
            hnsw: eddy_hnsw::HnswParams {
                m: self.hnsw_m.max(2),
                ef_construction: self.hnsw_ef_construction.max(1),
                ..eddy_hnsw::HnswParams::default()
            },
            sq8: self.sq8,
            min_rows: self.min_graph_rows,
        }
    }

    /// When segments are merged.
    pub fn merge_policy(&self) -> MergePolicy {
        MergePolicy {
            min_segments: self.merge_min_segments,
            max_rows: self.merge_max_rows.max(1),
            deleted_share: (self.merge_deleted_pct > 0)
                .then(|| f64::from(self.merge_deleted_pct) / 100.0),
            idle: (self.merge_idle_ms > 0).then(|| Duration::from_millis(self.merge_idle_ms)),
            ..MergePolicy::default()
        }
    }

    /// When garbage is collected and what is kept (`None`: never).
    pub fn gc_schedule(&self) -> Option<GcSchedule> {
        (self.gc_interval_ms > 0).then(|| GcSchedule {
            every: Duration::from_millis(self.gc_interval_ms),
            policy: eddy_manifest::GcPolicy {
                keep_versions: self.gc_keep_versions.max(1),
                grace: Duration::from_secs(self.gc_grace_secs),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[test]
    fn defaults_and_derived_policies() {
        let config = IngestConfig::parse_from(["eddy-ingest", "--group-prefix", "g"]);
        assert_eq!(config.group_id("docs"), "g.docs");
        assert_eq!(config.seal_policy().max_rows, 50_000);
        assert_eq!(config.seal_policy().max_age, Duration::from_secs(10));
        let quiet = config
            .seal_policy()
            .quiet
            .expect("quiet seals on by default");
        assert_eq!(quiet.after, Duration::from_secs(1));
        assert_eq!(quiet.min_rows, eddy_segment::MIN_GRAPH_ROWS);
        assert_eq!(config.merge_policy().min_segments, 4);
        assert_eq!(config.merge_policy().idle, Some(Duration::from_secs(10)));
        assert_eq!(config.index_params().hnsw.m, 16);
        let gc = config.gc_schedule().expect("gc on by default");
        assert_eq!(gc.every, Duration::from_secs(60));
        assert_eq!(gc.policy.keep_versions, 16);
        assert_eq!(config.common.collection_poll_ms, 1_000);
        assert_eq!(
            config.kafka().expect("no protected property").brokers(),
            "127.0.0.1:9092"
        );
        let off = IngestConfig::parse_from([
            "eddy-ingest",
            "--gc-interval-ms",
            "0",
            "--seal-quiet-ms",
            "0",
        ]);
        assert!(off.gc_schedule().is_none());
        assert!(off.seal_policy().quiet.is_none());
    }

    #[test]
    fn the_instance_id_comes_from_the_flag_or_the_host() {
        let config = IngestConfig::parse_from(["eddy-ingest", "--instance-id", "a"]);
        assert_eq!(config.instance_id(), "a");
        let config = IngestConfig::parse_from(["eddy-ingest"]);
        assert!(config.instance_id().starts_with("eddy-ingest"));
    }
}
