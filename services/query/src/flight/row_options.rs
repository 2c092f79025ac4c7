//! Per-row search options of a DoExchange input: an optional `k` column
//! (any integer type) and an optional `filter` column (JSON text, as the
//! command's `filter`) override the command's options row by row; a null
//! keeps the command's. Rows that share options are searched together.

use std::collections::BTreeMap;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int16Type, Int32Type, Int64Type, Int8Type};
use arrow_array::types::{UInt16Type, UInt32Type, UInt64Type, UInt8Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use eddy_model::CollectionDef;

use crate::error::ApiError;
use crate::prepared::PreparedSearch;

/// The input column giving a row its own `k`.
pub const K_COLUMN: &str = "k";
/// The input column giving a row its own filter (JSON text).
pub const FILTER_COLUMN: &str = "filter";

/// One row's overrides: `k` and the filter's JSON text (`None`: the
/// command's).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RowOptions {
    /// Neighbours for this row.
    pub k: Option<usize>,
    /// Filter JSON for this row.
    pub filter: Option<String>,
}

/// Rows of one batch grouped by their options, in first-seen order of
/// rows within each group.
pub type Groups = BTreeMap<RowOptions, Vec<usize>>;

/// Groups `batch`'s rows by their `k` / `filter` columns; `None` when the
/// batch has neither (every row runs with the command's options).
pub fn group_rows(batch: &RecordBatch) -> Result<Option<Groups>, ApiError> {
    let k = batch.column_by_name(K_COLUMN).map(k_values).transpose()?;
    let filter = batch
        .column_by_name(FILTER_COLUMN)
        .map(filter_values)
        .transpose()?;
    if k.is_none() && filter.is_none() {
        return Ok(None);
    }
    let mut groups = Groups::new();
    for row in 0..batch.num_rows() {
        let options = RowOptions {
            k: k.as_ref().and_then(|k| k[row]),
            filter: filter.as_ref().and_then(|f| f[row].clone()),
        };
        groups.entry(options).or_default().push(row);
    }
    Ok(Some(groups))
}

/// `base` with `options` applied, checked against the caps and `def`'s
/// indexed fields like a command's own options.
pub fn prepared(
    def: &CollectionDef,
    base: &PreparedSearch,
    options: &RowOptions,
) -> Result<PreparedSearch, ApiError> {
    let mut params = base.params.clone();
    if let Some(k) = options.k {
        params.k = k;
    }
    if let Some(text) = &options.filter {
        params.filter = Some(serde_json::from_str(text).map_err(|e| {
            ApiError::BadRequest(format!("`{FILTER_COLUMN}` {text:?} is not JSON: {e}"))
        })?);
    }
    PreparedSearch::new(
        def,
        crate::request::SearchRequest {
            params,
            min_offsets: base.min_offsets.clone(),
            snapshot: None,
        },
    )
}

fn k_values(column: &ArrayRef) -> Result<Vec<Option<usize>>, ApiError> {
    fn collect<T: arrow_array::ArrowPrimitiveType>(column: &ArrayRef) -> Vec<Option<i128>>
    where
        T::Native: Into<i128>,
    {
        column
            .as_primitive::<T>()
            .iter()
            .map(|v| v.map(Into::into))
            .collect()
    }
    let wide = match column.data_type() {
        DataType::Int8 => collect::<Int8Type>(column),
        DataType::Int16 => collect::<Int16Type>(column),
        DataType::Int32 => collect::<Int32Type>(column),
        DataType::Int64 => collect::<Int64Type>(column),
        DataType::UInt8 => collect::<UInt8Type>(column),
        DataType::UInt16 => collect::<UInt16Type>(column),
        DataType::UInt32 => collect::<UInt32Type>(column),
        DataType::UInt64 => collect::<UInt64Type>(column),
        other => {
            return Err(ApiError::BadRequest(format!(
                "`{K_COLUMN}` must be an integer column, got {other}"
            )))
        }
    };
    wide.into_iter()
        .enumerate()
        .map(|(row, v)| match v {
            None => Ok(None),
            // The cap itself is checked with the other options.
            Some(v) => usize::try_from(v).map(Some).map_err(|_| {
                ApiError::BadRequest(format!("row {row}: `{K_COLUMN}` {v} is out of range"))
            }),
        })
        .collect()
}

