//! The index byte format: header and field-table constants, type codes, word reads and the CRC32.

use eddy_model::FieldType;

/// First 8 bytes of every payload index.
pub const MAGIC: [u8; 8] = *b"EDDYPIDX";
/// Format version written by this build (and the only one it reads).
pub const FORMAT_VERSION: u32 = 1;
/// Length of the fixed header in bytes.
pub const HEADER_LEN: usize = 64;

pub(super) const ENTRY_WORDS: usize = 22;
pub(super) const ENTRY_LEN: usize = ENTRY_WORDS * 8;
pub(super) const CRC_AT: usize = 60;
pub(super) const SECTIONS: usize = 8;
pub(super) const S_HAS: usize = 0;
pub(super) const S_NULL: usize = 1;
pub(super) const S_MULTI: usize = 2;
pub(super) const S_A: usize = 3;
pub(super) const S_B: usize = 4;
pub(super) const S_C: usize = 5;
pub(super) const S_D: usize = 6;
pub(super) const S_E: usize = 7;

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

/// CRC32 of header bytes `0..60` and bytes `64..`.
pub(super) fn checksum(bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(bytes.get(..CRC_AT).unwrap_or_default());
    h.update(bytes.get(HEADER_LEN..).unwrap_or_default());
    h.finalize()
}

pub(super) fn word(bytes: &[u8], at: usize) -> u64 {
    bytes
        .get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

pub(super) fn half(bytes: &[u8], at: usize) -> u32 {
    bytes
        .get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}
