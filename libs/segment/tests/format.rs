//! Format guarantees of segment and index files: golden files reopen, damage
//! and unsupported versions are reported clearly, and search is exact.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use eddy_format::FormatError;
use eddy_hnsw::GraphView;
use eddy_model::{FieldType, IdType, Metric, PointId};
use eddy_segment::{
    build_index, check_index, search_sealed, Error, Growing, IndexFile, IndexParams, IndexSection,
    Residency, RowMask, SealedQuery, Segment, FORMAT_VERSION, INDEX_FORMAT_VERSION,
};

/// Every way a file can be held; each test runs against all of them.
const RESIDENCIES: [Residency; 2] = [Residency::Mapped, Residency::HugePages];

fn golden(version: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/v{version}.seg"))
}

/// The golden segment: 4 rows of dim 3, u64 ids, one replaced id.
fn golden_rows() -> Growing {
    let mut g = Growing::new(3, Metric::L2, IdType::U64);
    g.upsert(
        PointId::Num(10),
        &[1.0, 2.0, 3.0],
        br#"{"name":"ten"}"#,
        0,
        100,
    );
    g.upsert(PointId::Num(11), &[-1.0, 0.5, 0.0], b"", 1, 200);
    g.upsert(PointId::Num(12), &[0.0, 0.0, 0.0], br#"{"n":12}"#, 0, 101);
    g.upsert(
        PointId::Num(10),
        &[3.0, 2.0, 1.0],
        br#"{"name":"ten-v2"}"#,
        0,
        102,
    );
    g
}

#[test]
fn golden_file_of_the_current_format_reopens() {
    let path = golden(FORMAT_VERSION);
    if std::env::var_os("EDDY_WRITE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        golden_rows()
            .write_segment(&path, &BTreeMap::new())
            .expect("write golden");
    }
    for residency in RESIDENCIES {
        let seg = Segment::open_with(&path, residency).expect("golden segment opens");
        assert_eq!(
            (seg.rows(), seg.dim(), seg.metric(), seg.id_type()),
            (3, 3, Metric::L2, IdType::U64)
        );
        assert_eq!(seg.id(2), Some(PointId::Num(10)));
        assert_eq!(seg.vector(2), &[3.0, 2.0, 1.0]);
        assert_eq!(seg.payload_json(2), br#"{"name":"ten-v2"}"#);
        assert_eq!(seg.meta().offset_ranges[&0], (101, 102));
        // No index file: an exact scan.
        let exact = SealedQuery {
            k: 2,
            ..SealedQuery::default()
        };
        let hits = search_sealed(
            &seg,
            None,
            None,
            None,
            RowMask::default(),
            &[3.0, 2.0, 1.0],
            &exact,
            &|_| true,
        );
        assert_eq!(hits[0].row, 2);
        assert_eq!(hits[0].score, 0.0);
    }
}

/// The golden segment of a collection with an indexed payload field: the
/// optional payload-index section reopens and answers filters.
#[test]
fn golden_file_with_a_payload_index_reopens() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/data/v{FORMAT_VERSION}-payload-index.seg"));
    let fields = BTreeMap::from([("name".to_owned(), FieldType::Keyword)]);
    if std::env::var_os("EDDY_WRITE_GOLDEN").is_some() {
        golden_rows()
            .write_segment(&path, &fields)
            .expect("write golden");
    }
    let seg = Segment::open(&path).expect("golden segment opens");
    let index = seg
        .payload_index()
        .expect("has a payload index")
        .expect("index opens");
    let filter = eddy_filter::Filter::parse(
        &serde_json::json!({"must": [{"key": "name", "match": {"value": "ten-v2"}}]}),
        &fields,
    )
    .expect("filter");
    let rows: Vec<u32> = index.evaluate(&filter).expect("evaluate").iter().collect();
    assert_eq!(rows, vec![2]);
    let plain = Segment::open(&golden(FORMAT_VERSION)).expect("plain golden");
    assert!(plain.payload_index().is_none());
}

fn golden_index() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/v{INDEX_FORMAT_VERSION}.idx"))
}

