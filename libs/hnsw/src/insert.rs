//! Inserting one node into a graph under construction: find its neighbours
//! on each of its levels with the same walk a search makes (over SQ8 codes
//! when the build has them, rescored in f32), then link them both ways.

use parking_lot::Mutex;

use crate::context::{Item, SearchContext};
use crate::link::{BuildState, Pruned, Scratch};
use crate::scorer::{F32Scorer, Scorer};
use crate::sq8::Sq8Scorer;
use crate::walk::{beam, descend, drain_sorted, walk, Links};

/// One build thread's reusable state.
#[derive(Default)]
pub(crate) struct Worker {
    ctx: SearchContext,
    scratch: Scratch,
    /// The neighbours picked for the node being inserted, by level.
    picked: Vec<Vec<Item>>,
    pruned: Vec<Pruned>,
}

impl Worker {
    /// A worker for a graph of `n` nodes.
    pub(crate) fn new(n: usize) -> Self {
        Self {
            ctx: SearchContext::with_capacity(n),
            ..Self::default()
        }
    }
}

/// Where a node goes: its id and level, and the graph's entry point and
/// top level when its insertion started.
#[derive(Clone, Copy)]
struct Placement {
    node: u32,
    level: usize,
    entry: u32,
    top: usize,
}

/// Insert node `q` (its level in `levels`); `global` holds the entry point
/// and top level, and is taken over by `q` when it reaches higher.
pub(crate) fn insert(
    g: &BuildState<'_>,
    global: &Mutex<(u32, usize)>,
    levels: &[u8],
    q: u32,
    worker: &mut Worker,
) {
    let level = usize::from(levels[q as usize]);
    let guard = global.lock();
    let (entry, top) = *guard;
    let hold = if level > top {
        Some(guard)
    } else {
        drop(guard);
        None
    };
    let at = Placement {
        node: q,
        level,
        entry,
        top,
    };
    let query = g.vectors.row(q);
    let exact = F32Scorer::new(&g.vectors, query);
    match &g.sq8 {
        Some(codes) => {
            let (mut qcode, mut qi7) = (
                std::mem::take(&mut worker.scratch.qcode),
                std::mem::take(&mut worker.scratch.qi7),
            );
            let approx = Sq8Scorer::new(codes, g.vectors.metric, query, &mut qcode, &mut qi7);
            link_levels(g, &approx, Some(&exact), at, worker);
            worker.scratch.qcode = qcode;
            worker.scratch.qi7 = qi7;
        }
        None => link_levels(g, &exact, None, at, worker),
    }
    if let Some(mut guard) = hold {
        *guard = (q, level);
    }
}

/// Find the node's neighbours on each of its levels with `scorer` (rescoring
/// the beam's candidates with `exact` when `scorer` is approximate) and link
/// them both ways.
///
/// The back links wait until the node's own lists are set on all its levels.
/// Linked back on an upper level first, the node could be reached there by a
/// concurrent insert while its lower lists were still empty: that insert then
/// descended to it, found no other neighbour and linked to it alone, and its
/// back link was overwritten when the node's own list was set (125 lists in
/// 200 builds of `tests::search::parallel_build_has_recall`, 3 threads on 2
/// loaded cores). Such nodes misled the descent: that test's recall@10 fell
/// to 0.93 in 3 of 1,000 runs (below its 0.95), and stayed ≥ 0.987 in 1,000
/// runs with the back links last. A single-threaded build makes the same
/// graph either way (a level's walk reads only that level's lists).
///
/// A node on level 0 only (15 of 16) is placed with the same walk a search
/// makes, level-1 beam included ([`crate::walk::upper_beam`]): with greedy
/// descent some nodes of far-apart clusters were linked from a wrong cluster
/// (on the clustered 1M set recall@10 at ef 512 went from 0.9953 to 0.9977 with
/// the beam, build time unchanged).
fn link_levels<S: Scorer>(
    g: &BuildState<'_>,
    scorer: &S,
    exact: Option<&F32Scorer<'_>>,
    at: Placement,
    worker: &mut Worker,
) {
    let q = at.node;
    let ef = g.ef_construction;
    let mut cur = Item {
        score: scorer.score_one(at.entry),
        id: at.entry,
    };
    if at.level == 0 && at.top > 0 {
        walk(g, scorer, &mut worker.ctx, cur, at.top, ef, &|id| id != q);
        connect(g, exact, 0, q, worker);
        link_back(g, 0, q, worker);
        return;
    }
    if at.top > at.level {
        cur = descend(g, scorer, &mut worker.ctx, cur, at.top, at.level + 1);
    }
    let n = g.nodes();
    for l in (0..=at.level.min(at.top)).rev() {
        let ctx = &mut worker.ctx;
        ctx.begin(n);
        ctx.visit(cur.id);
        ctx.push_entry(cur);
        beam(g, scorer, ctx, l, ef, &|id| id != q);
        drain_sorted(ctx);
        if let Some(&best) = ctx.sorted.first() {
            cur = best;
        }
        connect(g, exact, l, q, worker);
    }
    link_back(g, at.level.min(at.top), q, worker);
}

/// Set `q`'s list on level `l` to the heuristic's pick of the candidates in
/// `ctx.sorted` (rescored with `exact` first when given), kept in
/// `worker.picked[l]` for [`link_back`].
fn connect(
    g: &BuildState<'_>,
    exact: Option<&F32Scorer<'_>>,
    l: usize,
    q: u32,
    worker: &mut Worker,
) {
    let Worker {
        ctx,
        scratch,
        picked,
        pruned,
    } = worker;
    if let Some(exact) = exact {
        scratch.ids.clear();
        scratch.ids.extend(ctx.sorted.iter().map(|it| it.id));
        scratch.scores.clear();
        scratch.scores.resize(scratch.ids.len(), 0.0);
        exact.score_ids(&scratch.ids, &mut scratch.scores);
        for (it, &sc) in ctx.sorted.iter_mut().zip(&scratch.scores) {
            it.score = sc;
        }
        ctx.sorted.sort_unstable_by(|a, b| b.cmp(a));
    }
    let keep = if l == 0 { g.level0_out } else { g.m };
    if picked.len() <= l {
        picked.resize_with(l + 1, Vec::new);
    }
    let picked = &mut picked[l];
    g.select(&ctx.sorted, keep, picked, pruned);
    let _lock = g.locks[q as usize].lock();
    g.set_row(l, q, picked);
}

/// Link `q`'s picks on levels `top..=0` (set by [`connect`]) back to `q`.
fn link_back(g: &BuildState<'_>, top: usize, q: u32, worker: &mut Worker) {
    let Worker {
        picked, scratch, ..
    } = worker;
    for (l, picked) in picked.iter().enumerate().take(top + 1).rev() {
        for s in picked {
            g.add_link(l, s.id, q, scratch);
        }
    }
}
