//! Graph traversal over any [`CodeScorer`] (binary 1/1.5/2-bit, rotated 4-bit,
//! ...), then exact f32 rescoring of the best candidates.
//!
//! The walk is the same as [`crate::search_sq8`]: greedy descent on the upper
//! levels and a best-first beam on level 0, but every node is scored with the
//! quantizer's approximate similarity. Compact codes make each distance cheap
//! and keep the hot working set small; the approximation error is then removed
//! by rescoring the best `rescore` candidates with the f32 vectors.

use eddy_quant::CodeScorer;

use crate::scorer::Scorer;
use crate::search::{check_code_args, rescore_into, walk_from_entry};
use crate::{Error, GraphView, Query, Result, SearchContext, Vectors};

/// A code table and one query prepared against it (`codes.prepare(query)`):
/// what a walk over codes scores with.
pub struct CodeQuery<'a, C: CodeScorer> {
    /// Codes of every row of the graph.
    pub codes: &'a C,
    /// The query as [`CodeScorer::prepare`] made it for `codes`.
    pub prepared: &'a C::Query,
}

impl<C: CodeScorer> Clone for CodeQuery<'_, C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C: CodeScorer> Copy for CodeQuery<'_, C> {}

impl<C: CodeScorer> std::fmt::Debug for CodeQuery<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeQuery")
            .field("rows", &self.codes.len())
            .field("dim", &self.codes.dim())
            .finish_non_exhaustive()
    }
}

/// [`Scorer`] adapter: a code table plus one prepared query.
struct CodesScorer<'a, C: CodeScorer> {
    codes: &'a C,
    query: &'a C::Query,
}

impl<C: CodeScorer> Scorer for CodesScorer<'_, C> {
    #[inline]
    fn prefetch(&self, id: u32) {
        // Rows of these codes are 1-3 cache lines: the walk fetches every
        // row of an expansion before scoring the first.
        self.codes.prefetch(id as usize);
    }

    #[inline]
    fn score_one(&self, id: u32) -> f32 {
        self.codes.score(self.query, id as usize)
    }

    #[inline]
    fn score_ids(&self, ids: &[u32], out: &mut [f32]) {
        for (&id, o) in ids.iter().zip(out.iter_mut()) {
            *o = self.score_one(id);
        }
    }
}

/// Search traversing quantized codes, then rescoring the best
/// `params.rescore` (at least `k`) candidates exactly in f32; results
/// `(row, exact score)` best first, at most `params.k`.
///
/// Prepares the query with [`CodeScorer::prepare`] (one small allocation) and
/// calls [`search_codes_into`]; use that directly with a query prepared once to
/// avoid per-call allocations. `ef` is raised to the rescoring depth.
///
/// # Errors
/// [`Error::InvalidInput`] when the quantizer rejects the query (wrong
/// dimension, non-finite values).
///
/// # Panics
/// As [`search_codes_into`].
pub fn search_codes<C: CodeScorer>(
    view: &GraphView<'_>,
    vectors: &Vectors<'_>,
    codes: &C,
    params: &Query<'_>,
    query: &[f32],
    ctx: &mut SearchContext,
) -> Result<Vec<(u32, f32)>> {
    let prepared = codes
        .prepare(query)
        .map_err(|e| Error::InvalidInput(format!("search_codes: {e}")))?;
    let codes = CodeQuery {
        codes,
        prepared: &prepared,
    };
    let mut out = Vec::with_capacity(params.rescore_depth());
    search_codes_into(view, vectors, &codes, params, query, ctx, &mut out);
    Ok(out)
}

/// [`search_codes`] with a query prepared by the caller (`codes.prepared`
/// must come from `codes.codes.prepare(query)`), writing into `out` (cleared
/// first): no allocation after warm-up beyond what the quantizer's scoring does.
///
/// The walk ranks nodes by `codes.score(prepared, row)`; the best
/// rescoring-depth accepted rows are rescored with the f32 `vectors` and the
/// top `k` returned with their exact scores. `params.accept` restricts the
/// results, not the walk, as in [`crate::search`].
///
/// # Panics
/// If `query.len() != vectors.dim`, the codes' dimension differs from it, or
/// `vectors`/`codes` hold fewer than `view.len()` rows.
pub fn search_codes_into<C: CodeScorer>(
    view: &GraphView<'_>,
    vectors: &Vectors<'_>,
    codes: &CodeQuery<'_, C>,
    params: &Query<'_>,
    query: &[f32],
    ctx: &mut SearchContext,
    out: &mut Vec<(u32, f32)>,
) {
    out.clear();
    let shape = (codes.codes.dim(), codes.codes.len());
    check_code_args("search_codes", view, vectors, query, shape);
    if view.is_empty() || params.k == 0 {
        return;
    }
    let scorer = CodesScorer {
        codes: codes.codes,
        query: codes.prepared,
    };
    let ef = params.ef.max(params.rescore_depth());
    walk_from_entry(view, &scorer, ctx, ef, params.accept);
    rescore_into(view, vectors, params, query, ctx, out);
}

