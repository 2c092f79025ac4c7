//! A collection's live points matching a filter, taken at one moment:
//! what a filtered count, the HTTP scroll and the Flight scan read.
//!
//! Live means what a search would find: tail rows that are current, and
//! segment rows that are neither deleted nor shadowed by a fresher event
//! in the tail. A [`LiveView`] holds the snapshot (its segment files stay
//! open) and copies of the matching tail rows, so it reads consistently
//! after the lock is released while ingest seals and the tail moves on.

use std::collections::BTreeMap;
use std::sync::Arc;

use eddy_filter::Filter;
use eddy_model::PointId;
use eddy_segment::filter_rows;

use super::{Collection, Served, Snapshot};

/// One live point the view lists.
#[derive(Debug, Clone, Copy)]
enum Live {
    /// A tail row.
    Tail(u32),
    /// Row `1` of segment `0` of the snapshot.
    Segment(usize, u32),
}

/// Calls `visit` for every live point of `served` that `filter` lets
/// through, tail first, under the caller's read lock.
fn each_live(served: &Served, filter: Option<&Filter>, mut visit: impl FnMut(Live)) {
    let tail = &served.tail;
    for row in 0..tail.rows() as u32 {
        if tail.is_live(row) && filter.is_none_or(|f| f.matches_json(tail.row(row).payload_json)) {
            visit(Live::Tail(row));
        }
    }
    let tail_empty = tail.is_empty();
    for (i, s) in served.snapshot.segments.iter().enumerate() {
        let seg = &s.segment;
        let live = |row: u32| {
            !s.deleted.contains(row)
                && (tail_empty || seg.id(row).is_none_or(|id| tail.touched(&id).is_none()))
        };
        match filter {
            Some(f) => filter_rows(seg, f)
                .iter()
                .filter(|&r| live(r))
                .for_each(|r| visit(Live::Segment(i, r))),
            None => (0..seg.rows() as u32)
                .filter(|&r| live(r))
                .for_each(|r| visit(Live::Segment(i, r))),
        }
    }
}

/// A tail row copied out of the tail.
#[derive(Debug, Clone)]
struct TailPoint {
    id: PointId,
    vector: Vec<f32>,
    payload_json: Vec<u8>,
}

/// One point of a view, borrowed from it.
#[derive(Debug, Clone)]
pub struct ViewPoint<'a> {
    /// The id.
    pub id: PointId,
    /// The stored vector (unit length for cosine).
    pub vector: &'a [f32],
    /// The payload as stored (JSON object bytes; empty = none).
    pub payload_json: &'a [u8],
}

/// The live points matching a filter at one moment (see the module).
#[derive(Debug)]
pub struct LiveView {
    snapshot: Arc<Snapshot>,
    tail: Vec<TailPoint>,
    rows: Vec<(usize, u32)>,
    /// Per partition, the first offset the view does not reflect.
    pub offsets: BTreeMap<u32, i64>,
}

impl LiveView {
    /// Number of points.
    pub fn len(&self) -> usize {
        self.tail.len() + self.rows.len()
    }

    /// Whether it lists no point.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Point `i` (`0..len()`): tail points first, then segment rows.
    pub fn point(&self, i: usize) -> Option<ViewPoint<'_>> {
        if let Some(t) = self.tail.get(i) {
            return Some(ViewPoint {
                id: t.id.clone(),
                vector: &t.vector,
                payload_json: &t.payload_json,
            });
        }
        let (s, row) = *self.rows.get(i - self.tail.len())?;
        let seg = &self.snapshot.segments.get(s)?.segment;
        Some(ViewPoint {
            id: seg.id(row)?,
            vector: seg.vector(row),
            payload_json: seg.payload_json(row),
        })
    }

    /// The positions of the (at most) `limit` smallest ids after `after`,
    /// in id order, and whether more follow: one page of a scroll.
    pub fn page(&self, after: Option<&PointId>, limit: usize) -> (Vec<usize>, bool) {
        let mut candidates: Vec<(PointId, usize)> = (0..self.len())
            .filter_map(|i| {
                let id = self.point(i)?.id;
                after.is_none_or(|a| id > *a).then_some((id, i))
            })
            .collect();
        let more = candidates.len() > limit;
        if more {
            candidates.select_nth_unstable(limit);
            candidates.truncate(limit);
        }
        candidates.sort_unstable();
        (candidates.into_iter().map(|(_, i)| i).collect(), more)
    }
}

impl Collection {
    /// How many live points `filter` lets through (all without one), and
    /// the offsets that count reflects.
    pub fn count_matching(&self, filter: Option<&Filter>) -> (u64, BTreeMap<u32, i64>) {
        let served = self.served.read();
        let mut n = 0u64;
        each_live(&served, filter, |_| n += 1);
        (n, served.visible_offsets())
    }

    /// The live points `filter` lets through, now (see the module).
    pub fn view(&self, filter: Option<&Filter>) -> LiveView {
        let served = self.served.read();
        let mut tail = Vec::new();
        let mut rows = Vec::new();
        each_live(&served, filter, |live| match live {
            Live::Tail(row) => {
                let r = served.tail.row(row);
                tail.push(TailPoint {
                    id: r.id.clone(),
                    vector: r.vector.to_vec(),
                    payload_json: r.payload_json.to_vec(),
                });
            }
            Live::Segment(s, row) => rows.push((s, row)),
        });
        LiveView {
            snapshot: served.snapshot.clone(),
            tail,
            rows,
            offsets: served.visible_offsets(),
        }
    }
}

#[cfg(test)]
mod tests {
    use eddy_model::{CollectionDef, FieldType, IdType, Metric};
    use serde_json::json;

    use super::*;

    fn collection() -> Collection {
        let mut def = CollectionDef::new("v", 2);
        def.metric = Metric::L2;
        def.id_type = IdType::U64;
        def.payload_fields.insert("kind".into(), FieldType::Keyword);
        Collection::new(def)
    }

    #[test]
    fn counts_and_pages_follow_the_tail_and_the_filter() {
        let c = collection();
        c.apply_tail(|served| {
            for id in 0..10u64 {
                let payload = json!({"kind": if id % 2 == 0 { "even" } else { "odd" }});
                let payload = payload.to_string();
                served.tail.upsert(
                    PointId::Num(id),
                    &[id as f32, 0.0],
                    payload.as_bytes(),
                    0,
                    id as i64,
                );
            }
            served.tail.delete(PointId::Num(4), 0, 10);
        });
        let fields = c.def().payload_fields.clone();
        let even = Filter::parse(
            &json!({"must": [{"key": "kind", "match": {"value": "even"}}]}),
            &fields,
        )
        .expect("filter");
        assert_eq!(c.count_matching(None).0, 9);
        assert_eq!(c.count_matching(Some(&even)).0, 4, "0, 2, 6, 8");

        let view = c.view(Some(&even));
        let (first, more) = view.page(None, 3);
        let ids = |page: &[usize]| -> Vec<PointId> {
            page.iter()
                .filter_map(|&i| view.point(i).map(|p| p.id))
                .collect()
        };
        assert_eq!(ids(&first), [0, 2, 6].map(PointId::Num));
        assert!(more);
        let after = PointId::Num(6);
        let (rest, more) = view.page(Some(&after), 3);
        assert_eq!(ids(&rest), [PointId::Num(8)]);
        assert!(!more);
        // The view keeps its moment: later events do not change it.
        c.apply_tail(|served| served.tail.delete(PointId::Num(8), 0, 11));
        assert_eq!(view.len(), 4);
        assert_eq!(c.count_matching(Some(&even)).0, 3);
    }
}
