//! The segment file layout (format version 1), all integers little-endian:
//!
//! ```text
//! header    128 bytes (FramedHeader): magic "EDDYSEG\0", version u32,
//!           header_len u32, dim u32, metric u8, id_type u8, 2 pad, rows u64,
//!           sections u32, 4 pad, created_ms u64, reserved
//! table     sections × SectionEntry { kind u32, pad u32, offset u64, len u64 }
//! sections  each starting on a 64-byte boundary (see [`Section`])
//! footer    16 bytes (Footer): crc32 of everything before it u32, pad u32,
//!           magic "EDDYEND\0"
//! ```
//!
//! Index files (`index_file.rs`) use the same container with their own magic.
//! Sections are plain arrays so the reader views them in place from the map.

use eddy_format::{BinaryFormat, Extent, Header, Preamble, Versions, U32, U64};
use eddy_model::{IdType, Metric};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Magic at the start of every segment file.
pub const MAGIC: [u8; 8] = *b"EDDYSEG\0";
/// Magic at the very end of every segment and index file.
pub const FOOTER_MAGIC: [u8; 8] = *b"EDDYEND\0";
/// Format version this build writes.
pub const FORMAT_VERSION: u32 = 1;
/// Oldest format version this build reads.
pub const OLDEST_SUPPORTED_VERSION: u32 = 1;
/// Alignment of every section.
pub const ALIGN: usize = 64;

/// The segment file format: magic and readable versions.
pub(crate) const SEGMENT_FORMAT: BinaryFormat = BinaryFormat {
    what: "segment file",
    magic: MAGIC,
    versions: Versions::new(OLDEST_SUPPORTED_VERSION, FORMAT_VERSION),
};

/// The fixed header of segment and index files (128 bytes).
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub(crate) struct FramedHeader {
    /// Magic, version and header length.
    pub(crate) preamble: Preamble,
    /// Vector dimension.
    pub(crate) dim: U32,
    /// [`metric_code`] (segment files; 0 in index files).
    pub(crate) metric: u8,
    /// [`id_type_code`] (segment files; 0 in index files).
    pub(crate) id_type: u8,
    _pad0: [u8; 2],
    /// Rows in the segment.
    pub(crate) rows: U64,
    /// Entries in the section table that follows the header.
    pub(crate) section_count: U32,
    _pad1: [u8; 4],
    /// When the segment was written, in ms since the Unix epoch (segment
    /// files; 0 in index files).
    pub(crate) created_ms: U64,
    _reserved: [u8; 80],
}

impl FramedHeader {
    /// A zeroed header stamped with `format`'s magic and current version.
    pub(crate) fn new(format: &BinaryFormat) -> Self {
        let mut header = Self::new_zeroed();
        header.preamble = format.preamble::<Self>();
        header
    }
}

impl Header for FramedHeader {
    fn preamble(&self) -> &Preamble {
        &self.preamble
    }
}

/// One entry of the section table (24 bytes).
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub(crate) struct SectionEntry {
    /// [`Section`] or `IndexSection` code.
    pub(crate) kind: U32,
    _pad: [u8; 4],
    /// Where the section lies in the file.
    pub(crate) extent: Extent,
}

impl SectionEntry {
    /// The entry of section `kind` at `extent`.
    pub(crate) fn new(kind: u32, extent: Extent) -> Self {
        Self {
            kind: U32::new(kind),
            _pad: [0; 4],
            extent,
        }
    }
}

/// The footer that ends segment and index files (16 bytes).
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub(crate) struct Footer {
    /// CRC-32 of every byte before the footer.
    pub(crate) crc32: U32,
    _pad: [u8; 4],
    /// [`FOOTER_MAGIC`]: a file that lacks it was cut short.
    pub(crate) magic: [u8; 8],
}

impl Footer {
    /// The footer of a file whose bytes before it have CRC-32 `crc32`.
    pub(crate) fn new(crc32: u32) -> Self {
        Self {
            crc32: U32::new(crc32),
            _pad: [0; 4],
            magic: FOOTER_MAGIC,
        }
    }
}

const _: () = assert!(size_of::<FramedHeader>() == 128);
const _: () = assert!(size_of::<SectionEntry>() == 24);
const _: () = assert!(size_of::<Footer>() == 16);

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
