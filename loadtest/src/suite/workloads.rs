//! The suite's workloads against a running eddy, each a run of the query
//! driver: `ef` sweeps over HTTP (one client) and DoExchange batches,
//! alternated A/B/A/B; exact; DoGet; a saturating closed loop and open
//! loops at fractions of it; filtered at ~1 % and ~10 %; mixed read/write
//! with freshness probes at several write rates; and a scroll export.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use serde::Serialize;
use tokio::time::Instant;

mod mixed;

pub use mixed::{Mixed, Settled};

use super::matched::{mean_spread, Curve, CurvePoint};
use crate::dataset::Truth;
use crate::driver::{self, Api, PhaseResult, QueryArgs};
use crate::encode::Format;
use crate::http::QueryClient;

/// Where the workloads go.
#[derive(Debug, Clone)]
pub struct Target {
    /// eddy-query's HTTP address.
    pub http: String,
    /// eddy-query's Flight address.
    pub flight: String,
    /// Kafka bootstrap servers (the mixed workloads publish).
    pub brokers: String,
    /// The collection's topic.
    pub topic: String,
    /// The collection.
    pub collection: String,
    /// The format the collection declares for events without a
    /// `content-type` header (`format=` in its spec): the mixed phases'
    /// events of that format go without one.
    pub declared_format: Format,
    /// Processes whose CPU time the mixed phases account for (name, pid):
    /// on one machine the broker's share is the service's loss.
    pub processes: Vec<(String, u32)>,
}

/// How long and how wide the workloads run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Dataset directory (queries and ground truth).
    pub dataset: PathBuf,
    /// Queries used (default: all).
    pub queries: Option<usize>,
    /// Seconds per phase.
    pub duration: f64,
    /// Seconds of each mixed read/write phase and of its read-only
    /// reference (longer than `duration`: a writer's cost shows once seals,
    /// merges and graph builds start, not in its first seconds).
    pub mixed_duration: f64,
    /// Rounds of the A/B sweeps.
    pub rounds: usize,
    /// The `ef` sweep.
    pub ef: Vec<usize>,
    /// Closed-loop workers of the saturating and mixed phases.
    pub workers: usize,
    /// Write rates of the mixed phases (0 = freshness probes only).
    pub write_rates: Vec<f64>,
    /// Points per writer record in the mixed phases (1: one protobuf event
    /// per point; more: Arrow batches).
    pub write_batch: usize,
    /// Queries per DoExchange input batch.
    pub batch: usize,
    /// Input batches per exchange in the streamed DoExchange sweep (1 =
    /// no such sweep).
    pub exchange_batches: usize,
    /// The recall@10 the load phases run at (the smallest swept `ef`
    /// reaching it over HTTP).
    pub target_recall: f64,
}

/// An `ef` sweep of one API: its curve and every phase behind it.
#[derive(Debug, Clone, Serialize)]
pub struct Sweep {
    /// The API.
    pub api: Api,
    /// The codes asked for (`None`: the server's default).
    pub quantization: Option<String>,
    /// The curve (means over rounds).
    pub curve: Curve,
    /// Every phase, round after round.
    pub phases: Vec<PhaseResult>,
}

/// The scroll export: every live point, page after page.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Scroll {
    /// Points read.
    pub points: u64,
    /// Pages read.
    pub pages: u64,
    /// Seconds.
    pub elapsed_s: f64,
    /// Points per second.
    pub points_per_s: f64,
}

/// Everything the workloads measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EddyRuns {
    /// The `ef` sweeps (HTTP, DoExchange).
    pub sweeps: Vec<Sweep>,
    /// The `ef` the load phases ran at.
    pub chosen_ef: Option<usize>,
    /// Exact search over HTTP.
    pub exact: Vec<PhaseResult>,
    /// DoGet at the chosen `ef`.
    pub do_get: Vec<PhaseResult>,
    /// The saturating closed loop and the open loops.
    pub load: Vec<PhaseResult>,
    /// Filtered searches (graph at the chosen `ef`, and exact).
    pub filtered: Vec<PhaseResult>,
    /// Mixed read/write.
    pub mixed: Vec<Mixed>,
    /// The scroll export.
    pub scroll: Option<Scroll>,
    /// What was left out, and why.
    pub notes: Vec<String>,
}

/// Scroll page size.
const SCROLL_PAGE: usize = 1000;
/// Per-request timeout of every workload.
const TIMEOUT_S: f64 = 30.0;

