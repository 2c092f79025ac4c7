//! `eddy-bench synth`: a seeded clustered dataset of unit vectors with its
//! exact top-100 ground truth (dot product, ties by smaller id).

use std::time::Instant;

use anyhow::Result;
use eddy_dataset::{write_fvecs, write_ivecs, Matrix};
use eddy_hnsw::{exact_scan, ScanRows, Vectors};
use eddy_model::Metric;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use crate::cli::SynthArgs;

/// Generate the dataset of `a`, compute its ground truth and write both to `a.out`.
pub(crate) fn synth(a: &SynthArgs) -> Result<()> {
    std::fs::create_dir_all(&a.out)?;
    let (n, dim) = (a.n, a.dim);
    let mut rng = ChaCha8Rng::seed_from_u64(a.seed);
    let centres: Vec<f32> = (0..a.clusters * dim).map(|_| gauss(&mut rng)).collect();
    let t0 = Instant::now();
    let base = clustered(a, &centres, n, &mut rng);
    let queries = clustered(a, &centres, a.nq, &mut rng);
    println!(
        "generated {n} x {dim} in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let k = 100.min(n);
    let t1 = Instant::now();
    let gt = ground_truth(&base, &queries, dim, k);
    println!("ground truth in {:.1} s", t1.elapsed().as_secs_f64());
    write_fvecs(&a.out.join("base.fvecs"), &Matrix { dim, data: base })?;
    write_fvecs(&a.out.join("queries.fvecs"), &Matrix { dim, data: queries })?;
    write_ivecs(
        &a.out.join("gt.ivecs"),
        &Matrix {
            dim: k,
            data: gt
                .iter()
                .flat_map(|g| g.iter().map(|h| h.0 as i32))
                .collect(),
        },
    )?;
    write_fvecs(
        &a.out.join("gt-scores.fvecs"),
        &Matrix {
            dim: k,
            data: gt.iter().flat_map(|g| g.iter().map(|h| h.1)).collect(),
        },
    )?;
    std::fs::write(
        a.out.join("README.md"),
        format!(
            "Synthetic clustered set from `eddy-bench synth`: n={n} dim={dim} clusters={} spread={} seed={} queries={}; unit vectors, dot product; gt = exact top-{k} (ties by smaller id).\n",
            a.clusters, a.spread, a.seed, a.nq
        ),
    )?;
    println!("wrote {}", a.out.display());
    Ok(())
}

/// One standard normal draw (Box-Muller).
fn gauss(rng: &mut ChaCha8Rng) -> f32 {
    let u1: f32 = rng.random::<f32>().max(1e-12);
    let u2: f32 = rng.random::<f32>();
    (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
}

/// `count` unit rows, each a random centre plus `a.spread` Gaussian noise.
fn clustered(a: &SynthArgs, centres: &[f32], count: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
    let dim = a.dim;
    let mut v = vec![0.0f32; count * dim];
    for row in v.chunks_exact_mut(dim) {
        let c = rng.random_range(0..a.clusters);
        for (j, x) in row.iter_mut().enumerate() {
            *x = centres[c * dim + j] + a.spread * gauss(rng);
        }
        eddy_kernels::normalize(row);
    }
    v
}

/// Exact top `k` of every query by dot product (the one exact scan), on the rayon pool.
fn ground_truth(base: &[f32], queries: &[f32], dim: usize, k: usize) -> Vec<Vec<(u32, f32)>> {
    let vectors = Vectors::new(base, dim, Metric::Dot);
    queries
        .par_chunks_exact(dim)
        .map(|q| exact_scan(&vectors, q, k, ScanRows::All(&|_| true)))
        .collect()
}
