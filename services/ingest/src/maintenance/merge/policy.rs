//! When segments are merged: size tiers while events flow, mostly deleted
//! segments whenever they are due, everything small once ingest is idle.

use std::collections::BTreeMap;
use std::time::Duration;

use eddy_manifest::Manifest;

/// When segments are merged.
#[derive(Debug, Clone, Copy)]
pub struct MergePolicy {
    /// Segments in one size tier that trigger a merge of that tier.
    pub min_segments: usize,
    /// Most segments merged at once.
    pub max_segments: usize,
    /// Segments with at least this many live rows are never merged.
    pub max_rows: u64,
    /// Size tiers grow by this factor.
    pub tier_factor: u64,
    /// A segment whose deleted rows reach this share of its rows is merged
    /// (its deletes dropped) even without a full tier; `None`: never.
    /// Under upserts live rows fall, so the tiers (by live rows) scatter and
    /// never fill, while a walk still visits the deleted nodes of a graph:
    /// more of them for the same hits the more are deleted.
    pub deleted_share: Option<f64>,
    /// Once ingest has been idle this long, every segment below `max_rows`
    /// is merged into as few as `max_rows` allows ([`MergePolicy::pick_idle`]);
    /// `None`: never.
    pub idle: Option<Duration>,
}

impl Default for MergePolicy {
    fn default() -> Self {
        Self {
            min_segments: 4,
            max_segments: 10,
            max_rows: 2_000_000,
            tier_factor: 4,
            deleted_share: Some(0.5),
            idle: Some(Duration::from_secs(10)),
        }
    }
}

impl MergePolicy {
    /// The inputs of the next tier merge, if one is due: the smallest tier
    /// with `min_segments` segments (tiers by live rows, growing by
    /// `tier_factor`), its smallest `max_segments` members.
    pub fn pick(&self, manifest: &Manifest) -> Option<Vec<String>> {
        if self.min_segments < 2 {
            return None;
        }
        let mut tiers: BTreeMap<u32, Vec<(u64, &str)>> = BTreeMap::new();
        for s in &manifest.segments {
            let live_rows = s.live_rows();
            if live_rows >= self.max_rows {
                continue;
            }
            let mut tier = 0u32;
            let mut bound = 1_000u64;
            while live_rows >= bound {
                bound = bound.saturating_mul(self.tier_factor.max(2));
                tier += 1;
            }
            tiers
                .entry(tier)
                .or_default()
                .push((live_rows, s.id.as_str()));
        }
        tiers.into_values().find_map(|mut members| {
            if members.len() < self.min_segments {
                return None;
            }
            members.sort();
            members.truncate(self.max_segments.max(2));
            Some(members.into_iter().map(|(_, id)| id.to_owned()).collect())
        })
    }

    /// The segments whose deleted rows reach `deleted_share` of their rows,
    /// fewest live rows first, at most `max_segments` and `max_rows` live
    /// rows together (one alone is merged too: its deletes are dropped).
    pub fn pick_deleted(&self, manifest: &Manifest) -> Option<Vec<String>> {
        let share = self.deleted_share.filter(|_| self.min_segments >= 2)?;
        let due: Vec<(u64, &str)> = manifest
            .segments
            .iter()
            .filter(|s| {
                s.rows > 0
                    && s.live_rows() < self.max_rows
                    && s.deleted as f64 >= share * s.rows as f64
            })
            .map(|s| (s.live_rows(), s.id.as_str()))
            .collect();
        let picked = smallest_within(due, self.max_segments.max(1), self.max_rows);
        (!picked.is_empty()).then_some(picked)
    }

    /// The inputs of an idle merge: the segments below `max_rows` live rows,
    /// smallest first, as many as fit in `max_rows` together; `None` unless
    /// that is at least two. Tiers exist to bound write amplification while
    /// events flow; once they stop, the collection converges to one segment
    /// (a query walks one graph instead of one per segment).
    pub fn pick_idle(&self, manifest: &Manifest) -> Option<Vec<String>> {
        if self.idle.is_none() || self.min_segments < 2 {
            return None;
        }
        let small: Vec<(u64, &str)> = manifest
            .segments
            .iter()
            .map(|s| (s.live_rows(), s.id.as_str()))
            .filter(|(rows, _)| *rows < self.max_rows)
            .collect();
        let picked = smallest_within(small, usize::MAX, self.max_rows);
        (picked.len() >= 2).then_some(picked)
    }
}

/// The ids of `candidates` (live rows, id), fewest live rows first, at
/// most `count` of them and `max_rows` live rows together.
fn smallest_within(mut candidates: Vec<(u64, &str)>, count: usize, max_rows: u64) -> Vec<String> {
    candidates.sort();
    let mut total = 0u64;
    candidates
        .into_iter()
        .take(count)
        .take_while(|(rows, _)| {
            total += rows;
            total <= max_rows
        })
        .map(|(_, id)| id.to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maintenance::testing::{seal, store_with_collection};

    #[test]
    fn idle_merges_take_the_smallest_segments_that_fit_the_cap() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = store_with_collection(dir.path());
        seal(&store, 0..300);
        seal(&store, 300..400);
        seal(&store, 400..450);
        let manifest = store.latest_manifest("c").expect("manifest");
        let sizes = |ids: &[String]| -> Vec<u64> {
            ids.iter()
                .map(|id| {
                    manifest
                        .segments
                        .iter()
                        .find(|s| &s.id == id)
                        .map_or(0, |s| s.rows)
                })
                .collect()
        };
        let policy = MergePolicy {
            max_rows: 200,
            ..MergePolicy::default()
        };
        let picked = policy.pick_idle(&manifest).expect("two fit");
        assert_eq!(sizes(&picked), vec![50, 100]);
        let tight = MergePolicy {
            max_rows: 120,
            ..MergePolicy::default()
        };
        assert_eq!(tight.pick_idle(&manifest), None, "only one fits");
        let off = MergePolicy {
            idle: None,
            ..MergePolicy::default()
        };
        assert_eq!(off.pick_idle(&manifest), None);
    }
}
