//! `eddy-loadtest suite`: the end-to-end benchmark suite and its report.
//!
//! One command: starts a Tansu broker, eddy-ingest and eddy-query (the
//! binaries beside this one), publishes the dataset flat out and measures
//! ingest (acknowledged rate, all searchable, all indexed, bytes on disk),
//! runs the [`workloads`] (single query, `ef` sweeps over HTTP and
//! DoExchange alternated A/B/A/B, exact, DoGet, saturating closed loop and
//! open loops at 50/70/90 % of it, filtered at ~1 % and ~10 %, mixed
//! read/write with freshness probes, scroll), the served [`peers`] from one
//! Python client while eddy is up, a cold start of eddy-query, then the
//! in-process peers. Writes `report.json`, `report.md` and a self-contained
//! `report.html` (charts inline as SVG) into `--out`.

mod document;
mod host;
mod matched;
mod peers;
mod phases;
mod report;
mod summary;
mod svg;
mod workloads;

pub use host::Host;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _};
use eddy_manifest::StoreLocation;
use serde::Serialize;
use tokio::time::Instant;

pub use matched::{qps_at, ratio_at, AtRecall, Curve, CurvePoint, Ratio};
pub use peers::PeerResults;

pub use workloads::{run as run_workloads, EddyRuns, Mixed, Plan, Scroll, Settled, Sweep, Target};

use crate::dataset::{Dataset, SAMPLE_DIR};
use crate::encode::Format;
use crate::http::QueryClient;
use crate::produce::ProduceReport;
use crate::services::{self, wait_converged, wait_indexed, ServiceConfig, Services};
use eddy_manifest::Store;

/// The suite's collection and topic.
const COLLECTION: &str = "suite";
/// How long the services get to become ready (a cold start included).
const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// How long, after publishing, until every point must be counted.
const COUNT_TIMEOUT: Duration = Duration::from_secs(600);
/// How long the suite waits for the graphs.
const INDEX_TIMEOUT: Duration = Duration::from_secs(1800);
/// How long the suite waits, once indexed, for the idle merge to leave one
/// segment (eddy-ingest's default idle time is 10 s).
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(180);

/// Which peers run beside eddy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PeerSet {
    /// hnswlib, faiss, usearch, Qdrant's engine and eddy's, in process.
    InProcess,
    /// Milvus served, and eddy served, from one Python client.
    Served,
    /// No peers.
    None,
}

