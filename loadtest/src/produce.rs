//! `eddy-loadtest produce`: publish a dataset's base (fvecs + payload JSONL)
//! to a topic as JSON, protobuf or Arrow IPC events, at a fixed event rate
//! or flat out, with a progress bar; then print a summary (events/s, bytes/s,
//! acknowledgement latency percentiles) and write the delivered offsets
//! (partition → last offset, the `min_offsets` of a read-your-writes query).
//!
//! Events are encoded before the clock starts, so the rate measured is the
//! broker's and the consumer's, not the encoder's.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context as _};
use serde::Serialize;
use tokio::time::Instant;

use crate::dataset::{Base, SAMPLE_DIR};
use crate::encode::{self, EncodeOptions, Format, PayloadColumns, Record};
use crate::histogram::fmt_millis;
use crate::kafka;
use crate::progress;
use crate::publish::{self, PublishOptions, PublishStats, PublishSummary};

/// Rows encoded per progress step.
const ENCODE_CHUNK: usize = 1000;
/// librdkafka's default `message.max.bytes`.
const DEFAULT_MESSAGE_MAX_BYTES: usize = 1_000_000;
/// Room for a record's key, headers and batch framing.
const RECORD_OVERHEAD: usize = 64 * 1024;

/// Options of `eddy-loadtest produce`.
#[derive(Debug, Clone, clap::Args)]
pub struct ProduceArgs {
    /// Kafka bootstrap servers.
    #[arg(
        long,
        env = "EDDY_LOADTEST_PRODUCE_BROKERS",
        default_value = "127.0.0.1:9092"
    )]
    pub brokers: String,
    /// The topic to publish to.
    #[arg(long, env = "EDDY_LOADTEST_PRODUCE_TOPIC")]
    pub topic: String,
    /// Dataset directory (base.fvecs and base-payload.jsonl).
    #[arg(long, env = "EDDY_LOADTEST_PRODUCE_DATASET", default_value = SAMPLE_DIR)]
    pub dataset: PathBuf,
    /// Start at this base row (point id).
    #[arg(long, env = "EDDY_LOADTEST_PRODUCE_FIRST_ROW", default_value_t = 0)]
    pub first_row: usize,
    /// Publish at most N base rows.
    #[arg(long, env = "EDDY_LOADTEST_PRODUCE_LIMIT")]
    pub limit: Option<usize>,
    /// Event format.
    #[arg(
        long,
        env = "EDDY_LOADTEST_PRODUCE_FORMAT",
        value_enum,
        default_value = "json"
    )]
    pub format: Format,
    /// Send no `content-type` header: the collection declares the format
    /// (`format=` in its spec). Tansu 0.6 scans its whole header table for
    /// every record it fetches, so a large topic loads far faster without.
    #[arg(long, env = "EDDY_LOADTEST_PRODUCE_NO_HEADER")]
    pub no_header: bool,
    /// Points per Arrow message.
    #[arg(long, env = "EDDY_LOADTEST_PRODUCE_ARROW_ROWS", default_value_t = 1000)]
    pub arrow_rows: usize,
    /// Protobuf: the vector as raw little-endian bytes instead of packed floats.
    #[arg(long, env = "EDDY_LOADTEST_PRODUCE_PROTO_VECTOR_BYTES")]
    pub proto_vector_bytes: bool,
    /// Events (points) per second; 0 = flat out.
    #[arg(long, env = "EDDY_LOADTEST_PRODUCE_RATE", default_value_t = 0.0)]
    pub rate: f64,
    /// Passes over the base (later passes upsert the same ids); 0 = until Ctrl-C.
    #[arg(long, env = "EDDY_LOADTEST_PRODUCE_PASSES", default_value_t = 1)]
    pub passes: u64,
    /// From the second pass on, a tombstone instead of every N-th event
    /// (rotating, so deleted ids are re-created the pass after); 0 = none.
    /// Not with `--format arrow`.
    #[arg(long, env = "EDDY_LOADTEST_PRODUCE_DELETE_EVERY", default_value_t = 0)]
    pub delete_every: u64,
    /// librdkafka producer property KEY=VALUE (repeatable; overrides the
    /// defaults linger.ms=5, acks=all).
    #[arg(short = 'X', long = "kafka", value_parser = kafka::parse_property)]
    pub kafka: Vec<(String, String)>,
    /// Write the delivered offsets (partition → last offset) as JSON here.
    #[arg(long, env = "EDDY_LOADTEST_PRODUCE_OFFSETS_OUT")]
    pub offsets_out: Option<PathBuf>,
    /// Write the summary as JSON here.
    #[arg(long, env = "EDDY_LOADTEST_PRODUCE_JSON")]
    pub json: Option<PathBuf>,
}

