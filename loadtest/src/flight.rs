//! A small Arrow Flight client for eddy-query's search RPCs: `DoGet` with a
//! JSON ticket, and `DoExchange` streaming query vectors in and results out.
//!
//! Results arrive as record batches with columns `query_index: UInt32`,
//! `rank: UInt32`, `id: UInt64`, `score: Float32` (plus payload columns,
//! ignored here); [`collect_hits`] turns them into one ranked list per query.

use std::sync::Arc;
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, UInt32Type, UInt64Type};
use arrow_array::{ArrayRef, FixedSizeListArray, Float32Array, RecordBatch};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::{FlightClient, FlightDescriptor, Ticket};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use futures::TryStreamExt;
use serde::Serialize;
use tonic::transport::Channel;

use crate::options::SearchOptions;

/// Errors of the Flight client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The endpoint URL is invalid or the connection failed.
    #[error("connect to Flight endpoint {addr}: {source}")]
    Connect {
        /// The address.
        addr: String,
        /// The underlying error.
        source: tonic::transport::Error,
    },
    /// The RPC failed.
    #[error("Flight {rpc}: {source}")]
    Rpc {
        /// `DoGet` or `DoExchange`.
        rpc: &'static str,
        /// The underlying error.
        source: FlightError,
    },
    /// A request batch could not be built.
    #[error("building the query batch: {0}")]
    Arrow(#[from] ArrowError),
    /// A ticket or command could not be encoded.
    #[error("encoding the request: {0}")]
    BadRequest(String),
    /// The result batches do not have the expected shape.
    #[error("bad result batch: {0}")]
    BadResult(String),
}

/// Result alias for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Ranked (id, score) pairs, best first.
pub type Hits = Vec<(u64, f32)>;

/// Search client over one Flight connection (HTTP/2: clones share it and
/// their calls run concurrently).
#[derive(Debug, Clone)]
pub struct FlightSearch {
    channel: Channel,
}

/// A `DoGet` ticket or `DoExchange` command in its JSON form.
#[derive(Serialize)]
struct JsonRequest<'a> {
    collection: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    vectors: Option<&'a [&'a [f32]]>,
    #[serde(flatten)]
    options: &'a SearchOptions,
}

impl FlightSearch {
    /// Connects to `host:port` (plain HTTP/2), with a per-RPC `timeout`.
    pub async fn connect(addr: &str, timeout: Duration) -> Result<Self> {
        let connect_err = |source| Error::Connect {
            addr: addr.to_owned(),
            source,
        };
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(connect_err)?
            .connect_timeout(Duration::from_secs(5))
            .timeout(timeout)
            .connect()
            .await
            .map_err(connect_err)?;
        Ok(Self { channel })
    }

    fn client(&self) -> FlightClient {
        FlightClient::new(self.channel.clone())
    }

    /// `DoGet` with a ticket holding `vectors`; one hit list per vector.
    pub async fn do_get(
        &self,
        collection: &str,
        vectors: &[&[f32]],
        options: &SearchOptions,
    ) -> Result<Vec<Hits>> {
        let ticket = serde_json::to_vec(&JsonRequest {
            collection,
            vectors: Some(vectors),
            options,
        })
        .map_err(|e| Error::BadRequest(e.to_string()))?;
        let rpc_err = |source| Error::Rpc {
            rpc: "DoGet",
            source,
        };
        let batches: Vec<RecordBatch> = self
            .client()
            .do_get(Ticket::new(ticket))
            .await
            .map_err(rpc_err)?
            .try_collect()
            .await
            .map_err(rpc_err)?;
        collect_hits(&batches, vectors.len())
    }

    /// `DoExchange`: streams `queries` (rows of `dim` floats, `batch_rows` per
    /// batch) and collects the results; one hit list per query.
    pub async fn do_exchange(
        &self,
        collection: &str,
        queries: &[f32],
        dim: usize,
        options: &SearchOptions,
        batch_rows: usize,
    ) -> Result<Vec<Hits>> {
        let n = queries.len().checked_div(dim).unwrap_or(0);
        let batches = query_batches(queries, dim, batch_rows.max(1))?;
        let cmd = serde_json::to_vec(&JsonRequest {
            collection,
            vectors: None,
            options,
        })
        .map_err(|e| Error::BadRequest(e.to_string()))?;
        let descriptor = FlightDescriptor::new_cmd(cmd);
        let input = FlightDataEncoderBuilder::new()
            .with_schema(query_schema(dim)?)
            .with_flight_descriptor(Some(descriptor))
            .build(futures::stream::iter(batches.into_iter().map(Ok)));
        let rpc_err = |source| Error::Rpc {
            rpc: "DoExchange",
            source,
        };
        let results: Vec<RecordBatch> = self
            .client()
            .do_exchange(input)
            .await
            .map_err(rpc_err)?
            .try_collect()
            .await
            .map_err(rpc_err)?;
        collect_hits(&results, n)
    }
}

