//! The borrowed f32 rows a graph is built over and searched against, and the
//! one place an f32 similarity is computed from a [`Metric`].

use eddy_kernels::Kernels;
use eddy_model::Metric;

/// Row-major f32 vectors borrowed from the caller (a segment, an mmap, a
/// dataset) with the metric they are scored by.
///
/// Every score is "higher is closer": the inner product for
/// [`Metric::Cosine`] (the caller normalises rows and queries) and
/// [`Metric::Dot`], minus the squared distance for [`Metric::L2`].
#[derive(Debug, Clone, Copy)]
pub struct Vectors<'a> {
    /// `rows * dim` values, row-major.
    pub data: &'a [f32],
    /// Values per row.
    pub dim: usize,
    /// How rows are scored against a query.
    pub metric: Metric,
}

impl<'a> Vectors<'a> {
    /// A view over `data`, rows of `dim` values scored by `metric`.
    pub fn new(data: &'a [f32], dim: usize, metric: Metric) -> Self {
        Self { data, dim, metric }
    }

    /// Whole rows held (0 when `dim` is 0).
    pub fn rows(&self) -> usize {
        self.data.len().checked_div(self.dim).unwrap_or(0)
    }

    /// Row `id`.
    ///
    /// # Panics
    /// If `id` is past the last row.
    #[inline]
    pub(crate) fn row(&self, id: u32) -> &'a [f32] {
        let s = id as usize * self.dim;
        &self.data[s..s + self.dim]
    }

    /// Similarity of rows `a` and `b` with the kernels `k`.
    #[inline]
    pub(crate) fn pair(&self, k: &Kernels, a: u32, b: u32) -> f32 {
        similarity(k, self.metric, self.row(a), self.row(b))
    }
}

/// Similarity of `a` and `b` under `metric`, higher is closer.
#[inline]
pub(crate) fn similarity(k: &Kernels, metric: Metric, a: &[f32], b: &[f32]) -> f32 {
    match metric {
        Metric::Cosine | Metric::Dot => k.dot(a, b),
        Metric::L2 => -k.l2sq(a, b),
    }
}
