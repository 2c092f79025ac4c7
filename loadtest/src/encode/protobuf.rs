//! The protobuf event: `eddy.v1.PointEvent`, payload values typed
//! (keyword, integer, float, boolean; lists and objects as JSON text; null
//! as a value with no kind).

use eddy_proto::v1::{payload_value::Kind, point_event::Id, PayloadValue, PointEvent};
use prost::Message as _;
use serde_json::Value;

use super::Payload;

/// Encodes one point; the vector as raw little-endian bytes (`vector_le`)
/// when `vector_bytes`, else as packed floats.
pub(super) fn encode(id: u64, vector: &[f32], payload: &Payload, vector_bytes: bool) -> Vec<u8> {
    let (packed, bytes) = if vector_bytes {
        let bytes = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
        (Vec::new(), bytes)
    } else {
        (vector.to_vec(), Vec::new())
    };
    let event = PointEvent {
        id: Some(Id::NumId(id)),
        vector: packed,
        vector_le: bytes,
        payload: payload
            .iter()
            .map(|(field, value)| (field.clone(), payload_value(value)))
            .collect(),
    };
    event.encode_to_vec()
}

fn payload_value(value: &Value) -> PayloadValue {
    let kind = match value {
        Value::Null => None,
        Value::Bool(b) => Some(Kind::Boolean(*b)),
        Value::String(s) => Some(Kind::Keyword(s.clone())),
        Value::Number(n) => Some(match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Kind::Integer(i),
            (None, Some(f)) if !n.is_u64() => Kind::Float(f),
            // A u64 beyond i64 keeps its exact digits as JSON text.
            _ => Kind::Json(n.to_string()),
        }),
        Value::Array(_) | Value::Object(_) => Some(Kind::Json(value.to_string())),
    };
    PayloadValue { kind }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_through_prost() {
        let payload = match json!({"s": "net", "i": -3, "f": 0.5, "b": true, "n": null,
                                   "l": ["x"], "big": u64::MAX})
        {
            Value::Object(m) => m,
            _ => Payload::new(),
        };
        for vector_bytes in [false, true] {
            let bytes = encode(7, &[1.0, -2.5], &payload, vector_bytes);
            let event = PointEvent::decode(bytes.as_slice()).expect("decodes");
            assert_eq!(event.id, Some(Id::NumId(7)));
            if vector_bytes {
                assert!(event.vector.is_empty());
                assert_eq!(event.vector_le.len(), 8);
            } else {
                assert_eq!(event.vector, vec![1.0, -2.5]);
            }
            let kind = |f: &str| event.payload.get(f).and_then(|v| v.kind.clone());
            assert_eq!(kind("s"), Some(Kind::Keyword("net".into())));
            assert_eq!(kind("i"), Some(Kind::Integer(-3)));
            assert_eq!(kind("f"), Some(Kind::Float(0.5)));
            assert_eq!(kind("b"), Some(Kind::Boolean(true)));
            assert_eq!(kind("n"), None);
            assert!(event.payload.contains_key("n"));
            assert_eq!(kind("l"), Some(Kind::Json("[\"x\"]".into())));
            assert_eq!(kind("big"), Some(Kind::Json(u64::MAX.to_string())));
        }
    }
}