/// The schema of query batches: `vector: FixedSizeList<Float32, dim>`.
pub fn query_schema(dim: usize) -> Result<SchemaRef> {
    let dim =
        i32::try_from(dim).map_err(|_| Error::BadResult(format!("dimension {dim} too large")))?;
    let item = Arc::new(Field::new_list_field(DataType::Float32, true));
    Ok(Arc::new(Schema::new(vec![Field::new(
        "vector",
        DataType::FixedSizeList(item, dim),
        false,
    )])))
}

/// Splits row-major `queries` into record batches of at most `batch_rows` rows.
pub fn query_batches(queries: &[f32], dim: usize, batch_rows: usize) -> Result<Vec<RecordBatch>> {
    let schema = query_schema(dim)?;
    let DataType::FixedSizeList(item, size) = schema.field(0).data_type().clone() else {
        return Err(Error::BadResult(
            "query schema is not a fixed-size list".into(),
        ));
    };
    queries
        .chunks(dim.max(1) * batch_rows.max(1))
        .map(|chunk| {
            let values = Arc::new(Float32Array::from(chunk.to_vec()));
            let list = FixedSizeListArray::try_new(item.clone(), size, values, None)?;
            Ok(RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(list) as ArrayRef],
            )?)
        })
        .collect()
}

/// Groups result batches into one ranked hit list per query (`n_queries` lists).
pub fn collect_hits(batches: &[RecordBatch], n_queries: usize) -> Result<Vec<Hits>> {
    let mut ranked: Vec<Vec<(u32, u64, f32)>> = vec![Vec::new(); n_queries];
    for batch in batches {
        let column = |name: &str| {
            batch.column_by_name(name).ok_or_else(|| {
                Error::BadResult(format!("no column {name:?} in {:?}", batch.schema()))
            })
        };
        let wrong = |name: &str| Error::BadResult(format!("column {name:?} has the wrong type"));
        let query_index = column("query_index")?
            .as_primitive_opt::<UInt32Type>()
            .ok_or_else(|| wrong("query_index"))?;
        let rank = column("rank")?
            .as_primitive_opt::<UInt32Type>()
            .ok_or_else(|| wrong("rank"))?;
        let id = column("id")?
            .as_primitive_opt::<UInt64Type>()
            .ok_or_else(|| wrong("id"))?;
        let score = column("score")?
            .as_primitive_opt::<Float32Type>()
            .ok_or_else(|| wrong("score"))?;
        for row in 0..batch.num_rows() {
            let q = query_index.value(row) as usize;
            let list = ranked.get_mut(q).ok_or_else(|| {
                Error::BadResult(format!(
                    "query_index {q} out of range (queries: {n_queries})"
                ))
            })?;
            list.push((rank.value(row), id.value(row), score.value(row)));
        }
    }
    Ok(ranked
        .into_iter()
        .map(|mut list| {
            list.sort_by_key(|&(rank, ..)| rank);
            list.into_iter().map(|(_, id, score)| (id, score)).collect()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{UInt32Array, UInt64Array};

    #[test]
    fn query_batches_split_rows() {
        let queries: Vec<f32> = (0..10 * 3).map(|i| i as f32).collect();
        let batches = query_batches(&queries, 3, 4).expect("batches");
        assert_eq!(
            batches
                .iter()
                .map(RecordBatch::num_rows)
                .collect::<Vec<_>>(),
            vec![4, 4, 2]
        );
        let list = batches[1].column(0).as_fixed_size_list();
        assert_eq!(list.value_length(), 3);
        let row = list.value(0);
        let row = row.as_primitive::<Float32Type>();
        assert_eq!(row.values().as_ref(), &[12.0, 13.0, 14.0]);
    }

    #[test]
    fn hits_are_grouped_and_ranked() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("query_index", DataType::UInt32, false),
            Field::new("rank", DataType::UInt32, false),
            Field::new("id", DataType::UInt64, false),
            Field::new("score", DataType::Float32, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(UInt32Array::from(vec![1, 0, 1, 0])),
                Arc::new(UInt32Array::from(vec![1, 0, 0, 1])),
                Arc::new(UInt64Array::from(vec![11, 20, 10, 21])),
                Arc::new(Float32Array::from(vec![0.5, 0.9, 0.6, 0.8])),
            ],
        )
        .expect("batch");
        let hits = collect_hits(std::slice::from_ref(&batch), 2).expect("hits");
        assert_eq!(hits[0], vec![(20, 0.9), (21, 0.8)]);
        assert_eq!(hits[1], vec![(10, 0.6), (11, 0.5)]);
        assert!(
            collect_hits(&[batch], 1).is_err(),
            "query_index out of range"
        );
    }
}
