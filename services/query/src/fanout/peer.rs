//! One peer: the query node at a Flight URL, its lazily connected
//! channel, what it last said it serves, and the one call every fan-out
//! action makes of it.

use std::collections::HashMap;
use std::time::Duration;

use arrow_flight::{Action, FlightClient};
use bytes::Bytes;
use futures::StreamExt;
use parking_lot::RwLock;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use super::PeerOptions;
use crate::error::ApiError;

/// What a peer last said it serves.
#[derive(Debug, Default)]
pub(super) struct View {
    /// Whether its last refresh (or leg) succeeded.
    pub(super) reachable: bool,
    /// Per collection, the shards it serves.
    pub(super) served: HashMap<String, Vec<u32>>,
}

/// One other query node: its URL, its connection and what it serves.
#[derive(Debug)]
pub(super) struct Peer {
    pub(super) url: String,
    pub(super) channel: Channel,
    pub(super) view: RwLock<View>,
}

impl Peer {
    /// The peer at `url`, connected lazily with `opts`' timeout and CA.
    pub(super) fn connect(url: &str, opts: &PeerOptions) -> Result<Self, ApiError> {
        let bad = |e: &dyn std::fmt::Display| {
            ApiError::BadRequest(format!("peer {url:?} is not a usable Flight URL: {e}"))
        };
        let mut endpoint = Endpoint::from_shared(url.to_owned())
            .map_err(|e| bad(&e))?
            .connect_timeout(Duration::from_secs(2))
            .timeout(opts.timeout);
        if url.starts_with("https://") {
            let mut tls = ClientTlsConfig::new();
            if let Some(ca) = &opts.ca_pem {
                tls = tls.ca_certificate(Certificate::from_pem(ca));
            }
            endpoint = endpoint.tls_config(tls).map_err(|e| bad(&e))?;
        }
        Ok(Self {
            url: url.to_owned(),
            channel: endpoint.connect_lazy(),
            view: RwLock::new(View::default()),
        })
    }
}

/// Calls `action` on the peer at `url` (over `channel`, presenting `key`)
/// with `body`; its one answer. A refusal as invalid is a bad request (the
/// caller's), an unknown collection or snapshot is not found; any other
/// failure leaves the peer's shards to another.
pub(super) async fn call_peer(
    channel: Channel,
    key: Option<String>,
    url: String,
    action: String,
    body: Vec<u8>,
) -> Result<Bytes, ApiError> {
    let mut client = FlightClient::new(channel);
    if let Some(key) = &key {
        client
            .add_header("authorization", &format!("Bearer {key}"))
            .map_err(|e| ApiError::Internal(format!("the peer key header: {e}")))?;
    }
    let failed = |e: arrow_flight::error::FlightError| {
        let status = tonic::Status::from(e);
        match status.code() {
            tonic::Code::InvalidArgument => ApiError::BadRequest(format!(
                "peer {url} refused the search: {}",
                status.message()
            )),
            tonic::Code::NotFound => {
                ApiError::NotFound(format!("peer {url}: {}", status.message()))
            }
            _ => ApiError::Unavailable(format!(
                "peer {url}: {} {}",
                status.code(),
                status.message()
            )),
        }
    };
    let mut answers = client
        .do_action(Action::new(action.clone(), body))
        .await
        .map_err(failed)?;
    let first = answers.next().await;
    // Read the stream to its end: a call dropped before its end is
    // reset, and HTTP/2 refuses a connection that resets too many.
    while let Some(more) = answers.next().await {
        more.map_err(failed)?;
    }
    match first {
        Some(answer) => answer.map_err(failed),
        None => Err(ApiError::Unavailable(format!(
            "peer {url} answered {action} with nothing"
        ))),
    }
}
