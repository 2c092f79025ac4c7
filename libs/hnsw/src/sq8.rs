//! SQ8 codes for graph walks: a borrowed view of the stored codes, the scorer
//! (asymmetric u8 × 7-bit query for inner product, symmetric for L2) and
//! `search_sq8`, which walks on codes and rescores in f32.

use eddy_kernels::{Kernels, QueryI7};
use eddy_model::Metric;
use eddy_quant::binary::{BinaryCodes, BinaryQuery};
use eddy_quant::sq8::{Sq8Codes, Sq8Config, Sq8Quantizer};
use eddy_quant::CodeScorer as _;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::exact::{exact_scan, nearest_listed, ScanRows, TopK};
use crate::scorer::{F32Scorer, Scorer};
use crate::search::{check_code_args, rescore_into, walk_from_entry};
use crate::{Error, GraphView, Query, Result, SearchContext, Vectors};

/// SQ8 codes borrowed from memory (an mmap, or an [`Sq8Codes`]): `dim` bytes per
/// row plus one f32 correction term per row (as produced by
/// [`Sq8Quantizer::encode_into`]).
#[derive(Debug, Clone, Copy)]
pub struct Sq8View<'a> {
    dim: usize,
    lo: f32,
    pub(crate) delta: f32,
    codes: &'a [u8],
    corrections: &'a [f32],
}

impl<'a> Sq8View<'a> {
    /// A view over raw codes and corrections encoded with `quantizer`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] unless `codes.len() == corrections.len() * dim`.
    pub fn new(quantizer: &Sq8Quantizer, codes: &'a [u8], corrections: &'a [f32]) -> Result<Self> {
        Self::from_parts(
            quantizer.dim(),
            quantizer.lo(),
            quantizer.delta(),
            codes,
            corrections,
        )
    }

    /// A view from the quantizer's range (`lo`, `delta`) stored alongside the codes.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] on inconsistent lengths or a non-positive step.
    pub fn from_parts(
        dim: usize,
        lo: f32,
        delta: f32,
        codes: &'a [u8],
        corrections: &'a [f32],
    ) -> Result<Self> {
        if dim == 0 || codes.len() != corrections.len() * dim {
            return Err(Error::InvalidInput(format!(
                "sq8: {} code bytes for {} rows of dim {dim}",
                codes.len(),
                corrections.len()
            )));
        }
        if !(delta > 0.0 && delta.is_finite() && lo.is_finite()) {
            return Err(Error::InvalidInput("sq8: bad range".into()));
        }
        Ok(Self {
            dim,
            lo,
            delta,
            codes,
            corrections,
        })
    }

    /// Borrow an owned [`Sq8Codes`].
    pub fn from_codes(codes: &'a Sq8Codes) -> Self {
        let q = codes.quantizer();
        Self {
            dim: q.dim(),
            lo: q.lo(),
            delta: q.delta(),
            codes: codes.codes(),
            corrections: codes.corrections(),
        }
    }

    /// Values per row.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.corrections.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.corrections.is_empty()
    }

    /// Bytes of codes and corrections.
    pub fn memory_bytes(&self) -> usize {
        self.codes.len() + 4 * self.corrections.len()
    }

    /// Symmetric query code (same range as the rows), for L2.
    fn encode_query(&self, query: &[f32], out: &mut Vec<u8>) {
        out.clear();
        let inv = 1.0 / self.delta;
        out.extend(
            query
                .iter()
                .map(|&x| ((x - self.lo) * inv).round().clamp(0.0, 255.0) as u8),
        );
    }

    /// Asymmetric query code for inner product: `q ≈ s·t` with `t` in `-64..=64`
    /// (its own scale, so no query range is lost to the rows' range). Returns `s`.
    fn encode_query_i7(query: &[f32], out: &mut Vec<i8>) -> f32 {
        out.clear();
        let max = query.iter().fold(0.0f32, |m, &x| m.max(x.abs()));
        let s = if max > 0.0 && max.is_finite() {
            max / f32::from(QueryI7::MAX)
        } else {
            1.0
        };
        let inv = 1.0 / s;
        let lim = f32::from(QueryI7::MAX);
        out.extend(
            query
                .iter()
                .map(|&x| round_small(x * inv).clamp(-lim, lim) as i8),
        );
        s
    }
}

