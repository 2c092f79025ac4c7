//! On-disk format, version 1 (little-endian): a 192-byte [`GraphHeader`],
//! then the sections.
//!
//! ```text
//! offset  size  field
//! 0       16    preamble: magic "EDDYHNSW", version (1), header length (192)
//! 16      4     space (0 = dot, 1 = L2)
//! 20      4     M
//! 24      4     n (rows, duplicates included)
//! 28      4     dim
//! 32      4     entry node
//! 36      4     max level
//! 40      4     section count (5)
//! 44      4     reserved (0)
//! 48      80    5 x (offset u64, length u64): level0, upper_start, upper, dup_start, dup_rows
//! 128     4     CRC-32 of the body (bytes 192 .. end of the last section)
//! 132     4     CRC-32 of header bytes 0..132
//! 136     56    zero
//! 192     ...   sections, each starting at a multiple of 64, zero padded
//! ```

use std::io::Write;

use eddy_format::{
    check_crc, crc32, BinaryFormat, Crc32, Extent, FormatError, Header, Preamble, Versions, U32,
};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::space::{space_code, space_from_code};
use crate::{Error, GraphView, Result};

/// First 8 bytes of a graph file.
pub const MAGIC: [u8; 8] = *b"EDDYHNSW";
/// Format version written by this build.
pub const FORMAT_VERSION: u32 = 1;
/// Oldest format version this build reads.
pub const OLDEST_SUPPORTED_VERSION: u32 = 1;

/// The graph format: magic and readable versions.
const GRAPH_FORMAT: BinaryFormat = BinaryFormat {
    what: "HNSW graph",
    magic: MAGIC,
    versions: Versions::new(OLDEST_SUPPORTED_VERSION, FORMAT_VERSION),
};

const SECTIONS: usize = 5;
const ALIGN: usize = 64;

/// The fixed header of a graph (192 bytes).
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct GraphHeader {
    preamble: Preamble,
    space: U32,
    m: U32,
    n: U32,
    dim: U32,
    entry: U32,
    max_level: U32,
    section_count: U32,
    _reserved: U32,
    /// level0, upper_start, upper, dup_start, dup_rows.
    sections: [Extent; SECTIONS],
    /// CRC-32 of the body: from the end of the header to the end of the last section.
    body_crc: U32,
    /// CRC-32 of the header bytes before this field.
    header_crc: U32,
    _zero: [u8; 56],
}

const HEADER_LEN: usize = size_of::<GraphHeader>();
const _: () = assert!(HEADER_LEN == 192);
/// Header bytes the header CRC covers.
const HEADER_CRC_COVERS: usize = std::mem::offset_of!(GraphHeader, header_crc);

impl Header for GraphHeader {
    fn preamble(&self) -> &Preamble {
        &self.preamble
    }
}

fn pad(len: usize) -> usize {
    len.div_ceil(ALIGN) * ALIGN
}

fn sections<'a>(v: &GraphView<'a>) -> [&'a [u32]; SECTIONS] {
    [v.level0, v.upper_start, v.upper, v.dup_start, v.dup_rows]
}

pub(crate) fn write<W: Write>(v: &GraphView<'_>, w: &mut W) -> std::io::Result<()> {
    if cfg!(target_endian = "big") {
        return Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "the graph format is little-endian",
        ));
    }
    let secs = sections(v);
    let zeros = [0u8; ALIGN];
    let mut h = GraphHeader::new_zeroed();
    h.preamble = GRAPH_FORMAT.preamble::<GraphHeader>();
    h.space = U32::new(space_code(v.space));
    h.m = U32::new(v.m);
    h.n = U32::new(v.n);
    h.dim = U32::new(v.dim);
    h.entry = U32::new(v.entry);
    h.max_level = U32::new(v.max_level);
    h.section_count = U32::new(SECTIONS as u32);
    let mut off = HEADER_LEN;
    let mut body = Crc32::new();
    for (i, s) in secs.iter().enumerate() {
        let bytes: &[u8] = bytemuck::cast_slice(s);
        h.sections[i] = Extent::new(off as u64, bytes.len() as u64);
        body.update(bytes);
        let p = pad(bytes.len()) - bytes.len();
        if i + 1 < SECTIONS {
            body.update(&zeros[..p]);
        }
        off += pad(bytes.len());
    }
    h.body_crc = U32::new(body.finish());
    h.header_crc = U32::new(crc32(&h.as_bytes()[..HEADER_CRC_COVERS]));
    w.write_all(h.as_bytes())?;
    for (i, s) in secs.iter().enumerate() {
        let bytes: &[u8] = bytemuck::cast_slice(s);
        w.write_all(bytes)?;
        if i + 1 < SECTIONS {
            w.write_all(&zeros[..pad(bytes.len()) - bytes.len()])?;
        }
    }
    Ok(())
}

