//! Codes held in memory for rows that have no graph yet: the query tail,
//! and a sealed segment waiting for its index file. A search scans the
//! codes instead of every row in f32 and rescores the best rows exactly:
//! SQ8 codes (a quarter of the f32 bytes, [`eddy_hnsw::quantized_scan`]),
//! and on many rows of cosine embeddings sign bits first (a ninth of the SQ8
//! bytes at 384-d), whose best rows the SQ8 codes rank again
//! ([`eddy_hnsw::shortlisted_scan`]).

use eddy_hnsw::{
    quantized_scan, shortlisted_scan, shortlisted_scan_many, ShortlistSource, Vectors,
};
use eddy_model::Metric;
use eddy_quant::binary::{BinaryCodes, BinaryConfig, BinaryQuantizer, QueryEncoding};
use eddy_quant::sq8::{Sq8Codes, Sq8Config, Sq8Quantizer};
use eddy_quant::CodeScorer as _;

/// Rows from which codes are kept: below it an f32 scan costs about as
/// much as scanning codes and rescoring.
pub const SCAN_CODES_FROM_ROWS: usize = 1_024;

/// Rows from which a scan ranks rows by their sign bits first: below it the
/// SQ8 scan is short anyway, and the shortlist would be most of the rows.
/// On real 384-d embeddings the shortlist pays from about 2k rows (8k rows:
/// 36-43 us against 79 us for the SQ8 scan, recall of the exact top 10
/// 0.993-0.998; 2k rows: 17-22 us against 29 us;
/// `cargo run --release -p eddy-segment --example tail_scan`).
pub const SHORTLIST_FROM_ROWS: usize = 2_048;

/// Dimensions from which sign bits are kept: with fewer, one bit per
/// dimension ranks rows too coarsely.
pub const SHORTLIST_MIN_DIM: usize = 128;

/// How many rows ranked by code are rescored exactly for a top `k`: 4k, at
/// least 40 (on 20k rows of real 384-d embeddings 40 gave the exact scan's
/// top 10 for all of 1,000 queries, 20 for 99.94 %;
/// `cargo run --release -p eddy-segment --example tail_scan`).
pub fn scan_rescore_depth(k: usize) -> usize {
    k.saturating_mul(4).max(40)
}

/// How many of `rows` ranked by sign bits the SQ8 codes rank again for a
/// top `k`: a thirty-second of the rows, at least 40k and at most 64k (on
/// real 384-d embeddings, of the exact top 10 a shortlist of 625 of 20k
/// rows held 99.85 % in 78 us where a sixteenth held 99.98 % in 94 us, and
/// 500 of 8k rows 99.83 %). What a shortlist holds depends on its length,
/// not on the rows it is drawn from: 640 rows held 99.88 % of 10k rows and
/// of 60k alike, 400 rows 99.68 % and 99.70 %, so past 20k rows a longer
/// list buys almost nothing (a thirty-second of 60k, 1,875 rows, held
/// 99.97 %; `--example tail_scan`). Of a query's final top 10, the fresh
/// rows hold a share, so the loss there is a fraction of that.
pub fn scan_shortlist_depth(k: usize, rows: usize) -> usize {
    (rows / 32).clamp(k.saturating_mul(40), k.saturating_mul(64))
}

/// An SQ8 quantizer for `metric` whose range is trained on `vectors` (rows
/// of `dim`); `None` when they cannot train one (no rows, non-finite values).
pub fn scan_quantizer(vectors: &[f32], dim: usize, metric: Metric) -> Option<Sq8Quantizer> {
    let config = Sq8Config {
        metric,
        ..Sq8Config::default()
    };
    Sq8Quantizer::train(vectors, dim, &config).ok()
}

