//! What a query pays for the fresh tail: the exact f32 scan of a growing
//! buffer against its SQ8 scan with exact rescoring of the best `keep`,
//! and against the sign-bit shortlist ranked again by SQ8 (what the buffer
//! searches with from `SHORTLIST_FROM_ROWS` rows) at several shortlist
//! depths, on real embeddings (the first `rows` of a dataset as the tail,
//! its queries against them), alternated over rounds. Last, the same rows
//! as two buffers of half the rows each, codes trained on their own rows
//! (a tail and a seal waiting for its graph): a shortlist each against
//! one shortlist between them ([`eddy_segment::scan_many`]). Recall is
//! against the exact scan of the same tail.
//!
//! ```text
//! cargo run --release -p eddy-segment --example tail_scan -- ../shared/datasets/debian-minilm 20000
//! ```

use std::path::PathBuf;
use std::time::Instant;

use eddy_hnsw::{quantized_scan, shortlisted_scan, Vectors};
use eddy_model::{IdType, Metric, PointId};
use eddy_segment::{scan_many, CodeScan, Growing, Neighbor};

const K: usize = 10;

/// One way of searching the tail.
type Search<'a> = dyn Fn(&[f32]) -> Vec<Neighbor> + 'a;
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
        let mut v = v.to_vec();
        eddy_kernels::normalize(&mut v);
        v
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
        "{:>18} {:>10} {:>10} {:>8} {:>8}",
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
    let codes = tail.scan_codes().ok_or("the tail keeps no codes")?;
    let vectors = Vectors::new(tail.vectors(), dim, Metric::Cosine);
    let all = |_: u32| true;
    let scan = |q: &[f32], keep: usize| -> Vec<Neighbor> {
        quantized_scan(codes.sq8(), &vectors, q, K, keep, &all)
            .into_iter()
            .map(Neighbor::from)
            .collect()
    };
    let shortlist = |q: &[f32], depth: usize| -> Vec<Neighbor> {
        match codes.bits() {
            Some(bits) => shortlisted_scan(bits, codes.sq8(), &vectors, q, K, depth, 40, &all)
                .into_iter()
                .map(Neighbor::from)
                .collect(),
            None => Vec::new(),
        }
    };
    // The same rows as two buffers (rows of the second numbered after the
    // first's), and the top k of both merged.
    let half = tail.rows() / 2;
    let mut halves = [
        Growing::new(dim, Metric::Cosine, IdType::U64).with_quantized_scan(1_024),
        Growing::new(dim, Metric::Cosine, IdType::U64).with_quantized_scan(1_024),
    ];
    for (i, v) in base.iter().enumerate() {
        let buffer = &mut halves[usize::from(i >= half)];
        buffer.upsert(PointId::Num(i as u64), &normalised(v), b"", 0, i as i64);
    }
    let merged = |parts: [Vec<(u32, f32)>; 2]| -> Vec<Neighbor> {
        let [a, b] = parts;
        let mut all: Vec<Neighbor> = a
            .into_iter()
            .chain(b.into_iter().map(|(r, s)| (r + half as u32, s)))
            .map(Neighbor::from)
            .collect();
        all.sort_by(|x, y| y.score.total_cmp(&x.score));
        all.truncate(K);
        all
    };
    let own = |h: &Growing, q: &[f32]| -> Vec<(u32, f32)> {
        h.search_quantized(q, K, 40, &all)
            .into_iter()
            .map(|n| (n.row, n.score))
            .collect()
    };
    let both = &halves;
    let live_of = |i: usize| move |r: u32| both[i].is_live(r);
    let live = [live_of(0), live_of(1)];
    let live = &live;
    let rows = tail.rows();
    let mut variants: Vec<(String, Box<Search<'_>>)> = vec![
        ("f32".into(), Box::new(|q: &[f32]| tail.search(q, K, &all))),
        ("sq8/20".into(), Box::new(move |q: &[f32]| scan(q, 20))),
        ("sq8/40".into(), Box::new(move |q: &[f32]| scan(q, 40))),
    ];
    for depth in [400, 640, 1_000, rows / 32] {
        variants.push((
            format!("bits/{depth}+sq8/40"),
            Box::new(move |q: &[f32]| shortlist(q, depth)),
        ));
    }
    variants.push((
        "default".into(),
        Box::new(|q: &[f32]| tail.search_quantized(q, K, 40, &all)),
    ));
    let halves = &halves;
    variants.push((
        "2 halves, own".into(),
        Box::new(move |q: &[f32]| merged([own(&halves[0], q), own(&halves[1], q)])),
    ));
    variants.push((
        "2 halves, joint".into(),
        Box::new(move |q: &[f32]| {
            let sources: Vec<CodeScan<'_>> = halves
                .iter()
                .zip(live)
                .filter_map(|(h, accept)| {
                    let (codes, vectors) = h.code_scan_parts()?;
                    Some(CodeScan {
                        codes,
                        vectors,
                        accept,
                    })
                })
                .collect();
            let mut found = scan_many(&sources, q, K, 40).into_iter();
            let a = found.next().unwrap_or_default();
            let b = found.next().unwrap_or_default();
            merged([a, b])
        }),
    ));
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut recalls = vec![0.0; variants.len()];
    for _ in 0..ROUNDS {
        for (i, (_, run)) in variants.iter().enumerate() {
            let (us, r) = time(run.as_ref());
            times[i].push(us);
            recalls[i] = r;
        }
    }
    let f32_median = median(&mut times[0].clone()).0;
    for (i, (name, _)) in variants.iter().enumerate() {
        let (m, lo, hi) = median(&mut times[i]);
        println!(
            "{:>18} {:>10.1} {:>4.0}-{:<5.0} {:>8.2} {:>8.4}",
            name,
            m,
            lo,
            hi,
            f32_median / m,
            recalls[i]
        );
    }
    Ok(())
}

/// Median, lowest and highest of `v`.
fn median(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}
