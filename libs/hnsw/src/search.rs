//! Searching a graph over f32 vectors: what a query asks for ([`Query`]),
//! the walk from the graph's entry point, the expansion of folded duplicates,
//! and the exact rescoring that quantized walks end with.

use std::fmt;

use crate::context::{Item, SearchContext};
use crate::exact::top_listed_into;
use crate::scorer::{F32Scorer, Scorer};
use crate::walk::walk;
use crate::{GraphView, Vectors};

/// What one search asks for: how many neighbours, how wide a beam, how many
/// candidates of a quantized walk to rescore, and which rows may be returned.
#[derive(Clone, Copy)]
pub struct Query<'a> {
    /// Neighbours wanted.
    pub k: usize,
    /// Beam width of the level-0 walk (raised to `k`, and to `rescore` for
    /// quantized walks).
    pub ef: usize,
    /// Candidates of a quantized walk rescored exactly in f32 (raised to
    /// `k`; 0 = `k`). Unused by f32 walks.
    pub rescore: usize,
    /// Restricts the results (payload filters, deleted rows) but not the
    /// walk: rejected rows still route the search. `None` takes every row.
    pub accept: Option<&'a dyn Fn(u32) -> bool>,
}

impl<'a> Query<'a> {
    /// `k` neighbours with a beam of `ef`, every row acceptable, no extra rescoring.
    pub fn new(k: usize, ef: usize) -> Self {
        Self {
            k,
            ef,
            rescore: 0,
            accept: None,
        }
    }

    /// The same query rescoring `rescore` candidates after a quantized walk.
    pub fn with_rescore(self, rescore: usize) -> Self {
        Self { rescore, ..self }
    }

    /// The same query returning only rows `accept` takes.
    pub fn with_accept(self, accept: &'a dyn Fn(u32) -> bool) -> Self {
        Self {
            accept: Some(accept),
            ..self
        }
    }

    /// Candidates a quantized walk keeps for rescoring: `rescore`, at least `k`.
    pub(crate) fn rescore_depth(&self) -> usize {
        self.rescore.max(self.k)
    }
}

impl fmt::Debug for Query<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Query")
            .field("k", &self.k)
            .field("ef", &self.ef)
            .field("rescore", &self.rescore)
            .field("accept", &self.accept.map(|_| "fn"))
            .finish()
    }
}

/// Search with exact f32 traversal; results `(row, score)` best first, at
/// most `params.k`, scores "higher is closer" in `vectors.metric`.
///
/// # Panics
/// If `query.len() != vectors.dim` or `vectors` holds fewer than `view.len()` rows.
pub fn search(
    view: &GraphView<'_>,
    vectors: &Vectors<'_>,
    params: &Query<'_>,
    query: &[f32],
    ctx: &mut SearchContext,
) -> Vec<(u32, f32)> {
    let mut out = Vec::with_capacity(params.k);
    search_into(view, vectors, params, query, ctx, &mut out);
    out
}

/// [`search`] writing into `out` (cleared first): no allocation after warm-up.
///
/// # Panics
/// As [`search`].
pub fn search_into(
    view: &GraphView<'_>,
    vectors: &Vectors<'_>,
    params: &Query<'_>,
    query: &[f32],
    ctx: &mut SearchContext,
    out: &mut Vec<(u32, f32)>,
) {
    out.clear();
    check_args(view, vectors, query);
    if view.is_empty() || params.k == 0 {
        return;
    }
    let scorer = F32Scorer::new(vectors, query);
    walk_from_entry(view, &scorer, ctx, params.ef.max(params.k), params.accept);
    let sorted = std::mem::take(&mut ctx.sorted);
    expand(view, &sorted, params.accept, params.k, out);
    ctx.sorted = sorted;
}