impl ProduceArgs {
    /// Default options (for library callers and tests) for `topic` on `brokers`.
    pub fn new(brokers: &str, topic: &str) -> Self {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            args: ProduceArgs,
        }
        let mut args = Wrap::parse_from(["produce", "--topic", topic]).args;
        args.brokers = brokers.to_owned();
        args
    }
}

/// What `produce` reports (its JSON output).
#[derive(Debug, Clone, Serialize)]
pub struct ProduceReport {
    /// The topic.
    pub topic: String,
    /// The event format.
    pub format: Format,
    /// Points per record (1, or the Arrow batch size).
    pub points_per_record: usize,
    /// The requested rate (events/s; 0 = flat out).
    pub target_rate: f64,
    /// Seconds spent encoding before publishing.
    pub encode_s: f64,
    /// What publishing measured.
    pub publish: PublishSummary,
}

/// Runs `produce`: prints the summary and writes the requested files.
pub async fn run(args: ProduceArgs) -> anyhow::Result<()> {
    // Ctrl-C stops publishing; what was sent is still acknowledged and reported.
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let watcher = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            flag.store(true, Ordering::Relaxed);
        }
    });
    let outcome = produce(&args, &stop).await;
    watcher.abort();
    let outcome = outcome?;
    println!("{}", render(&outcome));
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&outcome).context("encoding the summary")?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Loads, encodes and publishes as `args` says; writes the offsets file.
pub async fn produce(args: &ProduceArgs, stop: &AtomicBool) -> anyhow::Result<ProduceReport> {
    if args.format == Format::Arrow && (args.arrow_rows == 0 || args.delete_every > 0) {
        bail!("--format arrow needs --arrow-rows of at least 1 and no --delete-every");
    }
    let dir = args.dataset.clone();
    let end = args.limit.map(|n| args.first_row.saturating_add(n));
    let base = tokio::task::spawn_blocking(move || Base::load(&dir, end))
        .await
        .context("dataset loader panicked")?
        .with_context(|| format!("loading {}", args.dataset.display()))?;
    tracing::info!(
        points = base.len(),
        dim = base.vectors.dim,
        format = args.format.name(),
        "encoding"
    );
    let opts = EncodeOptions {
        format: args.format,
        arrow_rows: args.arrow_rows,
        proto_vector_bytes: args.proto_vector_bytes,
    };
    let encode_started = Instant::now();
    let first = args.first_row;
    if first >= base.len() {
        bail!("--first-row {first} is past the base ({} rows)", base.len());
    }
    let records = tokio::task::spawn_blocking(move || encode_base(&base, first, &opts))
        .await
        .context("encoder panicked")??;
    let encode_s = encode_started.elapsed().as_secs_f64();

    // librdkafka refuses records over `message.max.bytes` (1 MB by default);
    // Arrow batches are larger. Room for the largest record, unless the user
    // set it (the broker's and topic's limits must allow it too).
    let largest = records.iter().map(|r| r.value.len()).max().unwrap_or(0);
    let mut properties = Vec::new();
    if largest + RECORD_OVERHEAD > DEFAULT_MESSAGE_MAX_BYTES {
        let max = (largest + RECORD_OVERHEAD).to_string();
        properties.push(("message.max.bytes".to_owned(), max));
    }
    properties.extend(args.kafka.iter().cloned());
    let producer = kafka::producer(&args.brokers, &properties)?;
    let publish_opts = PublishOptions {
        topic: args.topic.clone(),
        content_type: (!args.no_header).then(|| args.format.content_type()),
        rate: args.rate,
        passes: args.passes,
        delete_every: args.delete_every,
    };
    let events: u64 = records.iter().map(|r| u64::from(r.points)).sum();
    let total = (args.passes > 0).then(|| events * args.passes);
    let pb = progress::bar("produce", total, "events");
    let stats: PublishStats =
        publish::publish(&producer, &records, &publish_opts, stop, &pb).await?;
    pb.finish_and_clear();
    if let Some(path) = &args.offsets_out {
        stats.offsets.write(path)?;
    }
    Ok(ProduceReport {
        topic: args.topic.clone(),
        format: args.format,
        points_per_record: match args.format {
            Format::Arrow => args.arrow_rows,
            _ => 1,
        },
        target_rate: args.rate,
        encode_s,
        publish: stats.summary(),
    })
}

