//! The start of every binary file eddy writes, and reading a file's fixed
//! header back with one check.
//!
//! A format declares its header as a `#[repr(C)]` struct of byte arrays and
//! little-endian integers ([`U32`], [`U64`]) that starts with a [`Preamble`]
//! and derives zerocopy's `FromBytes`, `IntoBytes`, `KnownLayout`,
//! `Immutable` and `Unaligned` (as Qdrant's file headers do): alignment 1, no
//! padding, so the struct *is* the byte layout and fields are read by name,
//! from any offset, on any host, without a copy.

use std::ops::Range;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::{FormatError, Versions, U32, U64};

/// Size of the [`Preamble`] in bytes.
pub const PREAMBLE_LEN: usize = 16;

/// The first 16 bytes of every binary file eddy writes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct Preamble {
    /// Eight bytes naming the kind of file (`b"EDDYSEG\0"`).
    pub magic: [u8; 8],
    /// Format version the file was written in.
    pub version: U32,
    /// Length of the whole fixed header, this preamble included.
    pub header_len: U32,
}

const _: () = assert!(size_of::<Preamble>() == PREAMBLE_LEN);

/// A fixed file header: a little-endian `#[repr(C)]` struct that starts with
/// a [`Preamble`].
pub trait Header: FromBytes + IntoBytes + KnownLayout + Immutable + Unaligned {
    /// The preamble the header starts with.
    fn preamble(&self) -> &Preamble;
}

/// One kind of binary file: the magic a writer stamps and the versions a
/// reader accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BinaryFormat {
    /// What the file is, for error messages ("segment file").
    pub what: &'static str,
    /// The magic its preamble starts with.
    pub magic: [u8; 8],
    /// The versions this build reads; it writes `versions.current`.
    pub versions: Versions,
}

impl BinaryFormat {
    /// The preamble a writer puts at the start of a header of type `H`:
    /// the magic, the current version and the size of `H`.
    pub fn preamble<H: Header>(&self) -> Preamble {
        Preamble {
            magic: self.magic,
            version: U32::new(self.versions.current),
            header_len: U32::new(size_of::<H>() as u32),
        }
    }

    /// The header of type `H` at the start of `bytes`, after checking, in
    /// this order, the magic, the version (a newer file is refused before
    /// anything else of it is read), the stored header length and that the
    /// bytes hold the whole header. Checksums are the caller's: they cover
    /// more than the header.
    pub fn read_header<'a, H: Header>(&self, bytes: &'a [u8]) -> Result<&'a H, FormatError> {
        let truncated = |need: usize| FormatError::Truncated {
            what: self.what,
            need: need as u64,
            have: bytes.len() as u64,
        };
        let bad_magic = FormatError::BadMagic { what: self.what };
        let Ok((preamble, _)) = Preamble::ref_from_prefix(bytes) else {
            let n = bytes.len().min(self.magic.len());
            return Err(if bytes[..n] == self.magic[..n] {
                truncated(PREAMBLE_LEN)
            } else {
                bad_magic
            });
        };
        if preamble.magic != self.magic {
            return Err(bad_magic);
        }
        self.versions.check(self.what, preamble.version.get())?;
        let expected = size_of::<H>();
        if preamble.header_len.get() as usize != expected {
            return Err(FormatError::HeaderLength {
                what: self.what,
                found: preamble.header_len.get(),
                expected: expected as u32,
            });
        }
        H::ref_from_prefix(bytes)
            .map(|(header, _)| header)
            .map_err(|_| truncated(expected))
    }
}

/// Where a section lies: `len` bytes from `offset`, both little-endian u64.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct Extent {
    /// First byte, from the start of the file (or of the enclosing bytes).
    pub offset: U64,
    /// Length in bytes.
    pub len: U64,
}

impl Extent {
    /// The extent of `len` bytes at `offset`.
    pub fn new(offset: u64, len: u64) -> Self {
        Self {
            offset: U64::new(offset),
            len: U64::new(len),
        }
    }

    /// The byte range `offset..offset + len`, if it ends at or before
    /// `limit` (and fits in memory); `None` for an out-of-bounds extent.
    pub fn range(&self, limit: usize) -> Option<Range<usize>> {
        let start = usize::try_from(self.offset.get()).ok()?;
        let end = start.checked_add(usize::try_from(self.len.get()).ok()?)?;
        (end <= limit).then_some(start..end)
    }
}

#[cfg(test)]
mod tests {
    use zerocopy::FromZeros;

    use super::*;

    #[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
    #[repr(C)]
    struct TestHeader {
        preamble: Preamble,
        rows: U64,
        section: Extent,
    }

    impl Header for TestHeader {
        fn preamble(&self) -> &Preamble {
            &self.preamble
        }
    }

    const FORMAT: BinaryFormat = BinaryFormat {
        what: "test file",
        magic: *b"EDDYTEST",
        versions: Versions::new(1, 2),
    };

    fn written() -> Vec<u8> {
        let mut h = TestHeader::new_zeroed();
        h.preamble = FORMAT.preamble::<TestHeader>();
        h.rows = U64::new(7);
        h.section = Extent::new(40, 3);
        let mut bytes = h.as_bytes().to_vec();
        bytes.extend_from_slice(b"abc");
        bytes
    }

    #[test]
    fn a_written_header_reads_back_by_field() {
        let bytes = written();
        assert_eq!(&bytes[..8], b"EDDYTEST");
        assert_eq!(bytes[8..12], 2u32.to_le_bytes());
        assert_eq!(bytes[12..16], 40u32.to_le_bytes());
        let h: &TestHeader = FORMAT.read_header(&bytes).expect("reads");
        assert_eq!(h.preamble().version.get(), 2);
        assert_eq!(h.rows.get(), 7);
        let range = h.section.range(bytes.len()).expect("in bounds");
        assert_eq!(&bytes[range], b"abc");
        assert_eq!(h.section.range(bytes.len() - 1), None);
        assert_eq!(Extent::new(u64::MAX, 2).range(usize::MAX), None);
    }

    #[test]
    fn each_check_has_its_error() {
        let bytes = written();
        let read = |b: &[u8]| FORMAT.read_header::<TestHeader>(b).map(|_| ());
        assert!(matches!(
            read(&bytes[..3]),
            Err(FormatError::Truncated { need: 16, .. })
        ));
        assert!(matches!(
            read(&bytes[..20]),
            Err(FormatError::Truncated { need: 40, .. })
        ));
        assert!(matches!(read(b"hello"), Err(FormatError::BadMagic { .. })));
        let mut b = bytes.clone();
        b[0] = b'X';
        assert_eq!(
            read(&b).expect_err("magic").to_string(),
            "not an eddy test file (bad magic)"
        );
        let mut b = bytes.clone();
        b[8..12].copy_from_slice(&3u32.to_le_bytes());
        assert_eq!(
            read(&b).expect_err("newer").to_string(),
            "test file written by a newer eddy: format version 3, this build reads 1..=2"
        );
        let mut b = bytes.clone();
        b[12] = 41;
        assert!(matches!(
            read(&b),
            Err(FormatError::HeaderLength {
                found: 41,
                expected: 40,
                ..
            })
        ));
    }
}