#[cfg(test)]
mod tests {
    use eddy_model::Metric;
    use eddy_quant::binary::{BinaryConfig, BinaryEncoding, BinaryQuantizer};
    use eddy_quant::rabitq::{RabitqConfig, RabitqQuantizer};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::{Graph, HnswParams};

    const DIM: usize = 64;
    const N: usize = 1500;
    const NQ: usize = 20;

    /// Seeded i.i.d. Gaussian rows (unit length when `normalise`). Unlike a few
    /// tight clusters, this gives the codes something to resolve between close
    /// neighbours (1-bit codes of one tight cluster are nearly all equal).
    fn gaussian(n: usize, seed: u64, normalise: bool) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut v: Vec<f32> = (0..n * DIM)
            .map(|_| {
                let u1: f32 = rng.random_range(f32::EPSILON..1.0);
                let u2: f32 = rng.random();
                (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
            })
            .collect();
        if normalise {
            for row in v.chunks_exact_mut(DIM) {
                eddy_kernels::normalize(row);
            }
        }
        v
    }

    fn exact_top(data: &[f32], metric: Metric, q: &[f32], k: usize) -> Vec<(u32, f32)> {
        let rows: Vec<u32> = (0..(data.len() / DIM) as u32).collect();
        let vectors = Vectors::new(data, DIM, metric);
        crate::exact_scan(&vectors, q, k, crate::ScanRows::Listed(&rows))
    }

    /// Tie-aware recall@k: a hit when a returned score reaches the k-th true score.
    fn recall(got: &[(u32, f32)], truth: &[(u32, f32)]) -> f64 {
        let Some(kth) = truth.last().map(|t| t.1) else {
            return 1.0;
        };
        let hits = got.iter().filter(|g| g.1 >= kth - 1e-5).count();
        hits.min(truth.len()) as f64 / truth.len() as f64
    }

    fn graph(data: &[f32], metric: Metric) -> Graph {
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("pool")
            .install(|| Graph::build(&Vectors::new(data, DIM, metric), &HnswParams::default()))
            .expect("build")
    }

    /// Mean recall@10 of code traversal with rescore = ef over `NQ` queries;
    /// also checks each result list against the exact scores of its rows.
    fn code_recall<C: CodeScorer>(
        g: &Graph,
        codes: &C,
        data: &[f32],
        queries: &[f32],
        metric: Metric,
        ef: usize,
        rescore: usize,
    ) -> f64 {
        let view = g.view();
        let vectors = Vectors::new(data, DIM, metric);
        let params = Query::new(10, ef).with_rescore(rescore);
        let mut ctx = SearchContext::default();
        let mut out = Vec::new();
        let mut total = 0.0;
        for q in queries.chunks_exact(DIM) {
            let p = codes.prepare(q).expect("prepare");
            let cq = CodeQuery {
                codes,
                prepared: &p,
            };
            search_codes_into(&view, &vectors, &cq, &params, q, &mut ctx, &mut out);
            assert_eq!(out.len(), 10);
            for w in out.windows(2) {
                assert!(w[0].1 >= w[1].1, "not sorted: {out:?}");
            }
            for &(id, s) in &out {
                let row = &data[id as usize * DIM..(id as usize + 1) * DIM];
                let want = eddy_quant::exact_score(metric, q, row);
                assert!((s - want).abs() < 1e-4, "score {s} is not exact ({want})");
            }
            total += recall(&out, &exact_top(data, metric, q, 10));
        }
        total / NQ as f64
    }

    fn binary(data: &[f32], encoding: BinaryEncoding) -> eddy_quant::binary::BinaryCodes {
        let cfg = BinaryConfig {
            encoding,
            ..BinaryConfig::default()
        };
        BinaryQuantizer::train(data, DIM, &cfg)
            .expect("train")
            .encode_all(data)
            .expect("encode")
    }

    /// Mean recall@10 of an exhaustive scan of the codes keeping the best
    /// `depth`, rescored in f32: what the codes allow without a graph.
    fn flat_recall<C: CodeScorer>(codes: &C, data: &[f32], queries: &[f32], depth: usize) -> f64 {
        let mut total = 0.0;
        for q in queries.chunks_exact(DIM) {
            let got = eddy_quant::search_with_rescore(
                codes,
                data,
                Metric::Dot,
                q,
                10,
                depth as f32 / 10.0,
            )
            .expect("flat search");
            total += recall(&got, &exact_top(data, Metric::Dot, q, 10));
        }
        total / NQ as f64
    }

