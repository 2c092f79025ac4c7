//! Errors of the broker harness, one variant per cause with what is needed
//! to act on it (the install command, the broker's log tail).

use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

use super::{TANSU_BIN_ENV, TANSU_INSTALL};

/// Errors of the broker harness.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No `tansu` binary was found.
    #[error("tansu binary not found (looked at {searched}); install it with `{TANSU_INSTALL}` or set {TANSU_BIN_ENV}")]
    NotInstalled {
        /// The places that were searched.
        searched: String,
    },
    /// An I/O operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: io::Error,
    },
    /// The broker process exited while it was expected to run.
    #[error("tansu exited with {status} before it was ready; log {log_path}:\n{log}")]
    Exited {
        /// Its exit status.
        status: ExitStatus,
        /// Where its full log is (deleted when the harness drops).
        log_path: PathBuf,
        /// The end of its log.
        log: String,
    },
    /// The broker did not answer a metadata request in time.
    #[error("tansu on {bootstrap} did not become ready within {waited:?} (last error: {last_error}); log:\n{log}")]
    StartTimeout {
        /// The address it should listen on.
        bootstrap: String,
        /// How long we waited.
        waited: Duration,
        /// The last connection error.
        last_error: String,
        /// The end of its log.
        log: String,
    },
    /// `tansu topic create` failed.
    #[error("`tansu topic create {topic}` failed ({status}): {output}; broker log:\n{log}")]
    TopicCreate {
        /// The topic.
        topic: String,
        /// The command's exit status, or "timed out".
        status: String,
        /// The command's stdout and stderr.
        output: String,
        /// The end of the broker log.
        log: String,
    },
    /// `tansu user create` failed.
    #[error("`tansu user create {user}` failed ({status}): {output}; broker log:\n{log}")]
    UserCreate {
        /// The user.
        user: String,
        /// The command's exit status, or "timed out".
        status: String,
        /// The command's stdout and stderr.
        output: String,
        /// The end of the broker log.
        log: String,
    },
    /// The topic did not show all its partitions in metadata in time.
    #[error("topic {topic} did not show {partitions} partitions within {waited:?} (last seen: {seen}); broker log:\n{log}")]
    TopicTimeout {
        /// The topic.
        topic: String,
        /// The partitions expected.
        partitions: u32,
        /// How long we waited.
        waited: Duration,
        /// What the last metadata showed.
        seen: String,
        /// The end of the broker log.
        log: String,
    },
    /// A process helper failed (spawning, waiting, a free port).
    #[error(transparent)]
    Process(#[from] crate::process::Error),
    /// A Kafka client could not be created.
    #[error("kafka client for {bootstrap}: {source}")]
    Kafka {
        /// The bootstrap address.
        bootstrap: String,
        /// The underlying error.
        source: rdkafka::error::KafkaError,
    },
}

/// Result alias for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}
