//! Fixtures for the collection's tests: segments written to a store's
//! collection `c`, and their index files.

use std::collections::BTreeMap;

use eddy_manifest::{Manifest, SegmentEntry, Store};
use eddy_model::{CollectionDef, PointId};
use eddy_segment::{build_index, Growing, IndexParams, Residency, Segment};

use super::{Collection, Snapshot};
use crate::prepared::{PreparedSearch, QueryBatch};
use crate::request::SearchRequest;
use crate::results::Hit;

/// A store in a temporary directory (kept while the guard lives) holding
/// collection `c` of [`DIM`] dimensions.
pub fn store_with_collection() -> (tempfile::TempDir, Store, CollectionDef) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(dir.path()).expect("store");
    let def = CollectionDef::new("c", DIM as u32);
    store.create_collection(&def).expect("create");
    (dir, store, def)
}

/// Dimensions of the fixtures' vectors.
pub const DIM: usize = 8;

/// Point `n`'s vector of [`DIM`] dimensions.
pub fn vector(n: u64) -> Vec<f32> {
    vector_of(n, DIM)
}

/// Point `n`'s vector of `dim` dimensions: pseudo-random coordinates in
/// [-1, 1], the same on every run, no two points alike.
pub fn vector_of(n: u64, dim: usize) -> Vec<f32> {
    let mut state = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..dim)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 2_001) as f32 / 1_000.0 - 1.0
        })
        .collect()
}

/// Point `n`'s vector of `dim` dimensions about one of 16 centres (as
/// embeddings cluster): the centre's coordinates plus two fifths of the
/// point's own ([`vector_of`]).
pub fn clustered_vector(n: u64, dim: usize) -> Vec<f32> {
    let centre = vector_of(u64::MAX - n % 16, dim);
    centre
        .iter()
        .zip(vector_of(n, dim))
        .map(|(c, x)| c + 0.4 * x)
        .collect()
}

/// The name of an index file built for `segment` (id `id`) of
/// collection `c`.
pub fn indexed(store: &Store, segment: &Segment, id: &str) -> String {
    let name = store.new_index_name(id);
    build_index(
        segment,
        &IndexParams::default(),
        &store.index_path("c", &name),
    )
    .expect("index")
    .expect("big enough for a graph");
    name
}

/// A segment of `rows` points written to `store`'s collection `c`, as
/// a manifest lists it.
pub fn written_segment(store: &Store, rows: u64) -> SegmentEntry {
    written_segment_of(store, &CollectionDef::new("c", DIM as u32), rows)
}

/// [`written_segment`] for a collection `c` defined as `def` (its
/// dimensions and metric).
pub fn written_segment_of(store: &Store, def: &CollectionDef, rows: u64) -> SegmentEntry {
    written_segment_with(store, def, rows, vector_of)
}

/// [`written_segment_of`] with point `n`'s vector `vector(n, dim)`.
pub fn written_segment_with(
    store: &Store,
    def: &CollectionDef,
    rows: u64,
    vector: impl Fn(u64, usize) -> Vec<f32>,
) -> SegmentEntry {
    let dim = def.dimension as usize;
    let mut g = Growing::new(dim, def.metric, def.id_type);
    for n in 0..rows {
        let mut v = vector(n, dim);
        if def.metric == eddy_model::Metric::Cosine {
            eddy_kernels::normalize(&mut v);
        }
        g.upsert(PointId::Num(n), &v, b"{}", 0, n as i64);
    }
    let (id, path) = store.new_segment("c");
    let bytes = g
        .write_segment(&path, &BTreeMap::new())
        .expect("segment")
        .bytes;
    SegmentEntry {
        id,
        rows,
        bytes,
        deletes: None,
        deleted: 0,
        offset_ranges: BTreeMap::new(),
        index: None,
    }
}

/// The top 10 of each of `queries` in `c`: searched as served (graph walks,
/// code scans), and exactly.
pub fn served_and_exact(
    c: &Collection,
    def: &CollectionDef,
    queries: &QueryBatch,
) -> (Vec<Vec<Hit>>, Vec<Vec<Hit>>) {
    let answer = |exact: bool| {
        let mut request = SearchRequest::default();
        request.params.k = 10;
        request.params.exact = exact;
        let search = PreparedSearch::new(def, request).expect("valid");
        c.search(queries, 0..queries.len(), &search).hits
    };
    (answer(false), answer(true))
}

/// A manifest of collection `c` listing one indexed segment of `rows`
/// points written to `store`, every `every`-th row deleted.
pub fn indexed_with_deletes(
    store: &Store,
    def: &CollectionDef,
    rows: u64,
    every: usize,
) -> Manifest {
    let mut entry = written_segment_of(store, def, rows);
    let deleted: roaring::RoaringBitmap = (0..rows as u32).step_by(every).collect();
    entry.deleted = deleted.len();
    entry.deletes = Some(
        store
            .write_deletes("c", &entry.id, &deleted)
            .expect("deletes"),
    );
    let mut manifest = Manifest::empty("c");
    manifest.version = 1;
    manifest.segments.push(entry);
    let unindexed = Snapshot::load(
        store,
        def,
        &manifest,
        &Snapshot::default(),
        Residency::Mapped,
    )
    .expect("local store");
    let id = manifest.segments[0].id.clone();
    manifest.segments[0].index = Some(indexed(store, &unindexed.segments[0].segment, &id));
    manifest.version = 2;
    manifest
}
