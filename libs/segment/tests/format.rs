//! Format guarantees of sealed segments: golden files reopen, damage and
//! unsupported versions are reported clearly, and search is exact.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use eddy_model::{FieldType, IdType, Metric, PointId};
use eddy_segment::{
    search_sealed, Error, Growing, Residency, SealedQuery, Segment, FORMAT_VERSION,
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
        let hits = search_sealed(&seg, None, &[3.0, 2.0, 1.0], &exact, &|_| true);
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

#[test]
fn damage_and_unknown_versions_are_clear_errors() {
    for residency in RESIDENCIES {
        damage_is_reported(residency);
    }
}

fn damage_is_reported(residency: Residency) {
    let open = |path: &Path| Segment::open_with(path, residency);
    let dir = tempfile::tempdir().expect("tmp dir");
    let bytes = std::fs::read(golden(FORMAT_VERSION)).expect("golden");

    let flipped = dir.path().join("flipped.seg");
    let mut b = bytes.clone();
    let mid = b.len() / 2;
    b[mid] ^= 0x40;
    std::fs::write(&flipped, &b).expect("write");
    let err = open(&flipped).expect_err("corrupt");
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("checksum"), "{err}");

    let truncated = dir.path().join("truncated.seg");
    std::fs::write(&truncated, &bytes[..bytes.len() - 5]).expect("write");
    assert!(matches!(open(&truncated), Err(Error::Corrupt { .. })));

    let future = dir.path().join("future.seg");
    let mut b = bytes.clone();
    b[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    std::fs::write(&future, &b).expect("write");
    let err = open(&future).expect_err("unsupported");
    assert!(
        matches!(err, Error::UnsupportedVersion { found, .. } if found == FORMAT_VERSION + 1),
        "{err}"
    );

    let not_a_segment = dir.path().join("text.seg");
    std::fs::write(&not_a_segment, b"hello").expect("write");
    assert!(matches!(open(&not_a_segment), Err(Error::Corrupt { .. })));
}
