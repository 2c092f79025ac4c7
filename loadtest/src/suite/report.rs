//! The suite's report as sections: headline ratios at matched recall,
//! curves, ingest, latency under load, filtered, mixed read/write and
//! freshness, scroll and cold start, the peers, and what it does not show.

use super::document::{Section, Table};
use super::matched::Curve;
use super::summary::summary;
use super::svg::{Chart, Series};
use super::SuiteReport;
use crate::driver::{Load, PhaseResult};
use crate::histogram::{fmt_millis, LatencyStats};

/// Recall targets of the ratio tables.
pub(super) const TARGETS: [f64; 3] = [0.90, 0.95, 0.99];

/// The report's sections, in reading order.
pub fn sections(r: &SuiteReport) -> Vec<Section> {
    let curves = all_curves(r);
    vec![
        summary(r, &curves),
        curves_section(&curves),
        ingest(r),
        load(r),
        other_modes(r),
        mixed(r),
        export_and_cold_start(r),
        peers(r),
        limits(),
    ]
}

fn all_curves(r: &SuiteReport) -> Vec<Curve> {
    let mut v: Vec<Curve> = r.eddy.sweeps.iter().map(|s| s.curve.clone()).collect();
    v.extend(r.peers.curves.iter().cloned());
    v
}

pub(super) fn find<'a>(curves: &'a [Curve], name: &str) -> Option<&'a Curve> {
    curves.iter().find(|c| c.name == name)
}

fn curves_section(curves: &[Curve]) -> Section {
    let mut s = Section::new("Throughput against recall");
    let chart = |title: &str, pick: &dyn Fn(&Curve) -> bool| Chart {
        title: title.to_owned(),
        x_label: "recall@10 (tie-aware)".into(),
        y_label: "queries/s".into(),
        log_y: true,
        series: curves
            .iter()
            .filter(|c| pick(c))
            .map(|c| Series {
                name: c.name.clone(),
                points: c.points.iter().map(|p| (p.recall10, p.qps)).collect(),
            })
            .collect(),
    };
    s.chart(chart("Served, single queries, one client", &|c| {
        c.batch == 1 && !c.name.contains("in process")
    }));
    s.chart(chart("Served, batches", &|c| c.batch > 1));
    s.chart(chart("In process, one search thread", &|c| {
        c.name.contains("in process")
    }));
    for c in curves {
        let mut t = Table::new(&["ef", "recall@10", "q/s", "spread", "p50", "p99"]);
        for p in &c.points {
            t.row(vec![
                p.ef.to_string(),
                format!("{:.4}", p.recall10),
                format!("{:.0}", p.qps),
                format!("{:.0}%", p.spread * 100.0),
                p.p50_ms.map_or("-".into(), fmt_millis),
                p.p99_ms.map_or("-".into(), fmt_millis),
            ]);
        }
        s.text(format!(
            "{} ({}{} rounds):",
            c.name,
            if c.batch > 1 {
                format!("{} queries per request, ", c.batch)
            } else {
                String::new()
            },
            c.rounds.len()
        ));
        s.table(t);
    }
    s
}

fn ingest(r: &SuiteReport) -> Section {
    let mut s = Section::new("Ingest");
    let Some(i) = &r.ingest else {
        s.text("not run");
        return s;
    };
    let p = &i.produce.publish;
    s.text(format!(
        "The base published flat out as {:?} events by the producer, consumed by one eddy-ingest; then every segment's graph built in the background and served.",
        i.produce.format
    ));
    let mut t = Table::new(&["measure", "value"]);
    t.row(vec![
        "events acknowledged".into(),
        format!("{} ({:.0}/s)", p.events, p.events_per_s),
    ]);
    t.row(vec![
        "all searchable (count = base) after".into(),
        format!(
            "{:.1} s ({:.0} points/s)",
            i.all_searchable_s, i.searchable_per_s
        ),
    ]);
    t.row(vec![
        "then all indexed and served after".into(),
        format!("{:.1} s ({} segments)", i.indexed_after_s, i.segments),
    ]);
    t.row(vec![
        "then merged while idle, the workloads start, after".into(),
        format!(
            "{:.1} s ({} segment{}; eddy-ingest merges an idle collection after 10 s)",
            i.converged_after_s,
            i.converged_segments,
            if i.converged_segments == 1 { "" } else { "s" }
        ),
    ]);
    t.row(vec![
        "bytes on disk per vector".into(),
        format!("{:.0} (raw f32: {})", i.disk_bytes_per_vector, r.dim * 4),
    ]);
    let mib = |b: Option<u64>| b.map_or("-".into(), |b| format!("{:.0} MiB", b as f64 / 1048576.0));
    t.row(vec!["peak RSS eddy-ingest".into(), mib(r.peak_rss.0)]);
    t.row(vec!["peak RSS eddy-query".into(), mib(r.peak_rss.1)]);
    s.table(t);
    s
}

