//! Which sealed rows a search refuses: deleted ones, and those the tail
//! shadows (a row whose id has an event in the tail, a newer version or a
//! tombstone, is not served from its segment). Kept as one bitset per
//! segment of the installed snapshot, so a search asks a bit per candidate
//! instead of building the row's id and looking it up in the tail (15.8 %
//! of eddy-query's CPU under a 1,000 events/s writer before, by `perf`),
//! and a scan of a mostly refused segment lists its accepted rows from the
//! bits. Updated from the tail's touch journal after every applied batch
//! and rebuilt whole when a snapshot is installed.

use eddy_model::PointId;
use eddy_segment::Growing;

use super::Snapshot;

/// Per segment of a snapshot (same order), the rows searches refuse:
/// deleted or shadowed; a segment with none refused holds no bits.
#[derive(Debug, Clone, Default)]
pub struct Shadows {
    per_segment: Vec<Vec<u64>>,
    /// Per segment, how many rows are refused, each counted once (a graph
    /// nearly all refused is scanned rather than walked through every
    /// node, and one wholly refused is skipped).
    counts: Vec<usize>,
}

impl Shadows {
    /// The rows of `snapshot` deleted or shadowed by `tail`'s touches.
    pub fn of(snapshot: &Snapshot, tail: &Growing) -> Self {
        let mut shadows = Self {
            per_segment: snapshot
                .segments
                .iter()
                .map(|s| s.deleted_bits.as_ref().clone())
                .collect(),
            counts: snapshot
                .segments
                .iter()
                .map(|s| s.deleted.len() as usize)
                .collect(),
        };
        for (id, _) in tail.touches() {
            shadows.mark(snapshot, id);
        }
        shadows
    }

    /// Marks the rows of `snapshot` holding `id` (newly touched) as
    /// shadowed.
    pub fn mark(&mut self, snapshot: &Snapshot, id: &PointId) {
        for (i, s) in snapshot.segments.iter().enumerate() {
            let Some(row) = s.segment.row_of(id) else {
                continue;
            };
            if self.per_segment.len() <= i {
                self.per_segment.resize(snapshot.segments.len(), Vec::new());
                self.counts.resize(snapshot.segments.len(), 0);
            }
            let bits = &mut self.per_segment[i];
            if bits.is_empty() {
                bits.resize(s.segment.rows().div_ceil(64), 0);
            }
            if let Some(word) = bits.get_mut(row as usize / 64) {
                let bit = 1 << (row % 64);
                if *word & bit == 0 {
                    self.counts[i] += 1;
                }
                *word |= bit;
            }
        }
    }

    /// How many rows of segment `segment` are refused.
    pub fn count(&self, segment: usize) -> usize {
        self.counts.get(segment).copied().unwrap_or(0)
    }

    /// Whether row `row` of segment `segment` is refused (deleted or
    /// shadowed).
    pub fn refuses(&self, segment: usize, row: u32) -> bool {
        self.per_segment
            .get(segment)
            .and_then(|bits| bits.get(row as usize / 64))
            .is_some_and(|word| word & (1 << (row % 64)) != 0)
    }

