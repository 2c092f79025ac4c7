//! The segment file layout (format version 1), all integers little-endian:
//!
//! ```text
//! header    128 bytes: magic "EDDYSEG\0", version u32, header_len u32, dim u32,
//!           metric u8, id_type u8, 2 pad, rows u64, sections u32, 4 pad,
//!           created_ms u64, reserved
//! table     sections × { kind u32, pad u32, offset u64, len u64 }
//! sections  each starting on a 64-byte boundary (see [`Section`])
//! footer    16 bytes: crc32 of everything before it u32, pad u32, magic "EDDYEND\0"
//! ```
//!
//! Sections are plain arrays so the reader views them in place from the map.

use eddy_model::{IdType, Metric};

/// Magic at the start of every segment file.
pub const MAGIC: [u8; 8] = *b"EDDYSEG\0";
/// Magic at the very end of every segment file.
pub const FOOTER_MAGIC: [u8; 8] = *b"EDDYEND\0";
/// Format version this build writes.
pub const FORMAT_VERSION: u32 = 1;
/// Oldest format version this build reads.
pub const OLDEST_SUPPORTED_VERSION: u32 = 1;
/// Size of the fixed header.
pub const HEADER_LEN: usize = 128;
/// Size of one section-table entry.
pub const TABLE_ENTRY_LEN: usize = 24;
/// Size of the footer.
pub const FOOTER_LEN: usize = 16;
/// Alignment of every section.
pub const ALIGN: usize = 64;

/// Kinds of section. Unknown kinds are ignored by readers, so new optional
/// sections do not need a version bump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Section {
    /// `rows * dim` f32 vectors.
    Vectors = 1,
    /// `rows` u64 ids (u64 collections).
    IdsU64 = 2,
    /// `rows + 1` u64 offsets into [`Section::IdsStrBytes`] (string collections).
    IdsStrOffsets = 3,
    /// UTF-8 bytes of the string ids.
    IdsStrBytes = 4,
    /// `rows` u32 source partitions.
    Partitions = 5,
    /// `rows` i64 source offsets.
    Offsets = 6,
    /// `rows + 1` u64 offsets into [`Section::PayloadBytes`].
    PayloadOffsets = 7,
    /// Concatenated JSON payload objects.
    PayloadBytes = 8,
    /// JSON [`crate::SegmentMeta`]: offset ranges per partition.
    Meta = 9,
    /// Roaring-bitmap payload index (`eddy_filter` format), present when the
    /// collection declares indexed payload fields.
    PayloadIndex = 10,
}

/// Byte code of a metric in the header.
pub fn metric_code(m: Metric) -> u8 {
    match m {
        Metric::Cosine => 0,
        Metric::Dot => 1,
        Metric::L2 => 2,
    }
}

/// Metric of a header byte code.
pub fn metric_from_code(c: u8) -> Option<Metric> {
    [Metric::Cosine, Metric::Dot, Metric::L2]
        .into_iter()
        .find(|m| metric_code(*m) == c)
}

/// Byte code of an id type in the header.
pub fn id_type_code(t: IdType) -> u8 {
    match t {
        IdType::U64 => 0,
        IdType::String => 1,
    }
}

/// Id type of a header byte code.
pub fn id_type_from_code(c: u8) -> Option<IdType> {
    [IdType::U64, IdType::String]
        .into_iter()
        .find(|t| id_type_code(*t) == c)
}

/// Rounds `n` up to the section alignment.
pub fn align_up(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}
