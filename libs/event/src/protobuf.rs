//! The protobuf event format: `eddy.v1.PointEvent`.

use std::borrow::Cow;

use eddy_model::{CollectionDef, PointId};
use eddy_proto::v1::{payload_value::Kind, point_event::Id, PointEvent};
use prost::Message as _;
use serde_json::{Map, Value};

use crate::{Point, Reason, Rejection, MAX_PAYLOAD_BYTES};

/// Decodes one protobuf `PointEvent` value; its typed payload becomes
/// canonical JSON bytes, built once.
pub(crate) fn decode(def: &CollectionDef, value: &[u8]) -> Result<Point<'static>, Rejection> {
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
    let payload = if event.payload.is_empty() {
        Vec::new()
    } else {
        payload_json(def, event.payload)?
    };
    if payload.len() > MAX_PAYLOAD_BYTES {
        return Err(Rejection::new(
            Reason::Oversize,
            format!("payload exceeds {MAX_PAYLOAD_BYTES} bytes"),
        ));
    }
    Ok(Point {
        id,
        vector,
        payload: Cow::Owned(payload),
    })
}

/// The typed payload fields as one JSON object's bytes.
fn payload_json(
    def: &CollectionDef,
    fields: impl IntoIterator<Item = (String, eddy_proto::v1::PayloadValue)>,
) -> Result<Vec<u8>, Rejection> {
    let mut payload = Map::new();
    for (field, value) in fields {
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
        crate::payload::check_field(def, &field, &json)?;
        payload.insert(field, json);
    }
    serde_json::to_vec(&payload)
        .map_err(|e| Rejection::new(Reason::Malformed, format!("payload: {e}")))
}
