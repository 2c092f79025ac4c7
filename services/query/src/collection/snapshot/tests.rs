//! Snapshot loading: scan codes until the index file comes, live-row lists
//! of mostly deleted segments, versions refused once superseded.

use eddy_segment::SCAN_CODES_FROM_ROWS;

use super::*;
use crate::collection::testing::{
    indexed, indexed_with_deletes, store_with_collection, written_segment, DIM,
};

fn codes_of(s: &Snapshot) -> Option<&Arc<ScanCodes>> {
    s.segments[0].scan_codes.as_ref()
}

/// A segment whose index file is still being built is served with scan
/// codes trained at load, kept while the manifest names no index and
/// dropped once it does (the index file's codes take over).
#[test]
fn a_segment_awaiting_its_index_is_served_with_scan_codes_until_it_comes() {
    let (_dir, store, def) = store_with_collection();
    let rows = SCAN_CODES_FROM_ROWS.max(eddy_segment::MIN_GRAPH_ROWS) as u64;
    let entry = written_segment(&store, rows);
    let (id, bytes) = (entry.id.clone(), entry.bytes);
    let mut manifest = Manifest::empty("c");
    manifest.version = 1;
    manifest.segments.push(entry);
    let load = |m: &Manifest, previous: &Snapshot| {
        Snapshot::load(&store, &def, m, previous, Residency::Mapped).expect("local store")
    };
    let v1 = load(&manifest, &Snapshot::default());
    assert!(v1.quarantined.is_empty(), "{:?}", v1.quarantined);
    let codes = codes_of(&v1).expect("scan codes for an unindexed segment");
    assert_eq!(codes.sq8().codes().len(), rows as usize * DIM);
    assert!(v1.file_bytes() >= bytes + codes.bytes() as u64);

    manifest.version = 2;
    let v2 = load(&manifest, &v1);
    let kept = codes_of(&v2).expect("still unindexed");
    assert!(Arc::ptr_eq(codes, kept), "reloads reuse the codes");

    manifest.version = 3;
    manifest.segments[0].index = Some(indexed(&store, &v2.segments[0].segment, &id));
    let v3 = load(&manifest, &v2);
    assert!(v3.segments[0].index.is_some());
    assert!(codes_of(&v3).is_none(), "the index file's codes take over");
}

/// A segment's deleted rows are held as one bit per row (none without a
/// delete file), counted in the served bytes and reused by a reload with
/// the same delete file; its sign bits (made or not) are kept across
/// reloads too (they depend on its rows only).
#[test]
fn deleted_rows_are_held_as_bits_and_sign_bits_survive_reloads() {
    let (_dir, store, def) = store_with_collection();
    let rows = eddy_segment::MIN_GRAPH_ROWS as u64;
    let entry = written_segment(&store, rows);
    let id = entry.id.clone();
    let mut manifest = Manifest::empty("c");
    manifest.version = 1;
    manifest.segments.push(entry);
    let load = |m: &Manifest, previous: &Snapshot| {
        Snapshot::load(&store, &def, m, previous, Residency::Mapped).expect("local store")
    };
    let v0 = load(&manifest, &Snapshot::default());
    assert!(v0.segments[0].deleted_bits.is_empty(), "nothing deleted");

    let deleted: RoaringBitmap = (0..rows as u32).filter(|r| r % 4 != 0).collect();
    manifest.version += 1;
    manifest.segments[0].deleted = deleted.len();
    manifest.segments[0].deletes = Some(store.write_deletes("c", &id, &deleted).expect("deletes"));
    manifest.segments[0].index = Some(indexed(&store, &v0.segments[0].segment, &id));
    let v1 = load(&manifest, &v0);
    let bits = v1.segments[0].deleted_bits.clone();
    assert_eq!(bits.len(), (rows as usize).div_ceil(64));
    for row in 0..rows as u32 {
        let set = bits[row as usize / 64] & (1 << (row % 64)) != 0;
        assert_eq!(set, deleted.contains(row), "row {row}");
    }
    let files: u64 = v1
        .segments
        .iter()
        .map(|s| (s.segment.file_len() + s.index.as_ref().map_or(0, |i| i.file_len())) as u64)
        .sum();
    assert_eq!(
        v1.file_bytes(),
        files + bits.len() as u64 * 8,
        "the bits count"
    );

    // Rows of 8 dimensions take no sign bits (too coarse to rank by).
    v1.segments[0].sign_bits.make_now(&v1.segments[0].segment);
    assert!(v1.segments[0].sign_bits.get().is_none());
    manifest.version += 1;
    let v2 = load(&manifest, &v1);
    assert!(Arc::ptr_eq(&bits, &v2.segments[0].deleted_bits), "reused");
    assert!(
        Arc::ptr_eq(&v1.segments[0].sign_bits, &v2.segments[0].sign_bits),
        "the sign bits are kept"
    );
}

