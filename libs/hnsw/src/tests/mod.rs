//! Unit tests: recall against brute force, determinism, filters/deletes,
//! duplicates, SQ8 traversal, format round trip and corruption. Shared
//! helpers here; the tests by concern in the modules.

mod exact;
mod format;
mod prior;
mod scorers;
mod search;

use eddy_model::Metric;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::*;

pub(crate) fn clustered(n: usize, dim: usize, seed: u64, normalise: bool) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let centres: Vec<f32> = (0..10 * dim).map(|_| rng.random_range(-1.0..1.0)).collect();
    let mut v = Vec::with_capacity(n * dim);
    for _ in 0..n {
        let c = rng.random_range(0..10);
        let start = v.len();
        for j in 0..dim {
            v.push(centres[c * dim + j] + 0.3 * rng.random_range(-1.0f32..1.0));
        }
        if normalise {
            eddy_kernels::normalize(&mut v[start..]);
        }
    }
    v
}

fn brute(
    data: &[f32],
    dim: usize,
    metric: Metric,
    q: &[f32],
    k: usize,
    ok: impl Fn(u32) -> bool,
) -> Vec<(u32, f32)> {
    let mut all: Vec<(u32, f32)> = data
        .chunks_exact(dim)
        .enumerate()
        .filter(|(i, _)| ok(*i as u32))
        .map(|(i, v)| (i as u32, eddy_quant::exact_score(metric, q, v)))
        .collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    all.truncate(k);
    all
}

/// Tie-aware recall: a hit when the returned score reaches the k-th true score.
fn recall(got: &[(u32, f32)], truth: &[(u32, f32)]) -> f64 {
    let Some(kth) = truth.last().map(|t| t.1) else {
        return 1.0;
    };
    let hits = got
        .iter()
        .take(truth.len())
        .filter(|g| g.1 >= kth - 1e-5)
        .count();
    hits as f64 / truth.len() as f64
}

fn one_thread<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool")
        .install(f)
}

/// A graph over `data` built on one thread with default parameters.
fn graph_1t(data: &[f32], dim: usize, metric: Metric) -> Graph {
    one_thread(|| Graph::build(&Vectors::new(data, dim, metric), &HnswParams::default()))
        .expect("build")
}

fn mean_recall(
    g: &GraphView<'_>,
    data: &[f32],
    queries: &[f32],
    dim: usize,
    metric: Metric,
    ef: usize,
) -> f64 {
    let mut ctx = SearchContext::default();
    let mut total = 0.0;
    let nq = queries.len() / dim;
    let vectors = Vectors::new(data, dim, metric);
    for q in queries.chunks_exact(dim) {
        let got = search(g, &vectors, &Query::new(10, ef), q, &mut ctx);
        let truth = brute(data, dim, metric, q, 10, |_| true);
        total += recall(&got, &truth);
    }
    total / nq as f64
}