/// The golden index file: graph and SQ8 codes of the golden segment.
#[test]
fn golden_index_file_of_the_current_format_reopens() {
    let seg = Segment::open(&golden(FORMAT_VERSION)).expect("golden segment");
    let path = golden_index();
    if std::env::var_os("EDDY_WRITE_GOLDEN").is_some() {
        let params = IndexParams {
            min_rows: 1,
            ..IndexParams::default()
        };
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("pool")
            .install(|| build_index(&seg, &params, &path))
            .expect("write golden")
            .expect("an index");
    }
    for residency in RESIDENCIES {
        let index = IndexFile::open_with(&path, seg.rows(), seg.dim(), residency)
            .expect("golden index opens");
        check_index(&seg, &index).expect("golden index checks");
        let graph = index.section(IndexSection::Graph).expect("graph section");
        let graph = GraphView::from_bytes(graph).expect("graph checksums hold");
        assert_eq!((graph.len(), graph.dim()), (3, 3));
        let codes = index.section(IndexSection::Sq8Codes).expect("codes");
        assert_eq!(codes.len(), 3 * 3);
        assert!(index.section(IndexSection::Sq8Params).is_some());
        assert!(index.section(IndexSection::Sq8Corrections).is_some());
    }
    let err = IndexFile::open(&path, 4, 3).expect_err("index of another segment");
    assert!(err.to_string().contains("3 rows"), "{err}");
}

#[test]
fn damage_and_unknown_versions_are_clear_errors() {
    for residency in RESIDENCIES {
        damage_is_reported(&golden(FORMAT_VERSION), "segment file", &|path| {
            Segment::open_with(path, residency).map(drop)
        });
        damage_is_reported(&golden_index(), "index file", &|path| {
            IndexFile::open_with(path, 3, 3, residency).map(drop)
        });
    }
}

/// Copies of the golden file at `golden`, each damaged one way, are refused
/// by `open` with an error that names the file and what is wrong.
fn damage_is_reported(golden: &Path, what: &str, open: &dyn Fn(&Path) -> Result<(), Error>) {
    let dir = tempfile::tempdir().expect("tmp dir");
    let bytes = std::fs::read(golden).expect("golden");
    let refused = |name: &str, b: &[u8]| -> Error {
        let path = dir.path().join(name);
        std::fs::write(&path, b).expect("write");
        let err = open(&path).expect_err(name);
        assert!(err.to_string().contains(name), "names the file: {err}");
        err
    };

    let mut b = bytes.clone();
    let mid = b.len() / 2;
    b[mid] ^= 0x40;
    let err = refused("flipped", &b);
    assert!(
        matches!(
            &err,
            Error::Format {
                source: FormatError::Checksum { .. },
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains(&format!("{what} checksum mismatch")),
        "{err}"
    );

    let err = refused("truncated", &bytes[..bytes.len() - 5]);
    assert!(err.to_string().contains("truncated"), "{err}");
    let err = refused("short", &bytes[..100]);
    assert!(
        matches!(
            &err,
            Error::Format {
                source: FormatError::Truncated { .. },
                ..
            }
        ),
        "{err}"
    );

    let mut b = bytes.clone();
    let newer = u32::from_le_bytes([b[8], b[9], b[10], b[11]]) + 1;
    b[8..12].copy_from_slice(&newer.to_le_bytes());
    let err = refused("newer", &b);
    assert!(
        matches!(
            &err,
            Error::Format {
                source: FormatError::UnsupportedVersion { found, .. },
                ..
            } if *found == newer
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains(&format!(
            "{what} written by a newer eddy: format version {newer}"
        )),
        "{err}"
    );

    let err = refused("text", b"hello");
    assert!(
        matches!(
            &err,
            Error::Format {
                source: FormatError::BadMagic { .. },
                ..
            }
        ),
        "{err}"
    );
}
