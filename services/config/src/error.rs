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
    /// The tokio runtime could not be built.
    #[error("building the tokio runtime")]
    Runtime(#[source] std::io::Error),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