/// `x` rounded to the nearest integer, ties to even, for `|x| < 2^22` (a
/// query's 7-bit weights): two additions instead of a call to libm's
/// `roundf` per dimension, which the baseline x86-64 target makes of
/// `f32::round` (0.9 % of eddy-query's CPU under a Flight batch load).
/// Larger values come back unrounded or rounded to a multiple of 2, and are
/// clamped by the caller anyway.
#[inline]
pub(crate) fn round_small(x: f32) -> f32 {
    /// 1.5 × 2^23: adding it leaves no fraction bits below the units.
    const SHIFT: f32 = 12_582_912.0;
    (x + SHIFT) - SHIFT
}

/// Scores graph nodes from their SQ8 codes.
///
/// Inner product is asymmetric: `q·x ≈ q·(lo + Δ·c) = lo·Σq + Δ·s·(t·c)` with the
/// query kept at 7 bits (`t`, scale `s`) so the u8 × i8 kernel (`vpmaddubsw`) needs
/// no widening and no per-row correction. L2 stays symmetric (`Δ²·‖c_q − c‖²`).
pub(crate) struct Sq8Scorer<'a> {
    k: &'static Kernels,
    view: &'a Sq8View<'a>,
    qcode: &'a [u8],
    qi7: QueryI7<'a>,
    mul: f32,
    off: f32,
    metric: Metric,
}

impl<'a> Sq8Scorer<'a> {
    /// Encode `query` into the caller's buffers and build the scorer.
    pub(crate) fn new(
        view: &'a Sq8View<'a>,
        metric: Metric,
        query: &[f32],
        qcode: &'a mut Vec<u8>,
        qi7: &'a mut Vec<i8>,
    ) -> Self {
        let (mul, off) = match metric {
            Metric::Cosine | Metric::Dot => {
                qcode.clear();
                let s = Sq8View::encode_query_i7(query, qi7);
                (view.delta * s, view.lo * query.iter().sum::<f32>())
            }
            Metric::L2 => {
                qi7.clear();
                view.encode_query(query, qcode);
                (view.delta * view.delta, 0.0)
            }
        };
        Self {
            k: Kernels::get(),
            view,
            qcode,
            // Values were clamped to ±64 above; an empty slice for L2.
            qi7: QueryI7::new(qi7).unwrap_or(QueryI7::EMPTY),
            mul,
            off,
            metric,
        }
    }

    #[inline]
    fn code(&self, id: u32) -> &[u8] {
        let s = id as usize * self.view.dim;
        &self.view.codes[s..s + self.view.dim]
    }
}

/// Rows fetched ahead of the one being scored in [`Sq8Scorer::score_ids`].
const PREFETCH_AHEAD: usize = 4;

impl Scorer for Sq8Scorer<'_> {
    #[inline]
    fn prefetch(&self, id: u32) {
        // Only the first line: `score_ids` fetches whole rows a few ahead of
        // use. Fetching every row of an expansion at once (6 lines each at
        // 384 dims) overflows the core's miss buffers, and the rows then
        // arrive late and in the wrong order (measured 1.4-1.7x slower).
        eddy_kernels::prefetch(&self.code(id)[..1]);
    }

    #[inline]
    fn score_one(&self, id: u32) -> f32 {
        let c = self.code(id);
        match self.metric {
            Metric::Cosine | Metric::Dot => {
                self.off + self.mul * self.k.dot_u8_i7(c, self.qi7) as f32
            }
            Metric::L2 => -self.mul * self.k.l2sq_u8(self.qcode, c) as f32,
        }
    }

    #[inline]
    fn score_ids(&self, ids: &[u32], out: &mut [f32]) {
        for &id in ids.iter().take(PREFETCH_AHEAD) {
            eddy_kernels::prefetch(self.code(id));
        }
        for (k, (&id, o)) in ids.iter().zip(out.iter_mut()).enumerate() {
            if let Some(&next) = ids.get(k + PREFETCH_AHEAD) {
                eddy_kernels::prefetch(self.code(next));
            }
            *o = self.score_one(id);
        }
    }
}

/// Search traversing SQ8 codes, then rescoring the best `params.rescore`
/// (at least `k`) candidates exactly in f32; results `(row, exact score)`
/// best first, at most `params.k`. `ef` is raised to the rescoring depth.
///
/// # Panics
/// If `query.len() != vectors.dim`, the codes' dimension differs, or
/// `vectors`/`codes` hold fewer than `view.len()` rows.
pub fn search_sq8(
    view: &GraphView<'_>,
    vectors: &Vectors<'_>,
    codes: &Sq8View<'_>,
    params: &Query<'_>,
    query: &[f32],
    ctx: &mut SearchContext,
) -> Vec<(u32, f32)> {
    let mut out = Vec::with_capacity(params.k);
    search_sq8_into(view, vectors, codes, params, query, ctx, &mut out);
    out
}