/// Encodes the base rows from `first` on, with a progress bar.
fn encode_base(
    base: &Base,
    first: usize,
    opts: &EncodeOptions,
) -> Result<Vec<Record>, encode::Error> {
    let columns = match opts.format {
        Format::Arrow => PayloadColumns::infer(&base.payloads),
        _ => PayloadColumns::default(),
    };
    let pb = progress::bar("encode", Some((base.len() - first) as u64), "rows");
    // Chunks are whole Arrow messages, so batches do not depend on the chunking.
    let chunk = ENCODE_CHUNK.div_ceil(opts.arrow_rows.max(1)) * opts.arrow_rows.max(1);
    let mut records = Vec::new();
    let mut start = first;
    while start < base.len() {
        let end = (start + chunk).min(base.len());
        records.extend(encode::encode_rows(
            &base.vectors,
            &base.payloads,
            start..end,
            opts,
            &columns,
        )?);
        pb.inc((end - start) as u64);
        start = end;
    }
    pb.finish_and_clear();
    Ok(records)
}

/// Renders the summary as text.
pub fn render(r: &ProduceReport) -> String {
    let p = &r.publish;
    let target = if r.target_rate > 0.0 {
        format!("target {:.0}/s", r.target_rate)
    } else {
        "flat out".to_owned()
    };
    let ack = p.ack.as_ref().map_or_else(
        || "-".to_owned(),
        |a| {
            format!(
                "p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
                fmt_millis(a.p50_ms),
                fmt_millis(a.p90_ms),
                fmt_millis(a.p99_ms),
                fmt_millis(a.p999_ms),
                fmt_millis(a.max_ms)
            )
        },
    );
    let offsets: Vec<String> = p
        .offsets
        .min_offsets
        .iter()
        .map(|(partition, offset)| format!("{partition}:{offset}"))
        .collect();
    format!(
        "\n== eddy-loadtest produce: topic {}, {} ({} per record), {target} ==\n\
         events      {} in {} records ({} tombstones), {:.1} MB, encoded in {:.2} s beforehand\n\
         rate        {:.0} events/s acknowledged ({:.0} events/s sent), {:.1} MB/s\n\
         elapsed     {}\n\
         ack         {ack}\n\
         offsets     {} (last per partition; timestamps: {:?})",
        r.topic,
        r.format.name(),
        r.points_per_record,
        p.events,
        p.records,
        p.tombstones,
        p.bytes as f64 / 1e6,
        r.encode_s,
        p.events_per_s,
        p.send_events_per_s,
        p.bytes_per_s / 1e6,
        fmt_millis(p.elapsed_s * 1e3),
        offsets.join(" "),
        p.timestamps
    )
}
