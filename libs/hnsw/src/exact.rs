//! The one exact scan: every row a predicate accepts (scored in contiguous
//! blocks) or a given list of rows (scored by id), top `k` best first. Sealed
//! segments without a graph, selective filters, the growing buffer, quantized
//! walks' rescoring and the bench's ground truth all go through it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use eddy_quant::binary::{BinaryCodes, BinaryQuery};
use eddy_quant::CodeScorer;

use crate::context::Item;
use crate::scorer::{F32Scorer, Scorer};
use crate::Vectors;

/// Rows scored per kernel call in a block scan.
const BLOCK_ROWS: usize = 64;

/// Which rows an [`exact_scan`] scores.
#[derive(Clone, Copy)]
pub enum ScanRows<'a> {
    /// Every row, in contiguous blocks; `accept` is asked only about rows
    /// that would enter the top `k`, so an expensive predicate runs rarely.
    All(&'a dyn Fn(u32) -> bool),
    /// Exactly these rows (e.g. the matches of a selective filter), by id.
    Listed(&'a [u32]),
}

impl std::fmt::Debug for ScanRows<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScanRows::All(_) => f.write_str("All(..)"),
            ScanRows::Listed(rows) => write!(f, "Listed({} rows)", rows.len()),
        }
    }
}

/// Exact top `k` of `rows` against `query`: `(row, score)` best first, ties
/// to the smaller row, scores "higher is closer" in `vectors.metric`.
/// Returns nothing when `query` does not have `vectors.dim` values.
///
/// # Panics
/// If a listed row is past the end of `vectors`.
pub fn exact_scan(
    vectors: &Vectors<'_>,
    query: &[f32],
    k: usize,
    rows: ScanRows<'_>,
) -> Vec<(u32, f32)> {
    if k == 0 || vectors.dim == 0 || query.len() != vectors.dim {
        return Vec::new();
    }
    let scorer = F32Scorer::new(vectors, query);
    match rows {
        ScanRows::All(accept) => scan_blocks(&scorer, vectors, k, accept),
        ScanRows::Listed(rows) => {
            let mut out = Vec::with_capacity(rows.len());
            top_listed_into(&scorer, rows, k, &mut Vec::new(), &mut out);
            out
        }
    }
}

/// Exact top `k` of the rows `accept` lets through, found at a fraction of
/// the bytes of [`exact_scan`]: every row's code in `codes` (row `r` of
/// `codes` is row `r` of `vectors`) is scored, the best `keep` accepted rows
/// are kept, and those are rescored exactly: `(row, exact score)` best
/// first. `accept` is asked only about rows that would enter the best
/// `keep`. Approximate where a true top-`k` row's code falls outside the
/// best `keep`; falls back to [`exact_scan`] when `codes` do not cover
/// `vectors` or cannot take the query.
pub fn quantized_scan<C: CodeScorer>(
    codes: &C,
    vectors: &Vectors<'_>,
    query: &[f32],
    k: usize,
    keep: usize,
    accept: &dyn Fn(u32) -> bool,
) -> Vec<(u32, f32)> {
    if k == 0 || vectors.dim == 0 || query.len() != vectors.dim {
        return Vec::new();
    }
    let prepared = match codes.prepare(query) {
        Ok(p) if codes.len() == vectors.rows() && codes.dim() == vectors.dim => p,
        _ => return exact_scan(vectors, query, k, ScanRows::All(accept)),
    };
    let mut scores = vec![0f32; codes.len()];
    codes.score_all(&prepared, &mut scores);
    let mut top = TopK::new(keep.max(k));
    for (row, &score) in scores.iter().enumerate() {
        if score > top.threshold() {
            let row = row as u32;
            if accept(row) {
                top.push(row, score);
            }
        }
    }
    let candidates: Vec<u32> = top.into_sorted().into_iter().map(|(r, _)| r).collect();
    exact_scan(vectors, query, k, ScanRows::Listed(&candidates))
}

