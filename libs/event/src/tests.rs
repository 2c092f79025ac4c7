use eddy_model::{CollectionDef, FieldType, IdType, Metric, ValueFormat};
use eddy_proto::v1::{payload_value::Kind, point_event::Id, PayloadValue, PointEvent};
use prost::Message as _;

use super::*;

fn def() -> CollectionDef {
    let mut def = CollectionDef::new("c", 3);
    def.metric = Metric::Dot;
    def.payload_fields.insert("size".into(), FieldType::Integer);
    def
}

fn json(value: &str) -> Result<Event<'_>, Rejection> {
    decode(
        &def(),
        Message {
            key: None,
            value: Some(value.as_bytes()),
            content_type: None,
        },
    )
}

fn reason(r: Result<Event<'_>, Rejection>) -> Reason {
    r.expect_err("must be rejected").reason
}

#[test]
fn json_upsert_decodes() {
    let ev = json(r#"{"id": 7, "vector": [1, 2, 3], "payload": {"size": 3, "name": "x"}}"#)
        .expect("valid");
    let Event::Upsert(p) = ev else {
        panic!("expected upsert")
    };
    assert_eq!(p.id, PointId::Num(7));
    assert_eq!(p.vector, vec![1.0, 2.0, 3.0]);
    assert_eq!(&*p.payload, br#"{"size": 3, "name": "x"}"#);
}

#[test]
fn json_payload_is_kept_as_the_bytes_it_arrived_as() {
    let value = br#"{"id": 7, "vector": [1, 2, 3], "payload": {"z": 1.50, "a": "\u00e9"}}"#;
    let Ok(Event::Upsert(p)) = decode(
        &def(),
        Message {
            key: None,
            value: Some(value),
            content_type: None,
        },
    ) else {
        panic!("expected upsert")
    };
    assert!(
        matches!(p.payload, std::borrow::Cow::Borrowed(_)),
        "borrowed from the message, not copied"
    );
    assert_eq!(&*p.payload, br#"{"z": 1.50, "a": "\u00e9"}"#);
    let none = json(r#"{"id": 7, "vector": [1, 2, 3], "payload": null}"#).expect("valid");
    let Event::Upsert(p) = none else {
        panic!("expected upsert")
    };
    assert!(p.payload.is_empty());
    assert_eq!(
        reason(json(r#"{"id": 7, "vector": [1, 2, 3], "payload": [1]}"#)),
        Reason::Malformed
    );
    assert_eq!(
        reason(json(
            r#"{"id": 7, "vector": [1, 2, 3], "payload": {"si\u007ae": "x"}}"#
        )),
        Reason::PayloadType,
        "an escaped key still names the declared field"
    );
}

#[test]
fn bad_events_are_rejected_with_reasons() {
    assert_eq!(reason(json("{not json")), Reason::Malformed);
    assert_eq!(
        reason(json(r#"{"id": 1, "vector": [1, 2]}"#)),
        Reason::WrongDimension
    );
    assert_eq!(
        reason(json(r#"{"id": 1, "vector": [1, 2, 1e39]}"#)),
        Reason::NonFinite
    );
    assert_eq!(
        reason(json(r#"{"id": "a", "vector": [1, 2, 3]}"#)),
        Reason::WrongIdType
    );
    assert_eq!(
        reason(json(
            r#"{"id": 1, "vector": [1, 2, 3], "payload": {"size": "big"}}"#
        )),
        Reason::PayloadType
    );
    assert_eq!(
        reason(json(r#"{"id": 1, "vector": [1, 2, 3], "extra": 1}"#)),
        Reason::Malformed
    );
    assert_eq!(reason(json(r#"{"vector": [1, 2, 3]}"#)), Reason::Malformed);
    let mismatch = decode(
        &def(),
        Message {
            key: Some(b"2"),
            value: Some(br#"{"id": 1, "vector": [1, 2, 3]}"#),
            content_type: None,
        },
    );
    assert_eq!(reason(mismatch), Reason::KeyMismatch);
    let unsupported = decode(
        &def(),
        Message {
            key: None,
            value: Some(b"x"),
            content_type: Some("text/csv"),
        },
    );
    assert_eq!(reason(unsupported), Reason::UnsupportedContentType);
}

#[test]
fn tombstones_delete_the_key() {
    let ev = decode(
        &def(),
        Message {
            key: Some(b"5"),
            value: None,
            content_type: None,
        },
    );
    assert_eq!(ev, Ok(Event::Delete(PointId::Num(5))));
    assert_eq!(
        reason(decode(&def(), Message::default())),
        Reason::MissingKey
    );
    let bad_key = decode(
        &def(),
        Message {
            key: Some(b"x"),
            value: None,
            content_type: None,
        },
    );
    assert_eq!(reason(bad_key), Reason::WrongIdType);
}

#[test]
fn cosine_vectors_are_normalized_and_zero_rejected() {
    let mut def = def();
    def.metric = Metric::Cosine;
    let msg = |v: &'static [u8]| Message {
        key: None,
        value: Some(v),
        content_type: Some("application/json; charset=utf-8"),
    };
    let Ok(Event::Upsert(p)) = decode(&def, msg(br#"{"id": 1, "vector": [3, 0, 4]}"#)) else {
        panic!("expected upsert")
    };
    assert!((p.vector[0] - 0.6).abs() < 1e-6 && (p.vector[2] - 0.8).abs() < 1e-6);
    assert_eq!(
        reason(decode(&def, msg(br#"{"id": 1, "vector": [0, 0, 0]}"#))),
        Reason::ZeroVector
    );
}

#[test]
fn protobuf_events_decode() {
    let mut def = def();
    def.id_type = IdType::String;
    let mut event = PointEvent {
        id: Some(Id::StrId("doc".into())),
        vector: vec![],
        vector_le: [1.0f32, 2.0, 3.0]
            .iter()
            .flat_map(|f| f.to_le_bytes())
            .collect(),
        payload: Default::default(),
    };
    event.payload.insert(
        "size".into(),
        PayloadValue {
            kind: Some(Kind::Integer(4)),
        },
    );
    let bytes = event.encode_to_vec();
    let ev = decode(
        &def,
        Message {
            key: Some(b"doc"),
            value: Some(&bytes),
            content_type: Some(CONTENT_TYPE_PROTOBUF),
        },
    )
    .expect("valid protobuf event");
    let Event::Upsert(p) = ev else {
        panic!("expected upsert")
    };
    assert_eq!(p.vector, vec![1.0, 2.0, 3.0]);
    assert_eq!(&*p.payload, br#"{"size":4}"#);
    let garbage = decode(
        &def,
        Message {
            key: None,
            value: Some(&[0xff, 0xff, 0xff]),
            content_type: Some(CONTENT_TYPE_PROTOBUF),
        },
    );
    assert_eq!(reason(garbage), Reason::Malformed);
}

/// A collection may declare the format of events that carry no
/// `content-type` header; a header, where present, still decides.
#[test]
fn events_without_a_header_take_the_collections_format() {
    let mut def = def();
    def.format = ValueFormat::Protobuf;
    let bytes = PointEvent {
        id: Some(Id::NumId(9)),
        vector: vec![1.0, 0.0, 0.0],
        ..Default::default()
    }
    .encode_to_vec();
    let headerless = |content_type| Message {
        key: Some(b"9"),
        value: Some(&bytes),
        content_type,
    };
    let Ok(Event::Upsert(p)) = decode(&def, headerless(None)) else {
        panic!("a header-less protobuf event decodes in a protobuf collection")
    };
    assert_eq!(p.id, PointId::Num(9));
    assert!(
        decode(&def, headerless(Some(""))).is_ok(),
        "an empty header is none"
    );
    let json = br#"{"id": 9, "vector": [1, 0, 0]}"#;
    let labelled = Message {
        key: Some(b"9"),
        value: Some(json),
        content_type: Some(CONTENT_TYPE_JSON),
    };
    assert!(decode(&def, labelled).is_ok(), "the header wins");
    let unlabelled = Message {
        content_type: None,
        ..labelled
    };
    assert_eq!(reason(decode(&def, unlabelled)), Reason::Malformed);
    def.format = ValueFormat::Arrow;
    let tombstone = Message {
        key: Some(b"9"),
        value: None,
        content_type: None,
    };
    assert!(
        matches!(decode(&def, tombstone), Ok(Event::Delete(PointId::Num(9)))),
        "a tombstone deletes its key in an Arrow collection too"
    );
}

mod arrow {
    use std::sync::Arc;

    use arrow_array::builder::{
        FixedSizeListBuilder, Float32Builder, Int64Builder, LargeListBuilder, ListBuilder,
        StringBuilder,
    };
    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray, UInt64Array};
    use arrow_ipc::writer::StreamWriter;

    use super::*;

    fn vectors(rows: &[[f32; 3]]) -> ArrayRef {
        let mut b = FixedSizeListBuilder::new(Float32Builder::new(), 3);
        for row in rows {
            b.values().append_slice(row);
            b.append(true);
        }
        Arc::new(b.finish())
    }

    fn stream(columns: Vec<(&str, ArrayRef)>) -> Vec<u8> {
        let batch = RecordBatch::try_from_iter(columns).expect("batch");
        let mut out = Vec::new();
        let mut w = StreamWriter::try_new(&mut out, &batch.schema()).expect("writer");
        w.write(&batch).expect("write");
        w.finish().expect("finish");
        drop(w);
        out
    }

    fn bulk(def: &CollectionDef, value: &[u8]) -> Result<Event<'static>, Rejection> {
        decode(
            def,
            Message {
                key: Some(b"any key"),
                value: Some(value),
                content_type: Some(CONTENT_TYPE_ARROW),
            },
        )
        .map(|e| match e {
            Event::Bulk(points) => Event::Bulk(points),
            _ => panic!("an Arrow message decodes to a bulk event"),
        })
    }

    #[test]
    fn a_batch_decodes_to_points_in_row_order_with_payloads() {
        let value = stream(vec![
            ("id", Arc::new(UInt64Array::from(vec![5, 6])) as ArrayRef),
            ("vector", vectors(&[[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]])),
            ("size", Arc::new(Int64Array::from(vec![Some(3), None]))),
            ("name", Arc::new(StringArray::from(vec!["a\"b", "c"]))),
        ]);
        let Ok(Event::Bulk(points)) = bulk(&def(), &value) else {
            panic!("valid batch")
        };
        assert_eq!(points.len(), 2);
        let rows: Vec<PointRef<'_>> = points.iter().collect();
        assert_eq!(rows[0].id, &PointId::Num(5));
        assert_eq!(rows[1].vector, &[0.0, 2.0, 0.0]);
        assert_eq!(rows[0].payload, br#"{"size":3,"name":"a\"b"}"#);
        assert_eq!(rows[1].payload, br#"{"name":"c"}"#);
        assert_eq!(rows[1].row, 1);
    }

    #[test]
    fn list_payload_columns_become_json_arrays() {
        // What `eddy-loadtest produce --format arrow` sends for a list of
        // strings (the dataset's `tags`): List<Utf8>, with null lists, empty
        // lists and null items.
        let mut tags = ListBuilder::new(StringBuilder::new());
        tags.values().append_value("a");
        tags.values().append_null();
        tags.values().append_value("b\"c");
        tags.append(true);
        tags.append(false);
        tags.append(true);
        let mut sizes = LargeListBuilder::new(Int64Builder::new());
        sizes.values().append_value(1);
        sizes.append(true);
        sizes.append(true);
        sizes.values().append_value(-2);
        sizes.values().append_value(3);
        sizes.append(true);
        let value = stream(vec![
            ("id", Arc::new(UInt64Array::from(vec![1, 2, 3])) as ArrayRef),
            (
                "vector",
                vectors(&[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]),
            ),
            ("tags", Arc::new(tags.finish())),
            ("sizes", Arc::new(sizes.finish())),
        ]);
        let Ok(Event::Bulk(points)) = bulk(&def(), &value) else {
            panic!("a batch with list columns decodes")
        };
        let payloads: Vec<&[u8]> = points.iter().map(|p| p.payload).collect();
        assert_eq!(
            payloads,
            [
                &br#"{"tags":["a",null,"b\"c"],"sizes":[1]}"#[..],
                &br#"{"sizes":[]}"#[..],
                &br#"{"tags":[],"sizes":[-2,3]}"#[..],
            ]
        );
    }

    #[test]
    fn a_bad_batch_is_rejected_whole_with_the_reason() {
        let ok_vectors = || vectors(&[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]);
        let ids = || Arc::new(UInt64Array::from(vec![1, 2])) as ArrayRef;
        let nan = stream(vec![
            ("id", ids()),
            ("vector", vectors(&[[1.0, 0.0, 0.0], [f32::NAN, 0.0, 0.0]])),
        ]);
        let err = bulk(&def(), &nan).expect_err("NaN row");
        assert_eq!(err.reason, Reason::NonFinite);
        assert!(err.detail.contains("row 1"), "{err}");
        let typed = stream(vec![
            ("id", ids()),
            ("vector", ok_vectors()),
            (
                "size",
                Arc::new(StringArray::from(vec!["x", "y"])) as ArrayRef,
            ),
        ]);
        assert_eq!(
            bulk(&def(), &typed).expect_err("type").reason,
            Reason::PayloadType
        );
        let str_ids = stream(vec![
            (
                "id",
                Arc::new(StringArray::from(vec!["a", "b"])) as ArrayRef,
            ),
            ("vector", ok_vectors()),
        ]);
        assert_eq!(
            bulk(&def(), &str_ids).expect_err("ids").reason,
            Reason::WrongIdType
        );
        let no_vector = stream(vec![("id", ids())]);
        assert_eq!(
            bulk(&def(), &no_vector).expect_err("schema").reason,
            Reason::WrongSchema
        );
        let mut wide = def();
        wide.dimension = 4;
        assert_eq!(
            bulk(
                &wide,
                &stream(vec![("id", ids()), ("vector", ok_vectors())])
            )
            .expect_err("dimension")
            .reason,
            Reason::WrongDimension
        );
        assert_eq!(
            bulk(&def(), b"not arrow").expect_err("garbage").reason,
            Reason::Malformed
        );
    }

    #[test]
    fn string_ids_decode_for_string_collections() {
        let mut def = def();
        def.id_type = IdType::String;
        let value = stream(vec![
            ("id", Arc::new(StringArray::from(vec!["doc-1"])) as ArrayRef),
            ("vector", vectors(&[[0.0, 0.0, 1.0]])),
        ]);
        let Ok(Event::Bulk(points)) = bulk(&def, &value) else {
            panic!("valid batch")
        };
        let row = points.get(0).expect("one row");
        assert_eq!(row.id, &PointId::Str("doc-1".into()));
        assert!(row.payload.is_empty());
    }
}
