//! The segment store and its manifests.
//!
//! The store is a local directory or an S3-compatible object store
//! ([`StoreLocation`]). A collection lives in one directory of the store: its definition
//! (`collection.json`, and `definitions/` once altered), its segment files, delete files (roaring bitmaps of
//! deleted rows, one current file per segment), and numbered manifest
//! versions. A manifest names the live segments and, per partition, the first
//! offset not yet sealed and the partition's owner epoch. New versions are
//! published with compare-and-swap (a hard link that refuses to replace, or
//! an `If-None-Match: *` create on an object store), so
//! two writers can never both create version N+1 (DESIGN.md, "Segments and
//! manifests").
//!
//! Every file the store writes has a format version and a checksum:
//! manifests and collection definitions are JSON in a versioned,
//! checksummed envelope ([`JsonFormat`]), delete files carry a binary
//! `eddy_format` header; readers refuse newer versions and damaged files
//! with an error naming the file.

mod alter;
mod backend;
mod cache;
mod deletes;
mod drop;
mod envelope;
mod error;
mod fsck;
mod gc;
mod lease;
mod manifest;
mod nodes;
mod store;
mod update;

pub use alter::Altered;
pub use backend::StoreLocation;
pub use deletes::{DELETES_FORMAT_VERSION, DELETES_MAGIC};
pub use drop::{DropRecord, DroppedCollected, DROPPED_FORMAT};
pub use envelope::{JsonFormat, COLLECTION_FORMAT, MANIFEST_FORMAT};
pub use error::{Error, Result};
pub use fsck::{fsck, FsckReport, LiveRow, LiveRows};
pub use gc::{GcPolicy, GcReport};
pub use lease::{Lease, LeaseRecord, LEASE_FORMAT};
pub use manifest::{Manifest, PartitionResume, PartitionState, SegmentEntry};
pub use nodes::{valid_node_id, NodeRecord, NODE_FORMAT};
pub use store::{CreateOutcome, Store, FETCH_STREAMS};
pub use update::Updated;
