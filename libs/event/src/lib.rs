//! Decoding and validation of the Kafka point events (DESIGN.md, "The Kafka
//! event"): JSON (default) and protobuf `eddy.v1.PointEvent` values, Arrow
//! IPC stream messages carrying many points, and tombstones (null value =
//! delete the id in the key).
//!
//! The crate knows nothing about Kafka clients: it takes a message's key,
//! value and `content-type` header and returns an [`Event`] or a
//! [`Rejection`] whose [`Reason`] names the dead-letter cause.

mod arrow;
mod json;
mod payload;
mod points;
mod protobuf;

use std::borrow::Cow;

use eddy_model::{CollectionDef, PointId, ValueFormat};

pub use points::{PointRef, Points};

/// Largest accepted event value, in bytes.
pub const MAX_EVENT_BYTES: usize = 16 << 20;
/// Largest accepted payload once encoded as JSON, in bytes.
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;

/// `content-type` of JSON events (the default when the header is absent).
pub const CONTENT_TYPE_JSON: &str = "application/json";
/// `content-type` of protobuf `eddy.v1.PointEvent` events.
pub const CONTENT_TYPE_PROTOBUF: &str = "application/x-protobuf";
/// `content-type` of Arrow IPC stream messages carrying many points.
pub const CONTENT_TYPE_ARROW: &str = "application/vnd.apache.arrow.stream";

/// One point: what an upsert carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Point<'a> {
    /// The point id.
    pub id: PointId,
    /// The vector, normalised when the collection's metric asks for it.
    pub vector: Vec<f32>,
    /// The payload as the bytes of one JSON object (empty for none): for a
    /// JSON event the `payload` object exactly as it arrived (borrowed from
    /// the message, never re-serialised), for protobuf the canonical JSON
    /// built once.
    pub payload: Cow<'a, [u8]>,
}

/// A decoded event.
#[derive(Debug, Clone, PartialEq)]
pub enum Event<'a> {
    /// Insert or replace a point.
    Upsert(Point<'a>),
    /// Delete the point with this id.
    Delete(PointId),
    /// Insert or replace many points, in row order (an Arrow IPC message).
    Bulk(Points),
}

/// Why an event was rejected: a closed set, used as a metric label and in the
/// dead-letter headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The value is not a well-formed event of its content type.
    Malformed,
    /// The vector's length differs from the collection's dimension.
    WrongDimension,
    /// The vector holds NaN or an infinity.
    NonFinite,
    /// A cosine collection received an all-zero vector.
    ZeroVector,
    /// The id does not match the collection's id type.
    WrongIdType,
    /// The message key names another id than the value.
    KeyMismatch,
    /// A tombstone without a usable key.
    MissingKey,
    /// A declared payload field has a value of another type.
    PayloadType,
    /// The value or payload exceeds the size limits.
    Oversize,
    /// The `content-type` header names a format eddy does not read.
    UnsupportedContentType,
    /// An Arrow batch lacks a column eddy needs or has one of another type.
    WrongSchema,
}

impl Reason {
    /// Every reason, for pre-registering metric label values.
    pub const ALL: [Reason; 11] = [
        Reason::Malformed,
        Reason::WrongDimension,
        Reason::NonFinite,
        Reason::ZeroVector,
        Reason::WrongIdType,
        Reason::KeyMismatch,
        Reason::MissingKey,
        Reason::PayloadType,
        Reason::Oversize,
        Reason::UnsupportedContentType,
        Reason::WrongSchema,
    ];

    /// The stable snake_case name used in metrics and headers.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Malformed => "malformed",
            Reason::WrongDimension => "wrong_dimension",
            Reason::NonFinite => "non_finite",
            Reason::ZeroVector => "zero_vector",
            Reason::WrongIdType => "wrong_id_type",
            Reason::KeyMismatch => "key_mismatch",
            Reason::MissingKey => "missing_key",
            Reason::PayloadType => "payload_type",
            Reason::Oversize => "oversize",
            Reason::UnsupportedContentType => "unsupported_content_type",
            Reason::WrongSchema => "wrong_schema",
        }
    }
}

/// A rejected event: the reason and a human-readable detail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {detail}", reason.as_str())]
pub struct Rejection {
    /// The closed-set reason.
    pub reason: Reason,
    /// What exactly was wrong (bounded length, never the whole value).
    pub detail: String,
}

impl Rejection {
    pub(crate) fn new(reason: Reason, detail: impl Into<String>) -> Self {
        let mut detail = detail.into();
        if detail.len() > 256 {
            let mut cut = 256;
            while !detail.is_char_boundary(cut) {
                cut -= 1;
            }
            detail.truncate(cut);
        }
        Self { reason, detail }
    }
}

