//! The Arrow IPC stream event: one complete stream (schema, one record
//! batch, end marker) per Kafka record, many points per batch.
//!
//! Columns: `id: UInt64`, `vector: FixedSizeList<Float32, dim>`, then one
//! nullable column per payload field, typed from the dataset: strings as
//! `Utf8`, integers as `Int64`, other numbers as `Float64`, booleans as
//! `Boolean`, lists of strings as `List<Utf8>`, anything else as JSON text
//! in `Utf8`.

use std::sync::Arc;

use arrow_array::builder::{
    ArrayBuilder, BooleanBuilder, Float64Builder, Int64Builder, ListBuilder, StringBuilder,
};
use arrow_array::{ArrayRef, FixedSizeListArray, Float32Array, RecordBatch, UInt64Array};
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use eddy_dataset::Matrix;
use serde_json::Value;

use super::{payload_without_id, Payload, Result};

/// The Arrow type of one payload column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ColumnType {
    Utf8,
    Int64,
    Float64,
    Boolean,
    StringList,
    /// Mixed or nested values, as JSON text.
    JsonText,
}

impl ColumnType {
    fn of(value: &Value) -> Option<Self> {
        Some(match value {
            Value::Null => return None,
            Value::String(_) => Self::Utf8,
            Value::Bool(_) => Self::Boolean,
            Value::Number(n) if n.is_i64() => Self::Int64,
            Value::Number(_) => Self::Float64,
            Value::Array(items) if items.iter().all(Value::is_string) => Self::StringList,
            _ => Self::JsonText,
        })
    }

    /// The narrowest type holding both.
    fn join(self, other: Self) -> Self {
        match (self, other) {
            (a, b) if a == b => a,
            (Self::Int64, Self::Float64) | (Self::Float64, Self::Int64) => Self::Float64,
            _ => Self::JsonText,
        }
    }

    fn data_type(self) -> DataType {
        match self {
            Self::Utf8 | Self::JsonText => DataType::Utf8,
            Self::Int64 => DataType::Int64,
            Self::Float64 => DataType::Float64,
            Self::Boolean => DataType::Boolean,
            Self::StringList => {
                DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true)))
            }
        }
    }
}

/// The payload columns of an Arrow event schema, in first-seen field order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PayloadColumns {
    columns: Vec<(String, ColumnType)>,
}

impl PayloadColumns {
    /// Infers the columns from every payload (the `id` field excluded: it is
    /// the `id` column). A field that is always null becomes `Utf8`.
    pub fn infer(payloads: &[Payload]) -> Self {
        let mut columns: Vec<(String, Option<ColumnType>)> = Vec::new();
        for payload in payloads {
            for (field, value) in payload.iter().filter(|(f, _)| f.as_str() != "id") {
                let i = match columns.iter().position(|(name, _)| name == field) {
                    Some(i) => i,
                    None => {
                        columns.push((field.clone(), None));
                        columns.len() - 1
                    }
                };
                let slot = &mut columns[i].1;
                if let Some(t) = ColumnType::of(value) {
                    *slot = Some(slot.map_or(t, |s| s.join(t)));
                }
            }
        }
        Self {
            columns: columns
                .into_iter()
                .map(|(name, t)| (name, t.unwrap_or(ColumnType::Utf8)))
                .collect(),
        }
    }

    /// The schema of a batch of `dim`-dimensional points.
    pub fn schema(&self, dim: usize) -> Result<SchemaRef> {
        let size = i32::try_from(dim)
            .map_err(|_| ArrowError::SchemaError(format!("dimension {dim} too large")))?;
        let mut fields = vec![
            Field::new("id", DataType::UInt64, false),
            Field::new("vector", vector_type(size), false),
        ];
        fields.extend(
            self.columns
                .iter()
                .map(|(name, t)| Field::new(name, t.data_type(), true)),
        );
        Ok(Arc::new(Schema::new(fields)))
    }

    /// Number of payload columns.
    pub fn len(&self) -> usize {
        self.columns.len()
    }

    /// Whether there are no payload columns.
    pub fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }
}

fn vector_type(size: i32) -> DataType {
    DataType::FixedSizeList(
        Arc::new(Field::new_list_field(DataType::Float32, true)),
        size,
    )
}

/// Encodes rows `rows` of `vectors` (id = row number) as one IPC stream.
pub(super) fn encode_batch(
    vectors: &Matrix<f32>,
    payloads: &[Payload],
    rows: std::ops::Range<usize>,
    columns: &PayloadColumns,
) -> Result<Vec<u8>> {
    let ids: Vec<u64> = rows.clone().map(|r| r as u64).collect();
    let flat = &vectors.data[rows.start * vectors.dim..rows.end * vectors.dim];
    batch_bytes(&ids, flat, vectors.dim, &payloads[rows], columns)
}

/// Encodes one point as a one-row IPC stream.
pub(super) fn encode_one(id: u64, vector: &[f32], payload: &Payload) -> Result<Vec<u8>> {
    let payloads = [payload_without_id(payload)];
    let columns = PayloadColumns::infer(&payloads);
    batch_bytes(&[id], vector, vector.len(), &payloads, &columns)
}

