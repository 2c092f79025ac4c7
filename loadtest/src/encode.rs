//! Kafka event encoders: the dataset's rows as eddy events in each format
//! DESIGN.md defines — JSON (`{"id", "vector", "payload"}`), protobuf
//! `eddy.v1.PointEvent`, and Arrow IPC stream messages of many rows.
//!
//! Every record's key is the point id as text (for an Arrow message, the id
//! of its first row, so a re-sent batch keeps its partition), and every
//! record carries its format's `content-type` header.

mod arrow;
mod json;
mod protobuf;

use std::ops::Range;

use eddy_dataset::Matrix;
use serde_json::{Map, Value};

pub use arrow::PayloadColumns;

/// `content-type` of JSON events.
pub const CONTENT_TYPE_JSON: &str = "application/json";
/// `content-type` of protobuf `eddy.v1.PointEvent` events.
pub const CONTENT_TYPE_PROTOBUF: &str = "application/x-protobuf";
/// `content-type` of Arrow IPC stream messages.
pub const CONTENT_TYPE_ARROW: &str = "application/vnd.apache.arrow.stream";

/// A payload: one JSON object per point (the dataset's `base-payload.jsonl` line).
pub type Payload = Map<String, Value>;

/// Errors while encoding events.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A JSON event could not be serialized.
    #[error("encoding a JSON event: {0}")]
    Json(#[from] serde_json::Error),
    /// An Arrow batch could not be built or written.
    #[error("encoding an Arrow batch: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    /// The rows asked for do not fit the data.
    #[error("rows {start}..{end} out of range ({rows} rows, {payloads} payloads)")]
    Range {
        /// First row asked for.
        start: usize,
        /// One past the last row asked for.
        end: usize,
        /// Vector rows available.
        rows: usize,
        /// Payloads available.
        payloads: usize,
    },
}

/// Result alias for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The value format of the events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// `{"id": 42, "vector": [...], "payload": {...}}`, one point per record.
    Json,
    /// `eddy.v1.PointEvent`, one point per record.
    Protobuf,
    /// Arrow IPC stream, many points per record (columns `id`, `vector`,
    /// then the payload fields).
    Arrow,
}

impl Format {
    /// The `content-type` header value of this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => CONTENT_TYPE_JSON,
            Format::Protobuf => CONTENT_TYPE_PROTOBUF,
            Format::Arrow => CONTENT_TYPE_ARROW,
        }
    }

    /// The format's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Protobuf => "protobuf",
            Format::Arrow => "arrow",
        }
    }
}

/// How records are encoded.
#[derive(Debug, Clone, Copy)]
pub struct EncodeOptions {
    /// The value format.
    pub format: Format,
    /// Points per Arrow message (ignored by the single-point formats).
    pub arrow_rows: usize,
    /// Protobuf: send the vector as raw little-endian bytes (`vector_le`)
    /// instead of packed floats.
    pub proto_vector_bytes: bool,
}

/// One Kafka record, ready to send.
#[derive(Debug, Clone)]
pub struct Record {
    /// The key: the (first) point id as text.
    pub key: String,
    /// The encoded value.
    pub value: Vec<u8>,
    /// Points the record carries.
    pub points: u32,
}

/// The payload as sent: the dataset's line without its `id` (the id is the
/// event's own field).
fn payload_without_id(payload: &Payload) -> Payload {
    let mut p = payload.clone();
    p.remove("id");
    p
}

/// Encodes rows `rows` of `vectors` (point id = row number) with their
/// payloads. `columns` fixes the Arrow payload schema (infer it once over
/// the whole dataset with [`PayloadColumns::infer`], so every message of a
/// run has the same schema); the other formats ignore it.
pub fn encode_rows(
    vectors: &Matrix<f32>,
    payloads: &[Payload],
    rows: Range<usize>,
    opts: &EncodeOptions,
    columns: &PayloadColumns,
) -> Result<Vec<Record>> {
    if rows.end > vectors.rows() || rows.end > payloads.len() || rows.start > rows.end {
        return Err(Error::Range {
            start: rows.start,
            end: rows.end,
            rows: vectors.rows(),
            payloads: payloads.len(),
        });
    }
    match opts.format {
        Format::Json | Format::Protobuf => rows
            .map(|row| {
                let id = row as u64;
                let value = encode_point(opts, id, vectors.row(row), &payloads[row])?;
                Ok(Record {
                    key: id.to_string(),
                    value,
                    points: 1,
                })
            })
            .collect(),
        Format::Arrow => {
            let step = opts.arrow_rows.max(1);
            let starts = rows.clone().step_by(step);
            starts
                .map(|first| {
                    let chunk = first..(first + step).min(rows.end);
                    let value = arrow::encode_batch(vectors, payloads, chunk.clone(), columns)?;
                    Ok(Record {
                        key: first.to_string(),
                        value,
                        points: u32::try_from(chunk.len()).unwrap_or(u32::MAX),
                    })
                })
                .collect()
        }
    }
}

