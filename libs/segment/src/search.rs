//! Top-k search: the bounded heap, the search seam, and exact scans.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use eddy_model::Metric;

/// One candidate: a row and its rank key (smaller is closer, see
/// [`Metric::rank_key`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Neighbor {
    /// Row within the searched segment or buffer.
    pub row: u32,
    /// Rank key: smaller is closer.
    pub key: f32,
}

impl Eq for Neighbor {}

impl Ord for Neighbor {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key
            .total_cmp(&other.key)
            .then(self.row.cmp(&other.row))
    }
}

impl PartialOrd for Neighbor {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The k closest candidates seen so far (a bounded max-heap on the key).
#[derive(Debug, Clone)]
pub struct TopK {
    k: usize,
    heap: BinaryHeap<Neighbor>,
}

impl TopK {
    /// An empty top-k.
    pub fn new(k: usize) -> Self {
        Self {
            k,
            heap: BinaryHeap::with_capacity(k + 1),
        }
    }

    /// The key a candidate must beat to enter (infinity until full).
    #[inline]
    pub fn threshold(&self) -> f32 {
        if self.heap.len() < self.k {
            f32::INFINITY
        } else {
            self.heap.peek().map_or(f32::INFINITY, |n| n.key)
        }
    }

    /// Offers a candidate.
    #[inline]
    pub fn push(&mut self, row: u32, key: f32) {
        if self.k == 0 {
            return;
        }
        let n = Neighbor { row, key };
        if self.heap.len() < self.k {
            self.heap.push(n);
        } else if let Some(mut worst) = self.heap.peek_mut() {
            if n < *worst {
                *worst = n;
            }
        }
    }

    /// Number of candidates held.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no candidate is held.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The candidates, closest first.
    pub fn into_sorted(self) -> Vec<Neighbor> {
        self.heap.into_sorted_vec()
    }
}

/// The seam every searchable row set implements: sealed segments (exact scan
/// today, the HNSW graph next), and the growing buffer.
pub trait VectorSearch {
    /// The `k` closest rows to `query` among those `accept` lets through,
    /// closest first. `query` is already normalised for cosine.
    fn search(&self, query: &[f32], k: usize, accept: &dyn Fn(u32) -> bool) -> Vec<Neighbor>;
}

/// Rows scored per kernel call in a block scan.
const BLOCK_ROWS: usize = 64;

/// Exact top-k over `rows` row-major vectors of `dim` floats.
pub fn exact_scan(
    vectors: &[f32],
    dim: usize,
    metric: Metric,
    query: &[f32],
    k: usize,
    accept: &dyn Fn(u32) -> bool,
) -> Vec<Neighbor> {
    let mut top = TopK::new(k);
    if dim == 0 || query.len() != dim {
        return Vec::new();
    }
    let mut keys = [0f32; BLOCK_ROWS];
    for (b, block) in vectors.chunks(BLOCK_ROWS * dim).enumerate() {
        let n = block.len() / dim;
        let keys = &mut keys[..n];
        score_block(metric, query, block, keys);
        let base = b * BLOCK_ROWS;
        for (i, &key) in keys.iter().enumerate() {
            if key < top.threshold() {
                let row = (base + i) as u32;
                if accept(row) {
                    top.push(row, key);
                }
            }
        }
    }
    top.into_sorted()
}

/// Rank keys of `query` against a block of rows.
fn score_block(metric: Metric, query: &[f32], block: &[f32], out: &mut [f32]) {
    match metric {
        Metric::Cosine | Metric::Dot => {
            eddy_kernels::dot_block(query, block, out);
            out.iter_mut().for_each(|k| *k = -*k);
        }
        Metric::L2 => eddy_kernels::l2sq_block(query, block, out),
    }
}

/// Rank key of one vector.
#[inline]
pub fn rank_key(metric: Metric, query: &[f32], v: &[f32]) -> f32 {
    match metric {
        Metric::Cosine | Metric::Dot => -eddy_kernels::dot(query, v),
        Metric::L2 => eddy_kernels::l2sq(query, v),
    }
}

/// Exact search over a sealed segment (the path small segments and selective
/// filters keep once the graph exists).
#[derive(Debug, Clone, Copy)]
pub struct ExactScan<'a>(pub &'a crate::Segment);

impl VectorSearch for ExactScan<'_> {
    fn search(&self, query: &[f32], k: usize, accept: &dyn Fn(u32) -> bool) -> Vec<Neighbor> {
        let seg = self.0;
        exact_scan(seg.vectors(), seg.dim(), seg.metric(), query, k, accept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topk_keeps_the_smallest() {
        let mut top = TopK::new(3);
        for (row, key) in [(0, 5.0), (1, 1.0), (2, 3.0), (3, 0.5), (4, 9.0)] {
            top.push(row, key);
        }
        let rows: Vec<u32> = top.into_sorted().iter().map(|n| n.row).collect();
        assert_eq!(rows, vec![3, 1, 2]);
    }

    #[test]
    fn exact_scan_matches_brute_force_and_respects_accept() {
        let dim = 5;
        let vectors: Vec<f32> = (0..200 * dim)
            .map(|i| ((i * 37 % 101) as f32) / 50.0 - 1.0)
            .collect();
        let query: Vec<f32> = (0..dim).map(|i| i as f32 / 3.0).collect();
        for metric in [Metric::Dot, Metric::L2] {
            let got = exact_scan(&vectors, dim, metric, &query, 7, &|row| row % 2 == 0);
            let mut want: Vec<Neighbor> = vectors
                .chunks(dim)
                .enumerate()
                .filter(|(r, _)| r % 2 == 0)
                .map(|(r, v)| Neighbor {
                    row: r as u32,
                    key: rank_key(metric, &query, v),
                })
                .collect();
            want.sort();
            want.truncate(7);
            assert_eq!(got.len(), 7);
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g.key - w.key).abs() <= 1e-4 * w.key.abs().max(1.0),
                    "{g:?} vs {w:?}"
                );
            }
        }
    }
}
