//! Scroll pages: the live points after a cursor, in id order, a page at a
//! time (the HTTP scroll, a fan-out leg's page, a paged Flight scan).

use std::collections::BTreeMap;

use eddy_filter::Filter;
use eddy_model::PointId;

use super::view::Live;
use super::Collection;
use crate::prepared::ShardSet;

/// One point of a scroll page, copied out of the collection.
#[derive(Debug, Clone)]
pub struct PagePoint {
    /// The id.
    pub id: PointId,
    /// The stored vector (unit length for cosine).
    pub vector: Vec<f32>,
    /// The payload as stored (JSON object bytes; empty = none).
    pub payload_json: Vec<u8>,
}

/// One page of a scroll: the (at most) `limit` smallest live ids after the
/// cursor, in id order.
#[derive(Debug, Clone)]
pub struct ScrollPage {
    /// The points.
    pub points: Vec<PagePoint>,
    /// Whether more follow.
    pub more: bool,
    /// Per partition, the first offset the page does not reflect.
    pub offsets: BTreeMap<u32, i64>,
}

impl Collection {
    /// One scroll page: the (at most) `limit` smallest ids after `after`
    /// among the live points `filter` lets through, now. Each segment
    /// seeks the cursor in its id order and reads at most `limit + 1`
    /// matching rows, so a page costs its own size (plus the rows it skips
    /// as deleted, shadowed or filtered out, and a pass over the tail),
    /// not the collection's.
    ///
    /// With `only`, the page holds only the points of those shards and
    /// its offsets only their partitions' (a fan-out leg's page).
    pub fn scroll(
        &self,
        filter: Option<&Filter>,
        after: Option<&PointId>,
        limit: usize,
        only: Option<&ShardSet>,
    ) -> ScrollPage {
        let served = self.served.read();
        let tail = &served.tail;
        let want = limit.saturating_add(1);
        let mut found: Vec<(PointId, Live)> = Vec::new();
        for row in 0..tail.rows() as u32 {
            if !tail.is_live(row) {
                continue;
            }
            let r = tail.row(row);
            if after.is_none_or(|a| r.id > a)
                && only.is_none_or(|o| o.has_partition(r.partition))
                && filter.is_none_or(|f| f.matches_json(r.payload_json))
            {
                found.push((r.id.clone(), Live::Tail(row)));
            }
        }
        for (i, s) in served.snapshot.segments.iter().enumerate() {
            if only.is_some_and(|o| !o.has(s.shard)) {
                continue;
            }
            let seg = &s.segment;
            let order = seg.rows_in_id_order();
            let mut taken = 0;
            for &row in order.get(seg.id_order_after(after)..).unwrap_or_default() {
                if taken == want {
                    break;
                }
                if s.deleted.contains(row) {
                    continue;
                }
                let Some(id) = seg.id(row) else { continue };
                let shadowed = !tail.is_empty() && tail.touched(&id).is_some();
                if shadowed || filter.is_some_and(|f| !f.matches_json(seg.payload_json(row))) {
                    continue;
                }
                found.push((id, Live::Segment(i, row)));
                taken += 1;
            }
        }
        if found.len() > want {
            found.select_nth_unstable_by(want, |a, b| a.0.cmp(&b.0));
            found.truncate(want);
        }
        found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let more = found.len() > limit;
        found.truncate(limit);
        let points = found
            .into_iter()
            .map(|(id, live)| {
                let (vector, payload_json) = match live {
                    Live::Tail(row) => {
                        let r = tail.row(row);
                        (r.vector, r.payload_json)
                    }
                    Live::Segment(s, row) => {
                        let seg = &served.snapshot.segments[s].segment;
                        (seg.vector(row), seg.payload_json(row))
                    }
                };
                PagePoint {
                    id,
                    vector: vector.to_vec(),
                    payload_json: payload_json.to_vec(),
                }
            })
            .collect();
        ScrollPage {
            points,
            more,
            offsets: served
                .visible_offsets()
                .into_iter()
                .filter(|(p, _)| only.is_none_or(|o| o.has_partition(*p)))
                .collect(),
        }
    }
}
