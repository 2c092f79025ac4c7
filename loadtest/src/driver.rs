//! `eddy-loadtest query`: the query driver.
//!
//! Loads eddy-query over HTTP search, Flight `DoGet` (one ticket per query)
//! or Flight `DoExchange` (batches of N queries) in a closed loop (N
//! workers) or an open loop (a fixed offered rate, latency from each
//! request's scheduled time into HDR histograms), for each ground truth
//! (plain, or filtered at ~1 % / ~10 %) and each `ef` of a sweep (or exact),
//! scoring tie-aware recall@1/10/100 on every answer. `--saturate` measures
//! the closed loop's throughput, then offers 50/70/90 % of it open-loop.
//! Optionally, freshness probes and a background writer run beside the
//! phases (mixed read/write). Prints a table, and writes JSON with `--json`.

mod load;
mod report;
mod side;
mod tally;
mod target;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};

pub use load::{closed_loop, open_loop, Outcome, Work};
pub use report::{render, Load, PhaseResult, Report};
pub use side::SideArgs;
pub use tally::{Recall, Tally};
pub use target::{Api, Searcher};

use crate::dataset::{QuerySet, Truth, SAMPLE_DIR};
use crate::encode::Format;
use crate::flight::FlightSearch;
use crate::http::{QueryClient, SearchRequest};
use crate::offsets::DeliveredOffsets;
use crate::options::SearchOptions;
use crate::progress;

