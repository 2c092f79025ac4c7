//! The ingest service's small HTTP endpoint: `/metrics` and `/healthz`.

use std::net::SocketAddr;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus::Registry;

use crate::error::{Error, Result};

/// Binds `addr` and serves the endpoints; returns the bound address.
pub(crate) async fn serve(
    addr: SocketAddr,
    registry: Registry,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(registry);
    let endpoint_error = |source| Error::MetricsEndpoint { addr, source };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(endpoint_error)?;
    let bound = listener.local_addr().map_err(endpoint_error)?;
    let handle = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    Ok((bound, handle))
}

async fn metrics(State(registry): State<Registry>) -> impl IntoResponse {
    let (content_type, body) = eddy_config::metrics::encode(&registry);
    ([(header::CONTENT_TYPE, content_type)], body)
}