    /// The refused rows of segment `segment`, one bit per row (`None`:
    /// none refused).
    pub fn bits(&self, segment: usize) -> Option<&[u64]> {
        self.per_segment
            .get(segment)
            .filter(|bits| !bits.is_empty())
            .map(Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use eddy_manifest::Manifest;
    use eddy_model::PointId;
    use eddy_segment::{code_scan_pays, Residency, MIN_GRAPH_ROWS};

    use super::super::{Collection, Snapshot};
    use crate::collection::testing::{
        indexed_with_deletes, served_and_exact, store_with_collection, vector, vector_of,
    };
    use crate::prepared::QueryBatch;
    use crate::request::Vectors;

    /// A tail that upserts every id of a graph segment (a re-embedding
    /// job, not sealed yet) shadows all its rows: with the deleted ones,
    /// each counted once, the search refuses the whole segment, so it
    /// scans its codes instead of a walk that visits every node, and the
    /// answers are the tail's versions, as an exact search finds them.
    #[test]
    fn a_tail_that_rewrites_every_id_masks_the_whole_graph_segment() {
        let (_dir, store, def) = store_with_collection();
        let rows = MIN_GRAPH_ROWS as u64;
        let manifest = indexed_with_deletes(&store, &def, rows, 4);
        let load = |m: &Manifest| {
            Snapshot::load(&store, &def, m, &Snapshot::default(), Residency::Mapped)
                .expect("local store")
        };
        let c = Collection::new(def.clone());
        c.install(load(&manifest));
        assert!(c.snapshot().segments[0].index.is_some());
        assert_eq!(c.served.read().row_mask(0).masked, rows as usize / 4);

        // Half the ids first, then all (some twice): each row counts once.
        let upsert = |from: u64, to: u64, offset: i64| {
            c.apply_tail(|served| {
                for n in from..to {
                    let v = QueryBatch::new(&def, Vectors::Flat(vector(n + 7))).expect("valid");
                    served
                        .tail
                        .upsert(PointId::Num(n), v.get(0), b"{}", 0, offset + n as i64);
                }
            })
        };
        upsert(0, rows / 2, 0);
        let half = c.served.read().row_mask(0).masked;
        assert_eq!(half, rows as usize / 4 + (rows as usize / 2) * 3 / 4);
        upsert(0, rows, rows as i64);
        let served = c.served.read();
        let mask = served.row_mask(0);
        assert_eq!(mask.masked, rows as usize, "every row refused, once");
        assert!(code_scan_pays(rows as usize, 0, rows as usize, 10));
        drop(served);

        let queries = QueryBatch::new(
            &def,
            Vectors::Rows((0..20).map(|q| vector(5_000 + q * 13)).collect()),
        )
        .expect("valid");
        let (graph, exact) = served_and_exact(&c, &def, &queries);
        for (q, (g, e)) in graph.iter().zip(&exact).enumerate() {
            assert_eq!(g.len(), 10, "query {q}");
            for (a, b) in g.iter().zip(e) {
                assert!(
                    (a.score - b.score).abs() < 1e-5,
                    "query {q}: the exact scores"
                );
            }
            let query = queries.get(q);
            for hit in g {
                let current = c.get(&hit.id, None).expect("live");
                let score = eddy_kernels::dot(query, &current.vector);
                assert!(
                    (hit.score - score).abs() < 1e-4,
                    "query {q}: {:?} answered from its tail version",
                    hit.id
                );
            }
        }
    }

    /// A graph segment of 128-d cosine rows that the tail shadows mostly
    /// (a re-embedding job under way) gets its rows' sign bits made off
    /// the search path once half its rows are refused; searches then scan
    /// its accepted rows by them and still answer as an exact search does,
    /// nearly always, with the tail's versions of the rewritten ids.
    #[test]
    fn a_mostly_shadowed_graph_segment_gets_sign_bits_and_scans_by_them() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = eddy_manifest::Store::open(dir.path()).expect("store");
        let dim = 128;
        let def = eddy_model::CollectionDef::new("c", dim as u32);
        store.create_collection(&def).expect("create");
        let rows = MIN_GRAPH_ROWS as u64 * 2;
        // A tenth deleted, then eight tenths of the ids rewritten.
        let manifest = indexed_with_deletes(&store, &def, rows, 10);
        let c = Collection::new(def.clone());
        c.install(
            Snapshot::load(
                &store,
                &def,
                &manifest,
                &Snapshot::default(),
                Residency::Mapped,
            )
            .expect("local store"),
        );
        c.apply_tail(|served| {
            for n in 0..rows * 8 / 10 {
                let v =
                    QueryBatch::new(&def, Vectors::Flat(vector_of(n + rows, dim))).expect("valid");
                served
                    .tail
                    .upsert(PointId::Num(n), v.get(0), b"{}", 0, n as i64);
            }
        });
        let masked = c.served.read().row_mask(0).masked;
        assert!(masked * 10 >= rows as usize * 8, "{masked} refused");
        assert!(c.snapshot().segments[0].sign_bits.get().is_none());

        // Queries near rows the segment still serves.
        let near = |q: u64| {
            vector_of(rows - 1 - q * 7, dim)
                .iter()
                .enumerate()
                .map(|(i, x)| x + if i % 5 == 0 { 0.05 } else { 0.0 })
                .collect::<Vec<f32>>()
        };
        let queries =
            QueryBatch::new(&def, Vectors::Rows((0..40).map(near).collect())).expect("valid");
        served_and_exact(&c, &def, &queries);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while c.snapshot().segments[0].sign_bits.get().is_none() {
            assert!(std::time::Instant::now() < deadline, "no sign bits made");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let (served, exact) = served_and_exact(&c, &def, &queries);
        let (mut found, mut wanted) = (0, 0);
        for (q, (g, e)) in served.iter().zip(&exact).enumerate() {
            assert_eq!(g.len(), 10);
            let want: Vec<&PointId> = e.iter().map(|h| &h.id).collect();
            found += g.iter().filter(|h| want.contains(&&h.id)).count();
            wanted += want.len();
            for hit in g {
                let current = c.get(&hit.id, None).expect("live");
                let score = eddy_kernels::dot(queries.get(q), &current.vector);
                assert!(
                    (hit.score - score).abs() < 1e-4,
                    "query {q}: {:?} answered from its current version",
                    hit.id
                );
            }
        }
        assert!(found * 100 >= wanted * 95, "{found} of {wanted}");
    }
}