/// A Kafka message as the decoder sees it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Message<'a> {
    /// The record key (the point id as text), if any.
    pub key: Option<&'a [u8]>,
    /// The record value; `None` is a tombstone.
    pub value: Option<&'a [u8]>,
    /// The `content-type` header, if any.
    pub content_type: Option<&'a str>,
}

/// The content type of a collection's events that carry no header.
fn default_content_type(format: ValueFormat) -> &'static str {
    match format {
        ValueFormat::Json => CONTENT_TYPE_JSON,
        ValueFormat::Protobuf => CONTENT_TYPE_PROTOBUF,
        ValueFormat::Arrow => CONTENT_TYPE_ARROW,
    }
}

/// Decodes and validates one message for a collection: each value is
/// parsed once, and a JSON payload is kept as the bytes it arrived as.
pub fn decode<'a>(def: &CollectionDef, msg: Message<'a>) -> Result<Event<'a>, Rejection> {
    // A header decides; without one (or an empty one) the collection's
    // declared format does.
    let content_type = msg
        .content_type
        .map(|c| c.split(';').next().unwrap_or(c).trim())
        .filter(|c| !c.is_empty())
        .unwrap_or(default_content_type(def.format));
    let Some(value) = msg.value else {
        // A tombstone deletes its key, whatever format the topic carries.
        return key_id(def, msg.key)?
            .map(Event::Delete)
            .ok_or_else(|| Rejection::new(Reason::MissingKey, "tombstone without a key"));
    };
    let bulk = content_type == CONTENT_TYPE_ARROW;
    // A bulk message's key names no single id: it is not checked.
    let key_id = if bulk { None } else { key_id(def, msg.key)? };
    if value.len() > MAX_EVENT_BYTES {
        return Err(Rejection::new(
            Reason::Oversize,
            format!("value of {} bytes exceeds {MAX_EVENT_BYTES}", value.len()),
        ));
    }
    let mut point = match content_type {
        CONTENT_TYPE_JSON => json::decode(def, value)?,
        CONTENT_TYPE_PROTOBUF => protobuf::decode(def, value)?,
        CONTENT_TYPE_ARROW => return arrow::decode(def, value).map(Event::Bulk),
        other => {
            return Err(Rejection::new(
                Reason::UnsupportedContentType,
                format!(
                    "content-type {other:?} (expected {CONTENT_TYPE_JSON}, \
                     {CONTENT_TYPE_PROTOBUF} or {CONTENT_TYPE_ARROW})"
                ),
            ))
        }
    };
    point
        .id
        .check(def.id_type)
        .map_err(|e| Rejection::new(Reason::WrongIdType, e.to_string()))?;
    if let Some(key_id) = key_id {
        if key_id != point.id {
            return Err(Rejection::new(
                Reason::KeyMismatch,
                format!("key {key_id} but value id {}", point.id),
            ));
        }
    }
    validate_vector_for(def, &mut point.vector)?;
    Ok(Event::Upsert(point))
}

/// The id a message key names, if it has one.
fn key_id(def: &CollectionDef, key: Option<&[u8]>) -> Result<Option<PointId>, Rejection> {
    let Some(key) = key else {
        return Ok(None);
    };
    let text = std::str::from_utf8(key)
        .map_err(|_| Rejection::new(Reason::WrongIdType, "message key is not UTF-8"))?;
    PointId::parse(text, def.id_type)
        .map(Some)
        .map_err(|e| Rejection::new(Reason::WrongIdType, format!("message key: {e}")))
}

/// Checks a vector against the collection (dimension, finiteness) and
/// normalises it when the metric asks for it.
pub fn validate_vector_for(def: &CollectionDef, vector: &mut [f32]) -> Result<(), Rejection> {
    if vector.len() != def.dimension as usize {
        return Err(Rejection::new(
            Reason::WrongDimension,
            format!(
                "vector has {} values, collection dimension is {}",
                vector.len(),
                def.dimension
            ),
        ));
    }
    validate_vector(vector)?;
    if def.metric.normalizes() && !normalize(vector) {
        return Err(Rejection::new(
            Reason::ZeroVector,
            "cosine collection got an all-zero vector",
        ));
    }
    Ok(())
}

/// Checks that every value is finite.
pub fn validate_vector(vector: &[f32]) -> Result<(), Rejection> {
    match vector.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(Rejection::new(
            Reason::NonFinite,
            format!("vector[{i}] is {}", vector[i]),
        )),
        None => Ok(()),
    }
}

/// Scales `v` to unit length; returns false (leaving it as is) for a zero vector.
pub fn normalize(v: &mut [f32]) -> bool {
    let norm = eddy_kernels::dot(v, v).sqrt();
    if norm == 0.0 || !norm.is_finite() {
        return false;
    }
    let inv = 1.0 / norm;
    v.iter_mut().for_each(|x| *x *= inv);
    true
}

#[cfg(test)]
mod tests;
