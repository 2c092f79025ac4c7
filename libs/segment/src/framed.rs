//! The container both segment files and index files use: a 128-byte header
//! (magic, version, kind-specific fields, section count), a section table,
//! 64-byte aligned sections, and a crc32 footer. Writing goes through a
//! temporary file, fsync and rename; reading maps the file and checks magic,
//! version, checksum and section bounds once.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::format::{align_up, ALIGN, FOOTER_LEN, FOOTER_MAGIC, HEADER_LEN, TABLE_ENTRY_LEN};
use crate::resident::HugePageBytes;
use crate::{Error, Result};

/// Byte range of the section count in the header.
const SECTION_COUNT_AT: usize = 32;

/// Reads a little-endian u32 at `at` (callers bounds-check first).
pub(crate) fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Reads a little-endian u64 at `at` (callers bounds-check first).
pub(crate) fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// Writes a framed file at `path`: `header` must already carry the magic,
/// version and kind-specific fields; the section count, table, sections and
/// footer are added here. Returns the file size.
pub(crate) fn write(
    path: &Path,
    mut header: [u8; HEADER_LEN],
    sections: &[(u32, &[u8])],
) -> Result<u64> {
    header[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    header[SECTION_COUNT_AT..SECTION_COUNT_AT + 4]
        .copy_from_slice(&(sections.len() as u32).to_le_bytes());
    let mut table = Vec::with_capacity(sections.len() * TABLE_ENTRY_LEN);
    let mut pos = align_up(HEADER_LEN + sections.len() * TABLE_ENTRY_LEN);
    for (kind, bytes) in sections {
        table.extend_from_slice(&kind.to_le_bytes());
        table.extend_from_slice(&0u32.to_le_bytes());
        table.extend_from_slice(&(pos as u64).to_le_bytes());
        table.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        pos = align_up(pos + bytes.len());
    }

    let tmp = path.with_extension("tmp");
    let file = File::create(&tmp).map_err(Error::io(&tmp))?;
    let mut out = CrcWriter {
        inner: BufWriter::with_capacity(1 << 20, file),
        crc: crc32fast::Hasher::new(),
        written: 0,
    };
    out.write_all(&header).map_err(Error::io(&tmp))?;
    out.write_all(&table).map_err(Error::io(&tmp))?;
    for (_, bytes) in sections {
        out.pad_to(ALIGN).map_err(Error::io(&tmp))?;
        out.write_all(bytes).map_err(Error::io(&tmp))?;
    }
    out.pad_to(ALIGN).map_err(Error::io(&tmp))?;
    let crc = out.crc.clone().finalize();
    let mut footer = [0u8; FOOTER_LEN];
    footer[0..4].copy_from_slice(&crc.to_le_bytes());
    footer[8..16].copy_from_slice(&FOOTER_MAGIC);
    out.write_all(&footer).map_err(Error::io(&tmp))?;
    let size = out.written;
    let file = out.inner.into_inner().map_err(|e| Error::Io {
        path: tmp.clone(),
        source: e.into_error(),
    })?;
    file.sync_all().map_err(Error::io(&tmp))?;
    drop(file);
    fs::rename(&tmp, path).map_err(Error::io(path))?;
    if let Some(dir) = path.parent() {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(Error::io(dir))?;
    }
    Ok(size)
}

/// A writer that checksums and counts what passes through it.
struct CrcWriter<W> {
    inner: W,
    crc: crc32fast::Hasher,
    written: u64,
}

impl<W: Write> CrcWriter<W> {
    fn pad_to(&mut self, align: usize) -> std::io::Result<()> {
        const ZEROS: [u8; ALIGN] = [0; ALIGN];
        let rem = (self.written as usize) % align;
        if rem != 0 {
            self.write_all(&ZEROS[..align - rem])?;
        }
        Ok(())
    }
}

impl<W: Write> Write for CrcWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A mapped, checked framed file.
#[derive(Debug)]
pub(crate) struct Framed {
    pub(crate) path: PathBuf,
    bytes: Backing,
    sections: HashMap<u32, (usize, usize)>,
}

/// Where an opened segment or index file's bytes live while it is served.
///
/// Both keep the "no deserialisation pass" promise: sections are viewed in
/// place, only the backing memory differs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Residency {
    /// Memory-map the file: zero copy, pages shared with the page cache and
    /// evictable under memory pressure.
    #[default]
    Mapped,
    /// Read the file into anonymous memory advised for transparent huge pages
    /// (2 MiB-aligned). A graph walk touches rows at random, and with 4 KiB
    /// pages most of those touches also miss the TLB; huge pages measured
    /// 1.2-1.4x more queries/s. The copy is not evictable (no swap-backed
    /// service should rely on evicting its index anyway). Falls back to
    /// ordinary pages where the kernel has no THP.
    HugePages,
}

