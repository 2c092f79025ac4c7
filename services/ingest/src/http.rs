//! The ingest service's small HTTP endpoint: `/metrics` and `/healthz`.

use std::net::SocketAddr;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus::{Encoder, Registry, TextEncoder};

/// Binds `addr` and serves the endpoints; returns the bound address.
pub(crate) async fn serve(
    addr: SocketAddr,
    registry: Registry,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(registry);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let handle = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    Ok((bound, handle))
}

async fn metrics(State(registry): State<Registry>) -> impl IntoResponse {
    let mut families = registry.gather();
    families.extend(prometheus::gather());
    let mut out = Vec::new();
    if let Err(e) = TextEncoder::new().encode(&families, &mut out) {
        tracing::warn!(error = %e, "encoding metrics");
    }
    (
        [(
            header::CONTENT_TYPE,
            TextEncoder::new().format_type().to_owned(),
        )],
        out,
    )
}
