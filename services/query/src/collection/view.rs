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
use crate::prepared::ShardSet;

/// One live point the view lists.
#[derive(Debug, Clone, Copy)]
pub(super) enum Live {
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

    /// How many live points of `only`'s shards `filter` lets through (all
    /// without one), and the offsets of those shards' partitions that
    /// count reflects: a fan-out leg's count.
    pub fn count_in(&self, filter: Option<&Filter>, only: &ShardSet) -> (u64, BTreeMap<u32, i64>) {
        let served = self.served.read();
        let mut n = 0u64;
        each_live(&served, filter, |live| {
            let mine = match live {
                Live::Tail(row) => only.has_partition(served.tail.row(row).partition),
                Live::Segment(s, _) => only.has(served.snapshot.segments[s].shard),
            };
            n += u64::from(mine);
        });
        let offsets = served
            .visible_offsets()
            .into_iter()
            .filter(|(p, _)| only.has_partition(*p))
            .collect();
        (n, offsets)
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
    use crate::collection::ScrollPage;

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
        let ids = |page: &ScrollPage| -> Vec<PointId> {
            page.points.iter().map(|p| p.id.clone()).collect()
        };
        let first = c.scroll(Some(&even), None, 3, None);
        assert_eq!(ids(&first), [0, 2, 6].map(PointId::Num));
        assert!(first.more);
        let rest = c.scroll(Some(&even), Some(&PointId::Num(6)), 3, None);
        assert_eq!(ids(&rest), [PointId::Num(8)]);
        assert!(!rest.more);
        assert_eq!(rest.points[0].vector, [8.0, 0.0]);
        // The view keeps its moment: later events do not change it.
        c.apply_tail(|served| served.tail.delete(PointId::Num(8), 0, 11));
        assert_eq!(view.len(), 4);
        assert_eq!(c.count_matching(Some(&even)).0, 3);
    }

    /// A fan-out leg's count covers the asked shards' partitions alone,
    /// filtered, with only their offsets.
    #[test]
    fn a_legs_count_covers_its_shards_alone() {
        let mut def = CollectionDef::new("v", 2);
        def.metric = Metric::L2;
        def.id_type = IdType::U64;
        def.shards = 2;
        def.payload_fields.insert("kind".into(), FieldType::Keyword);
        let c = Collection::new(def);
        c.apply_tail(|served| {
            for id in 0..12u64 {
                let payload = json!({"kind": if id % 3 == 0 { "three" } else { "other" }});
                let payload = payload.to_string();
                // Partition id % 4: shard 0 holds partitions 0 and 2.
                served.tail.upsert(
                    PointId::Num(id),
                    &[id as f32, 0.0],
                    payload.as_bytes(),
                    (id % 4) as u32,
                    id as i64,
                );
            }
        });
        let shard = |s: u32| ShardSet {
            of: 2,
            shards: vec![s],
        };
        let (n0, offsets0) = c.count_in(None, &shard(0));
        assert_eq!(n0, 6, "ids 0, 2, 4, 6, 8, 10");
        assert!(offsets0.keys().all(|p| p % 2 == 0), "{offsets0:?}");
        assert_eq!(c.count_in(None, &shard(1)).0, 6);
        let three = Filter::parse(
            &json!({"must": [{"key": "kind", "match": {"value": "three"}}]}),
            &c.def().payload_fields,
        )
        .expect("filter");
        assert_eq!(c.count_in(Some(&three), &shard(0)).0, 2, "ids 0 and 6");
        assert_eq!(c.count_in(Some(&three), &shard(1)).0, 2, "ids 3 and 9");
        let both = ShardSet {
            of: 2,
            shards: vec![0, 1],
        };
        assert_eq!(c.count_in(None, &both).0, c.count_matching(None).0);
    }