/// [`quantized_scan`] with a cheaper first pass: `coarse` sign-bit codes
/// rank every row by Hamming distance, the nearest `shortlist` rows `accept`
/// lets through (whole distances at a time, so a few more on ties) are
/// ranked again by `fine` codes (SQ8), and the best `keep` of those are
/// rescored exactly. Reads a fraction of the bytes of a scan of `fine`; a
/// true top-`k` row is missed when its sign bits rank it out of the
/// shortlist or its fine code below `keep`. Codes that do not match
/// `vectors`, or a query they cannot prepare symmetrically, fall back to
/// [`quantized_scan`] of `fine`.
#[allow(clippy::too_many_arguments)]
pub fn shortlisted_scan<F: CodeScorer>(
    coarse: &BinaryCodes,
    fine: &F,
    vectors: &Vectors<'_>,
    query: &[f32],
    k: usize,
    shortlist: usize,
    keep: usize,
    accept: &dyn Fn(u32) -> bool,
) -> Vec<(u32, f32)> {
    if k == 0 || vectors.dim == 0 || query.len() != vectors.dim {
        return Vec::new();
    }
    let rows = vectors.rows();
    let matches = coarse.len() == rows
        && fine.len() == rows
        && coarse.dim() == vectors.dim
        && fine.dim() == vectors.dim;
    let (code, fine_query) = match (coarse.prepare(query), fine.prepare(query)) {
        (Ok(BinaryQuery::Symmetric(c)), Ok(f)) if matches => (c, f),
        _ => return quantized_scan(fine, vectors, query, k, keep, accept),
    };
    let mut distances = vec![0u32; rows];
    coarse.hamming_all(&code, &mut distances);
    let short = nearest_accepted(
        &distances,
        code.len() * 64,
        shortlist.max(keep).max(k),
        accept,
    );
    /// Rows ahead whose fine codes are fetched while one is scored.
    const AHEAD: usize = 8;
    let mut best = TopK::new(keep.max(k));
    for (i, &row) in short.iter().enumerate() {
        if let Some(&ahead) = short.get(i + AHEAD) {
            fine.prefetch(ahead as usize);
        }
        let score = fine.score(&fine_query, row as usize);
        if score > best.threshold() {
            best.push(row, score);
        }
    }
    let candidates: Vec<u32> = best.into_sorted().into_iter().map(|(r, _)| r).collect();
    exact_scan(vectors, query, k, ScanRows::Listed(&candidates))
}

/// The rows `accept` lets through with the smallest `distances` (at most
/// `max_distance`), at least `count` of them where there are so many: a
/// histogram of the distances gives the distance to stop at (no heap over
/// thousands of rows), extended while `accept` turns rows away.
fn nearest_accepted(
    distances: &[u32],
    max_distance: usize,
    count: usize,
    accept: &dyn Fn(u32) -> bool,
) -> Vec<u32> {
    let mut histogram = vec![0usize; max_distance + 2];
    for &d in distances {
        histogram[(d as usize).min(max_distance + 1)] += 1;
    }
    let mut taken: Vec<u32> = Vec::with_capacity(count + count / 8);
    let mut from = 0;
    while taken.len() < count && from < histogram.len() {
        let wanted = count - taken.len();
        let (mut to, mut rows) = (from, 0);
        while to < histogram.len() && rows < wanted {
            rows += histogram[to];
            to += 1;
        }
        let (lo, hi) = (from as u32, to as u32);
        for (row, &d) in distances.iter().enumerate() {
            if (lo..hi).contains(&d) && accept(row as u32) {
                taken.push(row as u32);
            }
        }
        from = to;
    }
    taken
}

