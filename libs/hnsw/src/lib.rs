//! HNSW graph index for eddy.
//!
//! * [`Graph::build`] builds a hierarchical navigable small world graph
//!   (Malkov & Yashunin) with the neighbour-selection heuristic, in parallel on
//!   the *current* rayon pool with one lock per node (like hnswlib). A 1-thread
//!   pool gives a deterministic graph for a given seed.
//! * Exact duplicate vectors are collapsed onto one representative node before
//!   the build (the others hang off it in a side table and are returned with
//!   it), and a repair pass links every node that the level-0 graph cannot
//!   reach from the entry point. Both keep the recall ceiling near 1.0 on data
//!   with many duplicates, where plain HNSW stalls.
//! * A graph is a few flat `u32` arrays (level 0: fixed rows of `2M` ids plus a
//!   count; upper levels compact), written by [`Graph::write_to`] in a
//!   versioned, checksummed, 64-byte-aligned format and read back without a
//!   deserialization pass by [`GraphView::from_bytes`] (for an mmap).
//! * [`search`] / [`search_sq8`] run on a [`GraphView`] over borrowed
//!   [`Vectors`] (or SQ8 codes, then rescored exactly in f32) with a reusable
//!   [`SearchContext`] (no allocation per query after warm-up); a [`Query`]
//!   says how many neighbours, how wide a beam and which rows may be returned.
//!   Its `accept` filter restricts results but not the walk, so deleted or
//!   filtered-out rows still route the search.
//! * [`search_codes`] walks over any [`eddy_quant::CodeScorer`] (binary
//!   1/1.5/2-bit, rotated 4-bit RaBitQ) and rescores the best candidates in f32.
//! * [`exact_scan`] is eddy's one exact scan: every accepted row in blocks, or
//!   a list of rows (selective filters).
//!
//! The metric is [`eddy_model::Metric`]. Every score is "higher is closer":
//! the inner product for cosine (normalised vectors) and dot, minus the
//! squared distance for L2.

mod build;
mod codes;
mod context;
mod exact;
mod format;
mod insert;
mod link;
mod prior;
mod repair;
mod scorer;
mod search;
mod space;
mod sq8;
mod vectors;
mod walk;

pub use build::BuildOptions;
pub use codes::{search_codes, search_codes_into, CodeQuery};
pub use context::SearchContext;
pub use exact::{
    exact_scan, quantized_scan, shortlisted_scan, shortlisted_scan_many, ScanRows, ShortlistSource,
};
pub use format::{FORMAT_VERSION, MAGIC, OLDEST_SUPPORTED_VERSION};
pub use prior::Prior;
pub use repair::unreachable_count;
pub use search::{search, search_into, Query};
pub use sq8::{
    scan_sq8_codes, scan_sq8_shortlisted, search_sq8, search_sq8_into, sq8_beam_fidelity, Sq8View,
    SQ8_BEAM_MIN_FIDELITY,
};
pub use vectors::Vectors;

use eddy_model::Metric;

/// Build parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HnswParams {
    /// Links per node on the upper levels (level 0 keeps `2 * m`).
    pub m: usize,
    /// Candidate list size while inserting.
    pub ef_construction: usize,
    /// Seed of the level draw.
    pub seed: u64,
}

impl Default for HnswParams {
    fn default() -> Self {
        Self {
            m: 16,
            ef_construction: 100,
            seed: 42,
        }
    }
}

