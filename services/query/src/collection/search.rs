//! Search over one collection: every segment plus the tail, deleted and
//! shadowed rows masked, per-source top-k merged into one top-k, each score
//! converted once to what users see.

use std::ops::Range;

use eddy_model::PointId;
use eddy_segment::{scan_rescore_depth, search_sealed, Neighbor};

use super::{Collection, Served};
use crate::prepared::{PreparedSearch, QueryBatch, ShardSet};
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
        BatchResult {
            hits,
            offsets,
            missing_shards: Vec::new(),
        }
    }

    /// The current version of point `id`, if it exists.
    ///
    /// With `only`, a point of another shard is not found (a fan-out leg
    /// reads only the shards it was asked for).
    pub fn get(&self, id: &PointId, only: Option<&ShardSet>) -> Option<PointRecord> {
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
            if only.is_some_and(|o| !o.has_partition(row.partition)) {
                return None;
            }
            return record(row.vector, row.payload_json);
        }
        let (i, row) = served.snapshot.find(id)?;
        if only.is_some_and(|o| !o.has(served.snapshot.segments[i].shard)) {
            return None;
        }
        let seg = &served.snapshot.segments[i].segment;
        record(seg.vector(row), seg.payload_json(row))
    }
}

fn search_one(served: &Served, query: &[f32], search: &PreparedSearch) -> Vec<Hit> {
    let k = search.params.k;
    let metric = served.tail.metric();
    let filter = search.filter.as_ref();
    let mut candidates: Vec<(Neighbor, Source)> = Vec::new();
    let only = search.only_shards.as_ref();
    // Without a shard restriction or a filter every live tail row is
    // accepted (no row is looked up: 1.3 % of eddy-query's CPU under a
    // writer, by `perf`).
    let unrestricted = only.is_none() && filter.is_none();
    let tail_accept = |row: u32| {
        unrestricted || {
            let r = served.tail.row(row);
            only.is_none_or(|o| o.has_partition(r.partition))
                && filter.is_none_or(|f| f.matches_json(r.payload_json))
        }
    };
    let tail_hits = if search.params.exact {
        served.tail.search(query, k, &tail_accept)
    } else {
        served
            .tail
            .search_quantized(query, k, scan_rescore_depth(k), &tail_accept)
    };
    for n in tail_hits {
        candidates.push((n, Source::Tail(n.row)));
    }
    let sealed = search.sealed();
    for (i, s) in served.snapshot.segments.iter().enumerate() {
        if only.is_some_and(|o| !o.has(s.shard)) {
            continue;
        }
        let seg = &s.segment;
        let accept = |row: u32| !served.shadows.refuses(i, row);
        let mask = served.row_mask(i);
        if s.index.is_some() {
            // Made off this path; later searches scan by them.
            s.sign_bits.request_when_refused(seg, mask.masked);
        }
        let sign_bits = s.sign_bits.get();
        for n in search_sealed(
            seg,
            s.index.as_deref(),
            s.scan_codes.as_deref(),
            sign_bits,
            mask,
            query,
            &sealed,
            &accept,
        ) {
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

#[cfg(test)]
mod tests {
    use eddy_model::{CollectionDef, Metric};
    use eddy_segment::SCAN_CODES_FROM_ROWS;

    use super::*;
    use crate::collection::testing::served_and_exact;
    use crate::request::Vectors;

    const DIM: usize = 24;

    fn vector(n: u64) -> Vec<f32> {
        crate::collection::testing::vector_of(n, DIM)
    }

    /// A tail past the size where it keeps codes answers a graph search by
    /// its code scan: the same hits, with the same scores, as an exact
    /// search, tombstones and replaced rows masked.
    #[test]
    fn a_long_tail_answers_by_its_codes_as_the_exact_scan_does() {
        let def = CollectionDef {
            metric: Metric::Cosine,
            ..CollectionDef::new("t", DIM as u32)
        };
        let c = Collection::new(def.clone());
        let rows = SCAN_CODES_FROM_ROWS as u64 * 3;
        c.apply_tail(|served| {
            for n in 0..rows {
                let v = QueryBatch::new(&def, Vectors::Flat(vector(n))).expect("valid");
                served
                    .tail
                    .upsert(PointId::Num(n), v.get(0), b"", 0, n as i64);
            }
            for n in (0..rows).step_by(5) {
                served.tail.delete(PointId::Num(n), 0, (rows + n) as i64);
            }
            assert!(served.tail.is_quantized());
        });
        let queries = QueryBatch::new(
            &def,
            Vectors::Rows((0..30).map(|q| vector(100_000 + q)).collect()),
        )
        .expect("valid");
        let (graph, exact) = served_and_exact(&c, &def, &queries);
        for (q, (g, e)) in graph.iter().zip(&exact).enumerate() {
            let ids = |hits: &[Hit]| hits.iter().map(|h| h.id.clone()).collect::<Vec<_>>();
            assert_eq!(ids(g), ids(e), "query {q}");
            assert!(g
                .iter()
                .all(|h| matches!(h.id, PointId::Num(n) if !n.is_multiple_of(5))));
            for (a, b) in g.iter().zip(e) {
                assert!(
                    (a.score - b.score).abs() < 1e-5,
                    "query {q}: scores are exact"
                );
            }
        }
    }
}