/// Runs every workload of `plan` against `target`, in order. `settle`
/// waits until the collection is settled (tail sealed, graphs built,
/// segments merged) and says how it found it; each mixed phase's read-only
/// reference runs after it, so every rate is compared with the same
/// collection rather than with what the previous rate's writer left.
pub async fn run(
    target: &Target,
    plan: &Plan,
    settle: impl AsyncFn() -> anyhow::Result<Settled>,
) -> anyhow::Result<EddyRuns> {
    let mut out = EddyRuns {
        sweeps: sweeps(target, plan).await?,
        ..EddyRuns::default()
    };
    let http = out
        .sweeps
        .iter()
        .find(|s| s.api == Api::Http && s.quantization.is_none());
    out.chosen_ef = http.and_then(|s| chosen_ef(&s.curve, plan.target_recall));
    let ef: Vec<usize> = out.chosen_ef.into_iter().collect();

    let base = |api: Api| {
        let mut a = args(target, plan, api);
        a.ef = ef.clone();
        a.workers = 1;
        a
    };
    out.exact = phases(QueryArgs {
        exact: true,
        ..base(Api::Http)
    })
    .await?;
    out.do_get = phases(base(Api::DoGet)).await?;
    out.load = phases(QueryArgs {
        workers: plan.workers,
        saturate: true,
        ..base(Api::Http)
    })
    .await?;
    if has_filtered_truth(plan) {
        let truth = vec![Truth::F1, Truth::F10];
        out.filtered = phases(QueryArgs {
            truth: truth.clone(),
            ..base(Api::Http)
        })
        .await?;
        out.filtered.extend(
            phases(QueryArgs {
                truth,
                exact: true,
                ..base(Api::Http)
            })
            .await?,
        );
    } else {
        out.notes.push(format!(
            "filtered workloads skipped: {} has no gt-public-f1/f10 ground truth",
            plan.dataset.display()
        ));
    }
    out.mixed = mixed::run(
        target,
        plan,
        QueryArgs {
            workers: plan.workers,
            warmup: 0.0,
            duration: plan.mixed_duration,
            ..base(Api::Http)
        },
        settle,
        &mut out.notes,
    )
    .await;
    tracing::info!("scroll export");
    out.scroll = Some(scroll(target).await?);
    Ok(out)
}

/// One swept variant: the API, the codes asked for (`None`: the server's
/// default) and the DoExchange input batches per exchange.
#[derive(Debug, Clone, Copy)]
struct Variant {
    api: Api,
    quantization: Option<&'static str>,
    exchange_batches: usize,
}

impl Variant {
    /// The curve's name in the report.
    fn name(&self, batch: usize) -> String {
        match (self.api, self.quantization) {
            (Api::DoExchange, _) if self.exchange_batches > 1 => {
                format!(
                    "eddy DoExchange ×{batch}, {} per exchange",
                    self.exchange_batches
                )
            }
            (Api::DoExchange, _) => format!("eddy DoExchange ×{batch}"),
            (_, Some(q)) => format!("eddy HTTP, quantization {q}"),
            _ => "eddy HTTP".to_owned(),
        }
    }

    /// Queries per request.
    fn queries(&self, batch: usize) -> usize {
        match self.api {
            Api::DoExchange => batch * self.exchange_batches.max(1),
            _ => 1,
        }
    }
}

/// The sweeps, alternated (A B C D, then D C B A): HTTP (one client),
/// DoExchange batches one per exchange and streamed through one exchange,
/// with the server's default codes, and HTTP with f32 walks
/// (`quantization: none`), the quantization variant.
async fn sweeps(target: &Target, plan: &Plan) -> anyhow::Result<Vec<Sweep>> {
    let variant = |api, quantization, exchange_batches| Variant {
        api,
        quantization,
        exchange_batches,
    };
    let mut variants = vec![
        variant(Api::Http, None, 1),
        variant(Api::DoExchange, None, 1),
    ];
    if plan.exchange_batches > 1 {
        variants.push(variant(Api::DoExchange, None, plan.exchange_batches));
    }
    variants.push(variant(Api::Http, Some("none"), 1));
    let mut phases: Vec<Vec<Vec<PhaseResult>>> = vec![Vec::new(); variants.len()];
    for round in 0..plan.rounds.max(1) {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..variants.len()).collect()
        } else {
            (0..variants.len()).rev().collect()
        };
        for i in order {
            let v = variants[i];
            let mut a = args(target, plan, v.api);
            a.ef = plan.ef.clone();
            a.workers = 1;
            a.quantization = v.quantization.map(str::to_owned);
            a.exchange_batches = v.exchange_batches;
            if round > 0 {
                a.warmup = 0.0;
            }
            let name = v.name(plan.batch);
            tracing::info!(sweep = name, round = round + 1, "ef sweep");
            let r = driver::drive(&a)
                .await
                .with_context(|| format!("{name} sweep, round {}", round + 1))?;
            phases[i].push(r.phases);
        }
    }
    Ok(variants
        .iter()
        .zip(phases)
        .map(|(v, rounds)| Sweep {
            api: v.api,
            quantization: v.quantization.map(str::to_owned),
            curve: curve(v.name(plan.batch), v.queries(plan.batch), &rounds),
            phases: rounds.into_iter().flatten().collect(),
        })
        .collect())
}

