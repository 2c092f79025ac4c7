//! What a query pays for the fresh tail: the exact f32 scan of a growing
//! buffer against its SQ8 scan with exact rescoring of the best `keep`,
//! on real embeddings (the first `rows` of a dataset as the tail, its
//! queries against them), alternated A/B over rounds. Recall is against the
//! exact scan of the same tail.
//!
//! ```text
//! cargo run --release -p eddy-segment --example tail_scan -- ../shared/datasets/debian-minilm 20000
//! ```

use std::path::PathBuf;
use std::time::Instant;

use eddy_model::{IdType, Metric, PointId};
use eddy_segment::{Growing, Neighbor};

const K: usize = 10;
const ROUNDS: usize = 4;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .unwrap_or_else(|| "../shared/datasets/debian-minilm".into()),
    );
    let rows: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(20_000);
    let base = eddy_dataset::read_fvecs(&dir.join("base.fvecs"), Some(rows))?;
    let queries = eddy_dataset::read_fvecs(&dir.join("queries-public.fvecs"), Some(1_000))?;
    let dim = base.row(0).len();
    let normalised = |v: &[f32]| {
        let n = v
            .iter()
            .map(|x| x * x)
            .sum::<f32>()
            .sqrt()
            .max(f32::MIN_POSITIVE);
        v.iter().map(|x| x / n).collect::<Vec<f32>>()
    };
    let started = Instant::now();
    let mut tail = Growing::new(dim, Metric::Cosine, IdType::U64).with_quantized_scan(1_024);
    for (i, v) in base.iter().enumerate() {
        tail.upsert(PointId::Num(i as u64), &normalised(v), b"", 0, i as i64);
    }
    println!(
        "tail of {} rows x {dim} built with codes in {:.2} s; {} queries, k={K}",
        tail.rows(),
        started.elapsed().as_secs_f64(),
        queries.rows()
    );
    let queries: Vec<Vec<f32>> = queries.iter().map(normalised).collect();
    let exact: Vec<Vec<Neighbor>> = queries
        .iter()
        .map(|q| tail.search(q, K, &|_| true))
        .collect();
    println!(
        "{:>8} {:>10} {:>10} {:>8} {:>8}",
        "scan", "us/query", "spread", "xf32", "recall"
    );
    let time = |run: &dyn Fn(&[f32]) -> Vec<Neighbor>| {
        let t = Instant::now();
        let mut found = 0usize;
        for (q, truth) in queries.iter().zip(&exact) {
            let hits = run(q);
            found += hits
                .iter()
                .filter(|h| truth.iter().any(|t| t.row == h.row))
                .count();
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / queries.len() as f64;
        (us, found as f64 / (queries.len() * K) as f64)
    };
    for keep in [10, 20, 40, 80, 160] {
        let mut f32_times = Vec::new();
        let mut sq8_times = Vec::new();
        let mut recall = 0.0;
        for _ in 0..ROUNDS {
            f32_times.push(time(&|q| tail.search(q, K, &|_| true)).0);
            let (us, r) = time(&|q| tail.search_quantized(q, K, keep, &|_| true));
            sq8_times.push(us);
            recall = r;
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            (v[v.len() / 2], v[0], v[v.len() - 1])
        };
        let (f, _, _) = median(&mut f32_times);
        let (s, lo, hi) = median(&mut sq8_times);
        println!(
            "{:>8} {:>10.1} {:>4.0}-{:<5.0} {:>8.2} {:>8.4}",
            format!("sq8/{keep}"),
            s,
            lo,
            hi,
            f / s,
            recall
        );
        println!("{:>8} {:>10.1}", "f32", f);
    }
    Ok(())
}
