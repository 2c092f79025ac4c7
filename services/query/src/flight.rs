//! The Arrow Flight service: `ListFlights`, `GetFlightInfo` (pins a
//! snapshot; its ticket scans it), `GetSchema`, `DoGet` with a search or
//! scan ticket and `DoExchange` with batches of query vectors. Search
//! results stream as RecordBatches with columns `query_index: UInt32,
//! rank: UInt32, id: UInt64|Utf8, score: Float32` and the requested payload
//! columns.

mod actions;
mod answers;
mod batches;
mod exchange;
mod request;
mod row_options;
mod scan;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightEndpoint, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaAsIpc, SchemaResult, Ticket,
};
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use tokio::sync::OwnedSemaphorePermit;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Request, Response, Status, Streaming};

use crate::auth::{self, ApiKeys, Scope};
use crate::collection::Collection;
use crate::engine::Engine;
use crate::error::ApiError;
use crate::pins::PinInfo;
use crate::prepared::{PreparedSearch, QueryBatch};
use crate::request::PayloadSelector;
use answers::Answer;
use exchange::{idle_status, Exchange, FlightRecordBatchStreamAdapter};

pub use batches::result_schema;

/// Input batches of one DoExchange searched at once: the next is searched
/// while the previous answer is encoded and sent (answers keep their
/// order). Admission still bounds the queries in flight.
const EXCHANGE_PIPELINE: usize = 2;

type FlightStream<T> = Pin<Box<dyn futures::Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The Flight service over an engine.
#[derive(Clone)]
pub struct EddyFlight {
    engine: Arc<Engine>,
    keys: Arc<ApiKeys>,
}

/// Builds the tonic server for the Flight service. With keys configured
/// every call needs `authorization: Bearer KEY` (or `api-key: KEY`)
/// metadata, or a token from `Handshake`.
pub fn make_server(engine: Arc<Engine>, keys: Arc<ApiKeys>) -> FlightServiceServer<EddyFlight> {
    FlightServiceServer::new(EddyFlight { engine, keys })
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20)
}

fn collection_path(descriptor: &FlightDescriptor) -> Result<String, ApiError> {
    match descriptor.path.as_slice() {
        [kind, name] if kind == "collections" => Ok(name.clone()),
        _ => Err(ApiError::BadRequest(format!(
            "descriptor path must be [\"collections\", NAME], got {:?}",
            descriptor.path
        ))),
    }
}

/// The FlightInfo of a collection: its endpoint's ticket scans it (every
/// live point with its vector and payload: `DoGet` on it exports the
/// collection). With `pin`, the ticket reads that pinned snapshot and the
/// app metadata says which (token, version, offsets, TTL).
fn flight_info(collection: &Collection, pin: Option<&PinInfo>) -> Result<FlightInfo, ApiError> {
    let def = collection.def();
    let schema = batches::scan_schema(&def, &PayloadSelector::All, true);
    let (rows, _) = collection.count();
    let mut ticket = serde_json::json!({"scan": def.name, "with_vector": true});
    let mut metadata = serde_json::json!({
        "dimension": def.dimension,
        "metric": def.metric,
        "id_type": def.id_type,
        "topic": def.topic,
    });
    if let Some(pin) = pin {
        ticket["snapshot"] = serde_json::json!(pin.token);
        metadata["snapshot"] = serde_json::json!(pin);
    }
    Ok(FlightInfo::new()
        .try_with_schema(&schema)
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .with_descriptor(FlightDescriptor::new_path(vec![
            "collections".into(),
            def.name.clone(),
        ]))
        .with_total_records(rows as i64)
        .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(ticket.to_string())))
        .with_app_metadata(metadata.to_string()))
}

/// The key a call's metadata presents.
fn presented(metadata: &MetadataMap) -> Option<&str> {
    auth::presented_key(|name| metadata.get(name).and_then(|v| v.to_str().ok()))
}

