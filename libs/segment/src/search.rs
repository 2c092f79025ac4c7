//! What a search of a sealed segment or of the growing buffer returns.

/// One hit: a row and its score, "higher is closer" (the similarity for
/// cosine and dot, `-l2sq` for L2; users see
/// [`Metric::reported`](eddy_model::Metric::reported)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Neighbor {
    /// Row within the searched segment or buffer.
    pub row: u32,
    /// Score: higher is closer.
    pub score: f32,
}

impl From<(u32, f32)> for Neighbor {
    fn from((row, score): (u32, f32)) -> Self {
        Self { row, score }
    }
}

/// Hits of a graph walk or an exact scan as [`Neighbor`]s, best first.
pub(crate) fn neighbors(hits: Vec<(u32, f32)>) -> Vec<Neighbor> {
    hits.into_iter().map(Neighbor::from).collect()
}