/// A quantizer of one sign bit per centred dimension trained on `vectors`
/// (rows of `dim`), for cosine rows of [`SHORTLIST_MIN_DIM`] dimensions or
/// more only: bits rank by angle, and dot and L2 scores depend on norms
/// the bits do not see. `None` otherwise, or when they cannot train one.
pub fn sign_bit_quantizer(vectors: &[f32], dim: usize, metric: Metric) -> Option<BinaryQuantizer> {
    let config = BinaryConfig {
        query: QueryEncoding::Symmetric,
        ..BinaryConfig::default()
    };
    (metric == Metric::Cosine && dim >= SHORTLIST_MIN_DIM)
        .then(|| BinaryQuantizer::train(vectors, dim, &config).ok())
        .flatten()
}

/// Codes of every row of `vectors` for a code scan, trained on those rows;
/// `None` below [`SCAN_CODES_FROM_ROWS`] rows or when they cannot be encoded.
pub fn train_scan_codes(vectors: &[f32], dim: usize, metric: Metric) -> Option<ScanCodes> {
    if dim == 0 || vectors.len() / dim < SCAN_CODES_FROM_ROWS {
        return None;
    }
    let mut codes = ScanCodes::trained(vectors, dim, metric)?;
    for v in vectors.chunks_exact(dim) {
        codes.push(v).ok()?;
    }
    Some(codes)
}

/// The codes a scan of rows without a graph reads: SQ8 codes of every row,
/// and for cosine rows of [`SHORTLIST_MIN_DIM`] dimensions or more one sign
/// bit per centred dimension.
#[derive(Debug, Clone)]
pub struct ScanCodes {
    sq8: Sq8Codes,
    bits: Option<BinaryCodes>,
}

impl ScanCodes {
    /// Quantizers trained on `vectors` (rows of `dim`), no row encoded yet;
    /// `None` when they cannot train SQ8 codes.
    pub fn trained(vectors: &[f32], dim: usize, metric: Metric) -> Option<Self> {
        let sq8 = Sq8Codes::empty(scan_quantizer(vectors, dim, metric)?);
        let bits = sign_bit_quantizer(vectors, dim, metric).map(BinaryCodes::empty);
        Some(Self { sq8, bits })
    }

    /// The same quantizers with no row encoded (a buffer pruned of its
    /// sealed rows keeps its trained codes).
    pub fn emptied(&self) -> Self {
        Self {
            sq8: Sq8Codes::empty(*self.sq8.quantizer()),
            bits: self
                .bits
                .as_ref()
                .map(|b| BinaryCodes::empty(b.quantizer().clone())),
        }
    }

    /// Encodes `v` as the next row.
    ///
    /// # Errors
    /// On a wrong length or non-finite values; nothing is appended then.
    pub fn push(&mut self, v: &[f32]) -> Result<(), eddy_quant::Error> {
        if let Some(bits) = &mut self.bits {
            bits.push(v)?;
        }
        if let Err(e) = self.sq8.push(v) {
            // Keep both codes row for row: a row the bits took and SQ8
            // refused leaves no bits behind.
            self.bits = None;
            return Err(e);
        }
        Ok(())
    }

    /// Rows encoded.
    pub fn len(&self) -> usize {
        self.sq8.len()
    }

    /// Whether no row is encoded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether scans rank rows by sign bits first (from
    /// [`SHORTLIST_FROM_ROWS`] rows, where the bits are kept).
    pub fn shortlists(&self) -> bool {
        self.bits.is_some() && self.len() >= SHORTLIST_FROM_ROWS
    }

    /// Bytes held in memory.
    pub fn bytes(&self) -> usize {
        let sq8 = self.sq8.codes().len() + self.sq8.corrections().len() * 4;
        let bits = self.bits.as_ref().map_or(0, |b| b.codes().len() * 8);
        sq8 + bits
    }

    /// The SQ8 codes.
    pub fn sq8(&self) -> &Sq8Codes {
        &self.sq8
    }

    /// The sign bits, where kept.
    pub fn bits(&self) -> Option<&BinaryCodes> {
        self.bits.as_ref()
    }