fn lat(l: Option<&LatencyStats>, f: fn(&LatencyStats) -> f64) -> String {
    l.map_or("-".into(), |l| fmt_millis(f(l)))
}

fn phase_table(phases: &[&PhaseResult]) -> Table {
    let mut t = Table::new(&[
        "api",
        "truth",
        "mode",
        "load",
        "q/s",
        "dropped",
        "errors",
        "p50",
        "p99",
        "p99.9",
        "recall@10",
    ]);
    for p in phases {
        t.row(vec![
            p.api.to_owned(),
            p.truth.name().to_owned(),
            p.mode.clone(),
            match p.load {
                Load::Closed { workers } => format!("closed ×{workers}"),
                Load::Open {
                    rate,
                    fraction: Some(f),
                } => format!("open {rate:.0}/s ({:.0}%)", f * 100.0),
                Load::Open { rate, .. } => format!("open {rate:.0}/s"),
            },
            format!("{:.0}", p.queries_per_s),
            p.dropped.to_string(),
            p.errors.to_string(),
            lat(p.latency.as_ref(), |l| l.p50_ms),
            lat(p.latency.as_ref(), |l| l.p99_ms),
            lat(p.latency.as_ref(), |l| l.p999_ms),
            p.recall
                .and_then(|r| r.at10)
                .map_or("-".into(), |r| format!("{r:.4}")),
        ]);
    }
    t
}

fn load(r: &SuiteReport) -> Section {
    let mut s = Section::new("Latency under load (HTTP)");
    s.text(format!(
        "A closed loop of 4 workers finds saturation at ef {} (the smallest swept ef reaching recall@10 {} over HTTP); open loops then offer 50/70/90 % of it, latency from each request's scheduled time.",
        r.eddy.chosen_ef.map_or("(server default)".into(), |e| e.to_string()),
        r.target_recall
    ));
    s.table(phase_table(&r.eddy.load.iter().collect::<Vec<_>>()));
    let open: Vec<(f64, &LatencyStats)> = r
        .eddy
        .load
        .iter()
        .filter_map(|p| match (p.load, &p.latency) {
            (Load::Open { rate, .. }, Some(l)) => Some((rate, l)),
            _ => None,
        })
        .collect();
    let line = |name: &str, f: fn(&LatencyStats) -> f64| Series {
        name: name.into(),
        points: open.iter().map(|(x, l)| (*x, f(l))).collect(),
    };
    s.chart(Chart {
        title: "Latency against offered load (open loop)".into(),
        x_label: "offered requests/s".into(),
        y_label: "latency ms".into(),
        log_y: true,
        series: vec![
            line("p50", |l| l.p50_ms),
            line("p99", |l| l.p99_ms),
            line("p99.9", |l| l.p999_ms),
        ],
    });
    s
}

fn other_modes(r: &SuiteReport) -> Section {
    let mut s = Section::new("Exact, DoGet and filtered");
    let all: Vec<&PhaseResult> = r
        .eddy
        .exact
        .iter()
        .chain(&r.eddy.do_get)
        .chain(&r.eddy.filtered)
        .collect();
    s.text("One client each. Filtered: `section == \"games\"` (f1, ~1.7 % of the base) and `section in [admin, net, text, utils]` (f10, ~10.8 %), scored against their own filtered ground truth.");
    s.table(phase_table(&all));
    for n in &r.eddy.notes {
        s.text(n.clone());
    }
    s
}

