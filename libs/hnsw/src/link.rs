//! The adjacency of a graph under construction, shared by the build threads:
//! atomic rows with one lock per node (like hnswlib), Malkov's
//! neighbour-selection heuristic with alpha relaxation, and back links that
//! prune a full list.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use eddy_kernels::Kernels;
use eddy_model::Metric;
use parking_lot::Mutex;

use crate::context::Item;
use crate::walk::Links;
use crate::{Sq8View, Vectors};

/// What every build thread shares: the vectors, the atomic adjacency and
/// its locks, and the build settings the linking needs.
pub(crate) struct BuildState<'a> {
    pub(crate) vectors: Vectors<'a>,
    pub(crate) m: usize,
    pub(crate) k: &'static Kernels,
    pub(crate) level0: Vec<AtomicU32>,
    pub(crate) upper_start: Vec<u32>,
    pub(crate) upper: Vec<AtomicU32>,
    pub(crate) locks: Vec<Mutex<()>>,
    /// Beam width while inserting.
    pub(crate) ef_construction: usize,
    pub(crate) keep_pruned: bool,
    /// Level-0 links a new node selects (`M`, or `2M` with `wide_level0`).
    pub(crate) level0_out: usize,
    pub(crate) alpha: f32,
    /// Codes the construction beam scores on, when it runs on SQ8.
    pub(crate) sq8: Option<Sq8View<'a>>,
}

impl Links for BuildState<'_> {
    #[inline]
    fn nodes(&self) -> usize {
        self.locks.len()
    }

    #[inline]
    fn get(&self, level: usize, node: u32, out: &mut Vec<u32>) {
        let row = self.row(level, node);
        let count = (row[0].load(Relaxed) as usize).min(row.len() - 1);
        out.extend(row[1..1 + count].iter().map(|a| a.load(Relaxed)));
    }

    #[inline]
    fn prefetch0(&self, node: u32) {
        eddy_kernels::prefetch(self.row(0, node));
    }
}

/// A candidate the heuristic pruned, with the score to the kept node that dominated it.
#[derive(Clone, Copy)]
pub(crate) struct Pruned {
    item: Item,
    dom: f32,
}

/// Per-thread buffers of [`BuildState::add_link`] and the SQ8 query codes.
#[derive(Default)]
pub(crate) struct Scratch {
    cands: Vec<Item>,
    sel: Vec<Item>,
    pruned: Vec<Pruned>,
    pub(crate) ids: Vec<u32>,
    pub(crate) scores: Vec<f32>,
    pub(crate) qcode: Vec<u8>,
    pub(crate) qi7: Vec<i8>,
}

impl BuildState<'_> {
    fn row(&self, level: usize, node: u32) -> &[AtomicU32] {
        if level == 0 {
            let w = 1 + 2 * self.m;
            &self.level0[node as usize * w..(node as usize + 1) * w]
        } else {
            let w = 1 + self.m;
            let r = self.upper_start[node as usize] as usize + level - 1;
            &self.upper[r * w..(r + 1) * w]
        }
    }

    pub(crate) fn pair(&self, a: u32, b: u32) -> f32 {
        self.vectors.pair(self.k, a, b)
    }

    /// Distance from a score (higher is closer): `1 - cos` for dot, `l2sq` for L2.
    fn dist(&self, score: f32) -> f32 {
        match self.vectors.metric {
            Metric::Cosine | Metric::Dot => 1.0 - score,
            Metric::L2 => -score,
        }
    }

    /// Malkov's heuristic over `cands` (sorted best first by score to the base node),
    /// then the `alpha` pass, then (with `keep_pruned`) fill from the pruned ones.
    pub(crate) fn select(
        &self,
        cands: &[Item],
        keep: usize,
        out: &mut Vec<Item>,
        pruned: &mut Vec<Pruned>,
    ) {
        out.clear();
        pruned.clear();
        if cands.len() <= keep {
            out.extend_from_slice(cands);
            return;
        }
        for &c in cands {
            if out.len() >= keep {
                break;
            }
            // The first kept `r` closer to `c` than the base is dominates it.
            let dominator = out
                .iter()
                .map(|r| self.pair(c.id, r.id))
                .find(|&s| s > c.score);
            match dominator {
                Some(s) => pruned.push(Pruned { item: c, dom: s }),
                None => out.push(c),
            }
        }
        if self.alpha > 1.0 && out.len() < keep && !pruned.is_empty() {
            self.relax(keep, out, pruned);
        }
        if self.keep_pruned {
            // Fill up to half the list only, so later back links still find free slots.
            let room = (keep / 2).saturating_sub(out.len());
            out.extend(pruned.iter().take(room).map(|p| p.item));
        }
    }

    /// The `alpha` pass: keep a pruned candidate `c` unless some kept `r` has
    /// `alpha * d(c, r) <= d(c, base)`; what stays pruned stays in `pruned`.
    fn relax(&self, keep: usize, out: &mut Vec<Item>, pruned: &mut Vec<Pruned>) {
        let alpha = self.alpha;
        let first = out.len();
        pruned.retain(|p| {
            if out.len() >= keep {
                return true;
            }
            let dc = self.dist(p.item.score);
            // The dominator found above usually occludes too: test it first.
            let occluded = alpha * self.dist(p.dom) <= dc
                || out
                    .iter()
                    .any(|r| alpha * self.dist(self.pair(p.item.id, r.id)) <= dc);
            if !occluded {
                out.push(p.item);
            }
            occluded
        });
        // Keep the list sorted best first (search and later prunes expect it).
        if out.len() > first {
            out.sort_unstable_by(|a, b| b.cmp(a));
        }
    }

    /// Replace `node`'s list on `level` with `ids`.
    pub(crate) fn set_row(&self, level: usize, node: u32, ids: &[Item]) {
        let row = self.row(level, node);
        for (slot, it) in row[1..].iter().zip(ids) {
            slot.store(it.id, Relaxed);
        }
        row[0].store(ids.len().min(row.len() - 1) as u32, Relaxed);
    }

    /// Add the back link `from -> to` at `level`, pruning `from`'s list when full.
    pub(crate) fn add_link(&self, level: usize, from: u32, to: u32, scratch: &mut Scratch) {
        let _g = self.locks[from as usize].lock();
        let row = self.row(level, from);
        let cap = row.len() - 1;
        let count = (row[0].load(Relaxed) as usize).min(cap);
        if row[1..1 + count].iter().any(|a| a.load(Relaxed) == to) {
            return;
        }
        if count < cap {
            row[1 + count].store(to, Relaxed);
            row[0].store(count as u32 + 1, Relaxed);
            return;
        }
        scratch.cands.clear();
        scratch.cands.push(Item {
            score: self.pair(from, to),
            id: to,
        });
        for a in &row[1..1 + count] {
            let id = a.load(Relaxed);
            scratch.cands.push(Item {
                score: self.pair(from, id),
                id,
            });
        }
        scratch.cands.sort_unstable_by(|a, b| b.cmp(a));
        let Scratch {
            cands, sel, pruned, ..
        } = scratch;
        self.select(cands, cap, sel, pruned);
        self.set_row(level, from, sel);
    }
}
