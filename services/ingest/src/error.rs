//! Errors of the ingest service: one variant per cause, each with the
//! context needed to act on it.

use std::net::SocketAddr;

use rdkafka::error::KafkaError;

/// Errors of the ingest service.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The segment store failed.
    #[error(transparent)]
    Store(#[from] eddy_manifest::Error),
    /// A Kafka client call failed.
    #[error("kafka: {action}: {source}")]
    Kafka {
        /// What eddy was doing (e.g. "creating the consumer").
        action: &'static str,
        /// The client's error.
        source: KafkaError,
    },
    /// Dead letters were not acknowledged by the broker, so no manifest may
    /// cover their offsets yet; the seal is retried at the next turn.
    #[error("dead letters to {topic} not acknowledged ({pending} pending); seal postponed")]
    DeadLettersPending {
        /// The dead-letter topic.
        topic: String,
        /// Letters still unacknowledged after the last attempt.
        pending: usize,
    },
    /// Binding or reading the address of the metrics endpoint failed.
    #[error("metrics endpoint {addr}: {source}")]
    MetricsEndpoint {
        /// The configured address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Building the rayon pool that builds segment indexes failed.
    #[error("index build pool: {0}")]
    IndexPool(#[from] rayon::ThreadPoolBuildError),
    /// Starting a thread failed.
    #[error("starting thread {name}: {source}")]
    Thread {
        /// The thread's name.
        name: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The thread writing a seal's segment panicked (the seal is retried
    /// on the worker's thread).
    #[error("the thread writing a seal's segment panicked")]
    SealWriterPanicked,
    /// A manifest update that always publishes came back without a version
    /// (a broken invariant, reported instead of a panic).
    #[error("{0}: the manifest update published nothing")]
    Unpublished(&'static str),
    /// Registering metrics failed.
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// An operator's resume request cannot be carried out.
    #[error("resume refused: {0}")]
    InvalidResume(String),
    /// A Kafka property in the configuration is one eddy refuses.
    #[error(transparent)]
    KafkaSettings(#[from] eddy_kafka::ProtectedProperty),
    /// The configuration could not be completed (the Kafka secrets file).
    #[error(transparent)]
    Config(#[from] eddy_config::Error),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A Kafka error with what eddy was doing when it happened.
    pub(crate) fn kafka(action: &'static str) -> impl FnOnce(KafkaError) -> Self {
        move |source| Error::Kafka { action, source }
    }
}

impl From<eddy_segment::Error> for Error {
    fn from(e: eddy_segment::Error) -> Self {
        Error::Store(e.into())
    }
}