    #[test]
    fn binary_traversal_with_rescore_has_recall() {
        let data = gaussian(N, 11, true);
        let queries = gaussian(NQ, 12, true);
        let g = graph(&data, Metric::Dot);
        let mut by_encoding = Vec::new();
        for (enc, floor) in [
            (BinaryEncoding::OneBit, 0.88),
            (BinaryEncoding::OneAndHalfBits, 0.8),
            (BinaryEncoding::TwoBits, 0.93),
        ] {
            let codes = binary(&data, enc);
            let r = code_recall(&g, &codes, &data, &queries, Metric::Dot, 128, 128);
            let flat = flat_recall(&codes, &data, &queries, 128);
            assert!(r >= floor, "{enc:?} recall@10 {r}");
            // The walk over codes finds about what an exhaustive code scan does.
            assert!(r >= flat - 0.05, "{enc:?}: graph {r} vs flat scan {flat}");
            by_encoding.push(r);
        }
        // Two bits per dimension beat one.
        assert!(by_encoding[2] > by_encoding[0], "{by_encoding:?}");
        // Rescoring only k candidates ranks by the 1-bit codes alone: the f32
        // rescoring of the whole beam does real work.
        let codes = binary(&data, BinaryEncoding::OneBit);
        let shallow = code_recall(&g, &codes, &data, &queries, Metric::Dot, 128, 10);
        assert!(
            shallow + 0.2 < by_encoding[0],
            "rescore 10 {shallow} vs 128 {by_encoding:?}"
        );
    }

    #[test]
    fn rabitq_traversal_with_rescore_has_recall() {
        for metric in [Metric::Dot, Metric::L2] {
            let data = gaussian(N, 13, metric == Metric::Dot);
            let queries = gaussian(NQ, 14, metric == Metric::Dot);
            let codes = RabitqQuantizer::train(&data, DIM, &RabitqConfig { metric, seed: 5 })
                .expect("train")
                .encode_all(&data)
                .expect("encode");
            let g = graph(&data, metric);
            let r = code_recall(&g, &codes, &data, &queries, metric, 64, 64);
            assert!(r >= 0.93, "{metric:?} rq4 recall@10 {r}");
        }
    }

    #[test]
    fn codes_search_is_deterministic_and_respects_accept() {
        let data = gaussian(N, 15, true);
        let g = graph(&data, Metric::Dot);
        let codes = binary(&data, BinaryEncoding::TwoBits);
        let view = g.view();
        let vectors = Vectors::new(&data, DIM, Metric::Dot);
        let mut rng = ChaCha8Rng::seed_from_u64(16);
        let mut ctx = SearchContext::default();
        let even = |id: u32| id.is_multiple_of(2);
        let params = Query::new(10, 48);
        for _ in 0..10 {
            let qi = rng.random_range(0..N);
            let q = &data[qi * DIM..(qi + 1) * DIM];
            let a = search_codes(&view, &vectors, &codes, &params, q, &mut ctx).expect("search");
            let mut fresh = SearchContext::default();
            let b = search_codes(&view, &vectors, &codes, &params, q, &mut fresh).expect("search");
            assert_eq!(a, b);
            // The query is a stored row: it comes back first (exact score).
            assert_eq!(a[0].0 as usize, qi);
            let filtered = params.with_rescore(48).with_accept(&even);
            let f = search_codes(&view, &vectors, &codes, &filtered, q, &mut ctx).expect("search");
            assert_eq!(f.len(), 10);
            assert!(f.iter().all(|&(id, _)| even(id)), "{f:?}");
        }
    }

    #[test]
    fn bad_query_is_an_error_and_empty_graph_is_empty() {
        let data = gaussian(200, 17, true);
        let g = graph(&data, Metric::Dot);
        let codes = binary(&data, BinaryEncoding::OneBit);
        let vectors = Vectors::new(&data, DIM, Metric::Dot);
        let mut ctx = SearchContext::default();
        let mut q = data[..DIM].to_vec();
        q[3] = f32::NAN;
        let params = Query::new(10, 32);
        let r = search_codes(&g.view(), &vectors, &codes, &params, &q, &mut ctx);
        assert!(matches!(r, Err(Error::InvalidInput(_))), "{r:?}");
        let q = &data[..DIM];
        let k0 = search_codes(&g.view(), &vectors, &codes, &Query::new(0, 32), q, &mut ctx)
            .expect("search");
        assert!(k0.is_empty());
        let none = Vectors::new(&[], DIM, Metric::Dot);
        let empty = Graph::build(&none, &HnswParams::default()).expect("build");
        let r =
            search_codes(&empty.view(), &vectors, &codes, &params, q, &mut ctx).expect("search");
        assert!(r.is_empty());
    }
}
