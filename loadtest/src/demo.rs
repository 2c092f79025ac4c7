//! `eddy-loadtest demo`: the whole pipeline on one machine.
//!
//! Starts a Tansu broker, creates the topic, runs `eddy-ingest` and
//! `eddy-query` as child processes, publishes the dataset's base vectors at a
//! fixed rate while measuring produce→searchable latency on a sample, waits
//! until every point is counted, runs the queries over HTTP, Flight `DoGet` and
//! Flight `DoExchange`, and prints recall and latency. Then it keeps serving
//! until Ctrl-C (or exits at once with `--exit`). Every child process is
//! stopped on the way out, whatever happened.

mod produce;
mod queries;
mod report;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use eddy_manifest::{Store, StoreLocation};
use tokio::time::Instant;

use crate::broker::Tansu;
use crate::dataset::{Dataset, SAMPLE_DIR};
use crate::encode::Format;
use crate::flight::FlightSearch;
use crate::http::QueryClient;
use crate::kafka;
use crate::services::{self, wait_count, wait_indexed, ServiceConfig, Services};
use produce::ProduceOptions;
use queries::Mode;

/// The collection (and topic) the demo uses.
const COLLECTION: &str = "demo";
/// Results per query.
const K: usize = 10;
/// How long the services get to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long, after publishing, until every point must be counted.
const COUNT_TIMEOUT: Duration = Duration::from_secs(120);
/// Per-request timeout of the query clients.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the demo waits for the background indexer.
const INDEX_TIMEOUT: Duration = Duration::from_secs(300);

/// Options of `eddy-loadtest demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Dataset directory: the committed sample (default) or the full
    /// debian-minilm layout (base.fvecs, base-payload.jsonl,
    /// queries-public.fvecs, gt-public.ivecs, gt-public-scores.fvecs).
    #[arg(long, env = "EDDY_DEMO_DATASET", default_value = SAMPLE_DIR)]
    pub dataset: PathBuf,

    /// Number of queries to run per API (default: all in the dataset).
    #[arg(long, env = "EDDY_DEMO_QUERIES")]
    pub queries: Option<usize>,

    /// Publish rate in events per second (0 = as fast as possible).
    #[arg(long, env = "EDDY_DEMO_RATE", default_value_t = 1000.0)]
    pub rate: f64,

    /// Partitions of the demo topic.
    #[arg(long, env = "EDDY_DEMO_PARTITIONS", default_value_t = 3)]
    pub partitions: u32,

    /// Shards the demo collection is split into (partition `p` is shard
    /// `p % shards`); the demo's query node serves them all.
    #[arg(long, env = "EDDY_DEMO_SHARDS", default_value_t = 1)]
    pub shards: u32,

    /// Event format, one point per record: JSON or protobuf
    /// (`eddy.v1.PointEvent`, ~6× fewer bytes on the broker). Events carry
    /// no `content-type` header; the demo collection declares the format.
    #[arg(long, env = "EDDY_DEMO_FORMAT", value_enum, default_value_t = DemoFormat::Json)]
    pub format: DemoFormat,

    /// Measure produce→searchable latency on one event in this many (0 = off).
    #[arg(long, env = "EDDY_DEMO_SAMPLE_EVERY", default_value_t = 20)]
    pub sample_every: usize,

    /// Segment store: a directory, or `s3://bucket/prefix` on an
    /// S3-compatible store the `AWS_*` environment reaches (default: a
    /// directory in the run's temp dir). On an object store each service
    /// caches in the temp dir.
    #[arg(long, env = "EDDY_DEMO_STORE", value_parser = crate::options::parse_store)]
    pub store: Option<StoreLocation>,

    /// Directory holding eddy-ingest and eddy-query (default: next to this binary).
    #[arg(long, env = "EDDY_DEMO_BIN_DIR")]
    pub bin_dir: Option<PathBuf>,

    /// Exit right after the report instead of serving until Ctrl-C.
    #[arg(long, env = "EDDY_DEMO_EXIT")]
    pub exit: bool,
}

/// The demo's event formats (one point per record, so every event can be
/// probed for produce→searchable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DemoFormat {
    /// `{"id": 42, "vector": [...], "payload": {...}}`.
    Json,
    /// `eddy.v1.PointEvent`.
    Protobuf,
}

impl From<DemoFormat> for Format {
    fn from(f: DemoFormat) -> Self {
        match f {
            DemoFormat::Json => Format::Json,
            DemoFormat::Protobuf => Format::Protobuf,
        }
    }
}

