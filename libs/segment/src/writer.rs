//! Writing a segment file: rows in, one fsynced immutable file out.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::Path;

use eddy_model::{IdType, Metric, PointId};
use serde::{Deserialize, Serialize};

use crate::format::{
    self, Section, ALIGN, FOOTER_LEN, FOOTER_MAGIC, HEADER_LEN, MAGIC, TABLE_ENTRY_LEN,
};
use crate::{Error, Result, RowRef};

/// Metadata stored in a segment's `Meta` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentMeta {
    /// Per partition, the first and last source offset of its rows.
    pub offset_ranges: BTreeMap<u32, (i64, i64)>,
    /// When the file was written, in ms since the Unix epoch.
    pub created_ms: u64,
}

/// Accumulates rows in memory and writes them as one segment file.
#[derive(Debug)]
pub struct SegmentWriter {
    dim: usize,
    metric: Metric,
    id_type: IdType,
    vectors: Vec<f32>,
    ids_u64: Vec<u64>,
    ids_str_offsets: Vec<u64>,
    ids_str_bytes: Vec<u8>,
    partitions: Vec<u32>,
    offsets: Vec<i64>,
    payload_offsets: Vec<u64>,
    payload_bytes: Vec<u8>,
    meta: SegmentMeta,
}

impl SegmentWriter {
    /// An empty writer for vectors of `dim` floats.
    pub fn new(dim: usize, metric: Metric, id_type: IdType) -> Self {
        Self {
            dim,
            metric,
            id_type,
            vectors: Vec::new(),
            ids_u64: Vec::new(),
            ids_str_offsets: vec![0],
            ids_str_bytes: Vec::new(),
            partitions: Vec::new(),
            offsets: Vec::new(),
            payload_offsets: vec![0],
            payload_bytes: Vec::new(),
            meta: SegmentMeta::default(),
        }
    }

    /// Rows added so far.
    pub fn rows(&self) -> usize {
        self.partitions.len()
    }

    /// Appends one row.
    pub fn push(&mut self, row: RowRef<'_>) -> Result<()> {
        if row.vector.len() != self.dim {
            return Err(Error::InvalidRow(format!(
                "vector has {} values, segment dimension is {}",
                row.vector.len(),
                self.dim
            )));
        }
        match (row.id, self.id_type) {
            (PointId::Num(n), IdType::U64) => self.ids_u64.push(*n),
            (PointId::Str(s), IdType::String) => {
                self.ids_str_bytes.extend_from_slice(s.as_bytes());
                self.ids_str_offsets.push(self.ids_str_bytes.len() as u64);
            }
            (id, t) => return Err(Error::InvalidRow(format!("id {id} is not of type {t}"))),
        }
        self.vectors.extend_from_slice(row.vector);
        self.partitions.push(row.partition);
        self.offsets.push(row.offset);
        self.payload_bytes.extend_from_slice(row.payload_json);
        self.payload_offsets.push(self.payload_bytes.len() as u64);
        let range = self
            .meta
            .offset_ranges
            .entry(row.partition)
            .or_insert((row.offset, row.offset));
        range.0 = range.0.min(row.offset);
        range.1 = range.1.max(row.offset);
        Ok(())
    }

    /// Writes the file at `path` (via a temporary file and a rename, both
    /// fsynced) and returns its size in bytes.
    pub fn finish(mut self, path: &Path) -> Result<u64> {
        self.meta.created_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let meta_json = serde_json::to_vec(&self.meta)
            .map_err(|e| Error::InvalidRow(format!("segment meta: {e}")))?;
        let mut sections: Vec<(Section, &[u8])> =
            vec![(Section::Vectors, bytemuck::cast_slice(&self.vectors))];
        match self.id_type {
            IdType::U64 => sections.push((Section::IdsU64, bytemuck::cast_slice(&self.ids_u64))),
            IdType::String => {
                sections.push((
                    Section::IdsStrOffsets,
                    bytemuck::cast_slice(&self.ids_str_offsets),
                ));
                sections.push((Section::IdsStrBytes, &self.ids_str_bytes));
            }
        }
        sections.push((Section::Partitions, bytemuck::cast_slice(&self.partitions)));
        sections.push((Section::Offsets, bytemuck::cast_slice(&self.offsets)));
        sections.push((
            Section::PayloadOffsets,
            bytemuck::cast_slice(&self.payload_offsets),
        ));
        sections.push((Section::PayloadBytes, &self.payload_bytes));
        sections.push((Section::Meta, &meta_json));

        let mut header = [0u8; HEADER_LEN];
        header[0..8].copy_from_slice(&MAGIC);
        header[8..12].copy_from_slice(&format::FORMAT_VERSION.to_le_bytes());
        header[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        header[16..20].copy_from_slice(&(self.dim as u32).to_le_bytes());
        header[20] = format::metric_code(self.metric);
        header[21] = format::id_type_code(self.id_type);
        header[24..32].copy_from_slice(&(self.partitions.len() as u64).to_le_bytes());
        header[32..36].copy_from_slice(&(sections.len() as u32).to_le_bytes());
        header[40..48].copy_from_slice(&self.meta.created_ms.to_le_bytes());

        let mut table = Vec::with_capacity(sections.len() * TABLE_ENTRY_LEN);
        let mut pos = format::align_up(HEADER_LEN + sections.len() * TABLE_ENTRY_LEN);
        for (kind, bytes) in &sections {
            table.extend_from_slice(&(*kind as u32).to_le_bytes());
            table.extend_from_slice(&0u32.to_le_bytes());
            table.extend_from_slice(&(pos as u64).to_le_bytes());
            table.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            pos = format::align_up(pos + bytes.len());
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
        for (_, bytes) in &sections {
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
