//! Why a check could not run (findings are not errors: they are reported).

/// Errors of the admin command.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store could not be read.
    #[error(transparent)]
    Store(#[from] eddy_manifest::Error),
    /// The collection is not in the store.
    #[error("collection {0} is not in the store")]
    NoCollection(String),
    /// The resume was refused or could not be published.
    #[error(transparent)]
    Resume(#[from] eddy_ingest::Error),
    /// The Kafka settings were refused.
    #[error(transparent)]
    Settings(#[from] eddy_kafka::ProtectedProperty),
    /// The Kafka secrets file could not be read, or a secret was given on
    /// the command line.
    #[error(transparent)]
    Config(#[from] eddy_config::Error),
    /// A Kafka client call failed.
    #[error("kafka: {action}: {source}")]
    Kafka {
        /// What was being done.
        action: &'static str,
        /// The client's error.
        source: rdkafka::error::KafkaError,
    },
    /// A partition could not be read up to the manifest's offset in time.
    #[error(
        "topic {topic} partition {partition}: read up to {reached} of {wanted} before the timeout"
    )]
    Incomplete {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// First offset not read.
        reached: i64,
        /// First offset that did not need reading.
        wanted: i64,
    },
    /// The report could not be encoded.
    #[error("encoding the report: {0}")]
    Json(#[from] serde_json::Error),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A Kafka error with what was being done.
    pub(crate) fn kafka(action: &'static str) -> impl FnOnce(rdkafka::error::KafkaError) -> Self {
        move |source| Error::Kafka { action, source }
    }
}
