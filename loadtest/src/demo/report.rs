//! The demo's report table, rendered as plain text.

use std::fmt::Write as _;
use std::time::Duration;

use super::produce::ProduceStats;
use super::queries::ApiRun;
use crate::histogram::fmt_millis;
use crate::stats::{fmt_ms, LatencySummary};

/// Everything the report shows.
#[derive(Debug, Clone)]
pub struct Report<'a> {
    /// Dataset name (its directory name).
    pub dataset: String,
    /// Base points.
    pub points: usize,
    /// Vector dimension.
    pub dim: usize,
    /// Kafka partitions.
    pub partitions: u32,
    /// Results per query.
    pub k: usize,
    /// The event format.
    pub format: crate::encode::Format,
    /// The requested publish rate (events/s; 0 = unlimited).
    pub target_rate: f64,
    /// What publishing measured.
    pub produce: &'a ProduceStats,
    /// From the first send until `count` reported every point.
    pub all_searchable_after: Duration,
    /// One entry per query API.
    pub apis: &'a [ApiRun],
}

fn dash() -> String {
    "-".to_owned()
}

/// Renders the report.
pub fn render(r: &Report<'_>) -> String {
    let mut out = String::new();
    let p = r.produce;
    let target = if r.target_rate > 0.0 {
        format!("target {:.0}", r.target_rate)
    } else {
        "unthrottled".to_owned()
    };
    let _ = writeln!(
        out,
        "\n== eddy demo: {} ({} points, dim {}, {} partitions) ==\n",
        r.dataset, r.points, r.dim, r.partitions
    );
    let _ = writeln!(out, "ingest");
    let _ = writeln!(
        out,
        "  events published        {} ({}, one point per record)",
        p.events,
        r.format.name()
    );
    let _ = writeln!(
        out,
        "  publish rate            {:.0} events/s sent ({target}), {:.0} events/s acknowledged",
        p.send_rate(),
        p.rate()
    );
    if let Some(s) = LatencySummary::from_samples(&p.acked_after) {
        let _ = writeln!(
            out,
            "  produce->acked          p50 {}   p99 {}   max {}   (broker acknowledgement)",
            fmt_ms(s.p50),
            fmt_ms(s.p99),
            fmt_ms(s.max)
        );
    }
    let visible = LatencySummary::from_samples(&p.visible_after);
    let _ = match visible {
        Some(s) => writeln!(
            out,
            "  produce->searchable     p50 {}   p99 {}   max {}   ({} probed, {} timed out, {} skipped)",
            fmt_ms(s.p50),
            fmt_ms(s.p99),
            fmt_ms(s.max),
            s.count,
            p.probes_timed_out,
            p.probes_skipped
        ),
        None => writeln!(
            out,
            "  produce->searchable     no samples ({} timed out, {} skipped)",
            p.probes_timed_out, p.probes_skipped
        ),
    };
    let _ = writeln!(
        out,
        "  all {} searchable after {} (count API)",
        r.points,
        fmt_ms(r.all_searchable_after)
    );
    let queries = r.apis.first().map_or(0, |a| a.queries);
    let _ = writeln!(out, "\nqueries ({queries} per API, k={}; exact = every row scanned, graph = server default: HNSW over SQ8 codes, f32 rescoring)", r.k);
    let _ = writeln!(
        out,
        "  {:<27} {:>9} {:>10} {:>10} {:>10} {:>10} {:>9}",
        "API",
        format!("recall@{}", r.k),
        "p50",
        "p90",
        "p99",
        "total",
        "q/s"
    );
    for api in r.apis {
        let (p50, p90, p99) = api.latency.map_or_else(
            || (dash(), dash(), dash()),
            |l| {
                (
                    fmt_millis(l.p50_ms),
                    fmt_millis(l.p90_ms),
                    fmt_millis(l.p99_ms),
                )
            },
        );
        let _ = writeln!(
            out,
            "  {:<27} {:>9.4} {:>10} {:>10} {:>10} {:>10} {:>9.0}",
            api.name,
            api.recall,
            p50,
            p90,
            p99,
            fmt_ms(api.total),
            api.qps()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::LatencyStats;

    #[test]
    fn renders_every_section() {
        let produce = ProduceStats {
            events: 100,
            send_elapsed: Duration::from_millis(100),
            elapsed: Duration::from_millis(125),
            acked_after: vec![Duration::from_millis(3)],
            visible_after: vec![Duration::from_millis(5), Duration::from_millis(7)],
            probes_timed_out: 0,
            probes_skipped: 1,
        };
        let apis = [
            ApiRun {
                name: "HTTP search".into(),
                queries: 10,
                recall: 1.0,
                latency: Some(LatencyStats {
                    count: 10,
                    mean_ms: 2.0,
                    p50_ms: 2.0,
                    p90_ms: 2.0,
                    p99_ms: 2.0,
                    p999_ms: 2.0,
                    max_ms: 2.0,
                }),
                total: Duration::from_millis(20),
            },
            ApiRun {
                name: "Flight DoExchange".into(),
                queries: 10,
                recall: 0.95,
                latency: None,
                total: Duration::from_millis(4),
            },
        ];
        let text = render(&Report {
            dataset: "sample".into(),
            points: 100,
            dim: 4,
            partitions: 3,
            k: 10,
            format: crate::encode::Format::Json,
            target_rate: 1000.0,
            produce: &produce,
            all_searchable_after: Duration::from_millis(150),
            apis: &apis,
        });
        assert!(
            text.contains("publish rate            1000 events/s sent (target 1000), 800 events/s acknowledged"),
            "{text}"
        );
        assert!(text.contains("p50 5.00 ms"), "{text}");
        assert!(
            text.contains("produce->acked          p50 3.00 ms"),
            "{text}"
        );
        assert!(text.contains("recall@10"), "{text}");
        assert!(text.contains("HTTP search"), "{text}");
        assert!(text.contains("0.9500"), "{text}");
        assert!(text.contains("2500"), "DoExchange q/s: {text}");
    }
}
