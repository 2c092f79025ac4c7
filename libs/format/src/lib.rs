//! The one on-disk format discipline of eddy.
//!
//! Every file eddy writes has a format version, a checksum and a clear error
//! for anything it cannot read. This crate holds the pieces they share, so no
//! format writes byte offsets or a CRC by hand:
//!
//! * [`crc32`] / [`Crc32`] / [`ChecksumWriter`]: the one CRC-32 (IEEE, as
//!   zlib), over `crc32fast`.
//! * [`Preamble`]: the 16 bytes every binary file starts with (magic, format
//!   version, header length), and [`BinaryFormat`], which stamps it on write
//!   and reads a file's whole `#[repr(C)]` little-endian [`Header`] back after
//!   checking magic, length and version.
//! * [`Extent`]: an (offset, length) pair in a header or table, turned into a
//!   byte range only after a bounds check.
//! * [`Versions`]: the supported range `[oldest, current]` and the one check
//!   against it, used by the binary formats and the JSON files of the store.
//! * [`FormatError`]: what those checks report.
//!
//! Each file's own layout lives with the crate that owns it (segment and
//! index files in `eddy-segment`, the graph in `eddy-hnsw`, the payload index
//! in `eddy-filter`, manifests and delete files in `eddy-manifest`).

mod crc;
mod error;
mod header;
mod version;

pub use crc::{check_crc, crc32, ChecksumWriter, Crc32};
pub use error::FormatError;
pub use header::{BinaryFormat, Extent, Header, Preamble, PREAMBLE_LEN};
pub use version::Versions;

/// Little-endian integers for header fields: alignment 1, so a header
/// struct has no padding and can be read from any byte offset.
pub use zerocopy::byteorder::little_endian::{U32, U64};
