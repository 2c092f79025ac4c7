//! Store errors.

use std::io;
use std::path::PathBuf;

/// Errors of the segment store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O error on a store file.
    #[error("store {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A store file could not be parsed.
    #[error("store {path}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A store file is of a format version this build does not read, or
    /// fails its checksum or framing checks.
    #[error("{path}: {source}")]
    Format {
        /// The file.
        path: PathBuf,
        /// Which check failed.
        source: eddy_format::FormatError,
    },
    /// Another writer published this manifest version first.
    #[error("manifest version {version} of {collection} already exists")]
    Conflict {
        /// The collection.
        collection: String,
        /// The version that was taken.
        version: u64,
    },
    /// A manifest about to be published names a file that does not exist
    /// (garbage-collected while its writer stalled): nothing was published,
    /// the writer must write its files again.
    #[error("store {path}: missing; a manifest naming it is not published")]
    MissingFile {
        /// The missing file.
        path: PathBuf,
    },
    /// A manifest version could not be loaded whole because newer versions
    /// superseded it while it loaded, and garbage collection removed files
    /// only it named: not damage; load the newest instead.
    #[error("manifest version {version} of {collection} was superseded by version {newest} while it loaded (files only it named are collected): load the newest")]
    Superseded {
        /// The collection (manifest chain).
        collection: String,
        /// The version being loaded.
        version: u64,
        /// The newest version.
        newest: u64,
    },
    /// An update built a version that is not the successor of the newest.
    #[error("manifest update of {collection}: version {version} does not follow {latest}")]
    NotASuccessor {
        /// The collection.
        collection: String,
        /// The newest version.
        latest: u64,
        /// The version the update built.
        version: u64,
    },
    /// No collection of that name.
    #[error("collection {0} does not exist")]
    UnknownCollection(String),
    /// The collection was dropped: nothing is published for it, and its
    /// name is taken until its files are collected.
    #[error("collection {0} was dropped (its files are collected after the grace period)")]
    Dropped(String),
    /// The collection exists with a different definition.
    #[error("collection {0} already exists with a different definition")]
    CollectionConflict(String),
    /// The store does not refuse a second create of the same file, so
    /// compare-and-swap cannot be trusted on it.
    #[error("store {0} does not support exclusive create (hard links); refusing to run")]
    NoCompareAndSwap(PathBuf),
    /// A segment named by a manifest could not be read.
    #[error(transparent)]
    Segment(#[from] eddy_segment::Error),
    /// A definition in the store is invalid.
    #[error(transparent)]
    Model(#[from] eddy_model::Error),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether retrying may succeed: a failed request to the store (an
    /// object store's network or server error), not a missing or damaged
    /// file.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Io { source, .. } if !matches!(source.kind(), io::ErrorKind::NotFound | io::ErrorKind::InvalidData))
    }

    pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(io::Error) -> Error + '_ {
        move |source| Error::Io {
            path: path.to_owned(),
            source,
        }
    }
}
