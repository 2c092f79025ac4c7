//! Writing a segment file: rows in, one fsynced immutable file out.

use std::collections::BTreeMap;
use std::path::Path;

use eddy_format::{U32, U64};
use eddy_model::{FieldType, IdType, Metric, PointId};
use serde::{Deserialize, Serialize};

use crate::format::{self, FramedHeader, Section, SEGMENT_FORMAT};
use crate::framed::{self, WrittenFile};
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
    payload_index: Option<eddy_filter::PayloadIndexBuilder>,
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
            payload_index: None,
        }
    }

    /// Also builds a payload index over these fields (none when empty).
    pub fn with_payload_index(mut self, fields: &BTreeMap<String, FieldType>) -> Self {
        self.payload_index =
            (!fields.is_empty()).then(|| eddy_filter::PayloadIndexBuilder::new(fields));
        self
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
        if let Some(index) = &mut self.payload_index {
            if !row.payload_json.is_empty() {
                if let Ok(payload) = serde_json::from_slice::<serde_json::Value>(row.payload_json) {
                    index.add(self.partitions.len() as u32, &payload);
                }
            }
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
    /// fsynced); its size and CRC-32.
    pub fn finish(mut self, path: &Path) -> Result<WrittenFile> {
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
        let payload_index = self
            .payload_index
            .take()
            .map(|b| b.finish(self.partitions.len() as u32));
        if let Some(bytes) = &payload_index {
            sections.push((Section::PayloadIndex, bytes));
        }

        let mut header = FramedHeader::new(&SEGMENT_FORMAT);
        header.dim = U32::new(self.dim as u32);
        header.metric = format::metric_code(self.metric);
        header.id_type = format::id_type_code(self.id_type);
        header.rows = U64::new(self.partitions.len() as u64);
        header.created_ms = U64::new(self.meta.created_ms);
        let sections: Vec<(u32, &[u8])> = sections
            .into_iter()
            .map(|(kind, bytes)| (kind as u32, bytes))
            .collect();
        framed::write(path, header, &sections)
    }
}
