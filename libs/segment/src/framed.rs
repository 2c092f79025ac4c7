//! The container both segment files and index files use: a 128-byte header
//! (magic, version, kind-specific fields, section count), a section table,
//! 64-byte aligned sections, and a crc32 footer. Writing goes through a
//! temporary file, fsync and rename; reading maps the file and checks magic,
//! version, checksum and section bounds once.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};

use eddy_format::{check_crc, crc32, BinaryFormat, ChecksumWriter, Extent, FormatError, U32};
use memmap2::Mmap;
use zerocopy::{FromBytes, IntoBytes};

use crate::direct::DirectWriter;
use crate::format::{align_up, Footer, FramedHeader, SectionEntry, ALIGN, FOOTER_MAGIC};
use crate::resident::HugePageBytes;
use crate::{Error, Result};

/// A file as written: its size and the CRC-32 of all its bytes, computed
/// while they were written, so an upload needs no pass of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrittenFile {
    /// Size in bytes.
    pub bytes: u64,
    /// CRC-32 (IEEE, as `crc32fast`) of the whole file, footer included.
    pub crc32: u32,
}

/// Writes a framed file at `path`: `header` must already carry the preamble
/// and kind-specific fields; the section count, table, sections and footer
/// are added here.
pub(crate) fn write(
    path: &Path,
    mut header: FramedHeader,
    sections: &[(u32, &[u8])],
) -> Result<WrittenFile> {
    let count = u32::try_from(sections.len())
        .map_err(|_| Error::InvalidRow(format!("{} sections", sections.len())))?;
    header.section_count = U32::new(count);
    let mut table = Vec::with_capacity(sections.len());
    let mut pos = align_up(size_of::<FramedHeader>() + sections.len() * size_of::<SectionEntry>());
    for (kind, bytes) in sections {
        table.push(SectionEntry::new(
            *kind,
            Extent::new(pos as u64, bytes.len() as u64),
        ));
        pos = align_up(pos + bytes.len());
    }

    let tmp = path.with_extension("tmp");
    let file = DirectWriter::create(&tmp, crate::direct::write_mode()).map_err(Error::io(&tmp))?;
    let mut out = ChecksumWriter::new(file);
    out.write_all(header.as_bytes()).map_err(Error::io(&tmp))?;
    out.write_all(table.as_bytes()).map_err(Error::io(&tmp))?;
    for (_, bytes) in sections {
        out.pad_to(ALIGN).map_err(Error::io(&tmp))?;
        out.write_all(bytes).map_err(Error::io(&tmp))?;
    }
    out.pad_to(ALIGN).map_err(Error::io(&tmp))?;
    let footer = Footer::new(out.crc());
    out.write_all(footer.as_bytes()).map_err(Error::io(&tmp))?;
    let written = WrittenFile {
        bytes: out.written(),
        crc32: out.crc(),
    };
    let file = out.into_inner().finish().map_err(Error::io(&tmp))?;
    #[cfg(feature = "failpoints")]
    if path.extension().is_some_and(|e| e == "seg") {
        fail::fail_point!("segment::before_fsync");
    }
    file.sync_all().map_err(Error::io(&tmp))?;
    drop(file);
    fs::rename(&tmp, path).map_err(Error::io(path))?;
    if let Some(dir) = path.parent() {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(Error::io(dir))?;
    }
    Ok(written)
}

/// A mapped, checked framed file.
#[derive(Debug)]
pub(crate) struct Framed {
    pub(crate) path: PathBuf,
    bytes: Backing,
    header: FramedHeader,
    sections: HashMap<u32, Range<usize>>,
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

impl Framed {
    /// Maps `path` and checks magic, version, checksum and section bounds.
    pub(crate) fn open(path: &Path, format: &BinaryFormat, residency: Residency) -> Result<Framed> {
        let mut file = File::open(path).map_err(Error::io(path))?;
        let bytes = match residency {
            Residency::Mapped => Backing::Mapped(map_file(&file, path)?),
            Residency::HugePages => {
                let len = usize::try_from(file.metadata().map_err(Error::io(path))?.len())
                    .map_err(|_| Error::corrupt(path, "file does not fit in memory".to_owned()))?;
                Backing::Resident(HugePageBytes::read(&mut file, len).map_err(Error::io(path))?)
            }
        };
        let (header, sections) = check(path, bytes.bytes(), format)?;
        Ok(Framed {
            path: path.to_owned(),
            bytes,
            header,
            sections,
        })
    }

    /// The fixed header.
    pub(crate) fn header(&self) -> &FramedHeader {
        &self.header
    }

    /// A section's bytes (empty when absent).
    pub(crate) fn section(&self, kind: u32) -> &[u8] {
        match self.sections.get(&kind) {
            Some(range) => &self.bytes.bytes()[range.clone()],
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

/// Checks a whole framed file once: header (magic, version, length), footer
/// magic, checksum, and that every section lies aligned inside the body.
fn check(
    path: &Path,
    b: &[u8],
    format: &BinaryFormat,
) -> Result<(FramedHeader, HashMap<u32, Range<usize>>)> {
    let framing = |source: FormatError| Error::Format {
        path: path.to_owned(),
        source,
    };
    let corrupt = |reason: String| Error::corrupt(path, reason);
    let header = *format.read_header::<FramedHeader>(b).map_err(framing)?;
    let min_len = size_of::<FramedHeader>() + size_of::<Footer>();
    if b.len() < min_len {
        return Err(framing(FormatError::Truncated {
            what: format.what,
            need: min_len as u64,
            have: b.len() as u64,
        }));
    }
    let body_end = b.len() - size_of::<Footer>();
    let footer =
        Footer::ref_from_bytes(&b[body_end..]).map_err(|_| corrupt("unreadable footer".into()))?;
    if footer.magic != FOOTER_MAGIC {
        return Err(corrupt("bad footer magic (truncated file?)".into()));
    }
    check_crc(format.what, footer.crc32.get(), crc32(&b[..body_end])).map_err(framing)?;
    let count = header.section_count.get() as usize;
    let (table, _) = <[SectionEntry]>::ref_from_prefix_with_elems(
        &b[size_of::<FramedHeader>()..body_end],
        count,
    )
    .map_err(|_| corrupt("section table runs past the end".into()))?;
    let mut sections = HashMap::with_capacity(count);
    for entry in table {
        let kind = entry.kind.get();
        let range = entry
            .extent
            .range(body_end)
            .filter(|r| r.start % ALIGN == 0)
            .ok_or_else(|| {
                corrupt(format!(
                    "section {kind} at {}+{} is out of bounds",
                    entry.extent.offset, entry.extent.len
                ))
            })?;
        sections.insert(kind, range);
    }
    Ok((header, sections))
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
