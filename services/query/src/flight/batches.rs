//! Arrow conversions of the Flight service: the result schema, result
//! batches, and query vectors out of an input batch.

use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Float64Builder, Int64Builder, StringBuilder};
use arrow_array::{
    Array, ArrayRef, FixedSizeListArray, Float32Array, LargeListArray, ListArray, RecordBatch,
    StringArray, UInt32Array, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use eddy_model::{CollectionDef, FieldType, IdType, PointId};
use serde_json::Value;

use crate::error::ApiError;
use crate::prepared::QueryBatch;
use crate::request::PayloadSelector;
use crate::results::{Hit, HitPayload};

/// Name of the input column holding query vectors.
pub const VECTOR_COLUMN: &str = "vector";

/// The schema of an exchange's answers: the result columns, then every
/// input column but `vector` (a job's key, a partition id), carried beside
/// each result row so the job joins without bookkeeping. An input column
/// named like a result column is refused.
pub fn exchange_schema(results: &SchemaRef, input: &Schema) -> Result<SchemaRef, ApiError> {
    let carried: Vec<_> = input
        .fields()
        .iter()
        .filter(|f| f.name() != VECTOR_COLUMN)
        .cloned()
        .collect();
    if carried.is_empty() {
        return Ok(results.clone());
    }
    if let Some(clash) = carried
        .iter()
        .find(|f| results.field_with_name(f.name()).is_ok())
    {
        return Err(ApiError::BadRequest(format!(
            "input column `{}` has the name of a result column ({:?}); rename it",
            clash.name(),
            results
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>()
        )));
    }
    let fields: Vec<_> = results.fields().iter().cloned().chain(carried).collect();
    Ok(Arc::new(Schema::new(fields)))
}

/// `results` (answers to `input`'s queries, numbered from `base`) with
/// `input`'s carried columns beside each row, as `schema` (from
/// [`exchange_schema`]) says.
pub fn with_input_columns(
    results: RecordBatch,
    input: &RecordBatch,
    base: u32,
    schema: &SchemaRef,
) -> Result<RecordBatch, ApiError> {
    if schema.fields().len() == results.num_columns() {
        return Ok(results);
    }
    let query_index = results
        .column_by_name("query_index")
        .and_then(|c| c.as_any().downcast_ref::<UInt32Array>())
        .ok_or_else(|| ApiError::Internal("result batch without query_index".into()))?;
    let rows: UInt32Array = query_index.iter().map(|q| q.map(|q| q - base)).collect();
    let mut columns = results.columns().to_vec();
    for field in &schema.fields()[results.num_columns()..] {
        let column = input.column_by_name(field.name()).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "input batch lacks column `{}` of the exchange's first batch",
                field.name()
            ))
        })?;
        let taken = arrow_select::take::take(column.as_ref(), &rows, None)
            .map_err(|e| ApiError::Internal(format!("carrying `{}`: {e}", field.name())))?;
        columns.push(taken);
    }
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| {
        ApiError::BadRequest(format!(
            "input batch columns differ from the exchange's first batch: {e}"
        ))
    })
}

fn payload_type(def: &CollectionDef, field: &str) -> DataType {
    match def.payload_fields.get(field) {
        Some(FieldType::Integer) => DataType::Int64,
        Some(FieldType::Float) => DataType::Float64,
        Some(FieldType::Bool) => DataType::Boolean,
        // Keywords and undeclared fields: strings as they are, other values as JSON text.
        Some(FieldType::Keyword) | None => DataType::Utf8,
    }
}

/// The result schema for a collection and payload selection.
pub fn result_schema(def: &CollectionDef, with_payload: &PayloadSelector) -> SchemaRef {
    let mut fields = vec![
        Field::new("query_index", DataType::UInt32, false),
        Field::new("rank", DataType::UInt32, false),
        Field::new("id", id_data_type(def), false),
        Field::new("score", DataType::Float32, false),
    ];
    fields.extend(payload_fields(def, with_payload));
    Arc::new(Schema::new(fields))
}

fn id_data_type(def: &CollectionDef) -> DataType {
    match def.id_type {
        IdType::U64 => DataType::UInt64,
        IdType::String => DataType::Utf8,
    }
}

