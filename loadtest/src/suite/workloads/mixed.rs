//! The mixed read/write phases: at each write rate, the closed loop on
//! the settled collection (the reference), then the same loop beside a
//! writer and freshness probes, with the cores each process used.

use serde::Serialize;
use tokio::time::Instant;

use super::{Plan, Target};
use crate::driver::{self, QueryArgs, Report};
use crate::encode::Format;
use crate::process::cpu_seconds;

/// Freshness probes per second in the mixed phases.
const PROBE_RATE: f64 = 10.0;

/// One mixed read/write run: the closed loop with a writer and probes.
#[derive(Debug, Clone, Serialize)]
pub struct Mixed {
    /// Offered write rate, events/s (0: probes only).
    pub write_rate: f64,
    /// The driver's report (phase, freshness, writer).
    pub report: Report,
    /// The same closed loop without writer or probes, run just before on
    /// the settled collection (q/s): the reference the mixed phase is
    /// compared with, so neither drift over the suite's run nor the
    /// previous phase's unsettled tail enters the ratio.
    pub read_only_qps: Option<f64>,
    /// The collection the reference ran on (`None`: it did not settle in
    /// time, and the reference ran on whatever state was there).
    pub settled: Option<Settled>,
    /// Query throughput over `read_only_qps`.
    pub ratio_to_read_only: Option<f64>,
    /// Cores each accounted process used over the phase (CPU seconds over
    /// wall seconds).
    pub cpu_cores: Vec<(String, f64)>,
}

/// A settled collection, as the reference of a mixed phase found it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Settled {
    /// Segments served.
    pub segments: usize,
    /// Of which carry a graph.
    pub indexed: usize,
    /// Seconds waited for it (seals, graph builds, the idle merge).
    pub waited_s: f64,
}

/// CPU time of some processes since a start, to turn into cores used.
struct CpuClock {
    started: Instant,
    at_start: Vec<(String, u32, f64)>,
}

impl CpuClock {
    fn start(processes: &[(String, u32)]) -> Self {
        let at_start = processes
            .iter()
            .filter_map(|(name, pid)| Some((name.clone(), *pid, cpu_seconds(*pid)?)))
            .collect();
        Self {
            started: Instant::now(),
            at_start,
        }
    }

    /// Cores each process used since the start.
    fn cores(&self) -> Vec<(String, f64)> {
        let wall = self.started.elapsed().as_secs_f64().max(1e-9);
        self.at_start
            .iter()
            .filter_map(|(name, pid, before)| {
                Some((name.clone(), (cpu_seconds(*pid)? - before) / wall))
            })
            .collect()
    }
}

/// Runs the mixed phases of `plan`: for each write rate, `settle`, then
/// `reference` (the closed loop, read-only), then the same loop with a
/// writer and probes. A rate that fails leaves a line in `notes` and the
/// other rates standing.
pub(super) async fn run(
    target: &Target,
    plan: &Plan,
    reference: QueryArgs,
    settle: impl AsyncFn() -> anyhow::Result<Settled>,
    notes: &mut Vec<String>,
) -> Vec<Mixed> {
    let mut out = Vec::new();
    for &rate in &plan.write_rates {
        let mut a = reference.clone();
        let settled = match settle().await {
            Ok(s) => {
                tracing::info!(segments = s.segments, waited_s = s.waited_s, "settled");
                Some(s)
            }
            Err(e) => {
                tracing::warn!(error = format!("{e:#}"), "the collection did not settle");
                notes.push(format!(
                    "mixed read/write at {rate} events/s: the collection did not settle before its read-only reference ({e:#})"
                ));
                None
            }
        };
        // The reference: the same loop, read-only, right before (an A/B
        // pair per rate, as the sweeps alternate).
        let read_only = match driver::drive(&a).await {
            Ok(report) => report.phases.first().map(|p| p.queries_per_s),
            Err(e) => {
                tracing::warn!(error = format!("{e:#}"), "read-only reference failed");
                None
            }
        };
        a.side.brokers = Some(target.brokers.clone());
        a.side.topic = Some(target.topic.clone());
        a.side.format = Format::Protobuf;
        a.side.no_header = target.declared_format == Format::Protobuf;
        a.side.write_rate = rate;
        a.side.write_batch = plan.write_batch;
        a.side.freshness = (plan.mixed_duration * PROBE_RATE).ceil() as u64;
        a.side.freshness_rate = PROBE_RATE;
        tracing::info!(write_rate = rate, "mixed read/write");
        let cpu = CpuClock::start(&target.processes);
        match driver::drive(&a).await {
            Ok(report) => {
                let qps = report.phases.first().map(|p| p.queries_per_s);
                out.push(Mixed {
                    write_rate: rate,
                    read_only_qps: read_only,
                    settled,
                    ratio_to_read_only: qps.zip(read_only).map(|(q, r)| q / r.max(1e-9)),
                    cpu_cores: cpu.cores(),
                    report,
                });
            }
            // A broker that cannot keep up at one rate leaves the others
            // (and the rest of the report) standing; the report says why.
            Err(e) => {
                tracing::warn!(
                    write_rate = rate,
                    error = format!("{e:#}"),
                    "mixed phase failed"
                );
                notes.push(format!("mixed read/write at {rate} events/s failed: {e:#}"));
            }
        }
    }
    out
}
