//! The Arrow IPC stream format (`application/vnd.apache.arrow.stream`): many
//! points in one message, for bulk loads. Columns: `id` (UInt64 or Utf8, as
//! the collection's id type says), `vector` (FixedSizeList<Float32, dim>)
//! and any others as payload fields (strings, numbers, booleans, and lists
//! of them as JSON arrays). One bad row rejects the whole message:
//! it goes to the dead-letter topic as it came, with the reason.

use std::io::Write as _;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrowPrimitiveType, GenericListArray, OffsetSizeTrait, RecordBatch};
use arrow_ipc::reader::StreamReader;
use arrow_schema::DataType;
use eddy_model::{CollectionDef, FieldType, IdType, PointId};

use crate::{validate_vector_for, Points, Reason, Rejection, MAX_PAYLOAD_BYTES};

/// The id column's name.
const ID: &str = "id";
/// The vector column's name.
const VECTOR: &str = "vector";

/// Decodes every batch of one Arrow IPC stream into points, in row order.
pub(crate) fn decode(def: &CollectionDef, value: &[u8]) -> Result<Points, Rejection> {
    let reader = StreamReader::try_new(std::io::Cursor::new(value), None)
        .map_err(|e| Rejection::new(Reason::Malformed, format!("invalid Arrow IPC stream: {e}")))?;
    let mut points = Points::with_capacity(def.dimension as usize, 0);
    for batch in reader {
        let batch = batch.map_err(|e| {
            Rejection::new(
                Reason::Malformed,
                format!("invalid Arrow record batch: {e}"),
            )
        })?;
        decode_batch(def, &batch, &mut points)?;
    }
    Ok(points)
}

/// Appends the rows of one record batch to `points`.
fn decode_batch(
    def: &CollectionDef,
    batch: &RecordBatch,
    points: &mut Points,
) -> Result<(), Rejection> {
    let first = points.len();
    let ids = ids(def.id_type, batch)?;
    let vectors = vectors(def, batch)?;
    let payload = PayloadColumns::new(def, batch)?;
    for (row, id) in ids.into_iter().enumerate() {
        let start = points.payload_buffer().len();
        payload.write_row(row, points.payload_buffer())?;
        if points.payload_buffer().len() - start > MAX_PAYLOAD_BYTES {
            return Err(Rejection::new(
                Reason::Oversize,
                format!("row {row}: payload exceeds {MAX_PAYLOAD_BYTES} bytes"),
            ));
        }
        points.push(
            id,
            &vectors[row * def.dimension as usize..][..def.dimension as usize],
        );
    }
    let dim = def.dimension as usize;
    for (row, vector) in points.vectors_mut()[first * dim..]
        .chunks_exact_mut(dim)
        .enumerate()
    {
        validate_vector_for(def, vector)
            .map_err(|r| Rejection::new(r.reason, format!("row {row}: {}", r.detail)))?;
    }
    Ok(())
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a dyn Array, Rejection> {
    batch
        .column_by_name(name)
        .map(|c| c.as_ref())
        .ok_or_else(|| Rejection::new(Reason::WrongSchema, format!("no {name:?} column")))
}

fn null_in(name: &str, column: &dyn Array) -> Result<(), Rejection> {
    match column.logical_null_count() {
        0 => Ok(()),
        n => Err(Rejection::new(
            Reason::Malformed,
            format!("column {name:?} has {n} null values"),
        )),
    }
}

/// The ids of the `id` column, typed as the collection declares.
fn ids(id_type: IdType, batch: &RecordBatch) -> Result<Vec<PointId>, Rejection> {
    let column = column(batch, ID)?;
    null_in(ID, column)?;
    match (id_type, column.data_type()) {
        (IdType::U64, DataType::UInt64) => Ok(column
            .as_primitive::<UInt64Type>()
            .values()
            .iter()
            .map(|n| PointId::Num(*n))
            .collect()),
        (IdType::String, DataType::Utf8) => Ok(column
            .as_string::<i32>()
            .iter()
            .map(|s| PointId::Str(s.unwrap_or_default().to_owned()))
            .collect()),
        (IdType::String, DataType::LargeUtf8) => Ok(column
            .as_string::<i64>()
            .iter()
            .map(|s| PointId::Str(s.unwrap_or_default().to_owned()))
            .collect()),
        (_, other) => Err(Rejection::new(
            Reason::WrongIdType,
            format!("id column is {other}, collection ids are {id_type:?}"),
        )),
    }
}

/// The `vector` column's values, row after row.
fn vectors<'a>(def: &CollectionDef, batch: &'a RecordBatch) -> Result<&'a [f32], Rejection> {
    let column = column(batch, VECTOR)?;
    null_in(VECTOR, column)?;
    let DataType::FixedSizeList(item, size) = column.data_type() else {
        return Err(Rejection::new(
            Reason::WrongSchema,
            format!(
                "vector column is {}, not FixedSizeList<Float32>",
                column.data_type()
            ),
        ));
    };
    if item.data_type() != &DataType::Float32 {
        return Err(Rejection::new(
            Reason::WrongSchema,
            format!("vector items are {}, not Float32", item.data_type()),
        ));
    }
    if *size as u32 != def.dimension {
        return Err(Rejection::new(
            Reason::WrongDimension,
            format!(
                "vectors have {size} values, collection dimension is {}",
                def.dimension
            ),
        ));
    }
    let list = column.as_fixed_size_list();
    let values = list.values();
    null_in("vector items", values.as_ref())?;
    let start = list.value_offset(0).max(0) as usize;
    let floats = values.as_primitive::<Float32Type>().values();
    Ok(&floats[start..start + list.len() * *size as usize])
}

