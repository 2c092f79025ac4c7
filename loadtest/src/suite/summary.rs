//! The report's summary: what was measured on which host, and the
//! headline ratios at matched recall (eddy against each peer, at each
//! recall target), with the reason where a ratio cannot be given.

use super::document::{Section, Table};
use super::matched::{qps_at, ratio_at, AtRecall, Curve};
use super::report::{find, TARGETS};
use super::SuiteReport;

/// The summary section over `curves` (every engine's and API's).
pub(super) fn summary(r: &SuiteReport, curves: &[Curve]) -> Section {
    let mut s = Section::new("Summary");
    s.text(format!(
        "Dataset `{}`: {} points, {} dimensions, {} queries, k = 10. Host: {} ({} CPUs), eddy kernels `{}`, eddy `{}`, Tansu `{}`. {} s per phase, {} rounds per A/B comparison (order reversed each round); the whole suite took {:.0} s.",
        r.dataset, r.points, r.dim, r.queries, r.host.cpu, r.host.cpus, r.host.kernels,
        r.host.eddy, r.host.tansu, r.duration_s, r.rounds, r.elapsed_s
    ));
    s.text(format!("Command: `{}`", r.command));
    s.text(
        "Method: recall is tie-aware recall@10 against the exact ground truth (a hit counts when its true score ties the 10th). Engines are compared at matched recall, never at matched ef: each curve's throughput at a target is interpolated linearly in log(q/s) between the two ef points that bracket it, never extrapolated; \"≥\" marks a lower bound where even the smallest ef is above the target. Ratios give the mean curves' ratio and, in brackets, the lowest and highest per-round ratio. Open-loop latency runs from each request's scheduled send time (no coordinated omission). Every eddy search in the suite asks `oversampling: max(ef, k) / k`: the beam is max(ef, k), as in Milvus, and all of it is rescored in f32, the walk eddy's engine is measured with in process (the server's default, 4, rescores 40 candidates and keeps the beam at 40 or more).",
    );
    let mut t = Table::new(&["comparison", "@0.90", "@0.95", "@0.99"]);
    let pairs = [
        ("eddy HTTP (Python client)", "Milvus (Python client)"),
        (
            "eddy HTTP, lean client (Python client)",
            "Milvus (Python client)",
        ),
        (
            "eddy DoExchange ×100 (Python client)",
            "Milvus batch ×100 (Python client)",
        ),
        ("eddy HTTP (Python client)", "Qdrant HTTP (Python client)"),
        (
            "eddy HTTP, lean client (Python client)",
            "Qdrant HTTP, lean client (Python client)",
        ),
        (
            "eddy DoExchange ×100 (Python client)",
            "Qdrant batch ×100 (Python client)",
        ),
        ("eddy HTTP", "eddy HTTP, quantization none"),
        ("eddy HTTP", "eddy-sq8 (in process)"),
        ("eddy-sq8-2t (in process)", "eddy-sq8 (in process)"),
    ];
    for (x, y) in pairs {
        ratio_row(&mut t, curves, x, y);
    }
    // eddy's own DoExchange sweeps (one batch per exchange, and streamed)
    // against the engine in process on one and on two threads: the served
    // batch path's overhead.
    let exchanges = curves
        .iter()
        .filter(|c| c.name.starts_with("eddy DoExchange") && !c.name.ends_with(')'));
    for c in exchanges {
        for engine in ["eddy-sq8 (in process)", "eddy-sq8-2t (in process)"] {
            ratio_row(&mut t, curves, &c.name, engine);
        }
    }
    for mode in ["eddy-f32 (in process)", "eddy-sq8 (in process)"] {
        for peer in ["hnswlib", "faiss", "usearch", "qdrant-edge"] {
            ratio_row(&mut t, curves, mode, &format!("{peer} (in process)"));
        }
    }
    s.table(t);
    let mut b = Table::new(&["build (2 threads)", "seconds", "eddy / it"]);
    let eddy_build = find(curves, "eddy-f32 (in process)").and_then(|c| c.build_s);
    for c in curves.iter().filter(|c| c.build_s.is_some()) {
        let secs = c.build_s.unwrap_or(0.0);
        b.row(vec![
            c.name.clone(),
            format!("{secs:.1}"),
            eddy_build.map_or("-".into(), |e| format!("{:.2}×", e / secs.max(1e-9))),
        ]);
    }
    s.table(b);
    s
}

/// A row `x / y` at each target (left out when either curve is missing).
fn ratio_row(t: &mut Table, curves: &[Curve], x: &str, y: &str) {
    let (Some(cx), Some(cy)) = (find(curves, x), find(curves, y)) else {
        return;
    };
    let mut row = vec![format!("{x} / {y}")];
    for target in TARGETS {
        row.push(match ratio_at(cx, cy, target) {
            Some(r) => r.to_string(),
            None => why_no_ratio(cx, cy, target),
        });
    }
    t.row(row);
}

fn why_no_ratio(x: &Curve, y: &Curve, target: f64) -> String {
    for c in [x, y] {
        match qps_at(&c.points, target) {
            AtRecall::NotReached => return format!("{} does not reach it", c.name),
            AtRecall::AtLeast(..) if std::ptr::eq(c, y) => {
                return format!("{} above it at its lowest ef", c.name)
            }
            _ => {}
        }
    }
    "-".into()
}