/// Options of `eddy-loadtest suite`.
#[derive(Debug, Clone, clap::Args)]
pub struct SuiteArgs {
    /// Dataset directory (the committed sample, or the debian-minilm layout).
    #[arg(long, env = "EDDY_SUITE_DATASET", default_value = SAMPLE_DIR)]
    pub dataset: PathBuf,
    /// Directory the report files are written to.
    #[arg(long, env = "EDDY_SUITE_OUT", default_value = "suite-report")]
    pub out: PathBuf,
    /// Use at most this many queries.
    #[arg(long, env = "EDDY_SUITE_QUERIES")]
    pub queries: Option<usize>,
    /// Seconds per load phase.
    #[arg(long, env = "EDDY_SUITE_DURATION", default_value_t = 5.0)]
    pub duration: f64,
    /// Seconds of each mixed read/write phase and of its read-only
    /// reference: long enough for the writer's seals, merges and graph
    /// builds to show, not only its first seconds.
    #[arg(long, env = "EDDY_SUITE_MIXED_DURATION", default_value_t = 20.0)]
    pub mixed_duration: f64,
    /// Rounds of every A/B comparison (order reversed each round).
    #[arg(long, env = "EDDY_SUITE_ROUNDS", default_value_t = 2)]
    pub rounds: usize,
    /// The `ef` sweep, comma-separated.
    #[arg(
        long,
        env = "EDDY_SUITE_EF",
        value_delimiter = ',',
        default_value = "10,16,24,32,48,64,96,128,192,256"
    )]
    pub ef: Vec<usize>,
    /// The recall@10 the load, filtered and mixed phases run at.
    #[arg(long, env = "EDDY_SUITE_TARGET_RECALL", default_value_t = 0.95)]
    pub target_recall: f64,
    /// Closed-loop workers of the saturating and mixed phases.
    #[arg(long, env = "EDDY_SUITE_WORKERS", default_value_t = 4)]
    pub workers: usize,
    /// Write rates of the mixed read/write phases, events/s (0 = freshness
    /// probes only), comma-separated.
    #[arg(
        long,
        env = "EDDY_SUITE_WRITE_RATES",
        value_delimiter = ',',
        default_value = "0,500,2000,5000"
    )]
    pub write_rates: Vec<f64>,
    /// Points per record of the mixed phases' writer: Arrow batches of up
    /// to this many rows (default 49: one batch per 50 base rows, the
    /// freshness probe's row left out), or 1 for one protobuf event per
    /// point. Tansu's SQLite engine stores every record as a row and spends
    /// a core at ~2,000 records/s, which on one machine is taken from the
    /// service; a real Kafka cluster does not.
    #[arg(long, env = "EDDY_SUITE_WRITE_BATCH", default_value_t = 49)]
    pub write_batch: usize,
    /// Queries per DoExchange (and per Milvus batch).
    #[arg(long, env = "EDDY_SUITE_BATCH", default_value_t = 100)]
    pub batch: usize,
    /// Input batches of `--batch` queries streamed through one DoExchange
    /// in the streamed sweep (an analytics job's shape; 1 = no such sweep).
    #[arg(long, env = "EDDY_SUITE_EXCHANGE_BATCHES", default_value_t = 10)]
    pub exchange_batches: usize,
    /// Format the base is published in: Arrow batches of 1,000 points by
    /// default (Tansu falls behind one record per point on a full dataset).
    #[arg(
        long,
        env = "EDDY_SUITE_INGEST_FORMAT",
        value_enum,
        default_value = "arrow"
    )]
    pub ingest_format: Format,
    /// Partitions of the suite's topic.
    #[arg(long, env = "EDDY_SUITE_PARTITIONS", default_value_t = 3)]
    pub partitions: u32,
    /// Peers to run, comma-separated.
    #[arg(
        long,
        env = "EDDY_SUITE_PEERS",
        value_enum,
        value_delimiter = ',',
        default_value = "served,in-process"
    )]
    pub peers: Vec<PeerSet>,
    /// The Python interpreter of the peer scripts.
    #[arg(long, env = "PYTHON", default_value = "python3")]
    pub python: String,
    /// The repository root (holds `loadtest/bench/peers.py`).
    #[arg(long, env = "EDDY_SUITE_REPO", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/.."))]
    pub repo: PathBuf,
    /// Directory holding eddy-ingest, eddy-query and eddy-bench (default:
    /// next to this binary).
    #[arg(long, env = "EDDY_SUITE_BIN_DIR")]
    pub bin_dir: Option<PathBuf>,
    /// Segment store: a directory, or `s3://bucket/prefix` on an
    /// S3-compatible store the `AWS_*` environment reaches (default: a
    /// directory in the run's temp dir). On an object store the cold start
    /// downloads every file into an emptied cache.
    #[arg(long, env = "EDDY_SUITE_STORE", value_parser = crate::options::parse_store)]
    pub store: Option<StoreLocation>,
}

/// The ingest run: publishing flat out until everything is searchable and
/// indexed.
#[derive(Debug, Clone, Serialize)]
pub struct Ingest {
    /// What the producer measured.
    pub produce: ProduceReport,
    /// From the first send until `count` saw every point, seconds.
    pub all_searchable_s: f64,
    /// Points over `all_searchable_s`.
    pub searchable_per_s: f64,
    /// From then until every segment's graph is built and served, seconds.
    pub indexed_after_s: f64,
    /// Segments served once indexed.
    pub segments: usize,
    /// From then until the idle merge left one indexed segment (or
    /// [`CONVERGE_TIMEOUT`] passed), seconds; the workloads start after it.
    pub converged_after_s: f64,
    /// Segments served when the workloads start.
    pub converged_segments: usize,
    /// Bytes of the store directory over points, once indexed (before the
    /// idle merge).
    pub disk_bytes_per_vector: f64,
}

/// Cold starts of eddy-query on the ingested store, one per round.
#[derive(Debug, Clone, Serialize)]
pub struct ColdStart {
    /// From the start of the process to `/readyz` answering 200, seconds,
    /// per restart.
    pub ready_s: Vec<f64>,
    /// From the start to the first search answered, seconds, per restart.
    pub first_search_s: Vec<f64>,
    /// Bytes of the files the served manifest names.
    pub store_bytes: u64,
    /// Whether the store is an object store (the node downloaded every
    /// file into an emptied cache) rather than a directory (it read them,
    /// the page cache warm).
    pub object_store: bool,
}

