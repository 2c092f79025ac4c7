//! Timed loops and recall: every mode and strategy is one [`SearchFn`], run
//! once over the queries for recall and repeated for single- and
//! multi-thread QPS.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use eddy_dataset::{recall_at_k, Matrix};
use eddy_hnsw::SearchContext;

/// One search over a query: the closure used by all timed loops.
pub(crate) type SearchFn<'a> =
    dyn Fn(&mut SearchContext, &[f32], usize, &mut Vec<(u32, f32)>) + Sync + 'a;

/// A rayon pool of `threads` threads.
pub(crate) fn pool(threads: usize) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .context("rayon pool")
}

/// Run all queries once; returns results for recall.
pub(crate) fn run_all(queries: &Matrix<f32>, k: usize, f: &SearchFn<'_>) -> Vec<Vec<(u32, f32)>> {
    let mut ctx = SearchContext::default();
    let mut out = Vec::new();
    queries
        .iter()
        .map(|q| {
            f(&mut ctx, q, k, &mut out);
            out.clone()
        })
        .collect()
}

/// Single-thread QPS: repeat the query set until `min_secs`.
pub(crate) fn qps_single(queries: &Matrix<f32>, k: usize, min_secs: f64, f: &SearchFn<'_>) -> f64 {
    let mut ctx = SearchContext::default();
    let mut out = Vec::with_capacity(k);
    // warm-up
    for q in queries.iter().take(50) {
        f(&mut ctx, q, k, &mut out);
    }
    let start = Instant::now();
    let mut done = 0usize;
    while start.elapsed() < Duration::from_secs_f64(min_secs) || done == 0 {
        for q in queries.iter() {
            f(&mut ctx, q, k, &mut out);
        }
        done += queries.rows();
    }
    done as f64 / start.elapsed().as_secs_f64()
}

/// Multi-thread QPS: every pool thread takes an interleaved share.
pub(crate) fn qps_multi(
    pool: &rayon::ThreadPool,
    queries: &Matrix<f32>,
    k: usize,
    min_secs: f64,
    f: &SearchFn<'_>,
) -> f64 {
    let t = pool.current_num_threads();
    let rows = queries.rows();
    let start = Instant::now();
    let counts = pool.broadcast(|bc| {
        let me = bc.index();
        let mut ctx = SearchContext::default();
        let mut out = Vec::with_capacity(k);
        let mut done = 0usize;
        while start.elapsed() < Duration::from_secs_f64(min_secs) || done == 0 {
            let mut i = me;
            while i < rows {
                f(&mut ctx, queries.row(i), k, &mut out);
                done += 1;
                i += t;
            }
        }
        done
    });
    counts.iter().sum::<usize>() as f64 / start.elapsed().as_secs_f64()
}

/// Tie-aware recall@k of `results` against the ground truth ids and scores.
pub(crate) fn recall(
    results: &[Vec<(u32, f32)>],
    gt: &Matrix<i32>,
    gts: &Matrix<f32>,
    k: usize,
) -> f64 {
    let total: f64 = results
        .iter()
        .enumerate()
        .map(|(i, r)| recall_at_k(&as_u64(r), gt.row(i), gts.row(i), k))
        .sum();
    total / results.len().max(1) as f64
}

/// Hits with `u64` ids, as [`recall_at_k`] takes them.
pub(crate) fn as_u64(hits: &[(u32, f32)]) -> Vec<(u64, f32)> {
    hits.iter().map(|&(id, s)| (u64::from(id), s)).collect()
}