/// A node slow to load a version may find its files collected: newer
/// versions superseded it (a merge replaced its segments) and garbage
/// collection removed what only it named. Such a version is refused as
/// superseded, so the node loads the newest, instead of being served
/// with its segments quarantined: its cut-offs would claim rows it
/// lacks, and a read-your-writes answer would miss them (the drill saw
/// two live points missing from an exact answer this way).
#[test]
fn a_version_collected_while_it_loads_is_superseded_not_quarantined() {
    let (_dir, store, def) = store_with_collection();
    let publish = |segment: SegmentEntry| {
        store
            .update::<eddy_manifest::Error>("c", |latest| {
                let mut next = latest.successor();
                next.segments = vec![segment.clone()];
                next.partitions.entry(0).or_default().next_offset = 64;
                Ok(Some(next))
            })
            .expect("publish")
            .published
            .expect("published")
    };
    let first = written_segment(&store, 64);
    let old = publish(first.clone());
    // A merge rewrites the rows; the old version and its file go.
    let newest = publish(written_segment(&store, 64));
    let policy = eddy_manifest::GcPolicy {
        keep_versions: 1,
        grace: std::time::Duration::ZERO,
    };
    store
        .collect_garbage("c", &policy, std::time::SystemTime::now())
        .expect("gc");
    assert!(!store.segment_path("c", &first.id).exists(), "collected");

    let load =
        |m: &Manifest| Snapshot::load(&store, &def, m, &Snapshot::default(), Residency::Mapped);
    match load(&old) {
        Err(eddy_manifest::Error::Superseded {
            version, newest, ..
        }) => {
            assert_eq!((version, newest), (old.version, old.version + 1));
        }
        Err(e) => panic!("not refused as superseded: {e}"),
        Ok(s) => panic!(
            "served with cut-offs {:?} and {} of its segments quarantined: {:?}",
            s.cutoffs,
            s.quarantined.len(),
            s.quarantined
        ),
    }
    let served = load(&newest).expect("the newest loads");
    assert!(served.quarantined.is_empty(), "{:?}", served.quarantined);
    assert_eq!(served.sealed_rows(), 64);
}

/// On an object store that cannot be reached, a new version is not
/// loaded (the caller keeps the previous one and retries) instead of
/// quarantining segments that are not damaged; once the store answers,
/// the same version loads whole.
#[test]
fn an_unreachable_object_store_defers_a_version_instead_of_quarantining() {
    let server = eddy_loadtest::s3_server::S3Server::start("eddy").expect("S3 server");
    let location = eddy_manifest::StoreLocation::parse(&server.store_url("defer")).expect("url");
    let (writer_cache, reader_cache) = (
        tempfile::tempdir().expect("tmp"),
        tempfile::tempdir().expect("tmp"),
    );
    let mut env: Vec<(&str, String)> = server.env();
    let writer = Store::open_location_with(&location, writer_cache.path(), &env).expect("writer");
    let def = CollectionDef::new("c", DIM as u32);
    writer.create_collection(&def).expect("create");
    let entry = written_segment(&writer, 64);
    let id = entry.id.clone();
    let updated = writer
        .update::<eddy_manifest::Error>("c", |latest| {
            let mut next = latest.successor();
            next.segments.push(entry.clone());
            Ok(Some(next))
        })
        .expect("publish");
    let manifest = updated.published.expect("published");
    // A reader whose failed requests give up within a second.
    env.push(("retry_timeout_ms", "1000".to_owned()));
    env.push(("max_retries", "2".to_owned()));
    let reader = Store::open_location_with(&location, reader_cache.path(), &env).expect("reader");
    // It loses the store: the server stops.
    drop(server);
    let err = Snapshot::load(
        &reader,
        &def,
        &manifest,
        &Snapshot::default(),
        Residency::Mapped,
    )
    .expect_err("deferred, not quarantined");
    assert!(err.is_transient(), "{err}");
    assert!(!reader.segment_path("c", &id).exists(), "nothing cached");
}

/// A segment loaded from a mapped file is opened again when a load asks
/// for huge pages (a node that started serving from maps moves them into
/// huge pages), its index file too, while its delete bitmap and what was
/// derived at load are kept; a further load asking the same reuses it.
#[test]
fn a_load_asking_another_residency_opens_the_files_again() {
    let (_dir, store, def) = store_with_collection();
    let rows = eddy_segment::MIN_GRAPH_ROWS as u64;
    let manifest = indexed_with_deletes(&store, &def, rows, 3);
    let load = |m: &Manifest, previous: &Snapshot, residency: Residency| {
        Snapshot::load(&store, &def, m, previous, residency).expect("local store")
    };
    let mapped = load(&manifest, &Snapshot::default(), Residency::Mapped);
    let m = &mapped.segments[0];
    assert_eq!(m.residency, Residency::Mapped);
    assert!(m.index.is_some());
    let resident = load(&manifest, &mapped, Residency::HugePages);
    let r = &resident.segments[0];
    assert_eq!(r.residency, Residency::HugePages);
    assert!(
        !Arc::ptr_eq(&m.segment, &r.segment),
        "the segment opened again"
    );
    let (mi, ri) = (
        m.index.as_ref().expect("index"),
        r.index.as_ref().expect("index"),
    );
    assert!(!Arc::ptr_eq(mi, ri), "its index file too");
    assert!(Arc::ptr_eq(&m.deleted, &r.deleted), "the deletes kept");
    assert_eq!(r.segment.rows(), rows as usize);
    assert_eq!(r.segment.vector(7), m.segment.vector(7));
    let again = load(&manifest, &resident, Residency::HugePages);
    assert!(
        Arc::ptr_eq(&r.segment, &again.segments[0].segment),
        "then reused"
    );
}
