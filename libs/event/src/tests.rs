use eddy_model::{CollectionDef, FieldType, IdType, Metric};
use eddy_proto::v1::{payload_value::Kind, point_event::Id, PayloadValue, PointEvent};
use prost::Message as _;

use super::*;

fn def() -> CollectionDef {
    let mut def = CollectionDef::new("c", 3);
    def.metric = Metric::Dot;
    def.payload_fields.insert("size".into(), FieldType::Integer);
    def
}

fn json(value: &str) -> Result<Event, Rejection> {
    decode(
        &def(),
        Message {
            key: None,
            value: Some(value.as_bytes()),
            content_type: None,
        },
    )
}

fn reason(r: Result<Event, Rejection>) -> Reason {
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
    assert_eq!(p.payload["name"], "x");
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
    assert_eq!(p.payload["size"], 4);
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
