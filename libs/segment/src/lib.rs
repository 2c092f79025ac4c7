//! Immutable segments: the on-disk format, its writer and mmap reader, the
//! growing buffer that fresh rows land in, and searching both.
//!
//! A segment holds rows of (id, vector, payload, partition, offset). Ingest
//! appends events to a [`Growing`] buffer and seals it with [`SegmentWriter`],
//! and [`build_index`] writes its HNSW graph and SQ8 codes beside it; query
//! maps the file with [`Segment::open`] (no deserialisation pass, only a
//! checksum check) and searches it with [`search_sealed`] (graph walk, or
//! [`eddy_hnsw::exact_scan`] for small segments and selective filters), the
//! buffer with [`Growing::search`]. Hits are [`Neighbor`]s, "higher is closer".

mod direct;
mod error;
mod format;
mod framed;
mod growing;
mod ids;
mod index_file;
mod reader;
mod refused;
mod resident;
mod scan_codes;
mod sealed;
mod search;
mod writer;

pub use direct::{set_write_mode, write_mode, WriteMode};
pub use error::{Error, Result};
pub use format::{FORMAT_VERSION, OLDEST_SUPPORTED_VERSION};
pub use framed::{Residency, WrittenFile};
pub use growing::{Growing, Origin, RowRef, Touch};
pub use ids::Ids;
pub use index_file::{
    IndexFile, IndexSection, IndexWriter, INDEX_FORMAT_VERSION, INDEX_OLDEST_SUPPORTED_VERSION,
};
pub use reader::Segment;
pub use refused::{bit_scan_pays, code_scan_pays, LazySignBits, RowMask};
pub use resident::HugePageBytes;
pub use scan_codes::{
    scan_many, scan_quantizer, scan_rescore_depth, scan_shortlist_depth, sign_bit_quantizer,
    train_scan_codes, CodeScan, ScanCodes, SCAN_CODES_FROM_ROWS, SHORTLIST_FROM_ROWS,
    SHORTLIST_MIN_DIM,
};
pub use sealed::{
    build_index, build_index_from, check_index, filter_rows, scanned_by_codes, search_sealed,
    IndexParams, PriorIndex, Quantization, SealedQuery, DEFAULT_EF, MIN_GRAPH_ROWS,
};
pub use search::Neighbor;
pub use writer::{SegmentMeta, SegmentWriter};
