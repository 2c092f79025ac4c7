//! The JSON event format: `{"id": 42, "vector": [..], "payload": {..}}`.

use std::borrow::Cow;

use eddy_model::{CollectionDef, PointId};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::{Point, Reason, Rejection, MAX_PAYLOAD_BYTES};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEvent<'a> {
    id: PointId,
    vector: Vec<f32>,
    /// The payload object's bytes, borrowed as they are in the message.
    #[serde(default, borrow)]
    payload: Option<&'a RawValue>,
}

/// Decodes one JSON event value; the payload is kept as the bytes it
/// arrived as (a borrowed slice of `value`).
pub(crate) fn decode<'a>(def: &CollectionDef, value: &'a [u8]) -> Result<Point<'a>, Rejection> {
    let event: JsonEvent<'_> = serde_json::from_slice(value)
        .map_err(|e| Rejection::new(Reason::Malformed, format!("invalid JSON event: {e}")))?;
    let payload = event.payload.map_or("", RawValue::get);
    if !payload.is_empty() && !payload.starts_with('{') {
        return Err(Rejection::new(
            Reason::Malformed,
            "payload must be a JSON object",
        ));
    }
    if payload.len() > MAX_PAYLOAD_BYTES {
        return Err(Rejection::new(
            Reason::Oversize,
            format!("payload exceeds {MAX_PAYLOAD_BYTES} bytes"),
        ));
    }
    crate::payload::check_declared(def, payload.as_bytes())?;
    Ok(Point {
        id: event.id,
        vector: event.vector,
        payload: Cow::Borrowed(payload.as_bytes()),
    })
}