/// Walk `view` from its entry point with `scorer`, `ef` wide, keeping only rows
/// `accept` takes (if any) as results: the results are left best first in `ctx.sorted`.
pub(crate) fn walk_from_entry<S: Scorer>(
    view: &GraphView<'_>,
    scorer: &S,
    ctx: &mut SearchContext,
    ef: usize,
    accept: Option<&dyn Fn(u32) -> bool>,
) {
    let entry = Item {
        score: scorer.score_one(view.entry),
        id: view.entry,
    };
    let top = view.max_level as usize;
    match accept {
        None => walk(view, scorer, ctx, entry, top, ef, &|_| true),
        Some(a) => {
            let acc = node_accept(view, a);
            walk(view, scorer, ctx, entry, top, ef, &acc);
        }
    }
}

/// After a walk over approximate scores: expand the best
/// [`Query::rescore_depth`] rows of `ctx.sorted` (duplicates, accepted rows
/// only), rescore them exactly in f32 and keep the best `k` in `out`, best
/// first (ties by smaller row).
pub(crate) fn rescore_into(
    view: &GraphView<'_>,
    vectors: &Vectors<'_>,
    params: &Query<'_>,
    query: &[f32],
    ctx: &mut SearchContext,
    out: &mut Vec<(u32, f32)>,
) {
    let sorted = std::mem::take(&mut ctx.sorted);
    expand(view, &sorted, params.accept, params.rescore_depth(), out);
    ctx.sorted = sorted;
    ctx.ids.clear();
    ctx.ids.extend(out.iter().map(|c| c.0));
    let scorer = F32Scorer::new(vectors, query);
    top_listed_into(&scorer, &ctx.ids, params.k, &mut ctx.scores, out);
}

/// Node-level acceptance: a representative counts when it or one of its duplicates passes.
fn node_accept<'v>(
    view: &'v GraphView<'_>,
    accept: &'v dyn Fn(u32) -> bool,
) -> impl Fn(u32) -> bool + 'v {
    move |id| accept(id) || view.duplicates(id).iter().any(|&d| accept(d))
}

/// Expand the sorted representatives into rows (duplicates carry the same score),
/// keeping accepted rows, until `limit` rows.
fn expand(
    view: &GraphView<'_>,
    sorted: &[Item],
    accept: Option<&dyn Fn(u32) -> bool>,
    limit: usize,
    out: &mut Vec<(u32, f32)>,
) {
    out.clear();
    let ok = |id: u32| accept.is_none_or(|a| a(id));
    for it in sorted {
        if out.len() >= limit {
            break;
        }
        if ok(it.id) {
            out.push((it.id, it.score));
        }
        for &d in view.duplicates(it.id) {
            if out.len() >= limit {
                break;
            }
            if ok(d) {
                out.push((d, it.score));
            }
        }
    }
}

/// Panics unless `query` and `vectors` fit `view` (a caller bug, never undefined behaviour).
#[track_caller]
pub(crate) fn check_args(view: &GraphView<'_>, vectors: &Vectors<'_>, query: &[f32]) {
    let dim = vectors.dim;
    assert!(
        dim > 0 && query.len() == dim,
        "eddy_hnsw::search: query has {} values, dim is {dim}",
        query.len()
    );
    assert!(
        view.dim == 0 || view.dim as usize == dim,
        "eddy_hnsw::search: graph was built for dim {}, called with dim {dim}",
        view.dim
    );
    assert!(
        vectors.data.len() >= view.len() * dim,
        "eddy_hnsw::search: {} vector values for {} rows of dim {dim}",
        vectors.data.len(),
        view.len()
    );
}

/// [`check_args`] plus the code table's shape (`code_dim`, `code_rows`) for
/// walks over quantized codes; `kernel` names the caller in the panic message.
#[track_caller]
pub(crate) fn check_code_args(
    kernel: &str,
    view: &GraphView<'_>,
    vectors: &Vectors<'_>,
    query: &[f32],
    (code_dim, code_rows): (usize, usize),
) {
    check_args(view, vectors, query);
    assert!(
        code_dim == vectors.dim && code_rows >= view.len(),
        "eddy_hnsw::{kernel}: codes are {code_rows} rows of dim {code_dim}, graph has {} rows of dim {}",
        view.len(),
        vectors.dim
    );
}