/// Options of `eddy-loadtest query`.
#[derive(Debug, Clone, clap::Args)]
pub struct QueryArgs {
    /// eddy-query's HTTP address (host:port).
    #[arg(
        long,
        env = "EDDY_LOADTEST_QUERY_HTTP",
        default_value = "127.0.0.1:8080"
    )]
    pub http: String,
    /// eddy-query's Arrow Flight address (host:port).
    #[arg(
        long,
        env = "EDDY_LOADTEST_QUERY_FLIGHT",
        default_value = "127.0.0.1:50051"
    )]
    pub flight: String,
    /// The collection to query.
    #[arg(long, env = "EDDY_LOADTEST_QUERY_COLLECTION")]
    pub collection: String,
    /// Dataset directory (queries and ground truth; the base too for
    /// freshness probes and the background writer).
    #[arg(long, env = "EDDY_LOADTEST_QUERY_DATASET", default_value = SAMPLE_DIR)]
    pub dataset: PathBuf,
    /// Use at most this many queries (default: all).
    #[arg(long, env = "EDDY_LOADTEST_QUERY_QUERIES")]
    pub queries: Option<usize>,
    /// APIs to load, comma-separated.
    #[arg(
        long,
        env = "EDDY_LOADTEST_QUERY_API",
        value_enum,
        value_delimiter = ',',
        default_value = "http"
    )]
    pub api: Vec<Api>,
    /// Ground truths (and their filters) to score against, comma-separated.
    #[arg(
        long,
        env = "EDDY_LOADTEST_QUERY_TRUTH",
        value_enum,
        value_delimiter = ',',
        default_value = "all"
    )]
    pub truth: Vec<Truth>,
    /// Results per query (recall@100 needs 100).
    #[arg(long, env = "EDDY_LOADTEST_QUERY_K", default_value_t = 10)]
    pub k: usize,
    /// `ef` values to sweep, comma-separated (default: the server's).
    #[arg(long, env = "EDDY_LOADTEST_QUERY_EF", value_delimiter = ',')]
    pub ef: Vec<usize>,
    /// Codes the graph walks use: `auto`, `none` (f32) or `sq8` (default:
    /// the server's).
    #[arg(long, env = "EDDY_LOADTEST_QUERY_QUANTIZATION")]
    pub quantization: Option<String>,
    /// Oversampling of quantized walks: `k × this` candidates are rescored
    /// in f32 and the beam is `max(ef, k × this)` (default: the server's, 4).
    #[arg(long, env = "EDDY_LOADTEST_QUERY_OVERSAMPLING")]
    pub oversampling: Option<f32>,
    /// Each `ef` asks oversampling `max(ef, k) / k`: the beam is
    /// `max(ef, k)` and all of it is rescored in f32, the walk eddy's engine
    /// is measured with in process (overrides `--oversampling` where `ef`
    /// is swept).
    #[arg(long, env = "EDDY_LOADTEST_QUERY_RESCORE_BEAM")]
    pub rescore_beam: bool,
    /// Exact search (every row scanned) instead of the graphs.
    #[arg(long, env = "EDDY_LOADTEST_QUERY_EXACT")]
    pub exact: bool,
    /// Closed-loop workers.
    #[arg(long, env = "EDDY_LOADTEST_QUERY_WORKERS", default_value_t = 4)]
    pub workers: usize,
    /// Open loop at this many requests per second (instead of the closed loop).
    #[arg(long, env = "EDDY_LOADTEST_QUERY_RATE", conflicts_with = "saturate")]
    pub rate: Option<f64>,
    /// Closed loop to find saturation, then open loops at `--fractions` of it.
    #[arg(long, env = "EDDY_LOADTEST_QUERY_SATURATE")]
    pub saturate: bool,
    /// Fractions of saturation the `--saturate` open loops offer.
    #[arg(
        long,
        env = "EDDY_LOADTEST_QUERY_FRACTIONS",
        value_delimiter = ',',
        default_value = "0.5,0.7,0.9"
    )]
    pub fractions: Vec<f64>,
    /// Seconds each phase runs (at most).
    #[arg(long, env = "EDDY_LOADTEST_QUERY_DURATION", default_value_t = 10.0)]
    pub duration: f64,
    /// Requests each phase sends (at most; default: bounded by time only).
    #[arg(long, env = "EDDY_LOADTEST_QUERY_REQUESTS")]
    pub requests: Option<u64>,
    /// Seconds of unrecorded closed-loop warm-up before each API's phases.
    #[arg(long, env = "EDDY_LOADTEST_QUERY_WARMUP", default_value_t = 1.0)]
    pub warmup: f64,
    /// Open loop: requests outstanding at most; one due beyond it is dropped.
    #[arg(long, env = "EDDY_LOADTEST_QUERY_MAX_IN_FLIGHT", default_value_t = 256)]
    pub max_in_flight: usize,
    /// Queries per `DoExchange`.
    #[arg(
        long,
        env = "EDDY_LOADTEST_QUERY_EXCHANGE_BATCH",
        default_value_t = 100
    )]
    pub exchange_batch: usize,
    /// Input batches of `--exchange-batch` queries per `DoExchange`: more
    /// than one streams them through one exchange, as an analytics job
    /// does (the server searches the next while it answers the last).
    #[arg(
        long,
        env = "EDDY_LOADTEST_QUERY_EXCHANGE_BATCHES",
        default_value_t = 1
    )]
    pub exchange_batches: usize,
    /// Per-request timeout, seconds.
    #[arg(long, env = "EDDY_LOADTEST_QUERY_TIMEOUT", default_value_t = 30.0)]
    pub timeout: f64,
    /// Before the phases, wait until the service reflects these offsets (a
    /// file written by `produce --offsets-out`).
    #[arg(long, env = "EDDY_LOADTEST_QUERY_MIN_OFFSETS")]
    pub min_offsets: Option<PathBuf>,
    /// Write the report as JSON to this file.
    #[arg(long, env = "EDDY_LOADTEST_QUERY_JSON")]
    pub json: Option<PathBuf>,
    /// Freshness probes and the background writer.
    #[command(flatten)]
    pub side: side::SideArgs,
}

