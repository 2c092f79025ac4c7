//! The Flight scan: a DoGet ticket that streams a collection's live points
//! (or a filtered part, at a pinned snapshot) as Arrow batches, the way a
//! Spark or DuckDB job exports it.

use std::sync::Arc;

use arrow_flight::error::FlightError;
use arrow_flight::FlightData;
use futures::stream;
use futures::{StreamExt, TryStreamExt};
use tokio::sync::OwnedSemaphorePermit;
use tonic::Status;

use super::answers::{self, Answer};
use super::{batches, EddyFlight, FlightStream};
use crate::error::ApiError;

/// Points per scan batch.
const SCAN_BATCH_ROWS: usize = 4_096;

impl EddyFlight {
    /// Streams the live points of `collection` that the scan's filter lets
    /// through, as of now, in batches of [`SCAN_BATCH_ROWS`]; the request
    /// slot is held until the stream ends.
    pub(super) async fn scan(
        &self,
        collection: &str,
        request: crate::request::ScanRequest,
        slot: OwnedSemaphorePermit,
    ) -> Result<FlightStream<FlightData>, ApiError> {
        let collection = self
            .engine
            .collection_at(collection, request.snapshot.as_deref())?;
        let def = collection.def().clone();
        let filter = request
            .filter
            .as_ref()
            .map(|f| {
                eddy_filter::Filter::parse(f, &def.payload_fields)
                    .map_err(|e| ApiError::BadRequest(e.to_string()))
            })
            .transpose()?;
        let stale = collection.staleness();
        let view = self
            .engine
            .on_pool(move || collection.view(filter.as_ref()))
            .await?;
        let mut first = Some((view.offsets.clone(), stale));
        let schema = batches::scan_schema(&def, &request.with_payload, request.with_vector);
        let (view, rows) = (Arc::new(view), schema.clone());
        let selector = request.with_payload;
        // At least one batch, empty if nothing matches, to carry the
        // answer's metadata.
        let starts = (0..view.len().max(1)).step_by(SCAN_BATCH_ROWS);
        let batches = stream::iter(starts).map(move |start| {
            let _open = &slot;
            let end = (start + SCAN_BATCH_ROWS).min(view.len());
            let points: Vec<_> = (start..end).filter_map(|i| view.point(i)).collect();
            let batch = batches::scan_batch(&def, &rows, &selector, &points)
                .map_err(|e| FlightError::Tonic(Box::new(Status::from(e))))?;
            Ok(match first.take() {
                Some((offsets, stale)) => Answer::new(batch, &offsets, stale),
                None => Answer::more(batch),
            })
        });
        let encoded = answers::encode(Some(schema), batches);
        Ok(Box::pin(encoded.map_err(Status::from)))
    }
}