/// Writes one row's value of a payload column as JSON; false for null.
type WriteValue<'a> = Box<dyn Fn(usize, &mut Vec<u8>) -> Result<bool, Rejection> + 'a>;

/// The payload columns of a batch: every column but `id` and `vector`.
struct PayloadColumns<'a> {
    /// Each column's key, already JSON-escaped with its colon, and writer.
    columns: Vec<(Vec<u8>, WriteValue<'a>)>,
}

impl<'a> PayloadColumns<'a> {
    fn new(def: &CollectionDef, batch: &'a RecordBatch) -> Result<Self, Rejection> {
        let mut columns = Vec::new();
        for (field, column) in batch.schema_ref().fields().iter().zip(batch.columns()) {
            let name = field.name();
            if name == ID || name == VECTOR {
                continue;
            }
            if let Some(ty) = def.payload_fields.get(name) {
                if !declared_type_fits(*ty, column.data_type()) {
                    return Err(Rejection::new(
                        Reason::PayloadType,
                        format!(
                            "payload column {name:?} is {}, must be {ty:?}",
                            column.data_type()
                        ),
                    ));
                }
            }
            let mut key = serde_json::to_vec(name)
                .map_err(|e| Rejection::new(Reason::Malformed, e.to_string()))?;
            key.push(b':');
            columns.push((key, writer(name, column.as_ref())?));
        }
        Ok(Self { columns })
    }

    /// Appends row `row`'s payload object (nothing when every value is null).
    fn write_row(&self, row: usize, out: &mut Vec<u8>) -> Result<(), Rejection> {
        let start = out.len();
        for (key, write) in &self.columns {
            let mark = out.len();
            out.push(if mark == start { b'{' } else { b',' });
            out.extend_from_slice(key);
            if !write(row, out)? {
                out.truncate(mark);
            }
        }
        if out.len() > start {
            out.push(b'}');
        }
        Ok(())
    }
}

/// Whether an Arrow type holds values of a declared payload field type.
fn declared_type_fits(ty: FieldType, data_type: &DataType) -> bool {
    match ty {
        FieldType::Keyword => matches!(data_type, DataType::Utf8 | DataType::LargeUtf8),
        FieldType::Integer => data_type.is_integer(),
        FieldType::Float => data_type.is_integer() || data_type.is_floating(),
        FieldType::Bool => data_type == &DataType::Boolean,
    }
}