/// The payload columns a selection adds: `payload` (JSON text) for all of
/// it, else one typed column per field.
fn payload_fields(def: &CollectionDef, with_payload: &PayloadSelector) -> Vec<Field> {
    match with_payload {
        PayloadSelector::None => Vec::new(),
        PayloadSelector::All => vec![Field::new("payload", DataType::Utf8, true)],
        PayloadSelector::Fields(names) => names
            .iter()
            .map(|name| Field::new(name, payload_type(def, name), true))
            .collect(),
    }
}

/// The schema of a scan: `id`, `vector` when asked for, then the payload
/// columns.
pub fn scan_schema(
    def: &CollectionDef,
    with_payload: &PayloadSelector,
    with_vector: bool,
) -> SchemaRef {
    let mut fields = vec![Field::new("id", id_data_type(def), false)];
    if with_vector {
        let item = Arc::new(Field::new("item", DataType::Float32, false));
        fields.push(Field::new(
            VECTOR_COLUMN,
            DataType::FixedSizeList(item, def.dimension as i32),
            false,
        ));
    }
    fields.extend(payload_fields(def, with_payload));
    Arc::new(Schema::new(fields))
}

/// One scan batch: the points' ids, vectors (when `schema` has them) and
/// selected payloads.
pub fn scan_batch(
    def: &CollectionDef,
    schema: &SchemaRef,
    with_payload: &PayloadSelector,
    points: &[crate::collection::ViewPoint<'_>],
) -> Result<RecordBatch, ApiError> {
    let mut columns = vec![id_column(def, points.iter().map(|p| &p.id))];
    if schema.field_with_name(VECTOR_COLUMN).is_ok() {
        let dim = def.dimension as usize;
        let mut values = Vec::with_capacity(points.len() * dim);
        for p in points {
            values.extend_from_slice(p.vector);
        }
        let item = Arc::new(Field::new("item", DataType::Float32, false));
        let list = FixedSizeListArray::try_new(
            item,
            dim as i32,
            Arc::new(Float32Array::from(values)),
            None,
        )
        .map_err(|e| ApiError::Internal(format!("building vectors: {e}")))?;
        columns.push(Arc::new(list));
    }
    let payloads: Vec<Option<HitPayload>> = points
        .iter()
        .map(|p| HitPayload::select(p.payload_json, with_payload))
        .collect();
    let payloads: Vec<Option<&HitPayload>> = payloads.iter().map(Option::as_ref).collect();
    columns.extend(payload_columns(def, with_payload, &payloads));
    RecordBatch::try_new(schema.clone(), columns)
        .map_err(|e| ApiError::Internal(format!("building a scan batch: {e}")))
}

fn id_column<'a>(def: &CollectionDef, ids: impl Iterator<Item = &'a PointId>) -> ArrayRef {
    match def.id_type {
        IdType::U64 => Arc::new(UInt64Array::from_iter_values(ids.map(|id| match id {
            PointId::Num(n) => *n,
            PointId::Str(_) => 0,
        }))),
        IdType::String => Arc::new(StringArray::from_iter_values(ids.map(|id| id.to_string()))),
    }
}

/// The payload columns of rows whose selected payloads are `payloads`.
fn payload_columns(
    def: &CollectionDef,
    with_payload: &PayloadSelector,
    payloads: &[Option<&HitPayload>],
) -> Vec<ArrayRef> {
    match with_payload {
        PayloadSelector::None => Vec::new(),
        PayloadSelector::All => {
            let mut b = StringBuilder::new();
            for p in payloads {
                match p {
                    Some(p) => b.append_value(p.json_text()),
                    None => b.append_null(),
                }
            }
            vec![Arc::new(b.finish())]
        }
        PayloadSelector::Fields(names) => names
            .iter()
            .map(|name| {
                let values = payloads
                    .iter()
                    .map(|p| p.and_then(|p| p.field(name)).filter(|v| !v.is_null()));
                typed_column(payload_type(def, name), values)
            })
            .collect(),
    }
}