/// Everything the suite measured (`report.json`).
#[derive(Debug, Clone, Serialize)]
pub struct SuiteReport {
    /// The command line.
    pub command: String,
    /// Dataset directory name.
    pub dataset: String,
    /// Base points.
    pub points: usize,
    /// Dimensions.
    pub dim: usize,
    /// Queries.
    pub queries: usize,
    /// Seconds per phase.
    pub duration_s: f64,
    /// Seconds of each mixed phase and of its read-only reference.
    pub mixed_duration_s: f64,
    /// Rounds of each A/B comparison.
    pub rounds: usize,
    /// The recall target of the load phases.
    pub target_recall: f64,
    /// Closed-loop workers of the saturating and mixed phases.
    pub workers: usize,
    /// Points per record of the mixed phases' writer.
    pub write_batch: usize,
    /// Host and versions.
    pub host: Host,
    /// The ingest run.
    pub ingest: Option<Ingest>,
    /// The workloads.
    pub eddy: EddyRuns,
    /// Peak resident memory of eddy-ingest and eddy-query, bytes.
    pub peak_rss: (Option<u64>, Option<u64>),
    /// The cold start.
    pub cold_start: Option<ColdStart>,
    /// The peers.
    pub peers: PeerResults,
    /// Wall time of the whole suite, seconds.
    pub elapsed_s: f64,
}

