//! A stand-in query node for fan-out tests: a real Flight server on
//! loopback that answers `served_shards` at once and every other action
//! with a fixed body (or a fixed error) after a fixed delay, counting the
//! calls it took and keeping their bodies.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use futures::stream;
use tonic::{Request, Response, Status, Streaming};

use super::SERVED_SHARDS;

type Answers<T> = Pin<Box<dyn futures::Stream<Item = Result<T, Status>> + Send + 'static>>;

/// How the fake answers.
#[derive(Debug, Clone)]
struct Script {
    served: Vec<u8>,
    answer: Result<Vec<u8>, tonic::Code>,
    delay: Duration,
    calls: Arc<AtomicUsize>,
    bodies: Arc<Mutex<Vec<String>>>,
}

/// A running fake peer.
pub struct FakePeer {
    /// Its Flight URL.
    pub url: String,
    calls: Arc<AtomicUsize>,
    bodies: Arc<Mutex<Vec<String>>>,
}

impl FakePeer {
    /// Starts a fake serving `served` (the `served_shards` answer) that
    /// answers other actions with `answer` after `delay`.
    pub async fn start(
        served: serde_json::Value,
        answer: serde_json::Value,
        delay: Duration,
    ) -> Self {
        Self::start_with(served, Ok(answer.to_string().into_bytes()), delay).await
    }

    /// Starts a fake serving `served` that refuses other actions with
    /// `code`.
    pub async fn refusing(served: serde_json::Value, code: tonic::Code) -> Self {
        Self::start_with(served, Err(code), Duration::ZERO).await
    }

    async fn start_with(
        served: serde_json::Value,
        answer: Result<Vec<u8>, tonic::Code>,
        delay: Duration,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let calls = Arc::new(AtomicUsize::new(0));
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let script = Script {
            served: served.to_string().into_bytes(),
            answer,
            delay,
            calls: calls.clone(),
            bodies: bodies.clone(),
        };
        tokio::spawn(async move {
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            let _ = tonic::transport::Server::builder()
                .add_service(FlightServiceServer::new(script))
                .serve_with_incoming(incoming)
                .await;
        });
        Self { url, calls, bodies }
    }

    /// Actions other than `served_shards` it has been asked.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// The bodies of those actions, in order.
    pub fn bodies(&self) -> Vec<String> {
        self.bodies.lock().clone()
    }
}

fn unimplemented<T>() -> Result<T, Status> {
    Err(Status::unimplemented("a fake peer"))
}

#[tonic::async_trait]
impl FlightService for Script {
    type HandshakeStream = Answers<HandshakeResponse>;
    type ListFlightsStream = Answers<FlightInfo>;
    type DoGetStream = Answers<FlightData>;
    type DoPutStream = Answers<PutResult>;
    type DoActionStream = Answers<arrow_flight::Result>;
    type ListActionsStream = Answers<ActionType>;
    type DoExchangeStream = Answers<FlightData>;

    async fn handshake(
        &self,
        _: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        unimplemented()
    }

    async fn list_flights(
        &self,
        _: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        unimplemented()
    }

    async fn get_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        unimplemented()
    }

    async fn poll_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        unimplemented()
    }

    async fn get_schema(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        unimplemented()
    }

    async fn do_get(&self, _: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        unimplemented()
    }

    async fn do_put(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        unimplemented()
    }

    async fn do_exchange(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        unimplemented()
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        let body = if request.get_ref().r#type == SERVED_SHARDS {
            self.served.clone()
        } else {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.bodies
                .lock()
                .push(String::from_utf8_lossy(&request.get_ref().body).into_owned());
            tokio::time::sleep(self.delay).await;
            self.answer
                .clone()
                .map_err(|code| Status::new(code, "a fake peer's refusal"))?
        };
        let answer = arrow_flight::Result { body: body.into() };
        Ok(Response::new(Box::pin(stream::iter([Ok(answer)]))))
    }

    async fn list_actions(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        unimplemented()
    }
}