impl QueryArgs {
    /// Default options (for library callers and tests): HTTP at `http`,
    /// Flight at `flight`, collection `collection`, everything else as the
    /// command line's defaults.
    pub fn new(http: &str, flight: &str, collection: &str) -> Self {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            args: QueryArgs,
        }
        let mut args = Wrap::parse_from(["query", "--collection", collection]).args;
        args.http = http.to_owned();
        args.flight = flight.to_owned();
        args
    }

    fn check(&self) -> anyhow::Result<()> {
        if self.api.is_empty() || self.truth.is_empty() {
            bail!("--api and --truth need at least one value each");
        }
        if !(self.duration.is_finite() && self.duration > 0.0) {
            bail!("--duration must be positive");
        }
        if self.rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
            bail!("--rate must be positive");
        }
        if self.fractions.iter().any(|f| !(f.is_finite() && *f > 0.0)) {
            bail!("--fractions must be positive");
        }
        if self.k == 0 {
            bail!("--k must be at least 1");
        }
        Ok(())
    }

    fn modes(&self) -> Vec<SearchOptions> {
        if self.exact {
            return vec![SearchOptions::new(self.k, true)];
        }
        let graph = SearchOptions {
            quantization: self.quantization.clone(),
            oversampling: self.oversampling,
            ..SearchOptions::new(self.k, false)
        };
        if self.ef.is_empty() {
            return vec![graph];
        }
        self.ef
            .iter()
            .map(|&ef| SearchOptions {
                ef: Some(ef),
                oversampling: if self.rescore_beam {
                    Some(beam_oversampling(ef, self.k))
                } else {
                    graph.oversampling
                },
                ..graph.clone()
            })
            .collect()
    }
}

/// The oversampling that rescores a whole beam of `ef` (at least `k`)
/// candidates: `max(ef, k) / k`.
pub fn beam_oversampling(ef: usize, k: usize) -> f32 {
    let k = k.max(1);
    ef.max(k) as f32 / k as f32
}

/// Runs the driver and prints (and writes) its report.
pub async fn run(args: QueryArgs) -> anyhow::Result<()> {
    let report = drive(&args).await?;
    println!("{}", render(&report));
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report).context("encoding the report")?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Runs every phase (with the side tasks beside them) and returns the report.
pub async fn drive(args: &QueryArgs) -> anyhow::Result<Report> {
    args.check()?;
    let timeout = Duration::from_secs_f64(args.timeout.max(0.001));
    let client = QueryClient::new(&args.http, &args.collection, timeout)?;
    let mut sets = Vec::new();
    for &truth in &args.truth {
        let (dir, max) = (args.dataset.clone(), args.queries);
        let set = tokio::task::spawn_blocking(move || QuerySet::load(&dir, truth, max))
            .await
            .context("query loader panicked")??;
        if set.is_empty() {
            bail!("{}: no queries", args.dataset.display());
        }
        sets.push(Arc::new(set));
    }
    if let Some(path) = &args.min_offsets {
        wait_offsets(&client, &sets[0], path).await?;
    }
    let flight = if args.api.iter().any(|a| *a != Api::Http) {
        Some(FlightSearch::connect(&args.flight, timeout).await?)
    } else {
        None
    };
    let side = side::SideTasks::start(args, &client).await?;
    let phases = run_phases(args, &client, flight.as_ref(), &sets).await;
    let (freshness, writer) = side.finish().await?;
    Ok(Report {
        collection: args.collection.clone(),
        dataset: args.dataset.display().to_string(),
        queries: sets[0].len(),
        phases: phases?,
        freshness,
        writer,
    })
}

/// A read-your-writes search with the offsets of `path`: returns once the
/// service reflects them (or fails when it times out).
async fn wait_offsets(
    client: &QueryClient,
    set: &QuerySet,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    let offsets = DeliveredOffsets::read(path)?;
    client
        .search(&SearchRequest {
            vector: set.vectors.row(0),
            options: &SearchOptions::new(1, false),
            with_payload: false,
            min_offsets: Some(&offsets.min_offsets),
        })
        .await
        .with_context(|| format!("waiting for the offsets of {}", path.display()))?;
    Ok(())
}