/// [`search_sq8`] writing into `out` (cleared first).
///
/// # Panics
/// As [`search_sq8`].
pub fn search_sq8_into(
    view: &GraphView<'_>,
    vectors: &Vectors<'_>,
    codes: &Sq8View<'_>,
    params: &Query<'_>,
    query: &[f32],
    ctx: &mut SearchContext,
    out: &mut Vec<(u32, f32)>,
) {
    out.clear();
    check_code_args("search_sq8", view, vectors, query, (codes.dim, codes.len()));
    if view.is_empty() || params.k == 0 {
        return;
    }
    let mut qcode = std::mem::take(&mut ctx.qcode);
    let mut qi7 = std::mem::take(&mut ctx.qi7);
    let scorer = Sq8Scorer::new(codes, vectors.metric, query, &mut qcode, &mut qi7);
    let ef = params.ef.max(params.rescore_depth());
    walk_from_entry(view, &scorer, ctx, ef, params.accept);
    ctx.qcode = qcode;
    ctx.qi7 = qi7;
    rescore_into(view, vectors, params, query, ctx, out);
}

/// Top `k` of `rows` (every row when `None`) that `accept` lets through,
/// by their SQ8 codes in `codes` (row `r` of `codes` is row `r` of
/// `vectors`): every scanned row is scored by its code, the best `keep`
/// accepted ones are rescored exactly; `(row, exact score)` best first.
/// `accept` is asked only about rows that would enter the best `keep`.
///
/// For a graph whose rows are mostly deleted or shadowed: a walk still
/// routes through the refused nodes, so it visits more of them the fewer
/// are accepted (at 90 % deleted, 12x the walk of a graph over the live
/// rows alone; with none accepted, every node), while this reads each
/// scanned code once (the live rows' only, where listed). Codes that do
/// not match `vectors` fall back to the exact scan of the accepted rows.
pub fn scan_sq8_codes(
    vectors: &Vectors<'_>,
    codes: &Sq8View<'_>,
    query: &[f32],
    k: usize,
    keep: usize,
    rows: Option<&[u32]>,
    accept: &dyn Fn(u32) -> bool,
) -> Vec<(u32, f32)> {
    if k == 0 || vectors.dim == 0 || query.len() != vectors.dim {
        return Vec::new();
    }
    if codes.dim != vectors.dim || codes.len() != vectors.rows() {
        return match rows {
            Some(rows) => {
                let accepted: Vec<u32> = rows.iter().copied().filter(|&r| accept(r)).collect();
                exact_scan(vectors, query, k, ScanRows::Listed(&accepted))
            }
            None => exact_scan(vectors, query, k, ScanRows::All(accept)),
        };
    }
    /// Rows scored per kernel call.
    const CHUNK: usize = 256;
    let (mut qcode, mut qi7) = (Vec::new(), Vec::new());
    let scorer = Sq8Scorer::new(codes, vectors.metric, query, &mut qcode, &mut qi7);
    let mut top = TopK::new(keep.max(k));
    let mut scores = [0f32; CHUNK];
    let mut scan = |chunk: &[u32]| {
        let scores = &mut scores[..chunk.len()];
        scorer.score_ids(chunk, scores);
        for (&row, &score) in chunk.iter().zip(scores.iter()) {
            if score > top.threshold() && accept(row) {
                top.push(row, score);
            }
        }
    };
    match rows {
        Some(rows) => rows.chunks(CHUNK).for_each(&mut scan),
        None => {
            let mut ids = [0u32; CHUNK];
            let total = vectors.rows() as u32;
            for start in (0..total).step_by(CHUNK) {
                let n = (total - start).min(CHUNK as u32) as usize;
                for (i, id) in ids[..n].iter_mut().enumerate() {
                    *id = start + i as u32;
                }
                scan(&ids[..n]);
            }
        }
    }
    top.rescored(vectors, query, k)
}

