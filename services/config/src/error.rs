//! Errors of the service set-up.

use std::path::PathBuf;

/// What can fail while a service reads its configuration or starts up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The TOML config file could not be read.
    #[error("reading config file {}", path.display())]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The TOML config file is not valid TOML.
    #[error("parsing config file {}", path.display())]
    ParseFile {
        /// The file.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: toml::de::Error,
    },
    /// A line of the Kafka secrets file is malformed (its text is not
    /// shown: it may hold a secret).
    #[error("kafka secrets file {} line {line}: {reason} (the line is not shown)", path.display())]
    SecretsFile {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// A secret Kafka property was given on the command line.
    #[error("kafka property {key:?} holds a secret: put it in --kafka-secrets-file (or EDDY_KAFKA_PROPERTIES), not on the command line")]
    SecretOnCommandLine {
        /// The property's key.
        key: String,
    },
    /// A secret object-store setting was given as `--store-option`.
    #[error("store option {key:?} holds a secret: give it in the environment (AWS_*), not as --store-option")]
    SecretStoreOption {
        /// The setting's key.
        key: String,
    },
    /// The segment store could not be opened.
    #[error(transparent)]
    Store(#[from] eddy_manifest::Error),
    /// The tokio runtime could not be built.
    #[error("building the tokio runtime")]
    Runtime(#[source] std::io::Error),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