/// The mean curve of per-round sweeps (each round the same `ef` order).
pub fn curve(name: String, batch: usize, rounds: &[Vec<PhaseResult>]) -> Curve {
    let Some(first) = rounds.first() else {
        return Curve {
            name,
            batch,
            build_s: None,
            points: Vec::new(),
            rounds: Vec::new(),
        };
    };
    let points = (0..first.len())
        .map(|i| {
            let at: Vec<&PhaseResult> = rounds.iter().filter_map(|r| r.get(i)).collect();
            let q: Vec<f64> = at.iter().map(|p| p.queries_per_s).collect();
            let (qps, spread) = mean_spread(&q);
            let mean_of = |f: &dyn Fn(&PhaseResult) -> Option<f64>| {
                let v: Vec<f64> = at.iter().filter_map(|p| f(p)).collect();
                (!v.is_empty()).then(|| mean_spread(&v).0)
            };
            CurvePoint {
                ef: ef_of(&first[i].mode),
                recall10: mean_of(&|p| p.recall.and_then(|r| r.at10)).unwrap_or(0.0),
                qps,
                spread,
                p50_ms: mean_of(&|p| p.latency.map(|l| l.p50_ms)),
                p99_ms: mean_of(&|p| p.latency.map(|l| l.p99_ms)),
            }
        })
        .collect();
    Curve {
        name,
        batch,
        build_s: None,
        points,
        rounds: rounds
            .iter()
            .map(|r| r.iter().map(|p| p.queries_per_s).collect())
            .collect(),
    }
}

/// The `ef` of a phase mode `ef=N` (0 for `graph`/`exact`).
fn ef_of(mode: &str) -> usize {
    mode.strip_prefix("ef=")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The smallest swept `ef` whose recall@10 reaches `target` (the largest
/// swept one when none does).
pub fn chosen_ef(curve: &Curve, target: f64) -> Option<usize> {
    let mut pts: Vec<&CurvePoint> = curve.points.iter().filter(|p| p.ef > 0).collect();
    pts.sort_by_key(|p| p.ef);
    pts.iter()
        .find(|p| p.recall10 >= target)
        .or(pts.last())
        .map(|p| p.ef)
}

fn has_filtered_truth(plan: &Plan) -> bool {
    ["gt-public-f1.ivecs", "gt-public-f10.ivecs"]
        .iter()
        .all(|f| plan.dataset.join(f).is_file())
}

/// The driver's options for one API, with the plan's common settings.
fn args(target: &Target, plan: &Plan, api: Api) -> QueryArgs {
    let mut a = QueryArgs::new(&target.http, &target.flight, &target.collection);
    // Every swept `ef` rescores its whole beam (oversampling max(ef, k) /
    // k): the served walk is the one measured in process, and an `ef`
    // below the server's floor (k × 4) is the walk it names.
    a.rescore_beam = true;
    a.dataset = plan.dataset.clone();
    a.queries = plan.queries;
    a.api = vec![api];
    a.duration = plan.duration;
    a.exchange_batch = plan.batch;
    a.timeout = TIMEOUT_S;
    a
}

async fn phases(args: QueryArgs) -> anyhow::Result<Vec<PhaseResult>> {
    let what = format!(
        "{} {}",
        args.api.first().map_or("?", |a| a.name()),
        if args.exact { "exact" } else { "graph" }
    );
    tracing::info!(workload = what, saturate = args.saturate, truth = ?args.truth, "workload");
    Ok(driver::drive(&args)
        .await
        .with_context(|| format!("the {what} workload"))?
        .phases)
}

/// Reads every live point through the scroll API.
async fn scroll(target: &Target) -> anyhow::Result<Scroll> {
    let client = QueryClient::new(
        &target.http,
        &target.collection,
        Duration::from_secs_f64(TIMEOUT_S),
    )?;
    let started = Instant::now();
    let (mut points, mut pages, mut after) = (0u64, 0u64, None);
    loop {
        let (n, next) = client
            .scroll_page(after, SCROLL_PAGE)
            .await
            .context("scrolling the collection")?;
        points += n as u64;
        pages += 1;
        match next {
            Some(id) => after = Some(id),
            None => break,
        }
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    Ok(Scroll {
        points,
        pages,
        elapsed_s,
        points_per_s: points as f64 / elapsed_s.max(1e-9),
    })
}
