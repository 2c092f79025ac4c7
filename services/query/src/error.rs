//! The errors of the query service: [`Error`] for starting it, and
//! [`ApiError`], the one error type of the query APIs, mapped to both HTTP
//! and gRPC codes.

use std::net::SocketAddr;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// Errors starting the query service.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The segment store failed.
    #[error(transparent)]
    Store(#[from] eddy_manifest::Error),
    /// Binding a listener failed.
    #[error("binding the {endpoint} listener on {addr}: {source}")]
    Bind {
        /// Which listener (`HTTP`, `Flight`).
        endpoint: &'static str,
        /// The configured address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// Reading the address a listener was bound to failed.
    #[error("reading the bound address of the {endpoint} listener on {addr}: {source}")]
    LocalAddr {
        /// Which listener (`HTTP`, `Flight`).
        endpoint: &'static str,
        /// The configured address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// Registering metrics failed.
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// Building the search pool failed.
    #[error("search pool: {0}")]
    Pool(#[from] rayon::ThreadPoolBuildError),
    /// Starting an HTTP thread (or its runtime) failed.
    #[error("starting an HTTP thread: {0}")]
    HttpThread(std::io::Error),
    /// The API keys could not be loaded, or none guard a listener other
    /// hosts can reach.
    #[error(transparent)]
    Keys(#[from] crate::auth::KeysError),
    /// The TLS certificate or key could not be loaded.
    #[error("{0}")]
    Tls(String),
    /// A Kafka property in the configuration is one eddy refuses.
    #[error(transparent)]
    KafkaSettings(#[from] eddy_kafka::ProtectedProperty),
    /// The configuration could not be completed (the Kafka secrets file).
    #[error(transparent)]
    Config(#[from] eddy_config::Error),
    /// The peers (`--peers`) cannot be set up: an unusable URL, or an
    /// unreadable key or CA file.
    #[error("peers: {0}")]
    Peers(String),
}

/// An API error: a closed set of kinds, each with a message for the user.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed or invalid.
    #[error("{0}")]
    BadRequest(String),
    /// No API key, or one the service does not know (HTTP 401, gRPC
    /// UNAUTHENTICATED).
    #[error("{0}")]
    Unauthorized(String),
    /// The key is valid but its scope does not cover the request (HTTP
    /// 403, gRPC PERMISSION_DENIED).
    #[error("{0}")]
    Forbidden(String),
    /// The collection or point does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The resource exists with another definition.
    #[error("{0}")]
    Conflict(String),
    /// A wait (read-your-writes) ran out.
    #[error("{0}")]
    Timeout(String),
    /// The service is not ready.
    #[error("{0}")]
    Unavailable(String),
    /// Too many queries are in flight: retry later (HTTP 429, gRPC
    /// RESOURCE_EXHAUSTED) instead of queueing without bound.
    #[error("{0}")]
    Overloaded(String),
    /// A bug or an I/O failure on our side.
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Overloaded(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The gRPC status code.
    pub fn code(&self) -> tonic::Code {
        match self {
            ApiError::BadRequest(_) => tonic::Code::InvalidArgument,
            ApiError::Unauthorized(_) => tonic::Code::Unauthenticated,
            ApiError::Forbidden(_) => tonic::Code::PermissionDenied,
            ApiError::NotFound(_) => tonic::Code::NotFound,
            ApiError::Conflict(_) => tonic::Code::AlreadyExists,
            ApiError::Timeout(_) => tonic::Code::DeadlineExceeded,
            ApiError::Unavailable(_) => tonic::Code::Unavailable,
            ApiError::Overloaded(_) => tonic::Code::ResourceExhausted,
            ApiError::Internal(_) => tonic::Code::Internal,
        }
    }

    /// A short stable name for the kind (JSON `code`, metric `status`).
    pub fn kind(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "bad_request",
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::Conflict(_) => "conflict",
            ApiError::Timeout(_) => "timeout",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::Overloaded(_) => "overloaded",
            ApiError::Internal(_) => "internal",
        }
    }

    fn log(&self) {
        match self {
            ApiError::Internal(m) => tracing::error!(message = %m, "internal error"),
            ApiError::Unavailable(m) => tracing::warn!(message = %m, "unavailable"),
            // Counted in eddy_query_requests_total{status="overloaded"}; one log
            // line per shed request would add load exactly when there is too much.
            ApiError::Overloaded(m) => tracing::debug!(message = %m, "overloaded"),
            other => tracing::info!(kind = other.kind(), message = %other, "request rejected"),
        }
    }
}

impl From<ApiError> for tonic::Status {
    fn from(e: ApiError) -> Self {
        e.log();
        tonic::Status::new(e.code(), e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.log();
        let body = serde_json::json!({"error": {"code": self.kind(), "message": self.to_string()}});
        let mut response = (self.status(), Json(body)).into_response();
        match self {
            ApiError::Overloaded(_) => {
                response.headers_mut().insert(
                    axum::http::header::RETRY_AFTER,
                    axum::http::HeaderValue::from_static("1"),
                );
            }
            ApiError::Unauthorized(_) => {
                response.headers_mut().insert(
                    axum::http::header::WWW_AUTHENTICATE,
                    axum::http::HeaderValue::from_static("Bearer"),
                );
            }
            _ => {}
        }
        response
    }
}

impl From<eddy_manifest::Error> for ApiError {
    fn from(e: eddy_manifest::Error) -> Self {
        match e {
            eddy_manifest::Error::CollectionConflict(_) | eddy_manifest::Error::Dropped(_) => {
                ApiError::Conflict(e.to_string())
            }
            eddy_manifest::Error::Model(m @ eddy_model::Error::FieldTypeConflict { .. }) => {
                ApiError::Conflict(m.to_string())
            }
            eddy_manifest::Error::Model(m) => ApiError::BadRequest(m.to_string()),
            other => ApiError::Internal(other.to_string()),
        }
    }
}
