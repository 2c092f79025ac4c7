//! Search: greedy descent on the upper levels, best-first beam on level 0.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use eddy_kernels::Kernels;

use crate::{GraphView, Space};

/// A scored node; ordered by score, then by smaller id.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Item {
    pub(crate) score: f32,
    pub(crate) id: u32,
}

impl PartialEq for Item {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Item {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.id.cmp(&self.id))
    }
}

/// Reusable per-thread search state: the visited stamps, heaps and buffers.
///
/// Create one per thread (`SearchContext::default()`) and pass it to every
/// search; after the first query on a graph nothing is allocated per query
/// (apart from the returned `Vec` of the non-`_into` functions).
#[derive(Debug, Default)]
pub struct SearchContext {
    visited: Vec<u16>,
    epoch: u16,
    cand: BinaryHeap<Item>,
    res: BinaryHeap<Reverse<Item>>,
    pub(crate) sorted: Vec<Item>,
    /// Level-0 entry points of a walk.
    entries: Vec<Item>,
    links: Vec<u32>,
    ids: Vec<u32>,
    scores: Vec<f32>,
    pub(crate) qcode: Vec<u8>,
    pub(crate) qi7: Vec<i8>,
}

impl SearchContext {
    /// A context with room for a graph of `n` nodes.
    pub fn with_capacity(n: usize) -> Self {
        let mut c = Self::default();
        c.visited.resize(n, 0);
        c
    }

    /// Start a new walk over `n` nodes: bump the epoch (clear the stamps on wrap).
    pub(crate) fn begin(&mut self, n: usize) {
        if self.visited.len() < n {
            self.visited.resize(n, 0);
        }
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.visited.fill(0);
            self.epoch = 1;
        }
        self.cand.clear();
        self.res.clear();
    }

    #[inline]
    pub(crate) fn visit_pub(&mut self, id: u32) -> bool {
        self.visit(id)
    }

    pub(crate) fn push_entry(&mut self, it: Item) {
        self.cand.push(it);
        self.res.push(Reverse(it));
    }

    #[inline]
    fn visit(&mut self, id: u32) -> bool {
        let v = &mut self.visited[id as usize];
        if *v == self.epoch {
            false
        } else {
            *v = self.epoch;
            true
        }
    }
}

/// Adjacency as seen by a walk: the owned/borrowed arrays, or the atomics of a build.
pub(crate) trait Links {
    /// Append the neighbours of `node` on `level` to `out`.
    fn get(&self, level: usize, node: u32, out: &mut Vec<u32>);
    /// Prefetch the level-0 row of `node`.
    fn prefetch0(&self, _node: u32) {}
}

impl Links for GraphView<'_> {
    #[inline]
    fn get(&self, level: usize, node: u32, out: &mut Vec<u32>) {
        out.extend_from_slice(self.neighbors_at(node, level));
    }

    #[inline]
    fn prefetch0(&self, node: u32) {
        let w = 1 + 2 * self.m as usize;
        let s = node as usize * w;
        if let Some(row) = self.level0.get(s..s + w) {
            eddy_kernels::prefetch(row);
        }
    }
}

/// Scores rows against one query ("higher is closer").
pub(crate) trait Scorer {
    /// Hint that row `id` is about to be scored.
    fn prefetch(&self, _id: u32) {}
    fn score_one(&self, id: u32) -> f32;
    fn score_ids(&self, ids: &[u32], out: &mut [f32]);
}

/// Exact f32 scoring.
pub(crate) struct F32Scorer<'a> {
    pub(crate) k: &'static Kernels,
    pub(crate) query: &'a [f32],
    pub(crate) data: &'a [f32],
    pub(crate) dim: usize,
    pub(crate) space: Space,
}

impl<'a> F32Scorer<'a> {
    pub(crate) fn new(data: &'a [f32], dim: usize, space: Space, query: &'a [f32]) -> Self {
        Self {
            k: Kernels::get(),
            query,
            data,
            dim,
            space,
        }
    }

    #[inline]
    pub(crate) fn row(&self, id: u32) -> &'a [f32] {
        let s = id as usize * self.dim;
        &self.data[s..s + self.dim]
    }
}

