//! What the graph examples share: a dataset's rows and public queries,
//! normalised for cosine; a fixed pseudo-random choice of deleted rows; and
//! the exact top `K` of each query; a graph's recall against it.

use std::path::PathBuf;

use eddy_hnsw::{exact_scan, search_into, Graph, Query, ScanRows, SearchContext, Vectors};

/// Neighbours per query.
pub const K: usize = 10;

/// A dataset as the examples use it.
pub struct Dataset {
    /// Every base row, normalised, row after row.
    pub data: Vec<f32>,
    /// Dimensions per row.
    pub dim: usize,
    /// Base rows.
    pub rows: usize,
    /// The first 1,000 public queries, normalised.
    pub queries: Vec<Vec<f32>>,
}

/// The dataset in the directory named by the first argument (default
/// `../shared/datasets/debian-minilm`).
pub fn load() -> Result<Dataset, Box<dyn std::error::Error>> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "../shared/datasets/debian-minilm".into()),
    );
    let base = eddy_dataset::read_fvecs(&dir.join("base.fvecs"), None)?;
    let queries = eddy_dataset::read_fvecs(&dir.join("queries-public.fvecs"), Some(1_000))?;
    let normalised = |v: &[f32]| {
        let mut v = v.to_vec();
        eddy_kernels::normalize(&mut v);
        v
    };
    Ok(Dataset {
        data: base.iter().flat_map(normalised).collect(),
        dim: base.row(0).len(),
        rows: base.rows(),
        queries: queries.iter().map(normalised).collect(),
    })
}

/// Whether row `i` is deleted at `share`: a fixed pseudo-random order, so
/// the rows deleted at 0.5 include those deleted at 0.25.
pub fn deleted(i: usize, share: f64) -> bool {
    let h = (i as u64 ^ 0x9E37_79B9_7F4A_7C15).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let h = (h ^ (h >> 31)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((h >> 11) as f64 / (1u64 << 53) as f64) < share
}

/// The exact top `K` rows among `rows` of each query.
pub fn exact_top(all: &Vectors<'_>, queries: &[Vec<f32>], rows: &[u32]) -> Vec<Vec<u32>> {
    queries
        .iter()
        .map(|q| {
            exact_scan(all, q, K, ScanRows::Listed(rows))
                .into_iter()
                .map(|(r, _)| r)
                .collect()
        })
        .collect()
}

/// Recall@10 of `graph` over `vectors` at `ef`, against `truth`.
pub fn recall(
    graph: &Graph,
    vectors: &Vectors<'_>,
    queries: &[Vec<f32>],
    truth: &[Vec<u32>],
    ef: usize,
) -> f64 {
    let (mut ctx, mut out, mut found) = (SearchContext::default(), Vec::new(), 0usize);
    for (q, want) in queries.iter().zip(truth) {
        search_into(
            &graph.view(),
            vectors,
            &Query::new(K, ef),
            q,
            &mut ctx,
            &mut out,
        );
        found += out.iter().filter(|(r, _)| want.contains(r)).count();
    }
    found as f64 / (queries.len() * K) as f64
}
