//! Unit tests of the payload index: round trips, header errors and corruption.

use std::collections::BTreeMap;

use eddy_format::FormatError;
use eddy_model::FieldType;
use roaring::RoaringBitmap;
use serde_json::{json, Value};

use super::format::ENTRY_LEN;
use super::{PayloadIndexBuilder, PayloadIndexView, HEADER_LEN};
use crate::filter::Filter;
use crate::test_schema::schema;
use crate::IndexError;

fn payloads() -> Vec<Value> {
    (0..300)
        .map(|i| match i % 7 {
            0 => json!({}),
            1 => json!({"section": null, "size": null}),
            2 => json!({"section": ["a", "b", "a"], "size": i, "ok": true}),
            3 => json!({"section": "b", "price": i as f64 / 10.0, "ok": false}),
            4 => json!({"section": ["c"], "size": -i, "price": -0.0}),
            5 => json!({"section": 5, "size": "x", "price": [1], "ok": 1}),
            _ => json!({"section": format!("v{i}"), "size": i % 3}),
        })
        .collect()
}

fn build() -> Vec<u8> {
    let mut b = PayloadIndexBuilder::new(&schema());
    for (i, p) in payloads().iter().enumerate() {
        b.add(i as u32, p);
    }
    b.finish(300)
}

fn filters() -> Vec<Filter> {
    [
        json!({}),
        json!({"must": [{"key": "section", "match": {"value": "a"}}]}),
        json!({"must": [{"key": "section", "match": {"except": ["a"]}}]}),
        json!({"must": [{"key": "section", "match": {"any": ["c", "v6", "zz"]}}]}),
        json!({"must_not": [{"key": "size", "range": {"gte": 0, "lt": 100}}]}),
        json!({"should": [{"key": "price", "range": {"gte": 0}}, {"is_null": {"key": "size"}}]}),
        json!({"must": [{"is_empty": {"key": "ok"}}, {"key": "size", "match": {"except": [0, 1]}}]}),
        json!({"must": [{"key": "ok", "match": {"any": [false, true]}}], "must_not": [{"must": [{"key": "ok", "match": {"value": true}}]}]}),
    ]
    .into_iter()
    .map(|v| Filter::parse(&v, &schema()).expect("valid filter"))
    .collect()
}

fn check_all(view: &PayloadIndexView<'_>) {
    let payloads = payloads();
    for f in filters() {
        let want: RoaringBitmap = (0..300u32)
            .filter(|&r| f.matches(&payloads[r as usize]))
            .collect();
        let got = view.evaluate(&f).expect("evaluate");
        assert_eq!(got, want, "{}", f.to_json());
        let e = view.estimate(&f).expect("estimate");
        assert!(
            e.min <= want.len() && want.len() <= e.max,
            "{e:?} vs {} for {}",
            want.len(),
            f.to_json()
        );
        assert!(e.min <= e.expected && e.expected <= e.max, "{e:?}");
    }
}

#[test]
fn round_trip_matches_row_by_row() {
    let bytes = build();
    assert_eq!(bytes.len() % 8, 0);
    let view = PayloadIndexView::open(&bytes).expect("open");
    assert_eq!(view.rows(), 300);
    assert_eq!(
        view.fields().collect::<Vec<_>>(),
        vec![
            ("ok", FieldType::Bool),
            ("price", FieldType::Float),
            ("section", FieldType::Keyword),
            ("size", FieldType::Integer),
            ("tags", FieldType::Keyword),
        ]
    );
    assert_eq!(view.field_type("size"), Some(FieldType::Integer));
    assert_eq!(view.value_count("ok").expect("count"), 86);
    assert!(view.distinct_count("section").expect("distinct") > 40);
    check_all(&view);
}

#[test]
fn unaligned_bytes_work() {
    let bytes = build();
    let mut shifted = vec![0u8; bytes.len() + 3];
    shifted[3..].copy_from_slice(&bytes);
    let view = PayloadIndexView::open(&shifted[3..]).expect("open unaligned");
    check_all(&view);
    // Trailing bytes after total_len are ignored.
    let mut longer = bytes.clone();
    longer.extend_from_slice(&[0xAB; 13]);
    check_all(&PayloadIndexView::open(&longer).expect("open with trailing bytes"));
}