impl Scorer for F32Scorer<'_> {
    #[inline]
    fn prefetch(&self, id: u32) {
        let row = self.row(id);
        // The first 4 cache lines; the hardware streamer fetches the rest.
        eddy_kernels::prefetch(&row[..row.len().min(64)]);
    }

    #[inline]
    fn score_one(&self, id: u32) -> f32 {
        let row = self.row(id);
        match self.space {
            Space::Dot => self.k.dot(self.query, row),
            Space::L2 => -self.k.l2sq(self.query, row),
        }
    }

    #[inline]
    fn score_ids(&self, ids: &[u32], out: &mut [f32]) {
        match self.space {
            Space::Dot => self.k.dot_ids(self.query, self.data, ids, out),
            Space::L2 => {
                self.k.l2sq_ids(self.query, self.data, ids, out);
                for o in out.iter_mut() {
                    *o = -*o;
                }
            }
        }
    }
}

/// Greedy descent from `entry` through levels `top..=1`; returns the closest node found.
pub(crate) fn descend<L: Links, S: Scorer>(
    links: &L,
    scorer: &S,
    ctx: &mut SearchContext,
    mut cur: Item,
    top: usize,
    bottom: usize,
) -> Item {
    for level in (bottom..=top).rev() {
        loop {
            ctx.links.clear();
            links.get(level, cur.id, &mut ctx.links);
            let n = ctx.links.len();
            ctx.scores.clear();
            ctx.scores.resize(n, 0.0);
            scorer.score_ids(&ctx.links, &mut ctx.scores);
            let mut best = cur;
            for (&id, &s) in ctx.links.iter().zip(&ctx.scores) {
                let it = Item { score: s, id };
                if it > best {
                    best = it;
                }
            }
            if best.id == cur.id {
                break;
            }
            cur = best;
        }
    }
    cur
}

/// Best-first beam search on one level from the entries already in `ctx`
/// (`ctx.begin` called, entries visited and pushed). Results (accepted nodes
/// only, at most `ef`) end in `ctx.res`.
pub(crate) fn beam<L: Links, S: Scorer, A: Fn(u32) -> bool>(
    links: &L,
    scorer: &S,
    ctx: &mut SearchContext,
    level: usize,
    ef: usize,
    accept: &A,
) {
    while let Some(c) = ctx.cand.pop() {
        if ctx.res.len() >= ef {
            if let Some(Reverse(worst)) = ctx.res.peek() {
                if c.score < worst.score {
                    break;
                }
            }
        }
        if let Some(next) = ctx.cand.peek() {
            links.prefetch0(next.id);
        }
        ctx.links.clear();
        links.get(level, c.id, &mut ctx.links);
        ctx.ids.clear();
        for i in 0..ctx.links.len() {
            let nb = ctx.links[i];
            if ctx.visit(nb) {
                ctx.ids.push(nb);
            }
        }
        if ctx.ids.is_empty() {
            continue;
        }
        for &id in &ctx.ids {
            scorer.prefetch(id);
        }
        ctx.scores.clear();
        ctx.scores.resize(ctx.ids.len(), 0.0);
        scorer.score_ids(&ctx.ids, &mut ctx.scores);
        for i in 0..ctx.ids.len() {
            let it = Item {
                score: ctx.scores[i],
                id: ctx.ids[i],
            };
            let full = ctx.res.len() >= ef;
            let bound = match ctx.res.peek() {
                Some(Reverse(w)) if full => w.score,
                _ => f32::NEG_INFINITY,
            };
            if !full || it.score > bound {
                ctx.cand.push(it);
                if accept(it.id) {
                    ctx.res.push(Reverse(it));
                    if ctx.res.len() > ef {
                        ctx.res.pop();
                    }
                }
            }
        }
    }
}

/// The level-1 beam of a walk is `ef / UPPER_BEAM_DIVISOR` wide (so it costs
/// about an eighth of the level-0 beam), at most [`UPPER_BEAM_MAX`].
const UPPER_BEAM_DIVISOR: usize = 8;
/// Widest level-1 beam; wider ones found nothing more on the clustered 1M set.
const UPPER_BEAM_MAX: usize = 32;

/// Width of the level-1 beam for a level-0 beam of `ef` (1 = greedy).
///
/// Greedy descent can stop in the wrong cluster when clusters are far apart
/// (1,000 clusters in 1M × 128: recall@1 stayed at 0.988 up to ef 512 because
/// ~1 % of queries never reached their own cluster). A beam on level 1 picks
/// the cluster from several candidates: recall@10 at ef 256 went from 0.986
/// to 0.995 there, while on debian-minilm, where greedy descent does not get
/// lost, QPS at matched recall is unchanged.
pub(crate) fn upper_beam(ef: usize) -> usize {
    (ef / UPPER_BEAM_DIVISOR).clamp(1, UPPER_BEAM_MAX)
}

