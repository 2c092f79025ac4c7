//! The filtered benchmark (F1 / F10 on debian-minilm's `section` payload):
//! an exact scan over the matching rows against graph walks that skip the
//! others, and the policy that picks between them.

use std::io::BufRead;
use std::path::Path;

use anyhow::{Context, Result};
use eddy_dataset::{read_fvecs, read_ivecs, Matrix};
use eddy_hnsw::{exact_scan, search_into, Query, ScanRows, SearchContext, Vectors};

use crate::measure::{qps_single, recall, run_all};
use crate::modes::Sweep;
use crate::report::FilterPoint;

/// The filters: name, ground-truth file suffix, and the sections they keep.
const FILTERS: [(&str, &str, &[&str]); 2] = [
    ("F1", "f1", &["games"]),
    ("F10", "f10", &["admin", "net", "text", "utils"]),
];

/// Measure every filter of [`FILTERS`] (needs `base-payload.jsonl` and the
/// `gt-public-f*` files).
pub(crate) fn filter_bench(s: &Sweep<'_>) -> Result<Vec<FilterPoint>> {
    let section = read_sections(&s.data.dir, s.data.base.rows())?;
    let mut out = Vec::new();
    for (name, suffix, sections) in FILTERS {
        let ok: Vec<bool> = section
            .iter()
            .map(|x| sections.contains(&x.as_str()))
            .collect();
        out.extend(bench_filter(s, name, suffix, &ok)?);
    }
    Ok(out)
}

/// The `section` of every base row (empty when the payload has none).
fn read_sections(dir: &Path, n: usize) -> Result<Vec<String>> {
    let f = std::fs::File::open(dir.join("base-payload.jsonl")).context("base-payload.jsonl")?;
    let mut section = vec![String::new(); n];
    for line in std::io::BufReader::new(f).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&line)?;
        let id = v["id"].as_u64().context("payload row without id")? as usize;
        if id < n {
            section[id] = v["section"].as_str().unwrap_or_default().to_string();
        }
    }
    Ok(section)
}

/// One filter (`ok[row]`: the row matches): the exact scan, then the graph at every `--ef`.
fn bench_filter(s: &Sweep<'_>, name: &str, suffix: &str, ok: &[bool]) -> Result<Vec<FilterPoint>> {
    let (a, data) = (s.args, s.data);
    let n = data.base.rows();
    let rows: Vec<u32> = (0..n as u32).filter(|&i| ok[i as usize]).collect();
    let sel = rows.len() as f64 / n as f64;
    let gt = read_ivecs(
        &data.dir.join(format!("gt-public-{suffix}.ivecs")),
        a.queries,
    )?;
    let gts = read_fvecs(
        &data.dir.join(format!("gt-public-{suffix}-scores.fvecs")),
        a.queries,
    )?;
    let scan_at = |ef: usize| {
        sel < a.scan_below
            || (rows.len() as f64) < a.scan_factor * (ef.max(10) as f64 / sel) * 2.0 * a.m as f64
    };
    (s.log)(format!(
        "\nfilter {name}: {} rows, selectivity {sel:.4}; policy: scan when selectivity < {} or rows < {} x (ef/selectivity) x 2M",
        rows.len(),
        a.scan_below,
        a.scan_factor
    ));
    (s.log)(format!(
        "{:>10} {:>5} {:>9} {:>10} {:>7}",
        "strategy", "ef", "recall@10", "QPS 1T", "policy"
    ));
    let point = |strategy: &str, ef: Option<usize>, policy: bool, (recall10, qps1)| FilterPoint {
        filter: name.into(),
        selectivity: sel,
        strategy: strategy.into(),
        policy,
        ef,
        recall10,
        qps1,
    };
    let vectors = Vectors::new(&data.base.data, s.vectors.dim, s.vectors.metric);
    // Exact scan over the matching rows.
    let rows_ref = &rows;
    let scan = move |_: &mut SearchContext, q: &[f32], k: usize, o: &mut Vec<(u32, f32)>| {
        *o = exact_scan(&vectors, q, k, ScanRows::Listed(rows_ref));
    };
    let scanned = measure(s, &gt, &gts, a.min_secs, &scan);
    let policy = a.ef.iter().any(|&ef| scan_at(ef));
    (s.log)(format!(
        "{:>10} {:>5} {:>9.4} {:>10.0} {:>7}",
        "scan",
        "-",
        scanned.0,
        scanned.1,
        if policy { "yes" } else { "" }
    ));
    let mut out = vec![point("scan", None, policy, scanned)];
    for &ef in &a.ef {
        let view = s.view;
        let g = move |ctx: &mut SearchContext, q: &[f32], k: usize, o: &mut Vec<(u32, f32)>| {
            let acc = |id: u32| ok[id as usize];
            search_into(
                view,
                &vectors,
                &Query::new(k, ef).with_accept(&acc),
                q,
                ctx,
                o,
            );
        };
        let walked = measure(s, &gt, &gts, a.min_secs.min(0.3), &g);
        (s.log)(format!(
            "{:>10} {ef:>5} {:>9.4} {:>10.0} {:>7}",
            "graph",
            walked.0,
            walked.1,
            if scan_at(ef) { "" } else { "yes" }
        ));
        out.push(point("graph", Some(ef), !scan_at(ef), walked));
    }
    Ok(out)
}

/// Recall@10 against the filter's ground truth, and single-thread QPS.
fn measure(
    s: &Sweep<'_>,
    gt: &Matrix<i32>,
    gts: &Matrix<f32>,
    min_secs: f64,
    f: &crate::measure::SearchFn<'_>,
) -> (f64, f64) {
    let r = run_all(&s.data.queries, 10, f);
    let recall10 = recall(&r, gt, gts, 10);
    let qps1 = qps_single(&s.data.queries, 10, min_secs, f);
    (recall10, qps1)
}