fn mixed(r: &SuiteReport) -> Section {
    let mut s = Section::new("Mixed read/write and freshness");
    s.text(format!("A background writer upserts base rows at each rate ({}) while {} closed-loop HTTP workers search for {:.0} s, and freshness probes (10/s, one protobuf event each) re-publish rows and poll until the new version is served. Each mixed phase is compared with the same loop, read-only (no writer, no probes), run just before it for as long, on the settled collection: the suite first waits until the previous phase's tail is sealed, every graph built and the idle merge done (the segments it found and the wait are in the table), so every rate starts from the collection the sweeps measured. Broker → visible runs from the broker's timestamp (named in the table) to the first answer holding the event; produce → visible from the send. Cores: CPU seconds over wall seconds of each process during the phase; the broker runs on the same 2 cores here, so its share is taken from eddy.",
        if r.write_batch > 1 { format!("Arrow batches of up to {} points", r.write_batch) } else { "one protobuf event per point".to_owned() },
        r.workers, r.mixed_duration_s));
    let mut t = Table::new(&[
        "write rate",
        "writer achieved",
        "q/s",
        "read-only just before",
        "settled: segments (with a graph), waited",
        "of read-only",
        "recall@10",
        "probes visible",
        "broker → visible p50",
        "p99",
        "produce → visible p50",
        "p99",
        "ack p50",
        "cores: broker / ingest / query",
    ]);
    for m in &r.eddy.mixed {
        let cores = |name: &str| {
            m.cpu_cores
                .iter()
                .find(|(n, _)| n == name)
                .map_or("-".to_owned(), |(_, c)| format!("{c:.2}"))
        };
        let p = m.report.phases.first();
        let f = m.report.freshness.as_ref();
        t.row(vec![
            format!("{:.0}/s", m.write_rate),
            m.report
                .writer
                .as_ref()
                .map_or("-".into(), |w| format!("{:.0}/s", w.events_per_s)),
            p.map_or("-".into(), |p| format!("{:.0}", p.queries_per_s)),
            m.read_only_qps.map_or("-".into(), |q| format!("{q:.0}")),
            m.settled.map_or("not settled".into(), |s| {
                format!("{} ({}), {:.1} s", s.segments, s.indexed, s.waited_s)
            }),
            m.ratio_to_read_only
                .map_or("-".into(), |x| format!("{x:.2}×")),
            p.and_then(|p| p.recall)
                .and_then(|r| r.at10)
                .map_or("-".into(), |x| format!("{x:.4}")),
            f.map_or("-".into(), |f| {
                format!(
                    "{}/{} ({:?})",
                    f.visible,
                    f.visible + f.timed_out,
                    f.timestamps
                )
            }),
            lat(f.and_then(|f| f.append_to_visible.as_ref()), |l| l.p50_ms),
            lat(f.and_then(|f| f.append_to_visible.as_ref()), |l| l.p99_ms),
            lat(f.and_then(|f| f.produce_to_visible.as_ref()), |l| l.p50_ms),
            lat(f.and_then(|f| f.produce_to_visible.as_ref()), |l| l.p99_ms),
            lat(f.and_then(|f| f.acked.as_ref()), |l| l.p50_ms),
            format!(
                "{} / {} / {}",
                cores("broker"),
                cores("eddy-ingest"),
                cores("eddy-query")
            ),
        ]);
    }
    s.table(t);
    let fresh = |name: &str, pick: fn(&crate::freshness::FreshnessSummary) -> Option<f64>| Series {
        name: name.into(),
        points: r
            .eddy
            .mixed
            .iter()
            .filter_map(|m| Some((m.write_rate, pick(m.report.freshness.as_ref()?)?)))
            .collect(),
    };
    s.chart(Chart {
        title: "Freshness against write rate".into(),
        x_label: "write rate, events/s".into(),
        y_label: "ms".into(),
        log_y: true,
        series: vec![
            fresh("broker → visible p50", |f| {
                f.append_to_visible.map(|l| l.p50_ms)
            }),
            fresh("broker → visible p99", |f| {
                f.append_to_visible.map(|l| l.p99_ms)
            }),
            fresh("produce → visible p50", |f| {
                f.produce_to_visible.map(|l| l.p50_ms)
            }),
            fresh("produce → visible p99", |f| {
                f.produce_to_visible.map(|l| l.p99_ms)
            }),
        ],
    });
    s.chart(Chart {
        title: "Freshness over time (each probe, produce → visible)".into(),
        x_label: "seconds into the phase".into(),
        y_label: "ms".into(),
        log_y: true,
        series: r
            .eddy
            .mixed
            .iter()
            .filter_map(|m| {
                let f = m.report.freshness.as_ref()?;
                Some(Series {
                    name: format!("{:.0} events/s", m.write_rate),
                    points: f.timeline.clone(),
                })
            })
            .collect(),
    });
    s
}