/// Full walk: greedy descent through the upper levels (a beam of
/// [`upper_beam`] on level 1), then a level-0 beam of width `ef`; results
/// sorted best first into `ctx.sorted`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn walk<L: Links, S: Scorer, A: Fn(u32) -> bool>(
    links: &L,
    scorer: &S,
    ctx: &mut SearchContext,
    n: usize,
    entry: Item,
    top: usize,
    ef: usize,
    accept: &A,
) {
    let width = upper_beam(ef);
    let mut entries = std::mem::take(&mut ctx.entries);
    entries.clear();
    if top > 0 && width > 1 {
        let ep = if top > 1 {
            descend(links, scorer, ctx, entry, top, 2)
        } else {
            entry
        };
        ctx.begin(n);
        ctx.visit(ep.id);
        ctx.push_entry(ep);
        beam(links, scorer, ctx, 1, width, &|_| true);
        entries.extend(ctx.res.drain().map(|Reverse(it)| it));
    } else if top > 0 {
        entries.push(descend(links, scorer, ctx, entry, top, 1));
    } else {
        entries.push(entry);
    }
    ctx.begin(n);
    for &e in &entries {
        ctx.visit(e.id);
        ctx.cand.push(e);
        if accept(e.id) {
            ctx.res.push(Reverse(e));
            if ctx.res.len() > ef {
                ctx.res.pop();
            }
        }
    }
    ctx.entries = entries;
    beam(links, scorer, ctx, 0, ef, accept);
    drain_sorted(ctx);
}

pub(crate) fn drain_sorted(ctx: &mut SearchContext) {
    ctx.sorted.clear();
    ctx.sorted.extend(ctx.res.drain().map(|Reverse(it)| it));
    ctx.sorted.sort_unstable_by(|a, b| b.cmp(a));
}

pub(crate) fn check_args(view: &GraphView<'_>, vectors: &[f32], dim: usize, query: &[f32]) {
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
        vectors.len() >= view.len() * dim,
        "eddy_hnsw::search: {} vector values for {} rows of dim {dim}",
        vectors.len(),
        view.len()
    );
}

/// [`check_args`] plus the code table's shape (`code_dim`, `code_rows`) for
/// walks over quantized codes; `kernel` names the caller in the panic message.
#[track_caller]
pub(crate) fn check_code_args(
    kernel: &str,
    view: &GraphView<'_>,
    vectors: &[f32],
    dim: usize,
    query: &[f32],
    code_dim: usize,
    code_rows: usize,
) {
    check_args(view, vectors, dim, query);
    assert!(
        code_dim == dim && code_rows >= view.len(),
        "eddy_hnsw::{kernel}: codes are {code_rows} rows of dim {code_dim}, graph has {} rows of dim {dim}",
        view.len()
    );
}

/// Node-level acceptance: a representative counts when it or one of its duplicates passes.
pub(crate) fn node_accept<'v>(
    view: &'v GraphView<'_>,
    accept: &'v dyn Fn(u32) -> bool,
) -> impl Fn(u32) -> bool + 'v {
    move |id| accept(id) || view.duplicates(id).iter().any(|&d| accept(d))
}

/// Expand the sorted representatives into rows (duplicates carry the same score),
/// keeping accepted rows, until `limit` rows.
pub(crate) fn expand(
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

/// Search with exact f32 traversal; results `(row, score)` best first, at most `k`.
///
/// `accept` restricts the results (payload filters, deleted rows) but not the walk.
/// `ef` is raised to `k` when smaller.
///
/// # Panics
/// If `query.len() != dim` or `vectors` holds fewer than `view.len()` rows.
#[allow(clippy::too_many_arguments)]
pub fn search(
    view: &GraphView<'_>,
    ctx: &mut SearchContext,
    vectors: &[f32],
    dim: usize,
    space: Space,
    query: &[f32],
    k: usize,
    ef: usize,
    accept: Option<&dyn Fn(u32) -> bool>,
) -> Vec<(u32, f32)> {
    let mut out = Vec::with_capacity(k);
    search_into(
        view, ctx, vectors, dim, space, query, k, ef, accept, &mut out,
    );
    out
}

/// [`search`] writing into `out` (cleared first): no allocation after warm-up.
///
/// # Panics
/// As [`search`].
#[allow(clippy::too_many_arguments)]
pub fn search_into(
    view: &GraphView<'_>,
    ctx: &mut SearchContext,
    vectors: &[f32],
    dim: usize,
    space: Space,
    query: &[f32],
    k: usize,
    ef: usize,
    accept: Option<&dyn Fn(u32) -> bool>,
    out: &mut Vec<(u32, f32)>,
) {
    out.clear();
    check_args(view, vectors, dim, query);
    if view.is_empty() || k == 0 {
        return;
    }
    let scorer = F32Scorer::new(vectors, dim, space, query);
    walk_from_entry(view, &scorer, ctx, ef.max(k), accept);
    let sorted = std::mem::take(&mut ctx.sorted);
    expand(view, &sorted, accept, k, out);
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
        None => walk(view, scorer, ctx, view.len(), entry, top, ef, &|_| true),
        Some(a) => {
            let acc = node_accept(view, a);
            walk(view, scorer, ctx, view.len(), entry, top, ef, &acc);
        }
    }
}

