//! Connectivity: what a level-0 walk from the entry point reaches, and the
//! passes after the build: `repair` links every node the level-0 graph cannot
//! reach from the entry point, `boost_in_degree` gives nodes with few
//! in-links back links from their own nearest neighbours.

use eddy_kernels::Kernels;

use crate::context::{Item, SearchContext};
use crate::scorer::{F32Scorer, Scorer};
use crate::walk::walk;
use crate::{Graph, GraphView, Vectors};

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
fn reachable(view: &GraphView<'_>) -> Vec<bool> {
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

/// Link every node unreachable at level 0 from the entry into the list of its
/// closest reachable node (evicting a neighbour that has other in-links).
pub(crate) fn repair(graph: &mut Graph, vectors: &Vectors<'_>, rep: &[u32], ef: usize) {
    let n = graph.n as usize;
    let w = 1 + 2 * graph.m as usize;
    for _round in 0..2 {
        let mut reach = reachable(&graph.view());
        let todo: Vec<u32> = (0..n as u32)
            .filter(|&i| !reach[i as usize] && rep[i as usize] == i)
            .collect();
        if todo.is_empty() {
            return;
        }
        let mut indeg = vec![0u32; n];
        for i in 0..n as u32 {
            for &v in graph.view().neighbors(i) {
                indeg[v as usize] += 1;
            }
        }
        let mut ctx = SearchContext::with_capacity(n);
        for u in todo {
            if reach[u as usize] {
                continue;
            }
            let cands: Vec<Item> = {
                let view = graph.view();
                let scorer = F32Scorer::new(vectors, vectors.row(u));
                let entry = Item {
                    score: scorer.score_one(view.entry),
                    id: view.entry,
                };
                let top = view.max_level as usize;
                walk(&view, &scorer, &mut ctx, entry, top, ef, &|_| true);
                ctx.sorted.clone()
            };
            let mut linked = false;
            for c in cands.iter().filter(|c| c.id != u && reach[c.id as usize]) {
                let r = c.id as usize;
                let row = &mut graph.level0[r * w..(r + 1) * w];
                let count = (row[0] as usize).min(w - 1);
                if count < w - 1 {
                    row[1 + count] = u;
                    row[0] = count as u32 + 1;
                    linked = true;
                } else {
                    // Evict the neighbour with the most other in-links.
                    let (slot, &victim) = row[1..]
                        .iter()
                        .enumerate()
                        .max_by_key(|(_, &v)| indeg[v as usize])
                        .unwrap_or((0, &row[1]));
                    if indeg[victim as usize] > 1 {
                        indeg[victim as usize] -= 1;
                        row[1 + slot] = u;
                        linked = true;
                    }
                }
                if linked {
                    indeg[u as usize] += 1;
                    break;
                }
            }
            if linked {
                // Mark everything newly reachable from u.
                reach[u as usize] = true;
                let mut stack = vec![u];
                while let Some(x) = stack.pop() {
                    for &v in graph.view().neighbors(x) {
                        if !reach[v as usize] {
                            reach[v as usize] = true;
                            stack.push(v);
                        }
                    }
                }
            }
        }
    }
}

/// Give nodes with few level-0 in-links back links from their own out-neighbours
/// (closest first), evicting the neighbour's farthest link when that one keeps
/// enough in-links. Runs in node order, so it is deterministic.
pub(crate) fn boost_in_degree(
    graph: &mut Graph,
    vectors: &Vectors<'_>,
    rep: &[u32],
    min_in: usize,
) {
    let n = graph.n as usize;
    let w = 1 + 2 * graph.m as usize;
    let k = Kernels::get();
    let mut indeg = vec![0u32; n];
    for i in 0..n as u32 {
        for &v in graph.view().neighbors(i) {
            indeg[v as usize] += 1;
        }
    }
    let min_in = min_in as u32;
    let mut outs: Vec<Item> = Vec::new();
    for u in 0..n as u32 {
        if rep[u as usize] != u || indeg[u as usize] >= min_in {
            continue;
        }
        outs.clear();
        outs.extend(graph.view().neighbors(u).iter().map(|&v| Item {
            score: vectors.pair(k, u, v),
            id: v,
        }));
        outs.sort_unstable_by(|a, b| b.cmp(a));
        for o in &outs {
            if indeg[u as usize] >= min_in {
                break;
            }
            let v = o.id as usize;
            let row = &mut graph.level0[v * w..(v + 1) * w];
            let count = (row[0] as usize).min(w - 1);
            if row[1..1 + count].contains(&u) {
                continue;
            }
            if count < w - 1 {
                row[1 + count] = u;
                row[0] = count as u32 + 1;
                indeg[u as usize] += 1;
                continue;
            }
            // Farthest neighbour of v that keeps enough in-links, if it is farther than u.
            let mut victim: Option<(usize, f32)> = None;
            for (slot, &x) in row[1..].iter().enumerate() {
                if indeg[x as usize] <= min_in {
                    continue;
                }
                let s = vectors.pair(k, v as u32, x);
                if victim.is_none_or(|(_, best)| s < best) {
                    victim = Some((slot, s));
                }
            }
            if let Some((slot, s)) = victim {
                if s < o.score {
                    indeg[row[1 + slot] as usize] -= 1;
                    row[1 + slot] = u;
                    indeg[u as usize] += 1;
                }
            }
        }
    }
}
