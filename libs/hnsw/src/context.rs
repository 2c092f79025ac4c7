//! Per-thread walk state: scored nodes, the visited stamps, the two heaps and
//! the buffers a walk reuses from query to query.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

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
    /// Candidates still to expand, best on top.
    pub(crate) cand: BinaryHeap<Item>,
    /// Results so far, worst on top.
    pub(crate) res: BinaryHeap<Reverse<Item>>,
    /// Results of the last walk, best first.
    pub(crate) sorted: Vec<Item>,
    /// Level-0 entry points of a walk.
    pub(crate) entries: Vec<Item>,
    /// Neighbour ids of the node being expanded.
    pub(crate) links: Vec<u32>,
    /// Ids about to be scored.
    pub(crate) ids: Vec<u32>,
    /// Scores of `ids`.
    pub(crate) scores: Vec<f32>,
    /// The query as symmetric SQ8 codes (L2 walks).
    pub(crate) qcode: Vec<u8>,
    /// The query at 7 bits (inner-product SQ8 walks).
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

    /// Seed a walk with `it` as both a candidate and a result.
    pub(crate) fn push_entry(&mut self, it: Item) {
        self.cand.push(it);
        self.res.push(Reverse(it));
    }

    /// Mark `id` visited in this walk; false when it already was.
    #[inline]
    pub(crate) fn visit(&mut self, id: u32) -> bool {
        let v = &mut self.visited[id as usize];
        if *v == self.epoch {
            false
        } else {
            *v = self.epoch;
            true
        }
    }
}