    /// The `k` closest rows of `vectors` (the rows these codes encode) that
    /// `accept` lets through, by a scan of the codes and an exact rescoring
    /// of the best `keep` rows (see [`scan_rescore_depth`]); scores are
    /// exact.
    pub fn search(
        &self,
        vectors: &Vectors<'_>,
        query: &[f32],
        k: usize,
        keep: usize,
        accept: &dyn Fn(u32) -> bool,
    ) -> Vec<(u32, f32)> {
        match &self.bits {
            Some(bits) if self.shortlists() => {
                let shortlist = scan_shortlist_depth(k, self.len());
                shortlisted_scan(bits, &self.sq8, vectors, query, k, shortlist, keep, accept)
            }
            _ => quantized_scan(&self.sq8, vectors, query, k, keep, accept),
        }
    }
}

/// One source of rows without a graph for [`scan_many`]: the query tail,
/// or a sealed segment waiting for its graph.
#[derive(Clone, Copy)]
pub struct CodeScan<'a> {
    /// The codes of every row.
    pub codes: &'a ScanCodes,
    /// The rows themselves (row `r` of `codes` is row `r` here).
    pub vectors: Vectors<'a>,
    /// The rows a search may return.
    pub accept: &'a dyn Fn(u32) -> bool,
}

impl std::fmt::Debug for CodeScan<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeScan")
            .field("rows", &self.codes.len())
            .finish_non_exhaustive()
    }
}