    /// Two sealed segments (even and odd ids below 20, id 2 deleted) and a
    /// tail holding a fresher 7 (at 70), a new 25 and a tombstone for 9.
    fn sealed_and_tail(dir: &std::path::Path) -> Collection {
        let c = collection();
        let mut segments = Vec::new();
        for (n, ids) in [(0u64..20).step_by(2), (1u64..20).step_by(2)]
            .into_iter()
            .enumerate()
        {
            let mut w = eddy_segment::SegmentWriter::new(2, Metric::L2, IdType::U64);
            let mut rows = 0;
            for id in ids {
                w.push(eddy_segment::RowRef {
                    id: &PointId::Num(id),
                    vector: &[id as f32, 1.0],
                    partition: 0,
                    offset: id as i64,
                    payload_json: b"{}",
                })
                .expect("row");
                rows += 1;
            }
            let path = dir.join(format!("{n}.seg"));
            w.finish(&path).expect("segment");
            let segment = Arc::new(eddy_segment::Segment::open(&path).expect("open"));
            // Row 1 of the first segment (id 2) is deleted.
            let deleted: roaring::RoaringBitmap = if n == 0 {
                std::iter::once(1).collect()
            } else {
                roaring::RoaringBitmap::new()
            };
            segments.push(super::super::LoadedSegment {
                entry: eddy_manifest::SegmentEntry {
                    id: n.to_string(),
                    rows,
                    bytes: 0,
                    deletes: None,
                    deleted: deleted.len(),
                    offset_ranges: BTreeMap::new(),
                    index: None,
                },
                shard: 0,
                segment,
                deleted_bits: Arc::new(super::super::snapshot::deleted_bits(
                    &deleted,
                    rows as usize,
                )),
                deleted: Arc::new(deleted),
                index: None,
                scan_codes: None,
                sign_bits: Default::default(),
                indexed_fields: Arc::new(BTreeMap::new()),
                residency: eddy_segment::Residency::Mapped,
            });
        }
        c.install(Snapshot {
            version: 1,
            segments,
            cutoffs: BTreeMap::from([(0, 20)]),
            ..Snapshot::default()
        });
        c.apply_tail(|served| {
            // A fresher 7 (shadows the sealed one), a new 25, 9 deleted.
            served
                .tail
                .upsert(PointId::Num(7), &[70.0, 0.0], b"{}", 0, 20);
            served
                .tail
                .upsert(PointId::Num(25), &[25.0, 0.0], b"{}", 0, 21);
            served.tail.delete(PointId::Num(9), 0, 22);
        });
        c
    }

    /// Pages through segments and tail together: a segment row that is
    /// deleted, or shadowed by a fresher tail event, is skipped, and the
    /// pages cover every live id once, in order.
    #[test]
    fn scroll_pages_merge_segments_and_tail() {
        let dir = tempfile::tempdir().expect("tmp");
        let c = sealed_and_tail(dir.path());
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let page = c.scroll(None, after.as_ref(), 3, None);
            assert!(page.points.len() <= 3);
            seen.extend(page.points.iter().map(|p| (p.id.clone(), p.vector[0])));
            if !page.more {
                break;
            }
            after = page.points.last().map(|p| p.id.clone());
        }
        let want: Vec<(PointId, f32)> = (0u64..20)
            .filter(|id| *id != 2 && *id != 9)
            .map(|id| (PointId::Num(id), if id == 7 { 70.0 } else { id as f32 }))
            .chain(std::iter::once((PointId::Num(25), 25.0)))
            .collect();
        assert_eq!(seen, want);
        assert_eq!(c.count_matching(None).0, want.len() as u64);
    }

    /// Searches skip the sealed rows the tail shadows, whether the tail
    /// touched them after the snapshot was installed (the journal) or
    /// before a newer snapshot came (the rebuild at install).
    #[test]
    fn searches_skip_sealed_rows_the_tail_shadows() {
        use crate::prepared::{PreparedSearch, QueryBatch};
        use crate::request::{SearchRequest, Vectors};

        let dir = tempfile::tempdir().expect("tmp");
        let c = sealed_and_tail(dir.path());
        let def = c.def();
        let nearest = |c: &Collection, at: f32| -> Vec<PointId> {
            let queries = QueryBatch::new(&def, Vectors::Flat(vec![at, 1.0])).expect("valid");
            let mut request = SearchRequest::default();
            request.params.k = 3;
            let search = PreparedSearch::new(&def, request).expect("valid");
            let mut ids: Vec<PointId> = c.search(&queries, 0..1, &search).hits[0]
                .iter()
                .map(|h| h.id.clone())
                .collect();
            ids.sort();
            ids
        };
        // Around 7.9: sealed 7 is shadowed by the tail's 7 (at 70), 9 is
        // deleted; without them 7 and 9 would be second and third.
        let want = [6, 8, 10].map(PointId::Num).to_vec();
        assert_eq!(nearest(&c, 7.9), want);
        let mut again = Snapshot::clone(&c.snapshot());
        again.version += 1;
        c.install(again);
        assert_eq!(nearest(&c, 7.9), want, "rebuilt at install");
        c.apply_tail(|served| served.tail.delete(PointId::Num(6), 0, 23));
        assert_eq!(
            nearest(&c, 7.9),
            [5, 8, 10].map(PointId::Num).to_vec(),
            "a later tombstone shadows at once"
        );
    }
}