/// Encodes each of `runs` (row ranges of `vectors`) as one Arrow batch
/// record (point id = row number): a pipeline's micro-batches, where
/// [`encode_rows`] cuts fixed-size chunks.
pub fn encode_arrow_runs(
    vectors: &Matrix<f32>,
    payloads: &[Payload],
    runs: &[Range<usize>],
    columns: &PayloadColumns,
) -> Result<Vec<Record>> {
    runs.iter()
        .map(|run| {
            if run.end > vectors.rows() || run.end > payloads.len() || run.start > run.end {
                return Err(Error::Range {
                    start: run.start,
                    end: run.end,
                    rows: vectors.rows(),
                    payloads: payloads.len(),
                });
            }
            Ok(Record {
                key: run.start.to_string(),
                value: arrow::encode_batch(vectors, payloads, run.clone(), columns)?,
                points: u32::try_from(run.len()).unwrap_or(u32::MAX),
            })
        })
        .collect()
}

/// Encodes one point in `opts.format` (an Arrow message of one row for
/// [`Format::Arrow`], its payload columns inferred from this payload alone).
pub fn encode_point(
    opts: &EncodeOptions,
    id: u64,
    vector: &[f32],
    payload: &Payload,
) -> Result<Vec<u8>> {
    let payload = payload_without_id(payload);
    match opts.format {
        Format::Json => json::encode(id, vector, &payload),
        Format::Protobuf => Ok(protobuf::encode(
            id,
            vector,
            &payload,
            opts.proto_vector_bytes,
        )),
        Format::Arrow => arrow::encode_one(id, vector, &payload),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> (Matrix<f32>, Vec<Payload>) {
        let vectors = Matrix {
            dim: 2,
            data: vec![0.5, -1.0, 0.25, 2.0, 1.0, 1.0],
        };
        let payloads = [
            json!({"id": 0, "section": "net", "size": 7, "tags": ["a", "b"]}),
            json!({"id": 1, "section": "games", "size": null, "tags": []}),
            json!({"id": 2, "section": "text", "size": 3, "tags": ["c"]}),
        ]
        .into_iter()
        .map(|v| match v {
            Value::Object(m) => m,
            _ => Map::new(),
        })
        .collect();
        (vectors, payloads)
    }

    fn opts(format: Format) -> EncodeOptions {
        EncodeOptions {
            format,
            arrow_rows: 2,
            proto_vector_bytes: false,
        }
    }

    #[test]
    fn single_point_formats_key_by_id() {
        let (vectors, payloads) = sample();
        let columns = PayloadColumns::infer(&payloads);
        for format in [Format::Json, Format::Protobuf] {
            let records =
                encode_rows(&vectors, &payloads, 1..3, &opts(format), &columns).expect("encodes");
            let keys: Vec<_> = records.iter().map(|r| r.key.as_str()).collect();
            assert_eq!(keys, ["1", "2"], "{format:?}");
            assert!(records.iter().all(|r| r.points == 1));
        }
    }

    #[test]
    fn json_event_has_the_contract_shape() {
        let (vectors, payloads) = sample();
        let value =
            encode_point(&opts(Format::Json), 0, vectors.row(0), &payloads[0]).expect("encodes");
        let event: Value = serde_json::from_slice(&value).expect("valid JSON");
        assert_eq!(
            event,
            json!({"id": 0, "vector": [0.5, -1.0],
                   "payload": {"section": "net", "size": 7, "tags": ["a", "b"]}})
        );
    }

    #[test]
    fn arrow_messages_hold_many_rows() {
        let (vectors, payloads) = sample();
        let columns = PayloadColumns::infer(&payloads);
        let records = encode_rows(&vectors, &payloads, 0..3, &opts(Format::Arrow), &columns)
            .expect("encodes");
        let shape: Vec<_> = records.iter().map(|r| (r.key.as_str(), r.points)).collect();
        assert_eq!(shape, [("0", 2), ("2", 1)]);
    }

    #[test]
    fn out_of_range_rows_are_an_error() {
        let (vectors, payloads) = sample();
        let columns = PayloadColumns::infer(&payloads);
        let err = encode_rows(&vectors, &payloads, 2..5, &opts(Format::Json), &columns)
            .expect_err("out of range");
        assert!(err.to_string().contains("2..5"), "{err}");
    }
}
