//! The v1 byte format is frozen: `tests/data/v1.pidx` was written once by this
//! builder and must keep opening with the same answers.
//!
//! Regenerate only on a deliberate format change (with a version bump):
//! `EDDY_BLESS=1 cargo test -p eddy-filter --test golden`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use eddy_filter::{
    FieldType, Filter, IndexError, PayloadIndexBuilder, PayloadIndexView, FORMAT_VERSION,
};
use serde_json::json;

fn schema() -> BTreeMap<String, FieldType> {
    [
        ("section", FieldType::Keyword),
        ("size", FieldType::Integer),
        ("price", FieldType::Float),
        ("ok", FieldType::Bool),
    ]
    .into_iter()
    .map(|(k, t)| (k.to_owned(), t))
    .collect()
}

fn build() -> Vec<u8> {
    let payloads = [
        json!({"section": "games", "size": 3, "price": 9.5, "ok": true}),
        json!({"section": ["news", "games"], "size": 10, "price": 0.5}),
        json!({"section": "news", "size": -2, "ok": false}),
        json!({"section": null, "price": 100}),
        json!({}),
        json!({"section": ["admin", "net"], "size": 7, "price": -1.25, "ok": true}),
    ];
    let mut b = PayloadIndexBuilder::new(&schema());
    for (row, p) in payloads.iter().enumerate() {
        b.add(row as u32, p);
    }
    // Row 6 has no payload at all.
    b.finish(7)
}

fn path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/v1.pidx")
}

#[test]
fn golden_v1_reopens() {
    if std::env::var_os("EDDY_BLESS").is_some() {
        std::fs::write(path(), build()).expect("write golden file");
    }
    let bytes = std::fs::read(path()).expect("tests/data/v1.pidx exists (EDDY_BLESS=1 writes it)");
    assert_eq!(
        bytes,
        build(),
        "builder output changed: the v1 format must stay stable"
    );
    let view = PayloadIndexView::open(&bytes).expect("open golden");
    assert_eq!(view.rows(), 7);
    let cases = [
        (
            json!({"must": [{"key": "section", "match": {"value": "games"}}]}),
            vec![0, 1],
        ),
        (
            json!({"must": [{"key": "section", "match": {"except": ["games"]}}]}),
            vec![1, 2, 5],
        ),
        (
            json!({"must": [{"key": "section", "match": {"any": ["net", "news"]}}]}),
            vec![1, 2, 5],
        ),
        (
            json!({"must": [{"key": "size", "range": {"gte": 3, "lt": 10}}]}),
            vec![0, 5],
        ),
        (
            json!({"must": [{"key": "price", "range": {"gt": 0}}]}),
            vec![0, 1, 3],
        ),
        (
            json!({"must": [{"key": "ok", "match": {"value": true}}]}),
            vec![0, 5],
        ),
        (
            json!({"must_not": [{"key": "ok", "match": {"value": true}}]}),
            vec![1, 2, 3, 4, 6],
        ),
        (json!({"must": [{"is_null": {"key": "section"}}]}), vec![3]),
        (
            json!({"must": [{"is_empty": {"key": "section"}}]}),
            vec![3, 4, 6],
        ),
        (
            json!({"should": [{"key": "size", "match": {"value": -2}}, {"must": [{"key": "price", "range": {"lt": 0}}]}]}),
            vec![2, 5],
        ),
    ];
    for (json, want) in cases {
        let f = Filter::parse(&json, &schema()).expect("valid filter");
        let got: Vec<u32> = view.evaluate(&f).expect("evaluate").iter().collect();
        assert_eq!(got, want, "{json}");
    }
}

/// Copies of the golden file damaged one way each are refused with the
/// error that says what is wrong.
#[test]
fn damaged_or_newer_golden_is_refused() {
    let bytes = std::fs::read(path()).expect("tests/data/v1.pidx");
    let open = |b: &[u8]| match PayloadIndexView::open(b) {
        Err(IndexError::Format(e)) => e.to_string(),
        other => panic!("expected a format error, got {other:?}"),
    };
    let mut flipped = bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    assert!(
        open(&flipped).starts_with("payload index checksum mismatch"),
        "{}",
        open(&flipped)
    );
    assert!(open(&bytes[..bytes.len() - 1]).contains("truncated"));
    let mut newer = bytes.clone();
    newer[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    assert_eq!(
        open(&newer),
        format!(
            "payload index written by a newer eddy: format version {}, this build reads 1..={FORMAT_VERSION}",
            FORMAT_VERSION + 1
        )
    );
}