/// Runs the suite and writes its report.
pub async fn run(args: SuiteArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    if args.ef.is_empty() || args.rounds == 0 || args.partitions == 0 {
        bail!("--ef needs a value, --rounds and --partitions at least 1");
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let out = args.out.canonicalize().context("resolving --out")?;
    let dir = args.dataset.clone();
    let max_queries = args.queries;
    let ds = tokio::task::spawn_blocking(move || Dataset::load(&dir, max_queries))
        .await
        .context("dataset loader panicked")?
        .with_context(|| format!("loading {}", args.dataset.display()))?;
    let bin_dir = match &args.bin_dir {
        Some(d) => d.clone(),
        None => services::default_bin_dir()?,
    };
    services::check_binaries(&bin_dir)?;
    let peer_run = peers::PeerRun {
        python: args.python.clone(),
        repo: args.repo.clone(),
        dataset: args.dataset.canonicalize().context("resolving --dataset")?,
        queries: args.queries,
        rounds: args.rounds,
        ef: args.ef.clone(),
        out: out.clone(),
    };

    let tansu = services::start_broker(COLLECTION, args.partitions).await?;
    let work = tempfile::Builder::new()
        .prefix("eddy-suite-")
        .tempdir()
        .context("creating the suite's temp dir")?;
    let cfg = ServiceConfig {
        bin_dir: bin_dir.clone(),
        brokers: tansu.bootstrap(),
        store: args
            .store
            .clone()
            .unwrap_or_else(|| StoreLocation::Dir(work.path().join("store"))),
        cache_dir: work.path().join("cache"),
        log_dir: work.path().to_owned(),
        collection: format!(
            "name={COLLECTION},dim={},metric=cosine,topic={COLLECTION},id=u64,format=protobuf,field.section=keyword",
            ds.dim()
        ),
        ingest_args: Vec::new(),
        query_args: Vec::new(),
    };
    let mut services = Services::start(&cfg)?;
    let broker_pid = tansu.pid();
    let measured = tokio::select! {
        m = measure_served(&args, &ds, &cfg, &mut services, broker_pid, &peer_run) => m,
        r = services::shutdown_signal() => r.and(Err(anyhow::anyhow!("interrupted"))),
    };
    let peak_rss = services.peak_rss();
    services.stop();
    let (ingest, eddy, cold_start, mut peer_results) = match measured {
        Ok(m) => m,
        Err(e) => {
            eprintln!("{}", services.log_tails());
            return Err(e);
        }
    };
    drop(tansu);
    if args.peers.contains(&PeerSet::InProcess) {
        tracing::info!("in-process peers");
        let run = peer_run.clone();
        let bench = bin_dir.join("eddy-bench");
        let r = tokio::task::spawn_blocking(move || peers::in_process(&run, &bench))
            .await
            .context("peer runner panicked")?;
        peer_results.merge(r);
    }
    if !args.peers.contains(&PeerSet::Served) {
        peer_results
            .unavailable
            .insert("Milvus (served)".into(), "not asked for (--peers)".into());
    }
    // The served script says why Qdrant's server did not run; when that
    // script did not run at all, say it here.
    let qdrant_served = peer_results
        .curves
        .iter()
        .any(|c| c.name.starts_with("Qdrant "));
    if !qdrant_served {
        peer_results.unavailable.entry("qdrant-server".into()).or_insert_with(|| {
            "not run: no served peers in this run (its binary, built from Qdrant's source, is named by EDDY_QDRANT_BIN); the in-process engine (qdrant-edge-py) stands in".into()
        });
    }
    let report = SuiteReport {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        dataset: args.dataset.file_name().map_or_else(
            || args.dataset.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        ),
        points: ds.len(),
        dim: ds.dim(),
        queries: ds.queries.rows(),
        duration_s: args.duration,
        mixed_duration_s: args.mixed_duration,
        rounds: args.rounds,
        target_recall: args.target_recall,
        workers: args.workers,
        write_batch: args.write_batch,
        host: host::host(&args),
        ingest,
        eddy,
        peak_rss,
        cold_start,
        peers: peer_results,
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    write_report(&report, &out)?;
    println!(
        "report written: {}/report.md, report.html, report.json ({:.0} s)",
        out.display(),
        report.elapsed_s
    );
    Ok(())
}

/// The broker's and the services' process ids, named.
fn processes(services: &Services, broker_pid: Option<u32>) -> Vec<(String, u32)> {
    let (ingest, query) = services.pids();
    [
        ("broker", broker_pid),
        ("eddy-ingest", ingest),
        ("eddy-query", query),
    ]
    .into_iter()
    .filter_map(|(name, pid)| Some((name.to_owned(), pid?)))
    .collect()
}

type Measured = (Option<Ingest>, EddyRuns, Option<ColdStart>, PeerResults);

/// Waits until the suite's collection is sealed, indexed and merged
/// (`wait_indexed`, then `wait_converged`), and says how it found it.
async fn settle(client: &QueryClient, store: &Store) -> anyhow::Result<Settled> {
    wait_indexed(client, store, COLLECTION, INDEX_TIMEOUT).await?;
    let s = wait_converged(client, store, COLLECTION, CONVERGE_TIMEOUT).await?;
    Ok(Settled {
        segments: s.segments,
        indexed: s.indexed,
        waited_s: s.waited.as_secs_f64(),
    })
}

/// Ingest, workloads and served peers while the services run, then the
/// cold start.
async fn measure_served(
    args: &SuiteArgs,
    ds: &Dataset,
    cfg: &ServiceConfig,
    services: &mut Services,
    broker_pid: Option<u32>,
    peer_run: &peers::PeerRun,
) -> anyhow::Result<Measured> {
    let client = QueryClient::new(&services.http_addr, COLLECTION, Duration::from_secs(30))?;
    services.wait_ready(&client, READY_TIMEOUT).await?;
    let store = cfg.open_store()?;
    let target = Target {
        http: services.http_addr.clone(),
        flight: services.flight_addr.clone(),
        brokers: cfg.brokers.clone(),
        topic: COLLECTION.to_owned(),
        collection: COLLECTION.to_owned(),
        declared_format: Format::Protobuf,
        processes: processes(services, broker_pid),
    };
    let work = async {
        let ingest = phases::ingest(ds, args.ingest_format, &target, &client, &store).await?;
        tracing::info!(?ingest.all_searchable_s, ?ingest.indexed_after_s, "ingested and indexed");
        let plan = Plan {
            dataset: args.dataset.clone(),
            queries: args.queries,
            duration: args.duration,
            mixed_duration: args.mixed_duration,
            rounds: args.rounds,
            ef: args.ef.clone(),
            workers: args.workers,
            write_rates: args.write_rates.clone(),
            write_batch: args.write_batch,
            batch: args.batch,
            exchange_batches: args.exchange_batches,
            target_recall: args.target_recall,
        };
        // Each mixed phase's read-only reference meets the collection as
        // the sweeps did: sealed, indexed and merged.
        let eddy = workloads::run(&target, &plan, async || settle(&client, &store).await).await?;
        let mut peer_results = PeerResults::default();
        if args.peers.contains(&PeerSet::Served) {
            // The mixed phases left a tail and new segments: the peers
            // meet eddy sealed, merged and indexed again, as the sweeps did.
            let settled = settle(&client, &store).await?;
            tracing::info!(
                segments = settled.segments,
                waited_s = settled.waited_s,
                "converged"
            );
            tracing::info!("served peers");
            let (run, http, flight, batch) = (
                peer_run.clone(),
                target.http.clone(),
                target.flight.clone(),
                args.batch,
            );
            peer_results = tokio::task::spawn_blocking(move || {
                peers::served(&run, &http, &flight, COLLECTION, batch)
            })
            .await
            .context("peer runner panicked")?;
        }
        anyhow::Ok((ingest, eddy, peer_results))
    };
    let (ingest, eddy, peer_results) = tokio::select! {
        r = work => r?,
        e = services.watch() => return Err(e),
    };
    let cold = phases::cold_start(cfg, services, &client, ds, args.rounds).await?;
    Ok((Some(ingest), eddy, Some(cold), peer_results))
}

/// Writes `report.json`, `report.md` and `report.html` into `out`.
pub fn write_report(report: &SuiteReport, out: &Path) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(report).context("encoding the report")?;
    let sections = report::sections(report);
    let title = format!("eddy benchmark suite: {}", report.dataset);
    for (name, text) in [
        ("report.json", json + "\n"),
        ("report.md", document::markdown(&title, &sections)),
        ("report.html", document::html(&title, &sections)),
    ] {
        let path = out.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
