//! Payload checks on the bytes as they arrived: only the fields the
//! collection declares are parsed, and only to check their types.

use std::borrow::Cow;
use std::collections::HashMap;

use eddy_model::CollectionDef;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::{Reason, Rejection};

/// A payload object key: borrowed from the message unless it holds escapes.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        BorrowedStr(deserializer).deserialize().map(Key)
    }
}

/// Deserializes a string borrowed where the input allows it (serde's own
/// `Cow<str>` impl always copies).
struct BorrowedStr<D>(D);

impl<'de, D: Deserializer<'de>> BorrowedStr<D> {
    fn deserialize(self) -> Result<Cow<'de, str>, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Cow<'de, str>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Cow::Borrowed(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Cow::Owned(v.to_owned()))
            }
        }
        self.0.deserialize_str(Visitor)
    }
}

/// Checks that a declared payload field's value has the declared type.
pub(crate) fn check_field(
    def: &CollectionDef,
    field: &str,
    value: &Value,
) -> Result<(), Rejection> {
    match def.payload_fields.get(field) {
        Some(ty) if !ty.accepts(value) => Err(Rejection::new(
            Reason::PayloadType,
            format!("payload field {field:?} must be {ty:?}, got {value}"),
        )),
        _ => Ok(()),
    }
}

/// Checks the declared fields of a JSON payload object (`payload`, empty
/// for none): each one present must have its declared type. Undeclared
/// fields are not parsed.
pub(crate) fn check_declared(def: &CollectionDef, payload: &[u8]) -> Result<(), Rejection> {
    if payload.is_empty() || def.payload_fields.is_empty() {
        return Ok(());
    }
    let fields: HashMap<Key<'_>, &RawValue> = serde_json::from_slice(payload)
        .map_err(|e| Rejection::new(Reason::Malformed, format!("payload: {e}")))?;
    for (field, raw) in fields {
        if def.payload_fields.contains_key(field.0.as_ref()) {
            let value: Value = serde_json::from_str(raw.get())
                .map_err(|e| Rejection::new(Reason::Malformed, format!("payload: {e}")))?;
            check_field(def, &field.0, &value)?;
        }
    }
    Ok(())
}