fn export_and_cold_start(r: &SuiteReport) -> Section {
    let mut s = Section::new("Scroll export and cold start");
    let mut t = Table::new(&["measure", "value"]);
    if let Some(x) = &r.eddy.scroll {
        t.row(vec![
            "scroll, every live point with payloads, pages of 1,000".into(),
            format!(
                "{} points in {:.2} s ({:.0} points/s, {} pages)",
                x.points, x.elapsed_s, x.points_per_s, x.pages
            ),
        ]);
    }
    if let Some(c) = &r.cold_start {
        let mib = c.store_bytes as f64 / 1048576.0;
        let seconds = |runs: &[f64]| {
            runs.iter()
                .map(|s| format!("{s:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let best = c.ready_s.iter().copied().fold(f64::INFINITY, f64::min);
        t.row(vec![
            "eddy-query restarted on the store: ready after".into(),
            format!(
                "{} s ({mib:.0} MiB served, {:.0} MiB/s at the fastest; {})",
                seconds(&c.ready_s),
                mib / best.max(1e-9),
                if c.object_store {
                    "downloaded from the object store into an emptied cache"
                } else {
                    "page cache warm"
                }
            ),
        ]);
        t.row(vec![
            "first search answered after".into(),
            format!("{} s", seconds(&c.first_search_s)),
        ]);
    }
    s.table(t);
    s
}

fn peers(r: &SuiteReport) -> Section {
    let mut s = Section::new("Peers");
    s.text("Same data, same machine, same run. In process: M = 16, ef_construction = 100, built on 2 threads, searched one query at a time on one thread (`loadtest/bench/peers.py`). Served: one Python client, one request at a time, against eddy (HTTP JSON through `requests`, and through the standard library's `http.client` with `orjson` — the lean client; DoExchange over pyarrow.flight) Milvus's embedded server (pymilvus, its own gRPC client; HNSW M = 16, efConstruction = 100, inner product) and, when a binary built from its source is given (`EDDY_QDRANT_BIN`), Qdrant's server over REST through the same two HTTP clients and its `search/batch` (HNSW m = 16, ef_construct = 100, dot product, otherwise its defaults) (`loadtest/scripts/served_peers.py`, `qdrant_server.py`). Milvus 2.3.5's REST search takes no search parameters (no `ef`), so it cannot be swept to a matched recall and is not used.");
    let mut t = Table::new(&["package", "version"]);
    for (p, v) in &r.host.packages {
        t.row(vec![p.clone(), v.clone()]);
    }
    for (p, v) in &r.peers.versions {
        if !r.host.packages.contains_key(p) {
            t.row(vec![p.clone(), v.clone()]);
        }
    }
    s.table(t);
    let mut t = Table::new(&["set-up", "seconds"]);
    for (what, secs) in &r.peers.setup {
        t.row(vec![what.clone(), format!("{secs:.1}")]);
    }
    s.table(t);
    let mut t = Table::new(&["could not run", "why"]);
    for (what, why) in &r.peers.unavailable {
        t.row(vec![what.clone(), why.clone()]);
    }
    s.table(t);
    s
}

fn limits() -> Section {
    let mut s = Section::new("What this does not establish");
    s.text("One machine, shared and noisy: absolute figures drift between runs, so read the ratios and their per-round ranges, not the absolute q/s. The clients run on the same two cores as the servers, so served figures include the client's CPU. The Python-client comparisons measure what one Python job sees, not either server's ceiling. Milvus runs as its embedded single-process server and Qdrant as one server process, not distributed deployments. Freshness depends on the broker: Tansu here, not Kafka. See docs/benchmarks.md.");
    s
}
