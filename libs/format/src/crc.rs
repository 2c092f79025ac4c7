//! The one CRC-32 (IEEE polynomial, reflected, as zlib and gzip), over
//! `crc32fast` (hardware-accelerated where the CPU has carry-less multiply).

use std::io::{self, Write};

use crate::FormatError;

/// CRC-32 of one slice.
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// A streaming CRC-32, for a checksum over several pieces.
#[derive(Debug, Clone, Default)]
pub struct Crc32(crc32fast::Hasher);

impl Crc32 {
    /// An empty checksum.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The checksum of everything added so far.
    pub fn finish(&self) -> u32 {
        self.0.clone().finalize()
    }
}

/// `Ok` when `stored` equals `computed`, else [`FormatError::Checksum`]
/// naming `what` the checksum covers.
pub fn check_crc(what: &'static str, stored: u32, computed: u32) -> Result<(), FormatError> {
    if stored == computed {
        Ok(())
    } else {
        Err(FormatError::Checksum {
            what,
            stored,
            computed,
        })
    }
}

/// A writer that checksums and counts every byte that passes through it, so
/// a file's CRC is computed while it is written, not in a second pass.
#[derive(Debug)]
pub struct ChecksumWriter<W> {
    inner: W,
    crc: Crc32,
    written: u64,
}

impl<W: Write> ChecksumWriter<W> {
    /// Wraps `inner`.
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            crc: Crc32::new(),
            written: 0,
        }
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// CRC-32 of the bytes written so far.
    pub fn crc(&self) -> u32 {
        self.crc.finish()
    }

    /// Writes zeros up to the next multiple of `align` (at most 4096).
    pub fn pad_to(&mut self, align: usize) -> io::Result<()> {
        const ZEROS: [u8; 4096] = [0; 4096];
        if align == 0 || align > ZEROS.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("alignment {align} is not in 1..=4096"),
            ));
        }
        let rem = (self.written % align as u64) as usize;
        if rem != 0 {
            self.write_all(&ZEROS[..align - rem])?;
        }
        Ok(())
    }

    /// The inner writer.
    pub fn into_inner(self) -> W {
        self.inner
    }
}

impl<W: Write> Write for ChecksumWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors_and_streaming_agree() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut s = Crc32::new();
        s.update(&data[..333]);
        s.update(&data[333..]);
        assert_eq!(s.finish(), crc32(&data));
    }

    #[test]
    fn checksum_writer_counts_pads_and_checksums() {
        let mut w = ChecksumWriter::new(Vec::new());
        w.write_all(b"abc").expect("write");
        w.pad_to(8).expect("pad");
        assert_eq!(w.written(), 8);
        w.pad_to(8).expect("already aligned");
        assert_eq!(w.written(), 8);
        let crc = w.crc();
        let bytes = w.into_inner();
        assert_eq!(bytes, b"abc\0\0\0\0\0");
        assert_eq!(crc, crc32(&bytes));
        assert!(ChecksumWriter::new(Vec::new()).pad_to(0).is_err());
    }

    #[test]
    fn check_crc_names_what_it_covers() {
        assert_eq!(check_crc("graph body", 7, 7), Ok(()));
        let err = check_crc("graph body", 1, 2).expect_err("mismatch");
        assert_eq!(
            err.to_string(),
            "graph body checksum mismatch: stored 0x00000001, computed 0x00000002"
        );
    }
}