fn writer<'a>(name: &str, column: &'a dyn Array) -> Result<WriteValue<'a>, Rejection> {
    Ok(match column.data_type() {
        DataType::Utf8 => {
            let a = column.as_string::<i32>();
            Box::new(move |row, out| json_value(a.is_valid(row).then(|| a.value(row)), out))
        }
        DataType::LargeUtf8 => {
            let a = column.as_string::<i64>();
            Box::new(move |row, out| json_value(a.is_valid(row).then(|| a.value(row)), out))
        }
        DataType::Boolean => {
            let a = column.as_boolean();
            Box::new(move |row, out| json_value(a.is_valid(row).then(|| a.value(row)), out))
        }
        DataType::Int8 => number::<Int8Type>(column),
        DataType::Int16 => number::<Int16Type>(column),
        DataType::Int32 => number::<Int32Type>(column),
        DataType::Int64 => number::<Int64Type>(column),
        DataType::UInt8 => number::<UInt8Type>(column),
        DataType::UInt16 => number::<UInt16Type>(column),
        DataType::UInt32 => number::<UInt32Type>(column),
        DataType::UInt64 => number::<UInt64Type>(column),
        DataType::Float32 => float::<Float32Type>(name, column),
        DataType::Float64 => float::<Float64Type>(name, column),
        DataType::List(_) => list(name, column.as_list::<i32>())?,
        DataType::LargeList(_) => list(name, column.as_list::<i64>())?,
        other => {
            return Err(Rejection::new(
                Reason::WrongSchema,
                format!("payload column {name:?} has unsupported type {other}"),
            ))
        }
    })
}

/// A list column as JSON arrays (a null item as `null`), its items written
/// by the writer of their own type.
fn list<'a, O: OffsetSizeTrait>(
    name: &str,
    column: &'a GenericListArray<O>,
) -> Result<WriteValue<'a>, Rejection> {
    let item = writer(name, column.values().as_ref())?;
    Ok(Box::new(move |row, out| {
        if column.is_null(row) {
            return Ok(false);
        }
        let offsets = column.value_offsets();
        let (start, end) = (offsets[row].as_usize(), offsets[row + 1].as_usize());
        out.push(b'[');
        for i in start..end {
            if i > start {
                out.push(b',');
            }
            let mark = out.len();
            if !item(i, out)? {
                out.truncate(mark);
                out.extend_from_slice(b"null");
            }
        }
        out.push(b']');
        Ok(true)
    }))
}

fn number<'a, T>(column: &'a dyn Array) -> WriteValue<'a>
where
    T: ArrowPrimitiveType,
    T::Native: std::fmt::Display,
{
    let a = column.as_primitive::<T>();
    Box::new(move |row, out| {
        if a.is_null(row) {
            return Ok(false);
        }
        // Writing to a Vec cannot fail.
        let _ = write!(out, "{}", a.value(row));
        Ok(true)
    })
}

fn float<'a, T>(name: &str, column: &'a dyn Array) -> WriteValue<'a>
where
    T: ArrowPrimitiveType,
    T::Native: Into<f64>,
{
    let a = column.as_primitive::<T>();
    let name = name.to_owned();
    Box::new(move |row, out| {
        if a.is_null(row) {
            return Ok(false);
        }
        let value: f64 = a.value(row).into();
        if !value.is_finite() {
            return Err(Rejection::new(
                Reason::NonFinite,
                format!("row {row}: payload field {name:?} is {value}"),
            ));
        }
        json_value(Some(value), out)
    })
}

fn json_value<T: serde::Serialize>(value: Option<T>, out: &mut Vec<u8>) -> Result<bool, Rejection> {
    match value {
        None => Ok(false),
        Some(v) => serde_json::to_writer(out, &v)
            .map(|()| true)
            .map_err(|e| Rejection::new(Reason::Malformed, e.to_string())),
    }
}
