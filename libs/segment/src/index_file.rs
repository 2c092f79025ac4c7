//! A segment's index file (`<segment>.idx`): the structures built after a
//! segment is sealed — the HNSW graph and quantized codes — in the same
//! framed container as the segment. The segment stays immutable; the index
//! file sits beside it and the manifest names it once it is written, so a
//! segment is searchable (by exact scan) before its graph exists.
//!
//! Of the header's fields after the preamble, index files set `dim` and
//! `rows` (the segment's) and the section count; the others stay zero.

use std::path::Path;

use eddy_format::{BinaryFormat, Versions, U32, U64};

use crate::format::FramedHeader;
use crate::framed::{self, Framed, Residency};
use crate::{Error, Result};

/// Magic at the start of every index file.
pub const INDEX_MAGIC: [u8; 8] = *b"EDDYIDX\0";
/// Index file format version this build writes.
pub const INDEX_FORMAT_VERSION: u32 = 1;
/// Oldest index file format version this build reads.
pub const INDEX_OLDEST_SUPPORTED_VERSION: u32 = 1;

/// The index file format: magic and readable versions.
const INDEX_FORMAT: BinaryFormat = BinaryFormat {
    what: "index file",
    magic: INDEX_MAGIC,
    versions: Versions::new(INDEX_OLDEST_SUPPORTED_VERSION, INDEX_FORMAT_VERSION),
};

/// Kinds of section in an index file. Unknown kinds are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum IndexSection {
    /// The HNSW graph (`eddy_hnsw` byte format).
    Graph = 1,
    /// SQ8 quantizer parameters (`eddy_hnsw` SQ8 format).
    Sq8Params = 2,
    /// SQ8 codes, `rows * dim` bytes.
    Sq8Codes = 3,
    /// SQ8 per-row correction terms, `rows` f32.
    Sq8Corrections = 4,
}

/// Collects sections and writes one index file.
#[derive(Debug, Default)]
pub struct IndexWriter {
    dim: usize,
    rows: usize,
    sections: Vec<(u32, Vec<u8>)>,
}

impl IndexWriter {
    /// A writer for the index of a segment of `rows` vectors of `dim` floats.
    pub fn new(rows: usize, dim: usize) -> Self {
        Self {
            dim,
            rows,
            sections: Vec::new(),
        }
    }

    /// Adds a section.
    pub fn section(&mut self, kind: IndexSection, bytes: Vec<u8>) -> &mut Self {
        self.sections.push((kind as u32, bytes));
        self
    }

    /// Writes the file (temporary name, fsync, rename); returns its size.
    pub fn finish(&self, path: &Path) -> Result<u64> {
        let mut header = FramedHeader::new(&INDEX_FORMAT);
        header.dim = U32::new(self.dim as u32);
        header.rows = U64::new(self.rows as u64);
        let sections: Vec<(u32, &[u8])> = self
            .sections
            .iter()
            .map(|(k, b)| (*k, b.as_slice()))
            .collect();
        framed::write(path, header, &sections).map(|w| w.bytes)
    }
}

/// A mapped, checked index file.
#[derive(Debug)]
pub struct IndexFile {
    file: Framed,
}

impl IndexFile {
    /// Maps the index file at `path` and checks that it belongs to a segment
    /// of `rows` vectors of `dim` floats.
    pub fn open(path: &Path, rows: usize, dim: usize) -> Result<IndexFile> {
        Self::open_with(path, rows, dim, Residency::Mapped)
    }

    /// [`IndexFile::open`], holding the bytes as `residency` says.
    pub fn open_with(
        path: &Path,
        rows: usize,
        dim: usize,
        residency: Residency,
    ) -> Result<IndexFile> {
        let file = Framed::open(path, &INDEX_FORMAT, residency)?;
        let h = file.header();
        let (found_dim, found_rows) = (h.dim.get() as usize, h.rows.get());
        if found_dim != dim || found_rows != rows as u64 {
            return Err(Error::corrupt(
                path,
                format!(
                    "index is for {found_rows} rows of dim {found_dim}, the segment has {rows} of dim {dim}"
                ),
            ));
        }
        Ok(IndexFile { file })
    }

    /// A section's bytes, if the file has it. Sections start 64-byte aligned
    /// in the map.
    pub fn section(&self, kind: IndexSection) -> Option<&[u8]> {
        self.file
            .has(kind as u32)
            .then(|| self.file.section(kind as u32))
    }

    /// Size of the file in bytes.
    pub fn file_len(&self) -> usize {
        self.file.len()
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.file.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_mismatch() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("a.idx");
        let mut w = IndexWriter::new(3, 2);
        w.section(IndexSection::Graph, vec![1, 2, 3]);
        w.section(IndexSection::Sq8Codes, vec![9; 6]);
        w.finish(&path).expect("write");
        let idx = IndexFile::open(&path, 3, 2).expect("open");
        assert_eq!(idx.section(IndexSection::Graph), Some(&[1u8, 2, 3][..]));
        assert_eq!(idx.section(IndexSection::Sq8Codes), Some(&[9u8; 6][..]));
        assert_eq!(idx.section(IndexSection::Sq8Params), None);
        let graph = idx.section(IndexSection::Graph).expect("graph");
        assert_eq!(graph.as_ptr() as usize % 64, 0, "sections are aligned");
        let err = IndexFile::open(&path, 4, 2).expect_err("wrong rows");
        assert!(err.to_string().contains("3 rows"), "{err}");

        let mut bytes = std::fs::read(&path).expect("read");
        let mid = bytes.len() / 2;
        bytes[mid] ^= 1;
        std::fs::write(&path, &bytes).expect("write");
        let err = IndexFile::open(&path, 3, 2).expect_err("corrupt");
        assert!(err.to_string().contains("checksum"), "{err}");
    }
}