/// After a walk over approximate scores: expand the best `rescore` rows of
/// `ctx.sorted` (duplicates, accepted rows only) into `out`, rescore them exactly
/// in f32 and keep the best `k`, best first (ties by smaller row).
#[allow(clippy::too_many_arguments)]
pub(crate) fn rescore_into(
    view: &GraphView<'_>,
    ctx: &mut SearchContext,
    vectors: &[f32],
    dim: usize,
    space: Space,
    query: &[f32],
    k: usize,
    rescore: usize,
    accept: Option<&dyn Fn(u32) -> bool>,
    out: &mut Vec<(u32, f32)>,
) {
    let sorted = std::mem::take(&mut ctx.sorted);
    expand(view, &sorted, accept, rescore, out);
    ctx.sorted = sorted;
    ctx.ids.clear();
    ctx.ids.extend(out.iter().map(|c| c.0));
    ctx.scores.clear();
    ctx.scores.resize(ctx.ids.len(), 0.0);
    F32Scorer::new(vectors, dim, space, query).score_ids(&ctx.ids, &mut ctx.scores);
    for (c, &s) in out.iter_mut().zip(&ctx.scores) {
        c.1 = s;
    }
    out.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out.truncate(k);
}

/// Exact scan over `rows` (e.g. the rows matching a selective filter): top `k`
/// `(row, score)` best first.
///
/// # Panics
/// If `query.len() != dim` or a row is past the end of `vectors`.
pub fn exact_scan(
    vectors: &[f32],
    dim: usize,
    space: Space,
    query: &[f32],
    rows: &[u32],
    k: usize,
) -> Vec<(u32, f32)> {
    assert_eq!(query.len(), dim, "eddy_hnsw::exact_scan: query length");
    let mut scores = vec![0.0f32; rows.len()];
    F32Scorer::new(vectors, dim, space, query).score_ids(rows, &mut scores);
    let mut heap: BinaryHeap<Reverse<Item>> = BinaryHeap::with_capacity(k + 1);
    for (&id, &score) in rows.iter().zip(&scores) {
        let it = Item { score, id };
        if heap.len() < k {
            heap.push(Reverse(it));
        } else if let Some(Reverse(w)) = heap.peek() {
            if it > *w {
                heap.pop();
                heap.push(Reverse(it));
            }
        }
    }
    let mut v: Vec<Item> = heap.into_iter().map(|Reverse(i)| i).collect();
    v.sort_unstable_by(|a, b| b.cmp(a));
    v.into_iter().map(|i| (i.id, i.score)).collect()
}

/// Nodes that a level-0 walk from the entry point cannot reach (folded
/// duplicates count as reachable when their representative is).
pub fn unreachable_count(view: &GraphView<'_>) -> usize {
    let n = view.len();
    if n == 0 {
        return 0;
    }
    let reach = reachable(view);
    let mut dup = vec![false; n];
    for &d in view.dup_rows {
        dup[d as usize] = true;
    }
    (0..n).filter(|&i| !reach[i] && !dup[i]).count()
}

/// Level-0 reachability from the entry point.
pub(crate) fn reachable(view: &GraphView<'_>) -> Vec<bool> {
    let n = view.len();
    let mut reach = vec![false; n];
    if n == 0 {
        return reach;
    }
    let mut stack = vec![view.entry];
    reach[view.entry as usize] = true;
    while let Some(u) = stack.pop() {
        for &v in view.neighbors(u) {
            if !reach[v as usize] {
                reach[v as usize] = true;
                stack.push(v);
            }
        }
    }
    reach
}