/// Block scan over every row of `vectors`.
fn scan_blocks(
    scorer: &F32Scorer<'_>,
    vectors: &Vectors<'_>,
    k: usize,
    accept: &dyn Fn(u32) -> bool,
) -> Vec<(u32, f32)> {
    let mut top = TopK::new(k);
    let mut scores = [0f32; BLOCK_ROWS];
    for (b, block) in vectors.data.chunks(BLOCK_ROWS * vectors.dim).enumerate() {
        let n = block.len() / vectors.dim;
        let scores = &mut scores[..n];
        scorer.score_block(block, scores);
        let base = b * BLOCK_ROWS;
        for (i, &score) in scores.iter().enumerate() {
            if score > top.threshold() {
                let row = (base + i) as u32;
                if accept(row) {
                    top.push(row, score);
                }
            }
        }
    }
    top.into_sorted()
}

/// Scores of `rows` (through `scores`, a reusable buffer), top `k` into `out`
/// (cleared first) best first, ties to the smaller row.
pub(crate) fn top_listed_into(
    scorer: &F32Scorer<'_>,
    rows: &[u32],
    k: usize,
    scores: &mut Vec<f32>,
    out: &mut Vec<(u32, f32)>,
) {
    out.clear();
    if k == 0 {
        return;
    }
    scores.clear();
    scores.resize(rows.len(), 0.0);
    scorer.score_ids(rows, scores);
    out.extend(rows.iter().copied().zip(scores.iter().copied()));
    let best_first = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if k < out.len() {
        out.select_nth_unstable_by(k - 1, best_first);
        out.truncate(k);
    }
    out.sort_unstable_by(best_first);
}

/// The `k` best rows seen so far (a bounded min-heap on the score).
#[derive(Debug, Clone)]
pub(crate) struct TopK {
    k: usize,
    heap: BinaryHeap<Reverse<Item>>,
}

impl TopK {
    pub(crate) fn new(k: usize) -> Self {
        Self {
            k,
            heap: BinaryHeap::with_capacity(k + 1),
        }
    }

    /// The score a row must beat to enter (minus infinity until full).
    #[inline]
    pub(crate) fn threshold(&self) -> f32 {
        if self.heap.len() < self.k {
            f32::NEG_INFINITY
        } else {
            self.heap.peek().map_or(f32::INFINITY, |w| w.0.score)
        }
    }

    /// Offers a row.
    #[inline]
    pub(crate) fn push(&mut self, id: u32, score: f32) {
        let it = Item { score, id };
        if self.heap.len() < self.k {
            self.heap.push(Reverse(it));
        } else if let Some(mut worst) = self.heap.peek_mut() {
            if it > worst.0 {
                *worst = Reverse(it);
            }
        }
    }

