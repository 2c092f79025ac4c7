//! The JSON event format: `{"id": 42, "vector": [..], "payload": {..}}`.

use eddy_model::PointId;
use serde::Deserialize;

use crate::{Payload, Point, Reason, Rejection, MAX_PAYLOAD_BYTES};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEvent {
    id: PointId,
    vector: Vec<f32>,
    #[serde(default)]
    payload: Option<Payload>,
}

/// Decodes one JSON event value.
pub(crate) fn decode(value: &[u8]) -> Result<Point, Rejection> {
    let event: JsonEvent = serde_json::from_slice(value)
        .map_err(|e| Rejection::new(Reason::Malformed, format!("invalid JSON event: {e}")))?;
    let payload = event.payload.unwrap_or_default();
    if value.len() > MAX_PAYLOAD_BYTES
        && serde_json::to_vec(&payload).map_or(0, |p| p.len()) > MAX_PAYLOAD_BYTES
    {
        return Err(Rejection::new(
            Reason::Oversize,
            format!("payload exceeds {MAX_PAYLOAD_BYTES} bytes"),
        ));
    }
    Ok(Point {
        id: event.id,
        vector: event.vector,
        payload,
    })
}
