//! Quantizers for eddy: train, encode, and search with rescoring.
//!
//! A quantizer is trained on a sample of the collection (seeded, so builds are
//! reproducible), encodes rows into compact codes, and scores a prepared query
//! against codes with the kernels of [`eddy_kernels`]. Search over codes keeps
//! `k × oversampling` candidates and rescores them with the f32 vectors
//! ([`search::search_with_rescore`]).
//!
//! | scheme | module | bytes / vector (dim d) |
//! |---|---|---|
//! | SQ8 (u8, global quantile range) | [`sq8`] | d + 4 |
//! | binary 1 / 1.5 / 2 bit | [`binary`] | d/8, 3d/16, d/4 (+ 2 per plane) |
//! | PQ (m sub-spaces × 256 centroids) | [`pq`] | m |
//! | rotated 4-bit with norm correction (RaBitQ family) | [`rabitq`] | d/2 + 16 (d padded to 64) |
//!
//! All scores are "higher is more similar": inner product for
//! [`Metric::Cosine`](eddy_model::Metric::Cosine) (normalised vectors) and
//! [`Metric::Dot`](eddy_model::Metric::Dot), negated squared L2 for
//! [`Metric::L2`](eddy_model::Metric::L2). The metric is [`eddy_model::Metric`].

pub mod binary;
mod error;
pub mod pq;
pub mod rabitq;
pub mod search;
pub mod sq8;

pub use error::{Error, Result};
pub use search::{exact_score, rescore, search_with_rescore, top_k};

/// Codes of a collection that can be scored against a prepared query.
pub trait CodeScorer: Sync {
    /// Per-query state (quantized query, lookup tables, ...).
    type Query;

    /// Vector dimension.
    fn dim(&self) -> usize;

    /// Number of encoded rows.
    fn len(&self) -> usize;

    /// Whether no rows are encoded.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes stored per row (codes plus correction terms).
    fn bytes_per_vector(&self) -> usize;

    /// Prepare `query` for scoring.
    ///
    /// # Errors
    /// If the query has the wrong dimension or non-finite values.
    fn prepare(&self, query: &[f32]) -> Result<Self::Query>;

    /// Approximate similarity of row `row` to the prepared query (higher is closer).
    ///
    /// # Panics
    /// If `row >= self.len()`.
    fn score(&self, query: &Self::Query, row: usize) -> f32;

    /// Hint that `row` is about to be scored: start fetching its bytes so a
    /// graph walk overlaps the memory latency of several rows (default: none).
    fn prefetch(&self, _row: usize) {}

    /// Score every row into `out` (`out.len() == self.len()`).
    fn score_all(&self, query: &Self::Query, out: &mut [f32]) {
        for (row, o) in out.iter_mut().enumerate() {
            *o = self.score(query, row);
        }
    }
}

/// Checks a row-major matrix and returns its row count.
pub(crate) fn rows_of(data: &[f32], dim: usize) -> Result<usize> {
    if dim == 0 {
        return Err(Error::ZeroDim);
    }
    if !data.len().is_multiple_of(dim) {
        return Err(Error::Ragged {
            len: data.len(),
            dim,
        });
    }
    if data.iter().any(|x| !x.is_finite()) {
        return Err(Error::NonFinite);
    }
    Ok(data.len() / dim)
}

/// Checks one query vector.
pub(crate) fn check_query(query: &[f32], dim: usize) -> Result<()> {
    if query.len() != dim {
        return Err(Error::DimMismatch {
            expected: dim,
            got: query.len(),
        });
    }
    if query.iter().any(|x| !x.is_finite()) {
        return Err(Error::NonFinite);
    }
    Ok(())
}
