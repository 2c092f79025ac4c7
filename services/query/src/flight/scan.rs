//! The Flight scan: a DoGet ticket that streams a collection's live points
//! (or a filtered part, at a pinned snapshot) as Arrow batches, the way a
//! Spark or DuckDB job exports it. A split collection this node does not
//! serve whole is scanned page by page over every shard, its peers'
//! included.

use std::sync::Arc;

use arrow_flight::error::FlightError;
use arrow_flight::FlightData;
use futures::stream;
use futures::{StreamExt, TryStreamExt};
use tokio::sync::OwnedSemaphorePermit;
use tonic::Status;

use arrow_schema::SchemaRef;
use eddy_filter::Filter;
use eddy_model::{CollectionDef, PointId};

use super::answers::{self, Answer};
use super::{batches, EddyFlight, FlightStream};
use crate::collection::{Collection, ViewPoint};
use crate::engine::Engine;
use crate::error::ApiError;
use crate::fanout;
use crate::request::ScanRequest;

/// Points per scan batch.
const SCAN_BATCH_ROWS: usize = 4_096;

impl EddyFlight {
    /// Streams the live points of `collection` that the scan's filter lets
    /// through, as of now, in batches of [`SCAN_BATCH_ROWS`]; the request
    /// slot is held until the stream ends.
    pub(super) async fn scan(
        &self,
        collection: &str,
        request: ScanRequest,
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
        // A split collection this node does not serve whole is paged over
        // its peers (a pinned snapshot's over the peers holding its pins).
        if !collection.missing_shards().is_empty() {
            return Ok(self.paged_scan(collection, request, filter, slot));
        }
        let stale = collection.search_staleness(&[]);
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

    /// A scan of a split collection this node does not serve whole: scroll
    /// pages of [`SCAN_BATCH_ROWS`] over every shard (its own and its
    /// peers', merged in id order, see [`fanout::read`]), one batch each.
    /// Each page reflects its own moment, as an HTTP scroll's pages do; the
    /// first batch carries the first page's offsets. Shards no node answers
    /// for end the stream with 503, or with `allow_partial` are left out
    /// and the answer is marked partial.
    fn paged_scan(
        &self,
        collection: Arc<Collection>,
        request: ScanRequest,
        filter: Option<Filter>,
        slot: OwnedSemaphorePermit,
    ) -> FlightStream<FlightData> {
        let def = collection.def().clone();
        let schema = batches::scan_schema(&def, &request.with_payload, request.with_vector);
        let page = PagedScan {
            engine: self.engine.clone(),
            collection,
            def,
            rows: schema.clone(),
            request: Arc::new(request),
            filter,
            _slot: Arc::new(slot),
        };
        let pages = stream::unfold(Some((None, true)), move |state| {
            let page = page.clone();
            async move {
                let (after, first) = state?;
                match page.next(after, first).await {
                    Ok((answer, next)) => Some((Ok(answer), next.map(|n| (Some(n), false)))),
                    Err(e) => Some((Err(FlightError::Tonic(Box::new(Status::from(e)))), None)),
                }
            }
        });
        let encoded = answers::encode(Some(schema), pages);
        Box::pin(encoded.map_err(Status::from))
    }
}

/// What each page of a paged scan needs.
#[derive(Clone)]
struct PagedScan {
    engine: Arc<Engine>,
    collection: Arc<Collection>,
    def: Arc<CollectionDef>,
    rows: SchemaRef,
    request: Arc<ScanRequest>,
    filter: Option<Filter>,
    /// The request slot, held until the stream ends.
    _slot: Arc<OwnedSemaphorePermit>,
}

impl PagedScan {
    /// The page after `after` as one answer batch (the first carries the
    /// metadata), and the cursor of the next page (none: this was the last).
    async fn next(
        &self,
        after: Option<PointId>,
        first: bool,
    ) -> Result<(Answer, Option<PointId>), ApiError> {
        let r = &self.request;
        let ask = fanout::read::PageAsk {
            filter_json: r.filter.clone(),
            filter: self.filter.clone(),
            after,
            limit: SCAN_BATCH_ROWS,
            with_vector: r.with_vector,
        };
        let paged = fanout::read::scroll_everywhere(&self.engine, &self.collection, ask).await?;
        if !paged.missing.is_empty() && !r.allow_partial {
            return Err(self
                .engine
                .shards_unreachable(&self.collection, &paged.missing));
        }
        let page = paged.page;
        let points: Vec<ViewPoint<'_>> = page
            .points
            .iter()
            .map(|p| ViewPoint {
                id: p.id.clone(),
                vector: &p.vector,
                payload_json: &p.payload_json,
            })
            .collect();
        let batch = batches::scan_batch(&self.def, &self.rows, &r.with_payload, &points)?;
        let next = page
            .more
            .then(|| page.points.last().map(|p| p.id.clone()))
            .flatten();
        let answer = if first {
            let stale = self.collection.search_staleness(&paged.missing);
            Answer::new(batch, &page.offsets, stale)
        } else {
            Answer::more(batch)
        };
        Ok((answer, next))
    }
}