/// [`scan_sq8_codes`] of listed `rows` with a cheaper first pass: the rows'
/// sign bits in `bits` (row `r` of `bits` is row `r` of `vectors`) rank
/// them by Hamming distance, the nearest `shortlist` that `accept` lets
/// through (whole distances at a time) are ranked again by their SQ8 codes,
/// and the best `keep` of those rescored exactly; `(row, exact score)` best
/// first.
///
/// For a graph segment whose accepted rows are few (upserts shadowed or
/// deleted the rest): a sign-bit code is a ninth of an SQ8 code at 384-d,
/// so the listed rows cost a fraction of their SQ8 scan, and a walk would
/// route through the refused nodes. Bits that do not match `vectors`, or a
/// query they cannot prepare symmetrically, fall back to
/// [`scan_sq8_codes`] of the listed rows.
#[allow(clippy::too_many_arguments)]
pub fn scan_sq8_shortlisted(
    vectors: &Vectors<'_>,
    codes: &Sq8View<'_>,
    bits: &BinaryCodes,
    query: &[f32],
    k: usize,
    shortlist: usize,
    keep: usize,
    rows: &[u32],
    accept: &dyn Fn(u32) -> bool,
) -> Vec<(u32, f32)> {
    if k == 0 || vectors.dim == 0 || query.len() != vectors.dim {
        return Vec::new();
    }
    let matches = bits.len() == vectors.rows() && bits.dim() == vectors.dim;
    let code = match bits.prepare(query) {
        Ok(BinaryQuery::Symmetric(code)) if matches => code,
        _ => return scan_sq8_codes(vectors, codes, query, k, keep, Some(rows), accept),
    };
    let count = shortlist.max(keep).max(k);
    let short = nearest_listed(bits, &code, rows, count, accept);
    scan_sq8_codes(vectors, codes, query, k, keep, Some(&short), &|_| true)
}

/// SQ8 codes of `vectors` for the construction beam.
pub(crate) fn train_sq8(vectors: &Vectors<'_>) -> Result<Sq8Codes> {
    let config = Sq8Config {
        metric: vectors.metric,
        ..Sq8Config::default()
    };
    Sq8Quantizer::train(vectors.data, vectors.dim, &config)
        .and_then(|q| q.encode_all(vectors.data))
        .map_err(|e| Error::InvalidInput(format!("sq8 for the construction beam: {e}")))
}

/// Below this [`sq8_beam_fidelity`] the construction beam stays on f32: codes
/// that misrank most near neighbours (rows closer than one SQ8 step) would
/// steer the beam blindly. A guard for degenerate data, set low on purpose:
/// the clustered 1M × 128 set scores 0.69 and built no better graph on an f32
/// beam (recall@10 0.9836 vs 0.9860 at ef 256) but built 1.2–1.3x slower.
pub const SQ8_BEAM_MIN_FIDELITY: f64 = 0.5;

/// How well SQ8 codes keep a row's nearest neighbours on `vectors`: mean
/// recall@10 of the SQ8 ranking against the f32 ranking, for 64 seeded probe
/// rows over all rows (or 262,144 seeded ones on larger sets). The build uses
/// the SQ8 construction beam only at [`SQ8_BEAM_MIN_FIDELITY`] or above.
///
/// # Errors
/// [`Error::InvalidInput`] if the codes cannot be trained (ragged or non-finite data).
pub fn sq8_beam_fidelity(vectors: &Vectors<'_>, seed: u64) -> Result<f64> {
    let codes = train_sq8(vectors)?;
    Ok(fidelity_of(vectors, &Sq8View::from_codes(&codes), seed))
}

/// [`sq8_beam_fidelity`] for already trained codes. The pool is large on
/// purpose: a sparse sample has wider score gaps and flatters the codes.
pub(crate) fn fidelity_of(vectors: &Vectors<'_>, view: &Sq8View<'_>, seed: u64) -> f64 {
    const PROBES: usize = 64;
    const POOL: usize = 1 << 18;
    const K: usize = 10;
    let n = vectors.rows();
    if n <= K + 1 {
        return 1.0;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5138_f1de);
    let pool: Vec<u32> = if n <= POOL {
        (0..n as u32).collect()
    } else {
        (0..POOL).map(|_| rng.random_range(0..n as u32)).collect()
    };
    let (mut qcode, mut qi7) = (Vec::new(), Vec::new());
    let mut exact_scores = vec![0.0f32; pool.len()];
    let mut approx_scores = vec![0.0f32; pool.len()];
    let mut total = 0usize;
    for _ in 0..PROBES {
        let p = rng.random_range(0..n);
        let q = vectors.row(p as u32);
        F32Scorer::new(vectors, q).score_ids(&pool, &mut exact_scores);
        Sq8Scorer::new(view, vectors.metric, q, &mut qcode, &mut qi7)
            .score_ids(&pool, &mut approx_scores);
        let top = |scores: &[f32]| -> Vec<usize> {
            let mut idx: Vec<usize> = (0..scores.len()).collect();
            idx.sort_unstable_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
            idx.truncate(K);
            idx
        };
        let want = top(&exact_scores);
        let got = top(&approx_scores);
        // Compare by row so repeated pool rows or exact duplicates count as hits.
        let kth = exact_scores[want[K - 1]];
        total += got.iter().filter(|&&i| exact_scores[i] >= kth).count();
    }
    total as f64 / (PROBES * K) as f64
}
