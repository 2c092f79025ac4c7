//! The protobuf event format: `eddy.v1.PointEvent`.

use eddy_model::PointId;
use eddy_proto::v1::{payload_value::Kind, point_event::Id, PointEvent};
use prost::Message as _;
use serde_json::Value;

use crate::{Payload, Point, Reason, Rejection, MAX_PAYLOAD_BYTES};

/// Decodes one protobuf `PointEvent` value.
pub(crate) fn decode(value: &[u8]) -> Result<Point, Rejection> {
    let event = PointEvent::decode(value).map_err(|e| {
        Rejection::new(
            Reason::Malformed,
            format!("invalid protobuf PointEvent: {e}"),
        )
    })?;
    let id = match event.id {
        Some(Id::NumId(n)) => PointId::Num(n),
        Some(Id::StrId(s)) => PointId::Str(s),
        None => {
            return Err(Rejection::new(
                Reason::Malformed,
                "PointEvent without an id",
            ))
        }
    };
    let vector = if event.vector_le.is_empty() {
        event.vector
    } else {
        if event.vector_le.len() % 4 != 0 {
            return Err(Rejection::new(
                Reason::Malformed,
                format!(
                    "vector_le has {} bytes, not a multiple of 4",
                    event.vector_le.len()
                ),
            ));
        }
        event
            .vector_le
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let mut payload = Payload::new();
    let mut bytes = 0usize;
    for (field, value) in event.payload {
        let json = match value.kind {
            None => Value::Null,
            Some(Kind::Keyword(s)) => Value::String(s),
            Some(Kind::Integer(i)) => Value::from(i),
            Some(Kind::Float(f)) => serde_json::Number::from_f64(f)
                .map(Value::Number)
                .ok_or_else(|| {
                    Rejection::new(Reason::NonFinite, format!("payload field {field:?} is {f}"))
                })?,
            Some(Kind::Boolean(b)) => Value::Bool(b),
            Some(Kind::Json(text)) => serde_json::from_str(&text).map_err(|e| {
                Rejection::new(
                    Reason::Malformed,
                    format!("payload field {field:?}: invalid JSON: {e}"),
                )
            })?,
        };
        bytes += field.len() + json.to_string().len();
        payload.insert(field, json);
    }
    if bytes > MAX_PAYLOAD_BYTES {
        return Err(Rejection::new(
            Reason::Oversize,
            format!("payload exceeds {MAX_PAYLOAD_BYTES} bytes"),
        ));
    }
    Ok(Point {
        id,
        vector,
        payload,
    })
}
