//! The JSON event: `{"id": 42, "vector": [...], "payload": {...}}`.

use serde::Serialize;

use super::{Payload, Result};

#[derive(Serialize)]
struct Event<'a> {
    id: u64,
    vector: &'a [f32],
    payload: &'a Payload,
}

/// Encodes one point as a JSON event (floats in their shortest exact form).
pub(super) fn encode(id: u64, vector: &[f32], payload: &Payload) -> Result<Vec<u8>> {
    Ok(serde_json::to_vec(&Event {
        id,
        vector,
        payload,
    })?)
}
