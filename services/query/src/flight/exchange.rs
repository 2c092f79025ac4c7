//! One open DoExchange: its search, the answers' schema, and the input
//! stream with its idle timeout.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_flight::error::FlightError;
use arrow_flight::FlightData;
use arrow_schema::SchemaRef;
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use tonic::{Status, Streaming};

use super::answers::Answer;
use super::{batches, row_options};
use crate::collection::Collection;
use crate::engine::Engine;
use crate::error::ApiError;
use crate::prepared::{PreparedSearch, QueryBatch};
use crate::request::check_total_hits;
use crate::results::BatchResult;

/// One open DoExchange: the collection its command named, the search made
/// ready once for every batch, the schema of its results, and that of its
/// answers (results plus the input's carried columns), fixed by the first
/// input schema.
pub(super) struct Exchange {
    pub(super) engine: Arc<Engine>,
    pub(super) collection: Arc<Collection>,
    pub(super) search: Arc<PreparedSearch>,
    pub(super) schema: SchemaRef,
    pub(super) out: std::sync::OnceLock<SchemaRef>,
}

impl Exchange {
    /// Answers one input batch of query vectors, numbering its queries from
    /// `base`.
    pub(super) async fn answer(
        &self,
        batch: Result<RecordBatch, FlightError>,
        base: u32,
    ) -> Result<Answer, ApiError> {
        let def = self.collection.def();
        let with_payload = &self.search.params.with_payload;
        let batch = batch.map_err(|e| match e {
            // The input went idle past --exchange-idle-ms.
            FlightError::Tonic(status) if status.code() == tonic::Code::DeadlineExceeded => {
                ApiError::Timeout(status.message().to_owned())
            }
            other => ApiError::BadRequest(format!("decoding input batch: {other}")),
        })?;
        let out = match self.out.get() {
            Some(out) => out.clone(),
            None => {
                let out = batches::exchange_schema(&self.schema, &batch.schema())?;
                self.out.get_or_init(|| out).clone()
            }
        };
        if batch.num_rows() == 0 {
            let empty = batches::results_batch(&def, &self.schema, with_payload, &[], base)?;
            let answer = batches::with_input_columns(empty, &batch, base, &out)?;
            let offsets = self.collection.visible_offsets();
            return Ok(Answer::new(answer, &offsets, self.collection.staleness()));
        }
        let queries = batches::query_vectors(&batch, &def)?;
        let n = queries.len() as u64;
        let result = match row_options::group_rows(&batch)? {
            None => {
                self.engine
                    .search(&self.collection, &self.search, queries)
                    .await?
            }
            Some(groups) => self.search_groups(&queries, groups).await?,
        };
        self.engine
            .metrics
            .queries
            .with_label_values(&["flight_exchange"])
            .inc_by(n);
        let answers = batches::results_batch(&def, &self.schema, with_payload, &result.hits, base)?;
        let answer = batches::with_input_columns(answers, &batch, base, &out)?;
        Ok(Answer::new(
            answer,
            &result.offsets,
            self.collection.search_staleness(&result.missing_shards),
        ))
    }
}

impl Exchange {
    /// Searches each group of rows with its own options (the `k` and
    /// `filter` columns), all groups at once; the hits in row order.
    async fn search_groups(
        &self,
        queries: &QueryBatch,
        groups: row_options::Groups,
    ) -> Result<BatchResult, ApiError> {
        let def = self.collection.def();
        let mut runs = Vec::with_capacity(groups.len());
        let mut hits_asked = 0usize;
        for (options, rows) in groups {
            let search = Arc::new(row_options::prepared(&def, &self.search, &options)?);
            hits_asked = hits_asked.saturating_add(rows.len() * search.params.k);
            let group = QueryBatch::from_rows(&def, rows.iter().map(|&r| queries.get(r)))?;
            runs.push(async move {
                let result = self.engine.search(&self.collection, &search, group).await?;
                Ok::<_, ApiError>((rows, result))
            });
        }
        check_total_hits(hits_asked)?;
        let parts = futures::future::join_all(runs)
            .await
            .into_iter()
            .collect::<Result<Vec<_>, ApiError>>()?;
        Ok(BatchResult::scatter(queries.len(), parts))
    }
}

/// The status of an exchange whose client sent nothing for `idle`.
pub(super) fn idle_status(idle: std::time::Duration) -> Status {
    Status::deadline_exceeded(format!(
        "do_exchange: no input for {} ms (--exchange-idle-ms)",
        idle.as_millis()
    ))
}

/// Decodes a DoExchange input (whose first message was already read) into
/// RecordBatches.
pub(super) struct FlightRecordBatchStreamAdapter;

impl FlightRecordBatchStreamAdapter {
    /// The input after `first` as batches; a wait of more than `idle` for
    /// the next message ends it with DEADLINE_EXCEEDED.
    pub(super) fn decode(
        first: FlightData,
        rest: Streaming<FlightData>,
        idle: std::time::Duration,
    ) -> BoxStream<'static, Result<RecordBatch, FlightError>> {
        let rest = stream::unfold(Some(rest), move |open| async move {
            let mut rest = open?;
            match tokio::time::timeout(idle, rest.message()).await {
                Ok(Ok(Some(data))) => Some((Ok(data), Some(rest))),
                Ok(Ok(None)) => None,
                Ok(Err(status)) => Some((Err(FlightError::Tonic(Box::new(status))), None)),
                Err(_) => Some((Err(FlightError::Tonic(Box::new(idle_status(idle)))), None)),
            }
        });
        // Clients may send the descriptor (or app metadata) alone in a
        // message with no IPC header; only IPC messages go to the decoder.
        let data = stream::once(async move { Ok(first) })
            .chain(rest)
            .try_filter(|d| futures::future::ready(!d.data_header.is_empty()))
            .boxed();
        arrow_flight::decode::FlightRecordBatchStream::new_from_flight_data(data).boxed()
    }
}
