//! The driver's results: one [`PhaseResult`] per load phase, rendered as a
//! table for stdout and serialized as JSON for the benchmark report.

use std::fmt::Write as _;

use serde::Serialize;

use super::load::Outcome;
use super::tally::Recall;
use crate::dataset::Truth;
use crate::freshness::FreshnessSummary;
use crate::histogram::{fmt_millis, LatencyStats};
use crate::publish::PublishSummary;

/// How a phase offered its load.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "loop", rename_all = "lowercase")]
pub enum Load {
    /// N workers, each waiting for its answer before the next request.
    Closed {
        /// Concurrent workers.
        workers: usize,
    },
    /// Requests at a fixed offered rate.
    Open {
        /// Offered requests per second.
        rate: f64,
        /// The fraction of measured saturation this rate is, if derived.
        fraction: Option<f64>,
    },
}

impl Load {
    fn label(&self) -> String {
        match self {
            Load::Closed { workers } => format!("closed x{workers}"),
            Load::Open {
                rate,
                fraction: Some(f),
            } => format!("open {rate:.0}/s ({:.0}%)", f * 100.0),
            Load::Open { rate, .. } => format!("open {rate:.0}/s"),
        }
    }
}

/// One load phase's result.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseResult {
    /// The API.
    pub api: &'static str,
    /// Ground truth and filter.
    pub truth: Truth,
    /// `exact`, `graph` (server default) or `ef=N`.
    pub mode: String,
    /// Results per query.
    pub k: usize,
    /// Queries per request.
    pub batch: usize,
    /// How the load was offered.
    pub load: Load,
    /// Requests due (open loop) or sent (closed loop).
    pub scheduled: u64,
    /// Requests sent.
    pub sent: u64,
    /// Requests dropped at their scheduled time (open loop, all slots busy).
    pub dropped: u64,
    /// Requests answered.
    pub answered: u64,
    /// Requests failed.
    pub errors: u64,
    /// The first failure.
    pub first_error: Option<String>,
    /// From the first send to the last answer, seconds.
    pub elapsed_s: f64,
    /// Answered requests per second.
    pub requests_per_s: f64,
    /// Answered queries per second.
    pub queries_per_s: f64,
    /// Request latency: from the send (closed) or the scheduled time (open).
    pub latency: Option<LatencyStats>,
    /// Open loop: send → answer.
    pub service: Option<LatencyStats>,
    /// Open loop: scheduled time → send (the driver's own lateness).
    pub dispatch_lag: Option<LatencyStats>,
    /// Mean tie-aware recall of the answered queries.
    pub recall: Option<Recall>,
}

impl PhaseResult {
    /// Builds the result of a phase from what it counted.
    pub fn new(
        api: &'static str,
        truth: Truth,
        mode: String,
        (k, batch): (usize, usize),
        load: Load,
        o: &Outcome,
    ) -> Self {
        let secs = o.elapsed.as_secs_f64().max(1e-9);
        let t = &o.tally;
        let open = matches!(load, Load::Open { .. });
        Self {
            api,
            truth,
            mode,
            k,
            batch,
            load,
            scheduled: o.scheduled,
            sent: o.sent,
            dropped: o.dropped,
            answered: t.answered,
            errors: t.errors,
            first_error: t.first_error.clone(),
            elapsed_s: o.elapsed.as_secs_f64(),
            requests_per_s: t.answered as f64 / secs,
            queries_per_s: t.recall.queries() as f64 / secs,
            latency: t.latency.summary(),
            service: open.then(|| t.service.summary()).flatten(),
            dispatch_lag: open.then(|| t.lag.summary()).flatten(),
            recall: t.recall.means(k),
        }
    }
}

/// Everything a driver run reports.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The collection.
    pub collection: String,
    /// The dataset directory.
    pub dataset: String,
    /// Queries in the set.
    pub queries: usize,
    /// One entry per phase, in run order.
    pub phases: Vec<PhaseResult>,
    /// Freshness probes, when run.
    pub freshness: Option<FreshnessSummary>,
    /// The background writer, when run.
    pub writer: Option<PublishSummary>,
}

fn opt_ms(s: Option<&LatencyStats>, f: impl Fn(&LatencyStats) -> f64) -> String {
    s.map_or_else(|| "-".to_owned(), |s| fmt_millis(f(s)))
}

fn opt_recall(r: Option<f64>) -> String {
    r.map_or_else(|| "-".to_owned(), |r| format!("{r:.4}"))
}