/// Errors of this crate.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A build parameter or input shape is invalid.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The bytes are not a graph of a readable version, are cut short, or
    /// fail a checksum.
    #[error(transparent)]
    Format(#[from] eddy_format::FormatError),
    /// A header field or section is inconsistent.
    #[error("corrupt graph: {0}")]
    Corrupt(String),
    /// The byte slice is not 4-byte aligned.
    #[error("graph bytes are not 4-byte aligned (mmap the file or use AlignedBytes)")]
    Misaligned,
    /// The format is little-endian only.
    #[error("the graph format is little-endian; this platform is big-endian")]
    UnsupportedPlatform,
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An owned HNSW graph (adjacency only; the vectors stay with the caller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Graph {
    pub(crate) n: u32,
    pub(crate) dim: u32,
    pub(crate) m: u32,
    /// Similarity space: [`Metric::Dot`] (cosine graphs too) or [`Metric::L2`].
    pub(crate) space: Metric,
    pub(crate) entry: u32,
    pub(crate) max_level: u32,
    /// `n` rows of `1 + 2m` u32: count, then ids.
    pub(crate) level0: Vec<u32>,
    /// `n + 1` prefix sums: node `i` has upper rows `upper_start[i]..upper_start[i+1]` (levels 1..).
    pub(crate) upper_start: Vec<u32>,
    /// Upper rows of `1 + m` u32: count, then ids.
    pub(crate) upper: Vec<u32>,
    /// `n + 1` prefix sums into `dup_rows`: the exact duplicates a representative stands for.
    pub(crate) dup_start: Vec<u32>,
    /// Rows that are exact duplicates of their representative (not linked in the graph).
    pub(crate) dup_rows: Vec<u32>,
}

/// A borrowed graph: over an owned [`Graph`] or over bytes (an mmap).
#[derive(Debug, Clone, Copy)]
pub struct GraphView<'a> {
    pub(crate) n: u32,
    pub(crate) dim: u32,
    pub(crate) m: u32,
    /// Similarity space: [`Metric::Dot`] (cosine graphs too) or [`Metric::L2`].
    pub(crate) space: Metric,
    pub(crate) entry: u32,
    pub(crate) max_level: u32,
    pub(crate) level0: &'a [u32],
    pub(crate) upper_start: &'a [u32],
    pub(crate) upper: &'a [u32],
    pub(crate) dup_start: &'a [u32],
    pub(crate) dup_rows: &'a [u32],
}

impl Graph {
    /// Build a graph over `vectors` (borrowed, e.g. from an mmap) with default
    /// [`BuildOptions`], on the current rayon pool.
    ///
    /// # Errors
    /// On a ragged matrix, `dim == 0`, more than `u32::MAX - 1` rows or bad parameters.
    pub fn build(vectors: &Vectors<'_>, params: &HnswParams) -> Result<Graph> {
        build::build(vectors, params, &BuildOptions::default(), None, None)
    }

    /// [`Graph::build`] with explicit [`BuildOptions`].
    ///
    /// # Errors
    /// As [`Graph::build`].
    pub fn build_with(
        vectors: &Vectors<'_>,
        params: &HnswParams,
        options: &BuildOptions,
    ) -> Result<Graph> {
        build::build(vectors, params, options, None, None)
    }

    /// [`Graph::build_with`] whose SQ8 construction beam (when
    /// `options.sq8_beam`) scores on `codes`, SQ8 codes of `vectors` the caller
    /// already holds (e.g. for its index file), instead of training its own.
    ///
    /// # Errors
    /// As [`Graph::build`], and when `codes` does not cover `vectors`.
    pub fn build_with_sq8(
        vectors: &Vectors<'_>,
        params: &HnswParams,
        options: &BuildOptions,
        codes: &Sq8View<'_>,
    ) -> Result<Graph> {
        check_codes(vectors, codes)?;
        build::build(vectors, params, options, Some(*codes), None)
    }

    /// [`Graph::build_with`] (with `codes` as in [`Graph::build_with_sq8`])
    /// that starts from `prior`, an earlier graph over rows that became rows
    /// of `vectors`: the links among surviving rows are kept (chosen again
    /// for nodes that lost neighbours) and only the other rows are inserted.
    /// A prior built with another dimension, `M` or space, or whose row map
    /// does not fit, is ignored (a fresh build).
    ///
    /// # Errors
    /// As [`Graph::build_with_sq8`].
    pub fn build_from_prior(
        vectors: &Vectors<'_>,
        params: &HnswParams,
        options: &BuildOptions,
        codes: Option<&Sq8View<'_>>,
        prior: &Prior<'_>,
    ) -> Result<Graph> {
        if let Some(codes) = codes {
            check_codes(vectors, codes)?;
        }
        build::build(vectors, params, options, codes.copied(), Some(prior))
    }

    /// Borrow the graph for search.
    pub fn view(&self) -> GraphView<'_> {
        GraphView {
            n: self.n,
            dim: self.dim,
            m: self.m,
            space: self.space,
            entry: self.entry,
            max_level: self.max_level,
            level0: &self.level0,
            upper_start: &self.upper_start,
            upper: &self.upper,
            dup_start: &self.dup_start,
            dup_rows: &self.dup_rows,
        }
    }

    /// Write the graph in the on-disk format (see [`GraphView::from_bytes`]).
    ///
    /// # Errors
    /// On an I/O error from `w`.
    pub fn write_to<W: std::io::Write>(&self, w: &mut W) -> std::io::Result<()> {
        format::write(&self.view(), w)
    }

    /// Number of rows (vectors) the graph covers, duplicates included.
    pub fn len(&self) -> usize {
        self.n as usize
    }

    /// Whether the graph covers no rows.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
}

