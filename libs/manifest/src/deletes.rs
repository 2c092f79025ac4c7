//! The delete file format, version 1 (little-endian): which rows of one
//! segment are deleted.
//!
//! ```text
//! header  40 bytes (DeleteHeader): preamble (magic "EDDYDEL\0", version,
//!         header length 40), body length u64, deleted rows u64,
//!         reserved u32, crc32 u32 of header bytes 0..36 and the body
//! body    the roaring bitmap of deleted rows, in roaring's portable format
//! ```
//!
//! Roaring's format has no checksum or version of its own; the header adds
//! both, and the row count is checked against the bitmap read back.

use std::io;
use std::path::Path;

use eddy_format::{
    check_crc, BinaryFormat, Crc32, FormatError, Header, Preamble, Versions, U32, U64,
};
use roaring::RoaringBitmap;
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::{Error, Result};

/// Magic at the start of every delete file.
pub const DELETES_MAGIC: [u8; 8] = *b"EDDYDEL\0";
/// Delete file format version this build writes.
pub const DELETES_FORMAT_VERSION: u32 = 1;

/// The delete file format: magic and readable versions.
const DELETES_FORMAT: BinaryFormat = BinaryFormat {
    what: "delete file",
    magic: DELETES_MAGIC,
    versions: Versions::new(1, DELETES_FORMAT_VERSION),
};

/// The fixed header of a delete file (40 bytes).
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct DeleteHeader {
    preamble: Preamble,
    /// Bytes of the serialized bitmap after the header.
    body_len: U64,
    /// Rows in the bitmap.
    deleted: U64,
    _reserved: U32,
    /// CRC-32 of the header bytes before this field and of the body.
    crc32: U32,
}

const HEADER_LEN: usize = size_of::<DeleteHeader>();
const CRC_COVERS: usize = std::mem::offset_of!(DeleteHeader, crc32);
const _: () = assert!(HEADER_LEN == 40);

impl Header for DeleteHeader {
    fn preamble(&self) -> &Preamble {
        &self.preamble
    }
}

fn checksum(header: &DeleteHeader, body: &[u8]) -> u32 {
    let mut crc = Crc32::new();
    crc.update(&header.as_bytes()[..CRC_COVERS]);
    crc.update(body);
    crc.finish()
}

/// The file bytes of `deleted`.
pub(crate) fn encode(deleted: &RoaringBitmap) -> io::Result<Vec<u8>> {
    let mut body = Vec::with_capacity(deleted.serialized_size());
    deleted.serialize_into(&mut body)?;
    let mut header = DeleteHeader::new_zeroed();
    header.preamble = DELETES_FORMAT.preamble::<DeleteHeader>();
    header.body_len = U64::new(body.len() as u64);
    header.deleted = U64::new(deleted.len());
    header.crc32 = U32::new(checksum(&header, &body));
    let mut bytes = Vec::with_capacity(HEADER_LEN + body.len());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&body);
    Ok(bytes)
}

/// The bitmap in the file bytes `bytes` read from `path`, after checking
/// magic, version, length and checksum.
pub(crate) fn decode(path: &Path, bytes: &[u8]) -> Result<RoaringBitmap> {
    let framing = |source: FormatError| Error::Format {
        path: path.to_owned(),
        source,
    };
    let corrupt = |reason: String| Error::Corrupt {
        path: path.to_owned(),
        reason,
    };
    let header: &DeleteHeader = DELETES_FORMAT.read_header(bytes).map_err(framing)?;
    let body = &bytes[HEADER_LEN..];
    let body_len = header.body_len.get();
    if body_len > body.len() as u64 {
        return Err(framing(FormatError::Truncated {
            what: DELETES_FORMAT.what,
            need: (HEADER_LEN as u64).saturating_add(body_len),
            have: bytes.len() as u64,
        }));
    }
    if body_len < body.len() as u64 {
        return Err(corrupt(format!(
            "{} bytes after the {body_len}-byte bitmap",
            body.len() as u64 - body_len
        )));
    }
    check_crc(
        DELETES_FORMAT.what,
        header.crc32.get(),
        checksum(header, body),
    )
    .map_err(framing)?;
    let deleted = RoaringBitmap::deserialize_from(body)
        .map_err(|e| corrupt(format!("invalid roaring bitmap: {e}")))?;
    if deleted.len() != header.deleted.get() {
        return Err(corrupt(format!(
            "bitmap holds {} rows, header says {}",
            deleted.len(),
            header.deleted
        )));
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_damage_is_an_error() {
        let bits: RoaringBitmap = [1u32, 5, 900, 70_000].into_iter().collect();
        let bytes = encode(&bits).expect("encode");
        let path = Path::new("s.del");
        assert_eq!(decode(path, &bytes).expect("decode"), bits);
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            assert!(decode(path, &bad).is_err(), "flip at {at} undetected");
        }
        for len in 0..bytes.len() {
            assert!(decode(path, &bytes[..len]).is_err(), "cut at {len}");
        }
    }
}
