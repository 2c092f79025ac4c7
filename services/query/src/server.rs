//! The service's network side: the HTTP and Flight listeners and servers
//! (HTTP on threads of its own, [`crate::http_threads`]), and the task
//! that picks up new collections.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::auth::ApiKeys;
use crate::engine::Engine;
use crate::error::Error;
use crate::http_threads::HttpThreads;
use crate::tls::TlsIdentity;
use crate::{flight, http};

/// Binds `addr` for `endpoint`; returns the listener and its bound address.
pub(crate) async fn bind(
    endpoint: &'static str,
    addr: SocketAddr,
) -> Result<(TcpListener, SocketAddr), Error> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind {
            endpoint,
            addr,
            source,
        })?;
    let bound = listener.local_addr().map_err(|source| Error::LocalAddr {
        endpoint,
        addr,
        source,
    })?;
    Ok((listener, bound))
}

/// Serves the HTTP API (`state.registry` on `/metrics`) on `listener`
/// from `threads` HTTP threads, over TLS when `tls` is given; stopped when
/// the returned value is dropped.
pub(crate) fn serve_http(
    listener: TcpListener,
    state: http::HttpState,
    tls: Option<&TlsIdentity>,
    threads: usize,
) -> Result<HttpThreads, Error> {
    HttpThreads::start(
        listener,
        http::router(state),
        tls.map(TlsIdentity::http_acceptor),
        threads,
    )
}

/// Serves Arrow Flight on `listener`, over TLS when `tls` is given, until
/// `stop` is notified.
pub(crate) fn serve_flight(
    listener: TcpListener,
    engine: Arc<Engine>,
    keys: Arc<ApiKeys>,
    tls: Option<&TlsIdentity>,
    stop: Arc<tokio::sync::Notify>,
) -> Result<JoinHandle<()>, Error> {
    let flight = flight::make_server(engine, keys);
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = builder
            .tls_config(tls.flight())
            .map_err(|e| Error::Tls(e.to_string()))?;
    }
    Ok(tokio::spawn(async move {
        // No Nagle: small result messages would otherwise wait for the
        // client's delayed ACK (~40 ms per DoGet).
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        if let Err(e) = builder
            .add_service(flight)
            // On `stop`, open connections are closed once their calls end
            // (a peer fanning out to this node sees it gone at once).
            .serve_with_incoming_shutdown(incoming, async move { stop.notified().await })
            .await
        {
            tracing::error!(error = %e, "Flight server stopped");
        }
    }))
}

/// Looks for new collections in the store, and drops expired pinned
/// snapshots, every `poll`.
pub(crate) fn refresh_collections(engine: Arc<Engine>, poll: Duration) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(poll).await;
            let engine = engine.clone();
            // Listing the store is file I/O: keep it off the async workers
            // (so is dropping an expired pin's lease file).
            let refreshed = tokio::task::spawn_blocking(move || {
                engine.refresh();
                engine.pins.expire();
            });
            if let Err(e) = refreshed.await {
                tracing::error!(error = %e, "collection refresh panicked");
            }
        }
    })
}