#[test]
fn empty_schema_and_rows() {
    let bytes = PayloadIndexBuilder::new(&BTreeMap::new()).finish(0);
    assert_eq!(bytes.len(), HEADER_LEN);
    let view = PayloadIndexView::open(&bytes).expect("open");
    assert_eq!(view.evaluate(&Filter::all()).expect("eval").len(), 0);
    let bytes = PayloadIndexBuilder::new(&schema()).finish(10);
    let view = PayloadIndexView::open(&bytes).expect("open");
    assert_eq!(view.count(&Filter::all()).expect("eval"), 10);
    let f = Filter::parse(
        &json!({"must": [{"is_empty": {"key": "section"}}]}),
        &schema(),
    )
    .expect("f");
    assert_eq!(view.count(&f).expect("eval"), 10);
}

#[test]
fn rows_beyond_finish_are_dropped() {
    let mut b = PayloadIndexBuilder::new(&schema());
    b.add(
        1,
        &json!({"section": "a", "size": 1, "price": 1.0, "ok": true}),
    );
    b.add(
        5,
        &json!({"section": "a", "size": 1, "price": 1.0, "ok": true}),
    );
    let bytes = b.finish(3);
    let view = PayloadIndexView::open(&bytes).expect("open");
    for v in [
        json!({"must": [{"key": "section", "match": {"value": "a"}}]}),
        json!({"must": [{"key": "size", "match": {"value": 1}}]}),
        json!({"must": [{"key": "price", "range": {"lte": 1}}]}),
        json!({"must": [{"key": "ok", "match": {"value": true}}]}),
    ] {
        let f = Filter::parse(&v, &schema()).expect("f");
        assert_eq!(
            view.evaluate(&f).expect("eval").iter().collect::<Vec<_>>(),
            vec![1]
        );
    }
}

#[test]
fn unknown_fields_and_types_are_errors() {
    let bytes = PayloadIndexBuilder::new(&schema()).finish(4);
    let view = PayloadIndexView::open(&bytes).expect("open");
    let mut other = schema();
    other.insert("new".into(), FieldType::Keyword);
    other.insert("size".into(), FieldType::Float);
    let f = Filter::parse(
        &json!({"must": [{"key": "new", "match": {"value": "x"}}]}),
        &other,
    )
    .expect("f");
    assert_eq!(
        view.evaluate(&f),
        Err(IndexError::FieldNotIndexed("new".into()))
    );
    let f = Filter::parse(
        &json!({"must": [{"key": "size", "range": {"gt": 1}}]}),
        &other,
    )
    .expect("f");
    let e = view.evaluate(&f).expect_err("type mismatch");
    assert_eq!(
        e.to_string(),
        "field 'size' is indexed as Integer in this segment, filter expects Float"
    );
    assert!(view.estimate(&f).is_err());
}

#[test]
fn truncation_is_an_error() {
    let bytes = build();
    for len in 0..bytes.len() {
        let e = PayloadIndexView::open(&bytes[..len]).expect_err("truncated");
        assert!(
            matches!(
                e,
                IndexError::Format(FormatError::Truncated { .. } | FormatError::BadMagic { .. })
            ),
            "len {len}: {e}"
        );
    }
}

#[test]
fn header_errors_are_specific() {
    let bytes = build();
    let mut bad = bytes.clone();
    bad[0] = b'X';
    assert_eq!(
        PayloadIndexView::open(&bad).expect_err("magic"),
        IndexError::Format(FormatError::BadMagic {
            what: "payload index"
        })
    );
    let mut bad = bytes.clone();
    bad[8] = 2;
    assert_eq!(
        PayloadIndexView::open(&bad)
            .expect_err("version")
            .to_string(),
        "payload index written by a newer eddy: format version 2, this build reads 1..=1"
    );
    let mut bad = bytes.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert!(matches!(
        PayloadIndexView::open(&bad).expect_err("crc"),
        IndexError::Format(FormatError::Checksum { .. })
    ));
}

/// Every single-byte corruption is caught by the CRC; without the CRC the
/// view may answer wrongly but must never panic.
#[test]
fn corruption_never_panics() {
    let bytes = build();
    let filters = filters();
    let step = (bytes.len() / 700).max(1);
    for at in (0..bytes.len()).step_by(step) {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut bad = bytes.clone();
            bad[at] ^= flip;
            assert!(
                PayloadIndexView::open(&bad).is_err(),
                "flip at {at} undetected"
            );
            if let Ok(view) = PayloadIndexView::open_unverified(&bad) {
                for f in &filters {
                    let _ = view.evaluate(f);
                    let _ = view.estimate(f);
                }
            }
        }
    }
    // Garbage offsets in the field table.
    for at in (HEADER_LEN..HEADER_LEN + 4 * ENTRY_LEN).step_by(8) {
        let mut bad = bytes.clone();
        bad[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        if let Ok(view) = PayloadIndexView::open_unverified(&bad) {
            for f in &filters {
                let _ = view.evaluate(f);
            }
        }
    }
}
