//! Errors of the maintenance jobs.

/// Why a merge or an index build failed.
#[derive(Debug, thiserror::Error)]
pub enum MaintenanceError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] eddy_manifest::Error),
    /// Reading, writing or indexing a segment failed.
    #[error(transparent)]
    Segment(#[from] eddy_segment::Error),
    /// An input segment is not listed in the manifest.
    #[error("segment {0} is not listed in the manifest")]
    NotListed(String),
}