/// The `k` closest rows over several sources of rows without a graph, as
/// [`ScanCodes::search`] of each would find them, but the sources that rank
/// by sign bits share one shortlist, as deep as their rows together call
/// for ([`scan_shortlist_depth`], [`shortlisted_scan_many`]): what a
/// shortlist holds depends on its length, not on the rows it is drawn
/// from, so a tail and a seal waiting for its graph pay for one shortlist
/// and one exact rescoring instead of one each. Per source, its rows of
/// the overall top `k` (those that share a shortlist) or its own top `k`
/// (the others), `(row, exact score)` best first.
pub fn scan_many(
    sources: &[CodeScan<'_>],
    query: &[f32],
    k: usize,
    keep: usize,
) -> Vec<Vec<(u32, f32)>> {
    let mut out = vec![Vec::new(); sources.len()];
    let mut shared = Vec::with_capacity(sources.len());
    let mut joint = Vec::with_capacity(sources.len());
    for (i, s) in sources.iter().enumerate() {
        match s.codes.bits() {
            Some(bits) if s.codes.shortlists() => {
                joint.push(i);
                shared.push(ShortlistSource {
                    coarse: bits,
                    fine: s.codes.sq8(),
                    vectors: s.vectors,
                    accept: s.accept,
                });
            }
            _ => out[i] = s.codes.search(&s.vectors, query, k, keep, s.accept),
        }
    }
    if !shared.is_empty() {
        let rows = joint.iter().map(|&i| sources[i].codes.len()).sum();
        let shortlist = scan_shortlist_depth(k, rows);
        let found = shortlisted_scan_many(&shared, query, k, shortlist, keep);
        for (i, hits) in joint.into_iter().zip(found) {
            out[i] = hits;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_rows_keep_no_codes_and_enough_rows_code_every_row() {
        let dim = 8;
        let row = |i: usize| (0..dim).map(move |d| ((i * 7 + d * 3) % 11) as f32 - 5.0);
        let few: Vec<f32> = (0..SCAN_CODES_FROM_ROWS - 1).flat_map(row).collect();
        assert!(train_scan_codes(&few, dim, Metric::L2).is_none());
        let enough: Vec<f32> = (0..SCAN_CODES_FROM_ROWS).flat_map(row).collect();
        let codes = train_scan_codes(&enough, dim, Metric::L2).expect("codes");
        assert_eq!(codes.len(), SCAN_CODES_FROM_ROWS);
        assert_eq!(codes.sq8().codes().len(), SCAN_CODES_FROM_ROWS * dim);
        assert!(!codes.shortlists(), "8 dimensions keep no sign bits");
    }

    /// Sign bits are kept for cosine rows of enough dimensions only, and
    /// used from enough rows on.
    #[test]
    fn sign_bits_shortlist_many_cosine_rows_of_many_dimensions() {
        let row =
            |dim: usize| move |i: usize| (0..dim).map(move |d| ((i * 7 + d * 3) % 11) as f32 - 5.0);
        let dim = SHORTLIST_MIN_DIM;
        let many: Vec<f32> = (0..SHORTLIST_FROM_ROWS).flat_map(row(dim)).collect();
        let cosine = train_scan_codes(&many, dim, Metric::Cosine).expect("codes");
        assert!(cosine.shortlists());
        assert_eq!(cosine.bytes(), SHORTLIST_FROM_ROWS * (dim + 4 + dim / 8));
        assert!(!train_scan_codes(&many, dim, Metric::L2)
            .expect("codes")
            .shortlists());
        let few = &many[..(SHORTLIST_FROM_ROWS - 1) * dim];
        assert!(!train_scan_codes(few, dim, Metric::Cosine)
            .expect("codes")
            .shortlists());
        let narrow: Vec<f32> = (0..SHORTLIST_FROM_ROWS).flat_map(row(dim - 1)).collect();
        let narrow = train_scan_codes(&narrow, dim - 1, Metric::Cosine).expect("codes");
        assert!(!narrow.shortlists());
        let emptied = cosine.emptied();
        assert!(emptied.is_empty() && emptied.bits.is_some());
    }

    /// A joint scan hands each source its own rows: a source too small
    /// to shortlist is scanned alone, as its own search would; a single
    /// source that shortlists answers as its own search too.
    #[test]
    fn a_joint_scan_answers_each_source_as_its_own_search_when_alone() {
        let dim = SHORTLIST_MIN_DIM;
        let row =
            |i: usize| (0..dim).map(move |d| ((i * 7 + d * 3) % 11) as f32 - 5.0 + (i % 5) as f32);
        let many: Vec<f32> = (0..SHORTLIST_FROM_ROWS + 100).flat_map(row).collect();
        let few: Vec<f32> = (0..SCAN_CODES_FROM_ROWS + 50).flat_map(row).collect();
        let big = train_scan_codes(&many, dim, Metric::Cosine).expect("codes");
        let small = train_scan_codes(&few, dim, Metric::Cosine).expect("codes");
        assert!(big.shortlists() && !small.shortlists());
        let (vb, vs) = (
            Vectors::new(&many, dim, Metric::Cosine),
            Vectors::new(&few, dim, Metric::Cosine),
        );
        let odd = |r: u32| r % 2 == 1;
        let all = |_: u32| true;
        let query: Vec<f32> = row(17).map(|x| x + 0.25).collect();
        let sources = [
            CodeScan {
                codes: &big,
                vectors: vb,
                accept: &odd,
            },
            CodeScan {
                codes: &small,
                vectors: vs,
                accept: &all,
            },
        ];
        let got = scan_many(&sources, &query, 10, 40);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], big.search(&vb, &query, 10, 40, &odd));
        assert_eq!(got[1], small.search(&vs, &query, 10, 40, &all));
        assert!(got[0].iter().all(|&(r, _)| odd(r)));
        assert!(scan_many(&[], &query, 10, 40).is_empty());
    }

    #[test]
    fn the_shortlist_is_a_thirty_second_of_the_rows_within_forty_and_sixty_four_k() {
        assert_eq!(scan_shortlist_depth(10, 20_000), 625);
        assert_eq!(scan_shortlist_depth(10, 1_000), 400);
        assert_eq!(scan_shortlist_depth(100, 20_000), 4_000);
        assert_eq!(scan_shortlist_depth(10, 40_000), 640);
        assert_eq!(scan_shortlist_depth(10, 1_000_000), 640);
        assert_eq!(scan_shortlist_depth(usize::MAX, 1_000), usize::MAX);
    }

    #[test]
    fn the_rescore_depth_is_four_k_and_at_least_forty() {
        assert_eq!(scan_rescore_depth(1), 40);
        assert_eq!(scan_rescore_depth(10), 40);
        assert_eq!(scan_rescore_depth(25), 100);
        assert_eq!(scan_rescore_depth(usize::MAX), usize::MAX);
    }
}