/// Whether `codes` are SQ8 codes of every row of `vectors`.
fn check_codes(vectors: &Vectors<'_>, codes: &Sq8View<'_>) -> Result<()> {
    let dim = vectors.dim;
    if codes.dim() != dim || codes.len() * dim != vectors.data.len() {
        return Err(Error::InvalidInput(format!(
            "sq8 codes cover {} rows of dim {}, the vectors {} of dim {dim}",
            codes.len(),
            codes.dim(),
            vectors.data.len() / dim.max(1)
        )));
    }
    Ok(())
}

impl<'a> GraphView<'a> {
    /// Open a graph written by [`Graph::write_to`] without copying: validates the
    /// magic, version, header checksum, section bounds and lengths, and the body
    /// checksum (one sequential read of the bytes).
    ///
    /// `bytes` must be at least 4-byte aligned; sections are 64-byte aligned
    /// relative to the start, so an mmap (page aligned) gives cache-line aligned rows.
    ///
    /// # Errors
    /// [`Error::Format`] (magic, version, truncation, checksums),
    /// [`Error::Corrupt`] or [`Error::Misaligned`].
    pub fn from_bytes(bytes: &'a [u8]) -> Result<Self> {
        format::read(bytes, true)
    }

    /// [`GraphView::from_bytes`] without the body checksum (header, bounds and lengths
    /// are still checked): for very large trusted files. Corrupt ids make a search
    /// panic (bounds checks), never undefined behaviour.
    ///
    /// # Errors
    /// As [`GraphView::from_bytes`], minus the body checksum.
    pub fn from_bytes_unverified(bytes: &'a [u8]) -> Result<Self> {
        format::read(bytes, false)
    }

    /// Number of rows (vectors) the graph covers, duplicates included.
    pub fn len(&self) -> usize {
        self.n as usize
    }

    /// Whether the graph covers no rows.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Vector dimension the graph was built for.
    pub fn dim(&self) -> usize {
        self.dim as usize
    }

    /// Similarity space of the graph: [`Metric::Dot`] for graphs built for
    /// cosine or dot (both are scored alike and stored as one code), or
    /// [`Metric::L2`].
    pub fn space(&self) -> Metric {
        self.space
    }

    /// The `M` parameter (level 0 holds `2M` links).
    pub fn m(&self) -> usize {
        self.m as usize
    }

    /// Highest level.
    pub fn max_level(&self) -> usize {
        self.max_level as usize
    }

    /// Entry point node.
    pub fn entry(&self) -> u32 {
        self.entry
    }

    /// Rows that are exact duplicates folded onto a representative.
    pub fn duplicate_count(&self) -> usize {
        self.dup_rows.len()
    }

    /// Bytes of the adjacency arrays.
    pub fn memory_bytes(&self) -> usize {
        4 * (self.level0.len()
            + self.upper_start.len()
            + self.upper.len()
            + self.dup_start.len()
            + self.dup_rows.len())
    }

    /// Level-0 neighbours of `node` (empty for a folded duplicate).
    pub fn neighbors(&self, node: u32) -> &'a [u32] {
        let w = 1 + 2 * self.m as usize;
        let row = &self.level0[node as usize * w..(node as usize + 1) * w];
        let count = (row[0] as usize).min(w - 1);
        &row[1..1 + count]
    }

    /// Neighbours of `node` on `level` (0 = base level).
    pub fn neighbors_at(&self, node: u32, level: usize) -> &'a [u32] {
        if level == 0 {
            return self.neighbors(node);
        }
        let start = self.upper_start[node as usize] as usize;
        let end = self.upper_start[node as usize + 1] as usize;
        if level > end - start {
            return &[];
        }
        let w = 1 + self.m as usize;
        let r = start + level - 1;
        let row = &self.upper[r * w..(r + 1) * w];
        let count = (row[0] as usize).min(w - 1);
        &row[1..1 + count]
    }

    /// Exact duplicates represented by `node` (returned together with it).
    pub fn duplicates(&self, node: u32) -> &'a [u32] {
        let s = self.dup_start[node as usize] as usize;
        let e = self.dup_start[node as usize + 1] as usize;
        &self.dup_rows[s..e]
    }
}

/// An owned byte buffer aligned to 8 bytes (enough for [`GraphView::from_bytes`],
/// which needs 4), for reading a graph file into memory when it is not mmapped.
#[derive(Debug, Clone, Default)]
pub struct AlignedBytes {
    words: Vec<u64>,
    len: usize,
}

impl AlignedBytes {
    /// Copy `bytes` into an aligned buffer.
    pub fn from_slice(bytes: &[u8]) -> Self {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut words);
        dst[..bytes.len()].copy_from_slice(bytes);
        Self {
            words,
            len: bytes.len(),
        }
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        let all: &[u8] = bytemuck::cast_slice(&self.words);
        &all[..self.len]
    }
}

#[cfg(test)]
mod tests;
