//! The index byte format: the header and field-table structs, type codes and
//! the checksum.

use eddy_format::{BinaryFormat, Crc32, Extent, Header, Preamble, Versions, U32, U64};
use eddy_model::FieldType;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// First 8 bytes of every payload index.
pub const MAGIC: [u8; 8] = *b"EDDYPIDX";
/// Format version written by this build.
pub const FORMAT_VERSION: u32 = 1;
/// Oldest format version this build reads.
pub const OLDEST_SUPPORTED_VERSION: u32 = 1;
/// Length of the fixed header in bytes.
pub const HEADER_LEN: usize = size_of::<IndexHeader>();

/// The payload index format: magic and readable versions.
pub(super) const INDEX_FORMAT: BinaryFormat = BinaryFormat {
    what: "payload index",
    magic: MAGIC,
    versions: Versions::new(OLDEST_SUPPORTED_VERSION, FORMAT_VERSION),
};

pub(super) const ENTRY_LEN: usize = size_of::<FieldEntry>();
pub(super) const SECTIONS: usize = 8;
pub(super) const S_HAS: usize = 0;
pub(super) const S_NULL: usize = 1;
pub(super) const S_MULTI: usize = 2;
pub(super) const S_A: usize = 3;
pub(super) const S_B: usize = 4;
pub(super) const S_C: usize = 5;
pub(super) const S_D: usize = 6;
pub(super) const S_E: usize = 7;

/// The fixed header (64 bytes).
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub(super) struct IndexHeader {
    pub(super) preamble: Preamble,
    /// Rows of the segment.
    pub(super) rows: U32,
    /// Entries in the field table.
    pub(super) field_count: U32,
    /// Bytes of the index; anything after is ignored.
    pub(super) total_len: U64,
    /// Size of one field-table entry.
    pub(super) entry_len: U32,
    pub(super) _reserved: [u8; 24],
    /// CRC-32 of the header bytes before this field and of bytes `64..total_len`.
    pub(super) crc32: U32,
}

impl Header for IndexHeader {
    fn preamble(&self) -> &Preamble {
        &self.preamble
    }
}

/// One field-table entry (22 u64 words).
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub(super) struct FieldEntry {
    /// The field name's bytes.
    pub(super) name: Extent,
    /// [`type_code`] of the field.
    pub(super) type_code: U64,
    /// Distinct keyword values, or rows with a value for numeric fields.
    pub(super) n: U64,
    /// Rows holding at least one indexed value.
    pub(super) has_count: U64,
    /// Rows whose value is JSON null.
    pub(super) null_count: U64,
    /// HAS, NULL, MULTI, A, B, C, D, E.
    pub(super) sections: [Extent; SECTIONS],
}

const _: () = assert!(HEADER_LEN == 64);
const _: () = assert!(ENTRY_LEN == 22 * 8);

pub(super) fn type_code(t: FieldType) -> u64 {
    match t {
        FieldType::Keyword => 0,
        FieldType::Integer => 1,
        FieldType::Float => 2,
        FieldType::Bool => 3,
    }
}

pub(super) fn type_from_code(code: u64) -> Option<FieldType> {
    Some(match code {
        0 => FieldType::Keyword,
        1 => FieldType::Integer,
        2 => FieldType::Float,
        3 => FieldType::Bool,
        _ => return None,
    })
}

/// The CRC-32 the header stores: over the header bytes before the CRC field
/// and every byte after the header (`bytes` ends at `total_len`).
pub(super) fn checksum(bytes: &[u8]) -> u32 {
    const CRC_AT: usize = std::mem::offset_of!(IndexHeader, crc32);
    let mut crc = Crc32::new();
    crc.update(bytes.get(..CRC_AT).unwrap_or_default());
    crc.update(bytes.get(HEADER_LEN..).unwrap_or_default());
    crc.finish()
}