/// A column of JSON values as `data_type` (values of another type are null).
fn typed_column(data_type: DataType, values: impl Iterator<Item = Option<Value>>) -> ArrayRef {
    match data_type {
        DataType::Int64 => {
            let mut b = Int64Builder::new();
            values.for_each(|v| b.append_option(v.as_ref().and_then(Value::as_i64)));
            Arc::new(b.finish())
        }
        DataType::Float64 => {
            let mut b = Float64Builder::new();
            values.for_each(|v| b.append_option(v.as_ref().and_then(Value::as_f64)));
            Arc::new(b.finish())
        }
        DataType::Boolean => {
            let mut b = BooleanBuilder::new();
            values.for_each(|v| b.append_option(v.as_ref().and_then(Value::as_bool)));
            Arc::new(b.finish())
        }
        _ => {
            let mut b = StringBuilder::new();
            values.for_each(|v| b.append_option(v.as_ref().map(text)));
            Arc::new(b.finish())
        }
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// One RecordBatch with the hits of consecutive queries, numbered from `base`.
pub fn results_batch(
    def: &CollectionDef,
    schema: &SchemaRef,
    with_payload: &PayloadSelector,
    hits: &[Vec<Hit>],
    base: u32,
) -> Result<RecordBatch, ApiError> {
    let rows: Vec<(u32, u32, &Hit)> = hits
        .iter()
        .enumerate()
        .flat_map(|(q, hs)| {
            hs.iter()
                .enumerate()
                .map(move |(r, h)| (base + q as u32, r as u32, h))
        })
        .collect();
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.0))),
        Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.1))),
    ];
    columns.push(id_column(def, rows.iter().map(|r| &r.2.id)));
    columns.push(Arc::new(Float32Array::from_iter_values(
        rows.iter().map(|r| r.2.score),
    )));
    let payloads: Vec<Option<&HitPayload>> = rows.iter().map(|r| r.2.payload.as_ref()).collect();
    columns.extend(payload_columns(def, with_payload, &payloads));
    RecordBatch::try_new(schema.clone(), columns)
        .map_err(|e| ApiError::Internal(format!("building results: {e}")))
}

/// The query vectors of an input batch, copied once into a flat, checked
/// [`QueryBatch`]: column `vector` as `FixedSizeList<Float32>` or
/// `List<Float32>`, no nulls.
pub fn query_vectors(batch: &RecordBatch, def: &CollectionDef) -> Result<QueryBatch, ApiError> {
    let dim = def.dimension as usize;
    let column = batch.column_by_name(VECTOR_COLUMN).ok_or_else(|| {
        ApiError::BadRequest(format!(
            "input batch needs a `{VECTOR_COLUMN}` column (FixedSizeList<Float32, {dim}>); it has {:?}",
            batch.schema().fields().iter().map(|f| f.name().clone()).collect::<Vec<_>>()
        ))
    })?;
    if column.null_count() > 0 {
        return Err(ApiError::BadRequest(format!(
            "`{VECTOR_COLUMN}` holds null vectors"
        )));
    }
    let (values, offsets): (&ArrayRef, Vec<usize>) =
        if let Some(l) = column.as_any().downcast_ref::<FixedSizeListArray>() {
            let width = l.value_length() as usize;
            let start = l.offset() * width;
            (
                l.values(),
                (0..=l.len()).map(|i| start + i * width).collect(),
            )
        } else if let Some(l) = column.as_any().downcast_ref::<ListArray>() {
            (
                l.values(),
                l.value_offsets().iter().map(|&o| o as usize).collect(),
            )
        } else if let Some(l) = column.as_any().downcast_ref::<LargeListArray>() {
            (
                l.values(),
                l.value_offsets().iter().map(|&o| o as usize).collect(),
            )
        } else {
            return Err(ApiError::BadRequest(format!(
                "`{VECTOR_COLUMN}` must be FixedSizeList<Float32, {dim}> or List<Float32>, got {}",
                column.data_type()
            )));
        };
    let floats = values
        .as_any()
        .downcast_ref::<Float32Array>()
        .ok_or_else(|| {
            ApiError::BadRequest(format!(
                "`{VECTOR_COLUMN}` items must be Float32, got {}",
                values.data_type()
            ))
        })?;
    let all = floats.values();
    let rows = offsets.windows(2).map(|w| (w[0], w[1]));
    if floats.null_count() > 0 {
        if let Some(i) = rows
            .clone()
            .position(|(a, b)| (a..b).any(|j| floats.is_null(j)))
        {
            return Err(ApiError::BadRequest(format!("vector {i} holds nulls")));
        }
    }
    if offsets.last().is_some_and(|&end| end > all.len()) {
        return Err(ApiError::BadRequest(format!(
            "`{VECTOR_COLUMN}` offsets run past its values"
        )));
    }
    QueryBatch::from_rows(def, rows.map(|(a, b)| &all[a..b]))
}
