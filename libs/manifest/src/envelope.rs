//! The JSON files of the store — manifest versions and collection
//! definitions — each wrapped in one envelope:
//!
//! ```text
//! {"format_version":1,"kind":"manifest","crc32":1234567890,"body":{ ...the document... }}
//! ```
//!
//! Why an envelope rather than a `format_version` field inside each
//! document: the checksum must cover exact bytes, and the body's bytes are
//! exactly what was written — the reader takes them back verbatim
//! (`serde_json::value::RawValue`), checks the CRC over them, and only then
//! parses them, so no canonical re-serialisation (whose number or key
//! formatting could drift) is involved. The version sits outside the
//! checksummed body so a newer file is refused before anything in it is
//! interpreted, and the document types (`Manifest`, `CollectionDef`, which
//! the API serialises too) stay free of storage fields. The file is still a
//! single JSON document (`jq .body` shows the content).

use std::path::Path;

use eddy_format::{check_crc, crc32, Versions};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::{Error, Result};

/// One kind of JSON file in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonFormat {
    /// The envelope's `kind`, which a reader checks (the JSON magic).
    pub kind: &'static str,
    /// What the file is, for error messages.
    pub what: &'static str,
    /// Versions this build reads; it writes `versions.current`.
    pub versions: Versions,
}

/// Manifest versions (`manifests/<version>.json`).
pub const MANIFEST_FORMAT: JsonFormat = JsonFormat {
    kind: "manifest",
    what: "manifest",
    versions: Versions::new(1, 1),
};

/// Collection definitions (`collection.json`).
pub const COLLECTION_FORMAT: JsonFormat = JsonFormat {
    kind: "collection",
    what: "collection definition",
    versions: Versions::new(1, 1),
};

#[derive(Serialize)]
struct EnvelopeOut<'a> {
    format_version: u32,
    kind: &'a str,
    crc32: u32,
    body: &'a RawValue,
}

/// Every field optional, so a file that lacks one gets an error naming it.
#[derive(Deserialize)]
struct EnvelopeIn<'a> {
    format_version: Option<u32>,
    kind: Option<String>,
    crc32: Option<u32>,
    #[serde(borrow)]
    body: Option<&'a RawValue>,
}

impl JsonFormat {
    /// The file bytes of `value`: its pretty-printed JSON in the envelope
    /// of the current version.
    pub(crate) fn encode<T: Serialize>(&self, path: &Path, value: &T) -> Result<Vec<u8>> {
        let invalid = |e: serde_json::Error| Error::Corrupt {
            path: path.to_owned(),
            reason: format!("cannot encode the {}: {e}", self.what),
        };
        let body = RawValue::from_string(serde_json::to_string_pretty(value).map_err(invalid)?)
            .map_err(invalid)?;
        let mut bytes = serde_json::to_vec(&EnvelopeOut {
            format_version: self.versions.current,
            kind: self.kind,
            crc32: crc32(body.get().as_bytes()),
            body: &body,
        })
        .map_err(invalid)?;
        bytes.push(b'\n');
        Ok(bytes)
    }

    /// The document in the file bytes `bytes` read from `path`, after
    /// checking the envelope's kind, version and checksum, in that order.
    pub(crate) fn decode<T: DeserializeOwned>(&self, path: &Path, bytes: &[u8]) -> Result<T> {
        let corrupt = |reason: String| Error::Corrupt {
            path: path.to_owned(),
            reason,
        };
        let envelope: EnvelopeIn<'_> = serde_json::from_slice(bytes)
            .map_err(|e| corrupt(format!("not a readable {} file: {e}", self.what)))?;
        let version = envelope.format_version.ok_or_else(|| {
            corrupt(format!(
                "{} has no format_version (not an eddy store file, or written before format versions)",
                self.what
            ))
        })?;
        match envelope.kind.as_deref() {
            Some(kind) if kind == self.kind => {}
            other => {
                return Err(corrupt(format!(
                    "expected a {} file, found kind {other:?}",
                    self.kind
                )))
            }
        }
        self.versions
            .check(self.what, version)
            .map_err(|source| Error::Format {
                path: path.to_owned(),
                source,
            })?;
        let (Some(stored), Some(body)) = (envelope.crc32, envelope.body) else {
            return Err(corrupt(format!(
                "{} envelope lacks crc32 or body",
                self.what
            )));
        };
        check_crc(self.what, stored, crc32(body.get().as_bytes())).map_err(|source| {
            Error::Format {
                path: path.to_owned(),
                source,
            }
        })?;
        serde_json::from_str(body.get()).map_err(|e| corrupt(format!("{}: {e}", self.what)))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn round_trip_keeps_the_body_bytes_under_the_checksum() {
        let path = Path::new("x.json");
        let value = BTreeMap::from([("a", 1.5f64), ("b", -0.0)]);
        let bytes = MANIFEST_FORMAT.encode(path, &value).expect("encode");
        let text = std::str::from_utf8(&bytes).expect("utf-8");
        assert!(
            text.starts_with(r#"{"format_version":1,"kind":"manifest","crc32":"#),
            "{text}"
        );
        let back: BTreeMap<String, f64> = MANIFEST_FORMAT.decode(path, &bytes).expect("decode");
        assert_eq!(back.len(), 2);
        let err = COLLECTION_FORMAT
            .decode::<BTreeMap<String, f64>>(path, &bytes)
            .expect_err("wrong kind");
        assert!(
            err.to_string().contains("expected a collection file"),
            "{err}"
        );
        let legacy = br#"{"version":1,"collection":"c"}"#;
        let err = MANIFEST_FORMAT
            .decode::<serde_json::Value>(path, legacy)
            .expect_err("no envelope");
        assert!(err.to_string().contains("no format_version"), "{err}");
    }
}