fn batch_bytes(
    ids: &[u64],
    flat: &[f32],
    dim: usize,
    payloads: &[Payload],
    columns: &PayloadColumns,
) -> Result<Vec<u8>> {
    let schema = columns.schema(dim)?;
    let DataType::FixedSizeList(item, size) = schema.field(1).data_type().clone() else {
        return Err(ArrowError::SchemaError("vector is not a fixed-size list".into()).into());
    };
    let vector = FixedSizeListArray::try_new(
        item,
        size,
        Arc::new(Float32Array::from(flat.to_vec())),
        None,
    )?;
    let mut arrays: Vec<ArrayRef> =
        vec![Arc::new(UInt64Array::from(ids.to_vec())), Arc::new(vector)];
    for (name, t) in &columns.columns {
        arrays.push(payload_array(payloads, name, *t));
    }
    let batch = RecordBatch::try_new(schema.clone(), arrays)?;
    let mut writer = StreamWriter::try_new(Vec::new(), &schema)?;
    writer.write(&batch)?;
    writer.finish()?;
    Ok(writer.into_inner()?)
}

/// One payload column; values that do not fit its type become null (or
/// JSON text in a text column).
fn payload_array(payloads: &[Payload], field: &str, t: ColumnType) -> ArrayRef {
    let values = payloads
        .iter()
        .map(|p| p.get(field).filter(|v| !v.is_null()));
    let mut builder: Box<dyn ArrayBuilder> = match t {
        ColumnType::Utf8 | ColumnType::JsonText => {
            let mut b = StringBuilder::new();
            for v in values {
                b.append_option(v.map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                }));
            }
            Box::new(b)
        }
        ColumnType::Int64 => {
            let mut b = Int64Builder::new();
            values.for_each(|v| b.append_option(v.and_then(Value::as_i64)));
            Box::new(b)
        }
        ColumnType::Float64 => {
            let mut b = Float64Builder::new();
            values.for_each(|v| b.append_option(v.and_then(Value::as_f64)));
            Box::new(b)
        }
        ColumnType::Boolean => {
            let mut b = BooleanBuilder::new();
            values.for_each(|v| b.append_option(v.and_then(Value::as_bool)));
            Box::new(b)
        }
        ColumnType::StringList => {
            let mut b = ListBuilder::new(StringBuilder::new());
            for v in values {
                match v.and_then(Value::as_array) {
                    Some(items) => {
                        for item in items {
                            b.values().append_option(item.as_str());
                        }
                        b.append(true);
                    }
                    None => b.append(false),
                }
            }
            Box::new(b)
        }
    };
    builder.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float32Type, Int64Type, UInt64Type};
    use arrow_array::Array as _;
    use arrow_ipc::reader::StreamReader;
    use serde_json::json;

    fn payloads() -> Vec<Payload> {
        [
            json!({"id": 0, "section": "net", "size": 7, "score": 1, "tags": ["a", "b"], "x": {"k": 1}}),
            json!({"id": 1, "section": "games", "size": null, "score": 0.5, "tags": [], "x": 3}),
        ]
        .into_iter()
        .filter_map(|v| match v {
            Value::Object(m) => Some(m),
            _ => None,
        })
        .collect()
    }

    #[test]
    fn infers_column_types() {
        let columns = PayloadColumns::infer(&payloads());
        let schema = columns.schema(2).expect("schema");
        let t = |name: &str| {
            schema
                .field_with_name(name)
                .expect(name)
                .data_type()
                .clone()
        };
        assert_eq!(schema.field(0).name(), "id");
        assert_eq!(schema.field(1).name(), "vector");
        assert_eq!(t("id"), DataType::UInt64);
        assert_eq!(t("vector"), vector_type(2));
        assert_eq!(t("section"), DataType::Utf8);
        assert_eq!(t("size"), DataType::Int64);
        assert_eq!(t("score"), DataType::Float64);
        assert_eq!(t("tags"), ColumnType::StringList.data_type());
        assert_eq!(t("x"), DataType::Utf8);
        assert!(schema.field_with_name("id").is_ok_and(|f| !f.is_nullable()));
        assert_eq!(columns.len(), 5);
    }

    #[test]
    fn batches_read_back_as_one_ipc_stream() {
        let payloads = payloads();
        let columns = PayloadColumns::infer(&payloads);
        let vectors = Matrix {
            dim: 2,
            data: vec![1.0, 2.0, 3.0, 4.0],
        };
        let bytes = encode_batch(&vectors, &payloads, 0..2, &columns).expect("encodes");
        let reader = StreamReader::try_new(bytes.as_slice(), None).expect("stream");
        let batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>().expect("batches");
        assert_eq!(batches.len(), 1);
        let batch = &batches[0];
        assert_eq!(batch.num_rows(), 2);
        let ids = batch.column(0).as_primitive::<UInt64Type>();
        assert_eq!(ids.values().as_ref(), &[0, 1]);
        let vector = batch.column(1).as_fixed_size_list().value(1);
        assert_eq!(
            vector.as_primitive::<Float32Type>().values().as_ref(),
            &[3.0, 4.0]
        );
        let column = |name: &str| batch.column_by_name(name).expect(name);
        let size = column("size").as_primitive::<Int64Type>();
        assert_eq!((size.value(0), size.is_null(1)), (7, true));
        let x = column("x").as_string::<i32>();
        assert_eq!((x.value(0), x.value(1)), ("{\"k\":1}", "3"));
        let tags = column("tags").as_list::<i32>();
        assert_eq!(tags.value(0).as_string::<i32>().value(1), "b");
        assert_eq!(tags.value(1).len(), 0);
    }
}