/// Runs the demo. Returns an error (children stopped) on any failure.
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    if args.partitions == 0 {
        bail!("--partitions must be at least 1");
    }
    let dataset_dir = args.dataset.clone();
    let max_queries = args.queries;
    let ds = tokio::task::spawn_blocking(move || Dataset::load(&dataset_dir, max_queries))
        .await
        .context("dataset loader panicked")?
        .with_context(|| format!("loading dataset {}", args.dataset.display()))?;
    tracing::info!(
        points = ds.len(),
        dim = ds.dim(),
        queries = ds.queries.rows(),
        "dataset loaded"
    );

    let bin_dir = match &args.bin_dir {
        Some(dir) => dir.clone(),
        None => services::default_bin_dir()?,
    };
    services::check_binaries(&bin_dir)?;

    let tansu = services::start_broker(COLLECTION, args.partitions).await?;

    let work = tempfile::Builder::new()
        .prefix("eddy-demo-")
        .tempdir()
        .context("creating the demo's temp dir")?;
    let cfg = ServiceConfig {
        bin_dir,
        brokers: tansu.bootstrap(),
        store: args
            .store
            .clone()
            .unwrap_or_else(|| StoreLocation::Dir(work.path().join("store"))),
        cache_dir: work.path().join("cache"),
        log_dir: work.path().to_owned(),
        collection: format!(
            "name={COLLECTION},dim={},metric=cosine,topic={COLLECTION},id=u64,shards={},format={},field.section=keyword",
            ds.dim(),
            args.shards,
            Format::from(args.format).name()
        ),
        ingest_args: Vec::new(),
        query_args: Vec::new(),
    };
    let store = cfg.open_store()?;
    let mut services = Services::start(&cfg)?;
    let outcome = tokio::select! {
        r = pipeline(&args, &ds, &tansu, &mut services, &store) => r,
        _ = services::shutdown_signal() => Err(anyhow::anyhow!("interrupted")),
    };
    if let Err(e) = outcome {
        eprintln!("{}", services.log_tails());
        services.stop();
        return Err(e);
    }
    if !args.exit {
        println!("\nserving (Ctrl-C to stop):");
        println!(
            "  HTTP            http://{}/v1/collections/{COLLECTION}/search",
            services.http_addr
        );
        println!("  Arrow Flight    grpc://{}", services.flight_addr);
        println!("  query metrics   http://{}/metrics", services.http_addr);
        println!(
            "  ingest metrics  http://{}/metrics",
            services.ingest_metrics_addr
        );
        println!(
            "  Kafka           {} (topic {COLLECTION})",
            tansu.bootstrap()
        );
        println!("  store           {}", cfg.store);
        println!("  logs            {}", work.path().display());
        tokio::select! {
            r = services::shutdown_signal() => r?,
            e = services.watch() => {
                eprintln!("{}", services.log_tails());
                return Err(e);
            }
        }
        println!("stopping");
    }
    services.stop();
    Ok(())
}

/// Ready → publish → count → queries → report; fails fast when a service exits.
async fn pipeline(
    args: &DemoArgs,
    ds: &Dataset,
    tansu: &Tansu,
    services: &mut Services,
    store: &Store,
) -> anyhow::Result<()> {
    let client = QueryClient::new(&services.http_addr, COLLECTION, REQUEST_TIMEOUT)?;
    let flight_addr = services.flight_addr.clone();
    services.wait_ready(&client, READY_TIMEOUT).await?;
    tracing::info!("services ready");

    let work = async {
        // librdkafka's 5-minute delivery timeout: a flat-out run
        // (`--rate 0`) of the full dataset queues tens of thousands of
        // records behind Tansu, which stores each as a SQLite row.
        let producer = kafka::producer(&tansu.bootstrap(), &[("linger.ms".into(), "2".into())])
            .context("creating the Kafka producer")?;
        let opts = ProduceOptions {
            topic: COLLECTION.to_owned(),
            rate: args.rate,
            format: args.format.into(),
            sample_every: args.sample_every,
        };
        let started = Instant::now();
        let stats = produce::produce(ds, &producer, &client, &opts).await?;
        tracing::info!(
            events = stats.events,
            "published; waiting until every point is counted"
        );
        wait_count(&client, ds.len() as u64, COUNT_TIMEOUT).await?;
        let all_searchable_after = started.elapsed();

        // Exact first, on whatever mix of tail and segments serves now; then,
        // once everything is sealed and indexed, through the graphs.
        let flight = FlightSearch::connect(&flight_addr, REQUEST_TIMEOUT).await?;
        let set = Arc::new(ds.query_set());
        let searchers = queries::searchers(&client, &flight, COLLECTION, set.len());
        let mut apis = Vec::new();
        for (name, searcher) in &searchers {
            apis.push(queries::run(name, searcher, &set, K, Mode::Exact).await?);
        }

        let indexing = wait_indexed(&client, store, COLLECTION, INDEX_TIMEOUT).await?;
        tracing::info!(?indexing, "segments indexed");
        for (name, searcher) in &searchers {
            apis.push(queries::run(name, searcher, &set, K, Mode::Graph).await?);
        }
        println!(
            "segments: {} ({} with a graph; sealed and indexed {:.1} s after the last event was searchable)",
            indexing.segments,
            indexing.indexed,
            indexing.waited.as_secs_f64()
        );
        println!(
            "{}",
            report::render(&report::Report {
                dataset: dataset_name(&ds.dir),
                points: ds.len(),
                dim: ds.dim(),
                partitions: args.partitions,
                k: K,
                format: args.format.into(),
                target_rate: args.rate,
                produce: &stats,
                all_searchable_after,
                apis: &apis,
            })
        );
        anyhow::Ok(())
    };
    tokio::select! {
        r = work => r,
        e = services.watch() => Err(e),
    }
}

fn dataset_name(dir: &Path) -> String {
    dir.file_name().map_or_else(
        || dir.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}