impl std::str::FromStr for Residency {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s {
            "mapped" | "mmap" => Ok(Residency::Mapped),
            "huge-pages" | "hugepages" => Ok(Residency::HugePages),
            other => Err(format!(
                "unknown segment residency {other:?} (expected mapped or huge-pages)"
            )),
        }
    }
}

impl std::fmt::Display for Residency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Residency::Mapped => "mapped",
            Residency::HugePages => "huge-pages",
        })
    }
}

/// The bytes of an opened file.
#[derive(Debug)]
enum Backing {
    Mapped(Mmap),
    Resident(HugePageBytes),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mapped(map) => map,
            Backing::Resident(bytes) => bytes.as_bytes(),
        }
    }
}

/// What a reader accepts: which magic, which versions, and how to name the
/// file in errors.
pub(crate) struct Expect {
    pub(crate) magic: [u8; 8],
    pub(crate) what: &'static str,
    pub(crate) oldest: u32,
    pub(crate) current: u32,
}

impl Framed {
    /// Maps `path` and checks magic, version, checksum and section bounds.
    pub(crate) fn open(path: &Path, expect: &Expect, residency: Residency) -> Result<Framed> {
        let mut file = File::open(path).map_err(Error::io(path))?;
        let bytes = match residency {
            Residency::Mapped => Backing::Mapped(map_file(&file, path)?),
            Residency::HugePages => {
                let len = usize::try_from(file.metadata().map_err(Error::io(path))?.len())
                    .map_err(|_| Error::corrupt(path, "file does not fit in memory".to_owned()))?;
                Backing::Resident(HugePageBytes::read(&mut file, len).map_err(Error::io(path))?)
            }
        };
        let bad = |reason: String| Error::corrupt(path, reason);
        let b: &[u8] = bytes.bytes();
        if b.len() < HEADER_LEN + FOOTER_LEN || b[0..8] != expect.magic {
            return Err(bad(format!(
                "not an eddy {} (bad magic or too short)",
                expect.what
            )));
        }
        let version = le_u32(b, 8);
        if !(expect.oldest..=expect.current).contains(&version) {
            return Err(Error::UnsupportedVersion {
                path: path.to_owned(),
                found: version,
                oldest: expect.oldest,
                current: expect.current,
            });
        }
        let footer = &b[b.len() - FOOTER_LEN..];
        if footer[8..16] != FOOTER_MAGIC {
            return Err(bad("bad footer magic (truncated file?)".into()));
        }
        let stored_crc = le_u32(footer, 0);
        let actual_crc = crc32fast::hash(&b[..b.len() - FOOTER_LEN]);
        if stored_crc != actual_crc {
            return Err(bad(format!(
                "checksum mismatch: stored {stored_crc:08x}, computed {actual_crc:08x}"
            )));
        }
        let n_sections = le_u32(b, SECTION_COUNT_AT) as usize;
        let body_end = b.len() - FOOTER_LEN;
        if n_sections
            .checked_mul(TABLE_ENTRY_LEN)
            .and_then(|t| t.checked_add(HEADER_LEN))
            .is_none_or(|end| end > body_end)
        {
            return Err(bad("section table runs past the end".into()));
        }
        let mut sections = HashMap::new();
        for i in 0..n_sections {
            let at = HEADER_LEN + i * TABLE_ENTRY_LEN;
            let kind = le_u32(b, at);
            let offset = usize::try_from(le_u64(b, at + 8)).unwrap_or(usize::MAX);
            let len = usize::try_from(le_u64(b, at + 16)).unwrap_or(usize::MAX);
            if offset % ALIGN != 0 || offset.checked_add(len).is_none_or(|end| end > body_end) {
                return Err(bad(format!(
                    "section {kind} at {offset}+{len} is out of bounds"
                )));
            }
            sections.insert(kind, (offset, len));
        }
        Ok(Framed {
            path: path.to_owned(),
            bytes,
            sections,
        })
    }

    /// The header bytes.
    pub(crate) fn header(&self) -> &[u8] {
        &self.bytes.bytes()[..HEADER_LEN]
    }

    /// A section's bytes (empty when absent).
    pub(crate) fn section(&self, kind: u32) -> &[u8] {
        match self.sections.get(&kind) {
            Some(&(offset, len)) => &self.bytes.bytes()[offset..offset + len],
            None => &[],
        }
    }

    /// The file's size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.bytes.bytes().len()
    }

    /// Whether the file has a section of this kind.
    pub(crate) fn has(&self, kind: u32) -> bool {
        self.sections.contains_key(&kind)
    }
}

#[expect(unsafe_code, reason = "memory-mapping a file is unsafe by nature")]
fn map_file(file: &File, path: &Path) -> Result<Mmap> {
    // SAFETY: segment and index files are immutable once written (created
    // under a temporary name, fsynced and renamed into place, never opened
    // for writing again), so the mapped bytes cannot change under us. A file
    // truncated by an outside actor would be an operator error; every offset
    // we read is bounds-checked against the map's length at open.
    unsafe { Mmap::map(file) }.map_err(Error::io(path))
}
