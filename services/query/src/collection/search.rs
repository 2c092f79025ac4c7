//! Search over one collection: every segment plus the tail, deleted and
//! shadowed rows masked, per-source top-k merged into one top-k, each score
//! converted once to what users see.

use std::ops::Range;

use eddy_model::PointId;
use eddy_segment::{search_sealed, Neighbor};

use super::{Collection, Served};
use crate::prepared::{PreparedSearch, QueryBatch};
use crate::request::PayloadSelector;
use crate::results::{BatchResult, Hit, HitPayload};

/// Where a candidate came from.
#[derive(Debug, Clone, Copy)]
enum Source {
    Tail(u32),
    Segment(usize, u32),
}

/// A point looked up by id: the tail first, then the segments.
#[derive(Debug, Clone)]
pub struct PointRecord {
    /// The id.
    pub id: PointId,
    /// The stored vector (normalised for cosine).
    pub vector: Vec<f32>,
    /// The payload, as stored.
    pub payload: HitPayload,
}

impl Collection {
    /// Runs the queries `range` of `queries` against the current snapshot
    /// and tail.
    ///
    /// The read lock is taken per query, not per batch, so a long batch never
    /// holds the tail writer back; the offsets reported are those before the
    /// first query, a lower bound for the whole batch.
    pub fn search(
        &self,
        queries: &QueryBatch,
        range: Range<usize>,
        search: &PreparedSearch,
    ) -> BatchResult {
        let offsets = self.served.read().visible_offsets();
        let hits = queries
            .iter(range)
            .map(|q| search_one(&self.served.read(), q, search))
            .collect();
        BatchResult { hits, offsets }
    }

    /// The current version of point `id`, if it exists.
    pub fn get(&self, id: &PointId) -> Option<PointRecord> {
        let served = self.served.read();
        let all = PayloadSelector::All;
        let record = |vector: &[f32], payload: &[u8]| {
            HitPayload::select(payload, &all).map(|payload| PointRecord {
                id: id.clone(),
                vector: vector.to_vec(),
                payload,
            })
        };
        if let Some(touch) = served.tail.touched(id) {
            if touch.deleted {
                return None;
            }
            let row = served.tail.row(served.tail.row_of(id)?);
            return record(row.vector, row.payload_json);
        }
        let (i, row) = served.snapshot.find(id)?;
        let seg = &served.snapshot.segments[i].segment;
        record(seg.vector(row), seg.payload_json(row))
    }
}

fn search_one(served: &Served, query: &[f32], search: &PreparedSearch) -> Vec<Hit> {
    let k = search.params.k;
    let metric = served.tail.metric();
    let filter = search.filter.as_ref();
    let mut candidates: Vec<(Neighbor, Source)> = Vec::new();
    let tail_accept =
        |row: u32| filter.is_none_or(|f| f.matches_json(served.tail.row(row).payload_json));
    for n in served.tail.search(query, k, &tail_accept) {
        candidates.push((n, Source::Tail(n.row)));
    }
    let sealed = search.sealed();
    let tail_empty = served.tail.is_empty();
    for (i, s) in served.snapshot.segments.iter().enumerate() {
        let seg = &s.segment;
        let accept = |row: u32| {
            !s.deleted.contains(row)
                && (tail_empty
                    || seg
                        .id(row)
                        .is_none_or(|id| served.tail.touched(&id).is_none()))
        };
        for n in search_sealed(seg, s.index.as_deref(), query, &sealed, &accept) {
            candidates.push((n, Source::Segment(i, n.row)));
        }
    }
    // Best first; a stable sort keeps ties in source order (tail, then segments).
    candidates.sort_by(|a, b| b.0.score.total_cmp(&a.0.score));
    candidates.truncate(k);
    candidates
        .into_iter()
        .filter_map(|(n, src)| {
            let (id, payload_json) = match src {
                Source::Tail(row) => {
                    let r = served.tail.row(row);
                    (r.id.clone(), r.payload_json)
                }
                Source::Segment(i, row) => {
                    let seg = &served.snapshot.segments[i].segment;
                    (seg.id(row)?, seg.payload_json(row))
                }
            };
            Some(Hit {
                id,
                score: metric.reported(n.score),
                payload: HitPayload::select(payload_json, &search.params.with_payload),
            })
        })
        .collect()
}
