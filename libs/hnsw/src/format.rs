//! On-disk format, version 1 (little-endian).
//!
//! ```text
//! offset  size  field
//! 0       8     magic "EDDYHNSW"
//! 8       4     version (1)
//! 12      4     header length (192)
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

use crate::crc::{crc32, Crc32};
use crate::space::{space_code, space_from_code};
use crate::{Error, GraphView, Result};

/// First 8 bytes of a graph file.
pub const MAGIC: [u8; 8] = *b"EDDYHNSW";
/// Format version written by this build (and the only one it reads).
pub const FORMAT_VERSION: u32 = 1;

const HEADER_LEN: usize = 192;
const SECTIONS: usize = 5;
const ALIGN: usize = 64;

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
    let mut table = [(0u64, 0u64); SECTIONS];
    let mut off = HEADER_LEN;
    let mut body = Crc32::new();
    for (i, s) in secs.iter().enumerate() {
        let bytes: &[u8] = bytemuck::cast_slice(s);
        table[i] = (off as u64, bytes.len() as u64);
        body.update(bytes);
        let p = pad(bytes.len()) - bytes.len();
        if i + 1 < SECTIONS {
            body.update(&zeros[..p]);
        }
        off += pad(bytes.len());
    }
    let mut h = [0u8; HEADER_LEN];
    h[0..8].copy_from_slice(&MAGIC);
    let fields = [
        FORMAT_VERSION,
        HEADER_LEN as u32,
        space_code(v.space),
        v.m,
        v.n,
        v.dim,
        v.entry,
        v.max_level,
        SECTIONS as u32,
        0,
    ];
    for (i, f) in fields.iter().enumerate() {
        h[8 + 4 * i..12 + 4 * i].copy_from_slice(&f.to_le_bytes());
    }
    for (i, (o, l)) in table.iter().enumerate() {
        h[48 + 16 * i..56 + 16 * i].copy_from_slice(&o.to_le_bytes());
        h[56 + 16 * i..64 + 16 * i].copy_from_slice(&l.to_le_bytes());
    }
    h[128..132].copy_from_slice(&body.finish().to_le_bytes());
    let hc = crc32(&h[..132]);
    h[132..136].copy_from_slice(&hc.to_le_bytes());
    w.write_all(&h)?;
    for (i, s) in secs.iter().enumerate() {
        let bytes: &[u8] = bytemuck::cast_slice(s);
        w.write_all(bytes)?;
        if i + 1 < SECTIONS {
            w.write_all(&zeros[..pad(bytes.len()) - bytes.len()])?;
        }
    }
    Ok(())
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

fn corrupt(msg: impl Into<String>) -> Error {
    Error::Corrupt(msg.into())
}

pub(crate) fn read(bytes: &[u8], verify_body: bool) -> Result<GraphView<'_>> {
    if cfg!(target_endian = "big") {
        return Err(Error::UnsupportedPlatform);
    }
    if bytes.len() < 16 {
        return Err(if bytes.len() >= 8 && bytes[..8] != MAGIC {
            Error::BadMagic
        } else {
            Error::Truncated {
                need: HEADER_LEN as u64,
                have: bytes.len() as u64,
            }
        });
    }
    if bytes[..8] != MAGIC {
        return Err(Error::BadMagic);
    }
    let version = u32_at(bytes, 8);
    if version != FORMAT_VERSION {
        return Err(Error::UnsupportedVersion {
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    if bytes.len() < HEADER_LEN {
        return Err(Error::Truncated {
            need: HEADER_LEN as u64,
            have: bytes.len() as u64,
        });
    }
    let stored = u32_at(bytes, 132);
    let computed = crc32(&bytes[..132]);
    if stored != computed {
        return Err(Error::Checksum {
            what: "header",
            stored,
            computed,
        });
    }
    if u32_at(bytes, 12) as usize != HEADER_LEN {
        return Err(corrupt("header length is not 192"));
    }
    let space = space_from_code(u32_at(bytes, 16))
        .ok_or_else(|| corrupt(format!("unknown space code {}", u32_at(bytes, 16))))?;
    let m = u32_at(bytes, 20);
    let n = u32_at(bytes, 24);
    let dim = u32_at(bytes, 28);
    let entry = u32_at(bytes, 32);
    let max_level = u32_at(bytes, 36);
    if u32_at(bytes, 40) as usize != SECTIONS {
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
    for (i, sec) in secs.iter_mut().enumerate() {
        let off = u64_at(bytes, 48 + 16 * i);
        let len = u64_at(bytes, 56 + 16 * i);
        if !off.is_multiple_of(ALIGN as u64) || !len.is_multiple_of(4) || off < body_end as u64 {
            return Err(corrupt(format!("section {i} at {off} (+{len}) misplaced")));
        }
        let end = off
            .checked_add(len)
            .ok_or_else(|| corrupt("section overflow"))?;
        if end > bytes.len() as u64 {
            return Err(Error::Truncated {
                need: end,
                have: bytes.len() as u64,
            });
        }
        let (off, end) = (off as usize, end as usize);
        *sec = bytemuck::try_cast_slice(&bytes[off..end]).map_err(|_| Error::Misaligned)?;
        body_end = end;
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
    if verify_body {
        let stored = u32_at(bytes, 128);
        let computed = crc32(&bytes[HEADER_LEN..body_end]);
        if stored != computed {
            return Err(Error::Checksum {
                what: "body",
                stored,
                computed,
            });
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
