//! What a merge's graph costs when it starts from the graph of its largest
//! input ([`Graph::build_from_prior`]) instead of building afresh: the
//! first 40,000 rows of a dataset get a graph, a share of them is deleted,
//! and the survivors plus the dataset's remaining rows (the other inputs of
//! the merge) get a graph both ways, alternated, on one thread. Recall@10
//! is against the exact scan of the merged rows, at the same `ef`.
//!
//! ```text
//! cargo run --release -p eddy-hnsw --example merge_build -- ../shared/datasets/debian-minilm
//! ```

mod common;

use std::time::Instant;

use common::{deleted, exact_top, recall};
use eddy_hnsw::{BuildOptions, Graph, HnswParams, Prior, Vectors};
use eddy_model::Metric;

const EARLIER_ROWS: usize = 40_000;
const SHARES: [f64; 4] = [0.1, 0.25, 0.5, 0.75];
const EFS: [usize; 3] = [16, 32, 64];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let common::Dataset {
        data,
        dim,
        rows,
        queries,
    } = common::load()?;
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let params = HnswParams::default();
    let options = BuildOptions::default();
    let earlier_rows = EARLIER_ROWS.min(rows);
    let earlier_data = &data[..earlier_rows * dim];
    let earlier =
        pool.install(|| Graph::build(&Vectors::new(earlier_data, dim, Metric::Cosine), &params))?;
    println!(
        "earlier graph: {earlier_rows} rows; merged with the other {} rows; one thread",
        rows - earlier_rows
    );
    println!(
        "{:>8} {:>8} {:>10} {:>10} {:>6}  recall@10 fresh / from prior at ef {EFS:?}",
        "deleted", "rows", "fresh s", "prior s", "ratio"
    );
    for share in SHARES {
        let mut merged = Vec::with_capacity(data.len());
        let mut rows = Vec::with_capacity(earlier_rows);
        for (i, v) in earlier_data.chunks_exact(dim).enumerate() {
            if deleted(i, share) {
                rows.push(None);
            } else {
                rows.push(Some((merged.len() / dim) as u32));
                merged.extend_from_slice(v);
            }
        }
        merged.extend_from_slice(&data[earlier_rows * dim..]);
        let vectors = Vectors::new(&merged, dim, Metric::Cosine);
        let prior = Prior {
            view: earlier.view(),
            rows: &rows,
        };
        let (mut fresh_s, mut prior_s) = (Vec::new(), Vec::new());
        let (mut fresh, mut from_prior) = (None, None);
        for _ in 0..2 {
            let t = Instant::now();
            fresh = Some(pool.install(|| Graph::build_with(&vectors, &params, &options))?);
            fresh_s.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            from_prior =
                Some(pool.install(|| {
                    Graph::build_from_prior(&vectors, &params, &options, None, &prior)
                })?);
            prior_s.push(t.elapsed().as_secs_f64());
        }
        let (Some(fresh), Some(from_prior)) = (fresh, from_prior) else {
            continue;
        };
        let every = (0..(merged.len() / dim) as u32).collect::<Vec<_>>();
        let truth = exact_top(&vectors, &queries, &every);
        let recalls: Vec<String> = EFS
            .iter()
            .map(|&ef| {
                format!(
                    "{:.4}/{:.4}",
                    recall(&fresh, &vectors, &queries, &truth, ef),
                    recall(&from_prior, &vectors, &queries, &truth, ef)
                )
            })
            .collect();
        let range = |s: &[f64]| {
            format!(
                "{:.2}-{:.2}",
                s.iter().cloned().fold(f64::MAX, f64::min),
                s.iter().cloned().fold(0.0, f64::max)
            )
        };
        let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
        println!(
            "{:>8.2} {:>8} {:>10} {:>10} {:>6.2}  {}",
            share,
            merged.len() / dim,
            range(&fresh_s),
            range(&prior_s),
            mean(&prior_s) / mean(&fresh_s),
            recalls.join("  ")
        );
    }
    Ok(())
}