/// Renders the report as plain-text tables.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n== eddy-loadtest query: collection {}, {} ({} queries) ==\n",
        r.collection, r.dataset, r.queries
    );
    let _ = writeln!(
        out,
        "{:<11} {:<5} {:<7} {:<22} {:>7} {:>6} {:>5} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7}",
        "api", "gt", "mode", "load", "sent", "drop", "err", "req/s", "q/s", "p50", "p99",
        "p99.9", "max", "r@1", "r@10", "r@100"
    );
    for p in &r.phases {
        let l = p.latency.as_ref();
        let rec = p.recall.unwrap_or(Recall {
            at1: None,
            at10: None,
            at100: None,
        });
        let _ = writeln!(
            out,
            "{:<11} {:<5} {:<7} {:<22} {:>7} {:>6} {:>5} {:>8.0} {:>8.0} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7}",
            p.api,
            p.truth.name(),
            p.mode,
            p.load.label(),
            p.sent,
            p.dropped,
            p.errors,
            p.requests_per_s,
            p.queries_per_s,
            opt_ms(l, |s| s.p50_ms),
            opt_ms(l, |s| s.p99_ms),
            opt_ms(l, |s| s.p999_ms),
            opt_ms(l, |s| s.max_ms),
            opt_recall(rec.at1),
            opt_recall(rec.at10),
            opt_recall(rec.at100),
        );
        if let Some(lag) = &p.dispatch_lag {
            let _ = writeln!(
                out,
                "{:<11} service p50 {} p99 {}; dispatch lag p50 {} p99 {}",
                "",
                opt_ms(p.service.as_ref(), |s| s.p50_ms),
                opt_ms(p.service.as_ref(), |s| s.p99_ms),
                fmt_millis(lag.p50_ms),
                fmt_millis(lag.p99_ms)
            );
        }
        if let Some(e) = &p.first_error {
            let _ = writeln!(out, "{:<11} first error: {e}", "");
        }
    }
    if let Some(f) = &r.freshness {
        let _ = writeln!(
            out,
            "\nfreshness ({} visible, {} timed out; broker timestamps: {:?})",
            f.visible, f.timed_out, f.timestamps
        );
        for (name, s) in [
            ("produce->acked", &f.acked),
            ("produce->visible", &f.produce_to_visible),
            ("append->visible", &f.append_to_visible),
        ] {
            let s = s.as_ref();
            let _ = writeln!(
                out,
                "  {name:<18} p50 {:>9}  p90 {:>9}  p99 {:>9}  max {:>9}",
                opt_ms(s, |s| s.p50_ms),
                opt_ms(s, |s| s.p90_ms),
                opt_ms(s, |s| s.p99_ms),
                opt_ms(s, |s| s.max_ms)
            );
        }
    }
    if let Some(w) = &r.writer {
        let _ = writeln!(
            out,
            "\nbackground writer: {} events in {:.1} s ({:.0} events/s acknowledged), ack p99 {}",
            w.events,
            w.elapsed_s,
            w.events_per_s,
            opt_ms(w.ack.as_ref(), |s| s.p99_ms)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn renders_phases_and_serializes() {
        let mut o = Outcome {
            scheduled: 10,
            sent: 9,
            dropped: 1,
            elapsed: Duration::from_secs(1),
            ..Outcome::default()
        };
        o.tally.answered = 9;
        for _ in 0..9 {
            o.tally.latency.record(Duration::from_millis(2));
            o.tally.lag.record(Duration::from_micros(50));
            o.tally.service.record(Duration::from_millis(1));
        }
        let load = Load::Open {
            rate: 10.0,
            fraction: Some(0.5),
        };
        let phase = PhaseResult::new("http", Truth::All, "exact".into(), (10, 1), load, &o);
        assert_eq!(phase.requests_per_s, 9.0);
        let report = Report {
            collection: "c".into(),
            dataset: "d".into(),
            queries: 5,
            phases: vec![phase],
            freshness: None,
            writer: None,
        };
        let text = render(&report);
        assert!(text.contains("open 10/s (50%)"), "{text}");
        assert!(text.contains("2.00 ms"), "{text}");
        assert!(text.contains("dispatch lag p50 0.05 ms"), "{text}");
        let json = serde_json::to_value(&report).expect("serializes");
        assert_eq!(json["phases"][0]["load"]["loop"], "open");
        assert_eq!(json["phases"][0]["dropped"], 1);
        assert_eq!(json["phases"][0]["truth"], "all");
    }
}
