//! Search over one collection: every segment plus the tail, deleted and
//! shadowed rows masked, per-source top-k merged into one top-k, each score
//! converted once to what users see.

use std::ops::Range;

use eddy_model::PointId;
use eddy_segment::{
    scan_many, scan_rescore_depth, scanned_by_codes, search_sealed, CodeScan, Neighbor,
};

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

/// The hits of one query's rows without a graph, scanned together
/// ([`scan_many`]), by source.
#[derive(Default)]
struct Scanned {
    /// The sources scanned: `None` for the tail, else a segment's index.
    sources: Vec<Option<usize>>,
    /// Their hits, source by source.
    hits: Vec<Vec<(u32, f32)>>,
}

impl Scanned {
    /// The hits of `source`, if it was scanned with the others.
    fn take(&mut self, source: Option<usize>) -> Option<Vec<Neighbor>> {
        let at = self.sources.iter().position(|&s| s == source)?;
        let hits = std::mem::take(self.hits.get_mut(at)?);
        Some(hits.into_iter().map(Neighbor::from).collect())
    }
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
    let sealed = search.sealed();
    let segments = &served.snapshot.segments;
    let segment_accept = |i: usize| move |row: u32| !served.shadows.refuses(i, row);
    let accepts: Vec<_> = (0..segments.len()).map(segment_accept).collect();
    // Rows without a graph (the tail, seals waiting for theirs) are scanned
    // together: one shortlist and one exact rescoring between them.
    let tail_live = |row: u32| served.tail.is_live(row) && tail_accept(row);
    let mut scanned = Scanned::default();
    let mut scans: Vec<CodeScan<'_>> = Vec::new();
    if !search.params.exact {
        if let Some((codes, vectors)) = served.tail.code_scan_parts() {
            let accept = &tail_live;
            scanned.sources.push(None);
            scans.push(CodeScan {
                codes,
                vectors,
                accept,
            });
        }
    }
    for (i, s) in segments.iter().enumerate() {
        if only.is_some_and(|o| !o.has(s.shard)) {
            continue;
        }
        let (index, codes) = (s.index.as_deref(), s.scan_codes.as_deref());
        let mask = served.row_mask(i);
        if let Some((codes, vectors)) = scanned_by_codes(&s.segment, index, codes, mask, &sealed) {
            let accept = &accepts[i];
            scanned.sources.push(Some(i));
            scans.push(CodeScan {
                codes,
                vectors,
                accept,
            });
        }
    }
    scanned.hits = scan_many(&scans, query, k, scan_rescore_depth(k));
    let tail_hits = match scanned.take(None) {
        Some(hits) => hits,
        None if search.params.exact => served.tail.search(query, k, &tail_accept),
        None => served
            .tail
            .search_quantized(query, k, scan_rescore_depth(k), &tail_accept),
    };
    for n in tail_hits {
        candidates.push((n, Source::Tail(n.row)));
    }
    for (i, s) in segments.iter().enumerate() {
        if only.is_some_and(|o| !o.has(s.shard)) {
            continue;
        }
        if let Some(hits) = scanned.take(Some(i)) {
            for n in hits {
                candidates.push((n, Source::Segment(i, n.row)));
            }
            continue;
        }
        let seg = &s.segment;
        let accept = &accepts[i];
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
            accept,
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

    /// A tail and a seal still waiting for its graph, both past the rows
    /// from which sign bits shortlist them, are scanned with one shortlist
    /// between them: the answers hold rows of both, each with its exact
    /// score, and the exact top 10 but for what the shortlist's depth
    /// gives up.
    #[test]
    fn a_tail_and_a_seal_without_a_graph_are_scanned_together() {
        use eddy_manifest::Manifest;
        use eddy_segment::{Residency, SHORTLIST_FROM_ROWS, SHORTLIST_MIN_DIM};

        use crate::collection::testing::{clustered_vector, written_segment_with};
        use crate::collection::Snapshot;

        let dim = SHORTLIST_MIN_DIM;
        let dir = tempfile::tempdir().expect("temp dir");
        let store = eddy_manifest::Store::open(dir.path()).expect("store");
        let def = CollectionDef {
            metric: Metric::Cosine,
            ..CollectionDef::new("c", dim as u32)
        };
        store.create_collection(&def).expect("create");
        let rows = SHORTLIST_FROM_ROWS as u64 + 500;
        let mut manifest = Manifest::empty("c");
        manifest.version = 1;
        manifest
            .segments
            .push(written_segment_with(&store, &def, rows, clustered_vector));
        let snapshot = Snapshot::load(
            &store,
            &def,
            &manifest,
            &Snapshot::default(),
            Residency::Mapped,
        )
        .expect("local store");
        let c = Collection::new(def.clone());
        c.install(snapshot);
        let seal = c.snapshot();
        assert!(seal.segments[0].index.is_none());
        assert!(seal.segments[0]
            .scan_codes
            .as_ref()
            .is_some_and(|s| s.shortlists()));
        // Rows about 16 centres, as embeddings cluster (the seal's rows are
        // written the same way).
        let of = |n: u64| clustered_vector(n, dim);
        c.apply_tail(|served| {
            for n in rows..2 * rows {
                let v = QueryBatch::new(&def, Vectors::Flat(of(n))).expect("valid");
                served
                    .tail
                    .upsert(PointId::Num(n), v.get(0), b"", 0, n as i64);
            }
            assert!(served.tail.scan_codes().is_some_and(|s| s.shortlists()));
        });
        // Near points of both: the seal's below `rows`, the tail's above.
        let near = |q: u64| {
            let mut v = of(q * 131 % (2 * rows));
            for (d, x) in v.iter_mut().enumerate() {
                *x += 0.05 * (((d as u64 * 7 + q) % 5) as f32 - 2.0);
            }
            v
        };
        let queries =
            QueryBatch::new(&def, Vectors::Rows((0..40).map(near).collect())).expect("valid");
        let (served, exact) = served_and_exact(&c, &def, &queries);
        let (mut found, mut from_seal, mut from_tail) = (0, 0, 0);
        for (q, (got, want)) in served.iter().zip(&exact).enumerate() {
            assert_eq!(got.len(), 10, "query {q}");
            let kth = want.last().map_or(f32::NEG_INFINITY, |h| h.score);
            found += got.iter().filter(|h| h.score >= kth - 1e-5).count();
            for h in got {
                let PointId::Num(n) = h.id else {
                    panic!("numeric ids only");
                };
                if n < rows {
                    from_seal += 1;
                } else {
                    from_tail += 1;
                }
                if let Some(w) = want.iter().find(|w| w.id == h.id) {
                    assert!((w.score - h.score).abs() < 1e-5, "query {q}: exact scores");
                }
            }
        }
        let recall = found as f64 / (10 * served.len()) as f64;
        assert!(recall >= 0.95, "recall@10 {recall}");
        assert!(from_seal > 0 && from_tail > 0, "{from_seal} / {from_tail}");
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