impl EddyFlight {
    /// Lets a call through if its metadata carries a read key and a request
    /// slot is free (held until the returned permit drops); counts a
    /// refusal under `api="flight_auth"` or `api="flight_limit"`.
    fn authorize(&self, metadata: &MetadataMap) -> Result<OwnedSemaphorePermit, Status> {
        self.authorize_for(metadata, Scope::Read)
    }

    /// [`EddyFlight::authorize`] for a call that needs scope `need`.
    fn authorize_for(
        &self,
        metadata: &MetadataMap,
        need: Scope,
    ) -> Result<OwnedSemaphorePermit, Status> {
        let refuse = |api: &str, e: ApiError| {
            self.observe(api, "", Instant::now(), e.kind());
            Status::from(e)
        };
        self.keys
            .authorize(presented(metadata), need)
            .map_err(|e| refuse("flight_auth", e))?;
        self.engine
            .requests
            .take()
            .map_err(|e| refuse("flight_limit", e))
    }

    /// The key a handshake presents: `Basic` credentials whose password is
    /// the key (pyarrow's `authenticate_basic_token`), a bearer key, or the
    /// key as the first request's payload.
    async fn handshake_key(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<String, ApiError> {
        let header = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if let Some(header) = header.filter(|h| h.starts_with("Basic ")) {
            return self
                .keys
                .basic_password(&header)
                .ok_or_else(|| ApiError::Unauthorized("unknown API key".into()));
        }
        let key = match presented(request.metadata()) {
            Some(key) => key.to_owned(),
            None => {
                let first = request
                    .into_inner()
                    .message()
                    .await
                    .map_err(|s| ApiError::BadRequest(format!("handshake: {}", s.message())))?;
                let payload = first.map(|m| m.payload).unwrap_or_default();
                String::from_utf8(payload.to_vec())
                    .map_err(|_| ApiError::Unauthorized("the handshake key is not UTF-8".into()))?
            }
        };
        let shown = (!key.is_empty()).then_some(key.as_str());
        self.keys.authorize(shown, Scope::Read)?;
        Ok(key)
    }

    /// Counts and times a call by API, collection (empty when none is
    /// known) and status.
    fn observe(&self, api: &str, collection: &str, started: Instant, status: &str) {
        let m = &self.engine.metrics;
        m.requests
            .with_label_values(&[api, status, collection])
            .inc();
        m.latency
            .with_label_values(&[api, status, collection])
            .observe(started.elapsed().as_secs_f64());
    }

    /// [`EddyFlight::observe`] of an outcome, turned into the call's result.
    fn observed<T>(
        &self,
        api: &str,
        collection: &str,
        started: Instant,
        r: Result<T, ApiError>,
    ) -> Result<T, Status> {
        match r {
            Ok(v) => {
                self.observe(api, collection, started, "ok");
                Ok(v)
            }
            Err(e) => {
                self.observe(api, collection, started, e.kind());
                Err(e.into())
            }
        }
    }
}

#[tonic::async_trait]
impl FlightService for EddyFlight {
    type HandshakeStream = FlightStream<HandshakeResponse>;
    type ListFlightsStream = FlightStream<FlightInfo>;
    type DoGetStream = FlightStream<FlightData>;
    type DoPutStream = FlightStream<PutResult>;
    type DoActionStream = FlightStream<arrow_flight::Result>;
    type ListActionsStream = FlightStream<ActionType>;
    type DoExchangeStream = FlightStream<FlightData>;

