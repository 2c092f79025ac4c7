//! Segment errors.

use std::io;
use std::path::PathBuf;

/// Errors reading or writing a segment file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O error on a segment file.
    #[error("segment {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The file is not a segment, or is damaged.
    #[error("segment {path} is corrupt: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What check failed.
        reason: String,
    },
    /// The file's framing is damaged (magic, length, checksum) or of a
    /// format version this build does not read.
    #[error("{path}: {source}")]
    Format {
        /// The file.
        path: PathBuf,
        /// Which check failed.
        source: eddy_format::FormatError,
    },
    /// Building a segment's index (graph, codes) failed.
    #[error("building the segment index: {0}")]
    Index(String),
    /// A row does not fit the segment (wrong dimension, id of another type).
    #[error("invalid row: {0}")]
    InvalidRow(String),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(io::Error) -> Error + '_ {
        move |source| Error::Io {
            path: path.to_owned(),
            source,
        }
    }

    pub(crate) fn corrupt(path: &std::path::Path, reason: impl Into<String>) -> Error {
        Error::Corrupt {
            path: path.to_owned(),
            reason: reason.into(),
        }
    }
}