fn filter_values(column: &ArrayRef) -> Result<Vec<Option<String>>, ApiError> {
    let values: Vec<Option<String>> = match column.data_type() {
        DataType::Utf8 => column
            .as_string::<i32>()
            .iter()
            .map(|v| v.map(str::to_owned))
            .collect(),
        DataType::LargeUtf8 => column
            .as_string::<i64>()
            .iter()
            .map(|v| v.map(str::to_owned))
            .collect(),
        DataType::Utf8View => column
            .as_string_view()
            .iter()
            .map(|v| v.map(str::to_owned))
            .collect(),
        other => {
            return Err(ApiError::BadRequest(format!(
                "`{FILTER_COLUMN}` must be a string column of JSON filters, got {other}"
            )))
        }
    };
    Ok(values)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int32Array, StringArray, UInt64Array};
    use arrow_schema::{Field, Schema};
    use eddy_model::{FieldType, Metric};

    use super::*;
    use crate::request::SearchRequest;

    fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
        let fields: Vec<Field> = columns
            .iter()
            .map(|(n, c)| Field::new(*n, c.data_type().clone(), true))
            .collect();
        RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            columns.into_iter().map(|(_, c)| c).collect(),
        )
        .expect("batch")
    }

    #[test]
    fn rows_without_option_columns_are_not_grouped() {
        let b = batch(vec![("key", Arc::new(UInt64Array::from(vec![1, 2])))]);
        assert_eq!(group_rows(&b).expect("groups"), None);
    }

    #[test]
    fn rows_group_by_k_and_filter_with_nulls_meaning_the_command() {
        let b = batch(vec![
            (
                "k",
                Arc::new(Int32Array::from(vec![Some(5), None, Some(5), Some(3)])),
            ),
            (
                "filter",
                Arc::new(StringArray::from(vec![
                    Some(r#"{"must":[]}"#),
                    None,
                    Some(r#"{"must":[]}"#),
                    None,
                ])),
            ),
        ]);
        let groups = group_rows(&b).expect("groups").expect("some");
        let as_list: Vec<(Option<usize>, bool, Vec<usize>)> = groups
            .into_iter()
            .map(|(o, rows)| (o.k, o.filter.is_some(), rows))
            .collect();
        assert_eq!(
            as_list,
            [
                (None, false, vec![1]),
                (Some(3), false, vec![3]),
                (Some(5), true, vec![0, 2]),
            ]
        );
    }

    #[test]
    fn bad_option_columns_are_refused_clearly() {
        let b = batch(vec![("k", Arc::new(Int32Array::from(vec![-1])))]);
        let e = group_rows(&b).expect_err("negative k");
        assert!(e.to_string().contains("out of range"), "{e}");
        let b = batch(vec![("k", Arc::new(StringArray::from(vec!["5"])))]);
        let e = group_rows(&b).expect_err("text k");
        assert!(e.to_string().contains("integer column"), "{e}");
        let b = batch(vec![("filter", Arc::new(Int32Array::from(vec![1])))]);
        let e = group_rows(&b).expect_err("numeric filter");
        assert!(e.to_string().contains("string column"), "{e}");
    }

    #[test]
    fn options_override_the_command_and_are_checked() {
        let mut def = CollectionDef::new("c", 4);
        def.metric = Metric::L2;
        def.payload_fields.insert("tag".into(), FieldType::Keyword);
        let base = PreparedSearch::new(&def, SearchRequest::default()).expect("base");
        let row = RowOptions {
            k: Some(3),
            filter: Some(r#"{"must":[{"key":"tag","match":{"value":"a"}}]}"#.into()),
        };
        let p = prepared(&def, &base, &row).expect("row search");
        assert_eq!(p.params.k, 3);
        assert!(p.filter.is_some());
        let too_big = RowOptions {
            k: Some(1_000_000),
            filter: None,
        };
        assert!(prepared(&def, &base, &too_big).is_err());
        let not_json = RowOptions {
            k: None,
            filter: Some("{".into()),
        };
        let e = prepared(&def, &base, &not_json).expect_err("not JSON");
        assert!(e.to_string().contains("not JSON"), "{e}");
    }
}