fn corrupt(msg: impl Into<String>) -> Error {
    Error::Corrupt(msg.into())
}

pub(crate) fn read(bytes: &[u8], verify_body: bool) -> Result<GraphView<'_>> {
    if cfg!(target_endian = "big") {
        return Err(Error::UnsupportedPlatform);
    }
    let h: &GraphHeader = GRAPH_FORMAT.read_header(bytes)?;
    check_crc(
        "HNSW graph header",
        h.header_crc.get(),
        crc32(&h.as_bytes()[..HEADER_CRC_COVERS]),
    )?;
    let space = space_from_code(h.space.get())
        .ok_or_else(|| corrupt(format!("unknown space code {}", h.space.get())))?;
    let (m, n, dim) = (h.m.get(), h.n.get(), h.dim.get());
    let (entry, max_level) = (h.entry.get(), h.max_level.get());
    if h.section_count.get() as usize != SECTIONS {
        return Err(corrupt("section count is not 5"));
    }
    if !(2..=4096).contains(&m) {
        return Err(corrupt(format!("M = {m} out of range")));
    }
    if n == u32::MAX || (n > 0 && entry >= n) {
        return Err(corrupt(format!("entry {entry} not below n = {n}")));
    }
    let mut secs: [&[u32]; SECTIONS] = [&[]; SECTIONS];
    let mut body_end = HEADER_LEN;
    for (i, (sec, extent)) in secs.iter_mut().zip(&h.sections).enumerate() {
        let (off, len) = (extent.offset.get(), extent.len.get());
        if !off.is_multiple_of(ALIGN as u64) || !len.is_multiple_of(4) || off < body_end as u64 {
            return Err(corrupt(format!("section {i} at {off} (+{len}) misplaced")));
        }
        let range = extent.range(bytes.len()).ok_or(FormatError::Truncated {
            what: GRAPH_FORMAT.what,
            need: off.saturating_add(len),
            have: bytes.len() as u64,
        })?;
        body_end = range.end;
        *sec = bytemuck::try_cast_slice(&bytes[range]).map_err(|_| Error::Misaligned)?;
    }
    // Before the structure is read, so damage is reported as such.
    if verify_body {
        check_crc(
            "HNSW graph body",
            h.body_crc.get(),
            crc32(&bytes[HEADER_LEN..body_end]),
        )?;
    }
    let [level0, upper_start, upper, dup_start, dup_rows] = secs;
    let nn = n as usize;
    let expect = |what: &str, got: usize, want: usize| {
        if got == want {
            Ok(())
        } else {
            Err(corrupt(format!("{what} holds {got} u32, expected {want}")))
        }
    };
    expect("level0", level0.len(), nn * (1 + 2 * m as usize))?;
    expect("upper_start", upper_start.len(), nn + 1)?;
    expect("dup_start", dup_start.len(), nn + 1)?;
    let rows = upper_start[nn] as usize;
    expect("upper", upper.len(), rows * (1 + m as usize))?;
    expect("dup_rows", dup_rows.len(), dup_start[nn] as usize)?;
    if upper_start[0] != 0 || dup_start[0] != 0 {
        return Err(corrupt("prefix arrays do not start at 0"));
    }
    if nn > 0 {
        let e = entry as usize;
        if upper_start[e + 1].wrapping_sub(upper_start[e]) != max_level {
            return Err(corrupt("entry level does not match max level"));
        }
    }
    Ok(GraphView {
        n,
        dim,
        m,
        space,
        entry,
        max_level,
        level0,
        upper_start,
        upper,
        dup_start,
        dup_rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AlignedBytes;

    /// The writer still writes format 1: the golden graph (written by an
    /// earlier build), read and written again, comes back byte for byte.
    #[test]
    fn rewriting_the_golden_graph_reproduces_it() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/v1.graph");
        let golden = std::fs::read(path).expect("tests/data/v1.graph");
        let aligned = AlignedBytes::from_slice(&golden);
        let view = read(aligned.as_bytes(), true).expect("golden opens");
        let mut rewritten = Vec::new();
        write(&view, &mut rewritten).expect("write");
        assert!(rewritten == golden, "the graph writer no longer writes v1");
    }
}
