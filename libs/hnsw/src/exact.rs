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

mod nearest;

#[cfg(test)]
pub(crate) use nearest::gather_codes;
use nearest::DISTANCES;
pub(crate) use nearest::{nearest_accepted, nearest_listed};

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
    top.rescored(vectors, query, k)
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
    let source = ShortlistSource {
        coarse,
        fine,
        vectors: *vectors,
        accept,
    };
    shortlisted_scan_many(&[source], query, k, shortlist, keep)
        .pop()
        .unwrap_or_default()
}

/// One source of rows without a graph for [`shortlisted_scan_many`] (the
/// query tail, a sealed segment waiting for its graph): the sign bits and
/// finer codes of its rows, its vectors, and which of its rows a search
/// may return.
#[derive(Clone, Copy)]
pub struct ShortlistSource<'a, F> {
    /// Sign bits of every row.
    pub coarse: &'a BinaryCodes,
    /// Finer codes (SQ8) of every row.
    pub fine: &'a F,
    /// The rows themselves, for the exact rescoring.
    pub vectors: Vectors<'a>,
    /// The rows that may be returned (live, not shadowed).
    pub accept: &'a dyn Fn(u32) -> bool,
}

impl<F> std::fmt::Debug for ShortlistSource<'_, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShortlistSource")
            .field("rows", &self.vectors.rows())
            .finish_non_exhaustive()
    }
}

/// [`shortlisted_scan`] over several sources as if they were one: one
/// shortlist of the `shortlist` rows nearest by Hamming distance among all
/// of them (each source's rows against the query encoded by its own sign
/// bits), one best `keep` by fine code, rescored exactly. How much of the
/// exact top `k` a shortlist holds depends on its length, not on how many
/// rows it is drawn from, so a tail and a seal waiting for its graph need
/// one shortlist between them, not one each. Returns, per source, the
/// rows of the overall top `k` it holds, `(row within the source, exact
/// score)` best first. A source whose codes do not match its vectors, or
/// that cannot prepare the query symmetrically, is scanned alone
/// ([`quantized_scan`] of its fine codes).
pub fn shortlisted_scan_many<F: CodeScorer>(
    sources: &[ShortlistSource<'_, F>],
    query: &[f32],
    k: usize,
    shortlist: usize,
    keep: usize,
) -> Vec<Vec<(u32, f32)>> {
    let mut out = vec![Vec::new(); sources.len()];
    if k == 0 || query.is_empty() {
        return out;
    }
    // The sources scanned together: index, first row in the joint
    // numbering, the query's sign bits and fine codes.
    let mut joint = Vec::with_capacity(sources.len());
    let mut rows = 0usize;
    for (i, s) in sources.iter().enumerate() {
        let v = &s.vectors;
        if v.dim == 0 || query.len() != v.dim {
            continue;
        }
        let matches = s.coarse.len() == v.rows()
            && s.fine.len() == v.rows()
            && s.coarse.dim() == v.dim
            && s.fine.dim() == v.dim;
        match (s.coarse.prepare(query), s.fine.prepare(query)) {
            (Ok(BinaryQuery::Symmetric(code)), Ok(fine)) if matches => {
                joint.push((i, rows, code, fine));
                rows += v.rows();
            }
            _ => out[i] = quantized_scan(s.fine, v, query, k, keep, s.accept),
        }
    }
    let words = joint.first().map_or(0, |j| j.2.len());
    let apart = joint.iter().any(|j| j.2.len() != words) || u32::try_from(rows).is_err();
    if apart && joint.len() > 1 {
        // Sign bits of different widths rank on different scales (and the
        // joint numbering must fit a row id): each source alone.
        for &(i, ..) in &joint {
            let alone = shortlisted_scan_many(&sources[i..=i], query, k, shortlist, keep);
            out[i] = alone.into_iter().next().unwrap_or_default();
        }
        return out;
    }
    if joint.is_empty() {
        return out;
    }
    // The source holding joint row `r`: the last one starting at or before it.
    let source_of = |r: u32| joint.partition_point(|j| j.1 <= r as usize) - 1;
    let short = DISTANCES.with_borrow_mut(|distances| {
        // Every entry is overwritten: a buffer kept per thread is neither
        // zeroed nor faulted in again per query.
        distances.resize(rows, 0);
        for &(i, first, ref code, _) in &joint {
            let n = sources[i].vectors.rows();
            sources[i]
                .coarse
                .hamming_all(code, &mut distances[first..first + n]);
        }
        nearest_accepted(distances, words * 64, shortlist.max(keep).max(k), &|r| {
            let j = &joint[source_of(r)];
            (sources[j.0].accept)(r - j.1 as u32)
        })
    });
    /// Rows ahead whose fine codes are fetched while one is scored.
    const AHEAD: usize = 8;
    let mut best = TopK::new(keep.max(k));
    for (n, &r) in short.iter().enumerate() {
        if let Some(&ahead) = short.get(n + AHEAD) {
            let j = &joint[source_of(ahead)];
            sources[j.0].fine.prefetch(ahead as usize - j.1);
        }
        let j = &joint[source_of(r)];
        let score = sources[j.0].fine.score(&j.3, r as usize - j.1);
        if score > best.threshold() {
            best.push(r, score);
        }
    }
    // Rescored exactly, source by source; the overall top `k` handed back
    // to the sources holding them.
    let kept = best.into_sorted();
    let mut hits: Vec<(usize, u32, f32)> = Vec::with_capacity(kept.len());
    for (j, &(i, first, ..)) in joint.iter().enumerate() {
        let listed: Vec<u32> = kept
            .iter()
            .filter(|&&(r, _)| source_of(r) == j)
            .map(|&(r, _)| r - first as u32)
            .collect();
        if !listed.is_empty() {
            let found = exact_scan(&sources[i].vectors, query, k, ScanRows::Listed(&listed));
            hits.extend(found.into_iter().map(|(row, score)| (j, row, score)));
        }
    }
    hits.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)).then(a.1.cmp(&b.1)));
    hits.truncate(k);
    for (j, row, score) in hits {
        out[joint[j].0].push((row, score));
    }
    out
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
    /// The exact top `k` of the rows kept (ranked by codes), rescored in
    /// f32: the last step of every code scan.
    pub(crate) fn rescored(
        self,
        vectors: &Vectors<'_>,
        query: &[f32],
        k: usize,
    ) -> Vec<(u32, f32)> {
        let candidates: Vec<u32> = self.into_sorted().into_iter().map(|(r, _)| r).collect();
        exact_scan(vectors, query, k, ScanRows::Listed(&candidates))
    }

    pub(crate) fn into_sorted(self) -> Vec<(u32, f32)> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|Reverse(it)| (it.id, it.score))
            .collect()
    }
}