    /// Checks a key and answers with it as the bearer token (header and
    /// payload) that later calls carry. Without configured keys any
    /// handshake succeeds with an empty token.
    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        let started = Instant::now();
        if !self.keys.enabled() {
            let answer = HandshakeResponse::default();
            return Ok(Response::new(Box::pin(stream::iter([Ok(answer)]))));
        }
        let key = self.handshake_key(request).await;
        let key = self.observed("flight_handshake", "", started, key)?;
        let bearer = MetadataValue::try_from(format!("Bearer {key}"))
            .map_err(|_| Status::unauthenticated("the key is not valid metadata"))?;
        let answer = HandshakeResponse {
            protocol_version: 0,
            payload: key.into_bytes().into(),
        };
        let mut response: Response<Self::HandshakeStream> =
            Response::new(Box::pin(stream::iter([Ok(answer)])));
        response.metadata_mut().insert("authorization", bearer);
        Ok(response)
    }

    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        let _slot = self.authorize(request.metadata())?;
        let infos: Vec<Result<FlightInfo, Status>> = self
            .engine
            .collections()
            .iter()
            .map(|c| flight_info(c, None).map_err(Status::from))
            .collect();
        Ok(Response::new(Box::pin(stream::iter(infos))))
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let _slot = self.authorize(request.metadata())?;
        let started = Instant::now();
        // Each GetFlightInfo pins what the collection serves now: a job
        // reads one consistent view through the returned ticket, or names
        // the pin in its searches.
        let name = collection_path(request.get_ref());
        let label = name.as_deref().unwrap_or_default().to_owned();
        let r = match name {
            Ok(name) => self.engine.pin(&name).await,
            Err(e) => Err(e),
        }
        .and_then(|(pin, pinned)| flight_info(&pinned, Some(&pin)));
        self.observed("flight_info", &label, started, r)
            .map(Response::new)
    }

    async fn poll_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        let _slot = self.authorize(request.metadata())?;
        Err(Status::unimplemented(
            "poll_flight_info: searches are answered directly by DoGet",
        ))
    }

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        let _slot = self.authorize(request.metadata())?;
        let name = collection_path(request.get_ref())?;
        let collection = self.engine.collection(&name)?;
        let schema = result_schema(&collection.def(), &PayloadSelector::None);
        let options = arrow_ipc::writer::IpcWriteOptions::default();
        let result = SchemaResult::try_from(SchemaAsIpc::new(&schema, &options))
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(result))
    }

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        let slot = self.authorize(request.metadata())?;
        let started = Instant::now();
        let ticket = match request::parse_do_get(&request.get_ref().ticket) {
            Ok(request::DoGetTicket::Search(ticket)) => Ok(ticket),
            Ok(request::DoGetTicket::Scan {
                collection,
                request,
            }) => {
                let scan = self.scan(&collection, request, slot).await;
                return self
                    .observed("flight_scan", &collection, started, scan)
                    .map(Response::new);
            }
            Err(e) => Err(e),
        };
        let label = ticket
            .as_ref()
            .map(|t| t.collection.clone())
            .unwrap_or_default();
        let r = async {
            let ticket = ticket?;
            let collection = self
                .engine
                .collection_at(&ticket.collection, ticket.request.snapshot.as_deref())?;
            let def = collection.def();
            let search = Arc::new(PreparedSearch::new(&def, ticket.request)?);
            let schema = result_schema(&def, &search.params.with_payload);
            let queries = QueryBatch::new(&def, ticket.vectors)?;
            let n = queries.len() as u64;
            let result = self.engine.search(&collection, &search, queries).await?;
            self.engine
                .metrics
                .queries
                .with_label_values(&["flight_get"])
                .inc_by(n);
            let batch = batches::results_batch(
                &def,
                &schema,
                &search.params.with_payload,
                &result.hits,
                0,
            )?;
            let answer = Answer::new(
                batch,
                &result.offsets,
                collection.search_staleness(&result.missing_shards),
            );
            Ok::<_, ApiError>((schema, answer))
        }
        .await;
        let (schema, answer) = self.observed("flight_get", &label, started, r)?;
        let encoded = answers::encode(Some(schema), stream::iter([Ok(answer)]));
        Ok(Response::new(Box::pin(encoded.map_err(Status::from))))
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        let _slot = self.authorize(request.metadata())?;
        Err(Status::unimplemented(
            "do_put: publish points to the collection's Kafka topic instead",
        ))
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        // The slot stays taken while the exchange is open: it moves into
        // the answer stream below.
        let slot = self.authorize(request.metadata())?;
        let started = Instant::now();
        let idle = self.engine.options().exchange_idle;
        let mut input = request.into_inner();
        let first = match tokio::time::timeout(idle, input.message()).await {
            Ok(Ok(Some(first))) => first,
            Ok(Ok(None)) => return Err(Status::invalid_argument("do_exchange: empty stream")),
            Ok(Err(status)) => return Err(status),
            Err(_) => return Err(idle_status(idle)),
        };
        let setup = (|| {
            let descriptor = first.flight_descriptor.as_ref().ok_or_else(|| {
                ApiError::BadRequest(
                    "the first message must carry a FlightDescriptor with the command".into(),
                )
            })?;
            let command = request::parse_exchange_command(&descriptor.cmd)?;
            let collection = self
                .engine
                .collection_at(&command.collection, command.request.snapshot.as_deref())?;
            let search = Arc::new(PreparedSearch::new(&collection.def(), command.request)?);
            Ok::<_, ApiError>((search, collection))
        })();
        let label = setup
            .as_ref()
            .map(|(_, c)| c.name().to_owned())
            .unwrap_or_default();
        let (search, collection) = self.observed("flight_exchange_open", &label, started, setup)?;
        let schema = result_schema(&collection.def(), &search.params.with_payload);
        // Clients that send the input schema with the descriptor (pyarrow's
        // `writer.begin`) get the answer schema at once; others with the
        // first answer.
        let out = std::sync::OnceLock::new();
        if !first.data_header.is_empty() {
            let answer_schema = arrow_schema::Schema::try_from(&first)
                .map_err(|e| ApiError::BadRequest(format!("the input schema: {e}")))
                .and_then(|input| batches::exchange_schema(&schema, &input));
            let answer_schema =
                self.observed("flight_exchange_open", &label, started, answer_schema)?;
            let _ = out.set(answer_schema);
        }
        let up_front = out.get().cloned();
        let batches = FlightRecordBatchStreamAdapter::decode(first, input, idle);
        let exchange = Arc::new(Exchange {
            engine: self.engine.clone(),
            collection,
            search,
            schema,
            out,
        });
        // Query numbers continue across the input batches.
        let mut next_index = 0u32;
        let results: BoxStream<'static, Result<Answer, FlightError>> = batches
            .map(move |batch| {
                let base = next_index;
                next_index += batch.as_ref().map_or(0, |b| b.num_rows() as u32);
                let exchange = exchange.clone();
                let _open = &slot;
                async move {
                    let answer = exchange.answer(batch, base).await;
                    answer.map_err(|e| FlightError::Tonic(Box::new(Status::from(e))))
                }
            })
            // The next batch is searched while this one's answer is encoded
            // and sent, so the search threads do not idle between batches.
            .buffered(EXCHANGE_PIPELINE)
            .boxed();
        self.observe("flight_exchange_open", &label, started, "ok");
        let encoded = answers::encode(up_front, results).map_err(Status::from);
        Ok(Response::new(Box::pin(encoded)))
    }

    /// Collection management and stats ([`actions`]); admin actions need
    /// an admin key.
    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        let started = Instant::now();
        let action = request.get_ref().r#type.clone();
        let need = actions::scope(&action).unwrap_or(Scope::Read);
        let _slot = self.authorize_for(request.metadata(), need)?;
        let r = actions::run(&self.engine, &action, &request.get_ref().body).await;
        let body = self.observed("flight_action", "", started, r)?;
        let result = arrow_flight::Result { body: body.into() };
        Ok(Response::new(Box::pin(stream::iter([Ok(result)]))))
    }

    async fn list_actions(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        let _slot = self.authorize(request.metadata())?;
        let types = actions::action_types().into_iter().map(Ok);
        Ok(Response::new(Box::pin(stream::iter(types))))
    }
}
