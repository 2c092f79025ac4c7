//! Scoring rows against one query during a walk: the [`Scorer`] seam and its
//! exact f32 implementation (the SQ8 and code scorers live beside their views).

use eddy_kernels::Kernels;
use eddy_model::Metric;

use crate::vectors::similarity;
use crate::Vectors;

/// Scores rows against one query ("higher is closer").
pub(crate) trait Scorer {
    /// Hint that row `id` is about to be scored.
    fn prefetch(&self, _id: u32) {}
    /// Score of row `id`.
    fn score_one(&self, id: u32) -> f32;
    /// Scores of rows `ids` into `out` (same length).
    fn score_ids(&self, ids: &[u32], out: &mut [f32]);
}

/// Exact f32 scoring.
pub(crate) struct F32Scorer<'a> {
    k: &'static Kernels,
    query: &'a [f32],
    vectors: Vectors<'a>,
}

impl<'a> F32Scorer<'a> {
    pub(crate) fn new(vectors: &Vectors<'a>, query: &'a [f32]) -> Self {
        Self {
            k: Kernels::get(),
            query,
            vectors: *vectors,
        }
    }

    /// Scores of the contiguous rows in `block` (whole rows of `dim`) into `out`.
    #[inline]
    pub(crate) fn score_block(&self, block: &[f32], out: &mut [f32]) {
        match self.vectors.metric {
            Metric::Cosine | Metric::Dot => self.k.dot_block(self.query, block, out),
            Metric::L2 => {
                self.k.l2sq_block(self.query, block, out);
                negate(out);
            }
        }
    }
}

impl Scorer for F32Scorer<'_> {
    #[inline]
    fn prefetch(&self, id: u32) {
        let row = self.vectors.row(id);
        // The first 4 cache lines; the hardware streamer fetches the rest.
        eddy_kernels::prefetch(&row[..row.len().min(64)]);
    }

    #[inline]
    fn score_one(&self, id: u32) -> f32 {
        similarity(
            self.k,
            self.vectors.metric,
            self.query,
            self.vectors.row(id),
        )
    }

    #[inline]
    fn score_ids(&self, ids: &[u32], out: &mut [f32]) {
        let data = self.vectors.data;
        match self.vectors.metric {
            Metric::Cosine | Metric::Dot => self.k.dot_ids(self.query, data, ids, out),
            Metric::L2 => {
                self.k.l2sq_ids(self.query, data, ids, out);
                negate(out);
            }
        }
    }
}

/// Squared distances to "higher is closer" scores.
#[inline]
fn negate(out: &mut [f32]) {
    for o in out.iter_mut() {
        *o = -*o;
    }
}