    /// The rows held, best first.
    pub(crate) fn into_sorted(self) -> Vec<(u32, f32)> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|Reverse(it)| (it.id, it.score))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use eddy_model::Metric;

    use super::*;

    fn data(rows: usize, dim: usize) -> Vec<f32> {
        (0..rows * dim)
            .map(|i| ((i * 37 % 101) as f32) / 50.0 - 1.0)
            .collect()
    }

    fn brute(v: &Vectors<'_>, q: &[f32], k: usize, ok: impl Fn(u32) -> bool) -> Vec<(u32, f32)> {
        let scorer = F32Scorer::new(v, q);
        let mut all: Vec<(u32, f32)> = (0..v.rows() as u32)
            .filter(|&r| ok(r))
            .map(|r| (r, scorer.score_one(r)))
            .collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        all.truncate(k);
        all
    }

    #[test]
    fn topk_keeps_the_highest() {
        let mut top = TopK::new(3);
        for (row, score) in [(0, -5.0), (1, -1.0), (2, -3.0), (3, -0.5), (4, -9.0)] {
            top.push(row, score);
        }
        let rows: Vec<u32> = top.into_sorted().iter().map(|n| n.0).collect();
        assert_eq!(rows, vec![3, 1, 2]);
    }

    #[test]
    fn block_and_listed_scans_match_brute_force() {
        let dim = 5;
        let d = data(200, dim);
        let query: Vec<f32> = (0..dim).map(|i| i as f32 / 3.0).collect();
        let even: Vec<u32> = (0..200).filter(|r| r % 2 == 0).collect();
        for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
            let v = Vectors::new(&d, dim, metric);
            let want = brute(&v, &query, 7, |r| r % 2 == 0);
            let all = exact_scan(&v, &query, 7, ScanRows::All(&|r| r % 2 == 0));
            let listed = exact_scan(&v, &query, 7, ScanRows::Listed(&even));
            assert_eq!(all.len(), 7);
            assert_eq!(listed.iter().map(|h| h.0).collect::<Vec<_>>(), {
                want.iter().map(|h| h.0).collect::<Vec<_>>()
            });
            for ((a, l), w) in all.iter().zip(&listed).zip(&want) {
                let tol = 1e-4 * w.1.abs().max(1.0);
                assert!((a.1 - w.1).abs() <= tol, "{metric}: block {a:?} vs {w:?}");
                assert!((l.1 - w.1).abs() <= tol, "{metric}: listed {l:?} vs {w:?}");
            }
        }
    }

    /// With a shortlist as long as the rows, the coarse pass drops nothing
    /// and the answer is the fine codes' scan; with a short one, the answer
    /// still holds accepted rows only, with exact scores.
    #[test]
    fn a_shortlist_of_every_row_answers_as_the_fine_scan() {
        use eddy_quant::binary::{BinaryConfig, BinaryQuantizer, QueryEncoding};
        use eddy_quant::sq8::{Sq8Config, Sq8Quantizer};
        let (dim, rows) = (32, 500);
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let d: Vec<f32> = (0..rows * dim)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state % 10_007) as f32 / 5_000.0 - 1.0
            })
            .collect();
        let query: Vec<f32> = d[7 * dim..8 * dim].iter().map(|x| x * 0.9 + 0.01).collect();
        let v = Vectors::new(&d, dim, Metric::L2);
        let sq8 = Sq8Quantizer::train(
            &d,
            dim,
            &Sq8Config {
                metric: Metric::L2,
                ..Sq8Config::default()
            },
        )
        .and_then(|q| q.encode_all(&d))
        .expect("sq8");
        let bits = BinaryQuantizer::train(
            &d,
            dim,
            &BinaryConfig {
                query: QueryEncoding::Symmetric,
                ..BinaryConfig::default()
            },
        )
        .and_then(|q| q.encode_all(&d))
        .expect("bits");
        let odd = |r: u32| r % 2 == 1;
        let want = quantized_scan(&sq8, &v, &query, 5, 40, &odd);
        assert_eq!(
            shortlisted_scan(&bits, &sq8, &v, &query, 5, rows, 40, &odd),
            want
        );
        let short = shortlisted_scan(&bits, &sq8, &v, &query, 5, 60, 40, &odd);
        assert_eq!(short.len(), 5);
        let exact = F32Scorer::new(&v, &query);
        for (row, score) in short {
            assert!(odd(row));
            assert!((score - exact.score_one(row)).abs() <= 1e-4 * score.abs().max(1.0));
        }
    }

    /// SQ8 codes of the rows `encoded` (of `dim`), trained on `trained`.
    fn sq8_codes(
        trained: &[f32],
        encoded: &[f32],
        dim: usize,
        metric: Metric,
    ) -> eddy_quant::sq8::Sq8Codes {
        use eddy_quant::sq8::{Sq8Config, Sq8Quantizer};
        let config = Sq8Config {
            metric,
            ..Sq8Config::default()
        };
        Sq8Quantizer::train(trained, dim, &config)
            .and_then(|q| q.encode_all(encoded))
            .expect("codes")
    }

    #[test]
    fn quantized_scan_finds_the_exact_top_k_and_asks_only_candidates() {
        let dim = 16;
        let d = data(500, dim);
        let query: Vec<f32> = (0..dim).map(|i| (i as f32 / 7.0).sin()).collect();
        for metric in [Metric::Dot, Metric::L2] {
            let v = Vectors::new(&d, dim, metric);
            let codes = sq8_codes(&d, &d, dim, metric);
            let want = exact_scan(&v, &query, 5, ScanRows::All(&|r| !r.is_multiple_of(3)));
            let asked = std::cell::Cell::new(0usize);
            let accept = |r: u32| {
                asked.set(asked.get() + 1);
                !r.is_multiple_of(3)
            };
            let got = quantized_scan(&codes, &v, &query, 5, 50, &accept);
            assert_eq!(got, want, "{metric}: all 500 rows kept 50 deep");
            assert!(
                asked.get() < 500,
                "{metric}: accept asked {} times",
                asked.get()
            );
            // Codes that do not cover the rows: the exact scan answers.
            let short = sq8_codes(&d, &d[..dim * 10], dim, metric);
            assert_eq!(
                quantized_scan(&short, &v, &query, 5, 50, &|r| !r.is_multiple_of(3)),
                want
            );
        }
    }

    /// The listed SQ8 scan reads only the listed rows, keeps the best
    /// accepted ones and reports exact scores: kept deep enough it is the
    /// exact scan of the accepted listed rows; `accept` is asked only about
    /// candidates; codes that do not cover the rows fall back to the exact
    /// scan.
    #[test]
    fn the_listed_sq8_scan_finds_the_exact_top_k_of_the_listed_rows() {
        use crate::{scan_sq8_listed, Sq8View};
        let dim = 16;
        let d = data(600, dim);
        let query: Vec<f32> = (0..dim).map(|i| (i as f32 / 5.0).cos()).collect();
        // One row in ten listed (the live rows of a mostly deleted graph).
        let listed: Vec<u32> = (0..600).filter(|r| r % 10 == 4).collect();
        for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
            let v = Vectors::new(&d, dim, metric);
            let codes = sq8_codes(&d, &d, dim, metric);
            let view = Sq8View::from_codes(&codes);
            let accepted = |r: u32| r % 20 != 4;
            let rows: Vec<u32> = listed.iter().copied().filter(|&r| accepted(r)).collect();
            let want = exact_scan(&v, &query, 5, ScanRows::Listed(&rows));
            let asked = std::cell::Cell::new(0usize);
            let accept = |r: u32| {
                asked.set(asked.get() + 1);
                accepted(r)
            };
            let got = scan_sq8_listed(&v, &view, &query, 5, listed.len(), &listed, &accept);
            assert_eq!(got, want, "{metric}: every listed row kept");
            let shallow = scan_sq8_listed(&v, &view, &query, 5, 20, &listed, &accept);
            assert!(shallow.iter().all(|(r, _)| rows.contains(r)), "{metric}");
            for (row, score) in &shallow {
                let exact = exact_scan(&v, &query, 1, ScanRows::Listed(&[*row]));
                assert_eq!(exact, vec![(*row, *score)], "{metric}: scores are exact");
            }
            asked.set(0);
            scan_sq8_listed(&v, &view, &query, 5, 10, &listed, &accept);
            assert!(
                asked.get() < listed.len(),
                "{metric}: accept asked {} times for {} listed rows",
                asked.get(),
                listed.len()
            );
            let short = sq8_codes(&d, &d[..dim * 10], dim, metric);
            let short = Sq8View::from_codes(&short);
            assert_eq!(
                scan_sq8_listed(&v, &short, &query, 5, 10, &listed, &accepted),
                want,
                "{metric}: codes that do not cover the rows"
            );
        }
    }

    #[test]
    fn scans_of_nothing_are_empty() {
        let d = data(10, 4);
        let v = Vectors::new(&d, 4, Metric::Dot);
        let q = [1.0, 0.0, 0.0, 0.0];
        assert!(exact_scan(&v, &q, 0, ScanRows::All(&|_| true)).is_empty());
        assert!(exact_scan(&v, &q[..3], 3, ScanRows::All(&|_| true)).is_empty());
        assert!(exact_scan(&v, &q, 3, ScanRows::Listed(&[])).is_empty());
        assert!(exact_scan(&v, &q, 3, ScanRows::All(&|_| false)).is_empty());
        assert_eq!(exact_scan(&v, &q, 30, ScanRows::Listed(&[4, 2])).len(), 2);
    }
}