async fn run_phases(
    args: &QueryArgs,
    client: &QueryClient,
    flight: Option<&FlightSearch>,
    sets: &[Arc<QuerySet>],
) -> anyhow::Result<Vec<PhaseResult>> {
    let mut results = Vec::new();
    for &api in &args.api {
        let searcher = match (api, flight) {
            (Api::Http, _) => Searcher::Http(client.clone()),
            (Api::DoGet, Some(f)) => Searcher::DoGet {
                flight: f.clone(),
                collection: args.collection.clone(),
            },
            (Api::DoExchange, Some(f)) => Searcher::DoExchange {
                flight: f.clone(),
                collection: args.collection.clone(),
                batch: args.exchange_batch.max(1),
                batches: args.exchange_batches.max(1),
            },
            (_, None) => bail!("no Flight connection for {}", api.name()),
        };
        let mut warm = args.warmup > 0.0;
        for set in sets {
            for options in args.modes() {
                let mut options = options;
                options.filter = set.truth.filter();
                let work = Work {
                    searcher: searcher.clone(),
                    set: set.clone(),
                    options: Arc::new(options),
                    duration: Duration::from_secs_f64(args.duration),
                    requests: args.requests,
                };
                if std::mem::take(&mut warm) {
                    let warmup = Work {
                        duration: Duration::from_secs_f64(args.warmup),
                        ..work.clone()
                    };
                    let pb = progress::bar("warm-up", None, "req");
                    closed_loop(&warmup, args.workers, &pb).await;
                    pb.finish_and_clear();
                }
                results.extend(run_mode(args, &work).await?);
            }
        }
    }
    Ok(results)
}

/// The phases of one API × truth × mode: a closed loop, an open loop at
/// `--rate`, or a closed loop and open loops at fractions of its throughput.
async fn run_mode(args: &QueryArgs, work: &Work) -> anyhow::Result<Vec<PhaseResult>> {
    let api = work.searcher.api().name();
    let label = |what: &str| format!("{api} {}", what);
    let result = |load: Load, o: &Outcome| {
        PhaseResult::new(
            api,
            work.set.truth,
            work.options.mode(),
            (work.options.k, work.searcher.batch()),
            load,
            o,
        )
    };
    let mut out = Vec::new();
    if let Some(rate) = args.rate {
        let pb = progress::bar(&label("open"), None, "req");
        let o = open_loop(work, rate, args.max_in_flight, &pb).await;
        pb.finish_and_clear();
        out.push(result(
            Load::Open {
                rate,
                fraction: None,
            },
            &o,
        ));
        return Ok(out);
    }
    let pb = progress::bar(&label("closed"), None, "req");
    let closed = closed_loop(work, args.workers, &pb).await;
    pb.finish_and_clear();
    let saturation = closed.tally.answered as f64 / closed.elapsed.as_secs_f64().max(1e-9);
    out.push(result(
        Load::Closed {
            workers: args.workers,
        },
        &closed,
    ));
    if args.saturate {
        if closed.tally.answered == 0 {
            bail!("{api}: the closed loop got no answer; cannot derive open-loop rates");
        }
        for &fraction in &args.fractions {
            let rate = saturation * fraction;
            let pb = progress::bar(
                &label(&format!("open {:.0}%", fraction * 100.0)),
                None,
                "req",
            );
            let o = open_loop(work, rate, args.max_in_flight, &pb).await;
            pb.finish_and_clear();
            out.push(result(
                Load::Open {
                    rate,
                    fraction: Some(fraction),
                },
                &o,
            ));
        }
    }
    Ok(out)
}

/// The formats the side tasks can publish (eddy-ingest reads these two).
pub fn check_side_format(format: Format) -> anyhow::Result<()> {
    if format == Format::Arrow {
        bail!("freshness probes and the background writer publish json or protobuf");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rescored_beam_asks_ef_over_k() {
        assert_eq!(beam_oversampling(64, 10), 6.4);
        // Below k the beam is k: one candidate per neighbour.
        assert_eq!(beam_oversampling(4, 10), 1.0);
        assert_eq!(beam_oversampling(10, 0), 10.0);
        let mut args = QueryArgs::new("h:1", "f:1", "c");
        args.ef = vec![10, 64];
        args.rescore_beam = true;
        let modes: Vec<String> = args.modes().iter().map(SearchOptions::mode).collect();
        assert_eq!(modes, ["ef=10 oversampling=1", "ef=64 oversampling=6.4"]);
    }
}
