//! Reading a segment: map the file, check it once, view sections in place.

use std::collections::HashMap;
use std::path::Path;

use crate::format::{self, Section, SEGMENT_FORMAT};
use crate::framed::{Framed, Residency};
use crate::{Error, Ids, Result, SegmentMeta};
use eddy_model::{IdType, Metric, PointId};

/// A sealed, memory-mapped segment.
///
/// Opening checks magic, version, checksum and section bounds once; after
/// that every accessor is a view into the map with no copying.
#[derive(Debug)]
pub struct Segment {
    file: Framed,
    dim: usize,
    metric: Metric,
    id_type: IdType,
    rows: usize,
    meta: SegmentMeta,
    id_index: HashMap<PointId, u32>,
    /// The current rows in id order, built on first use (a scroll).
    id_order: std::sync::OnceLock<Vec<u32>>,
}

impl Segment {
    /// Maps and checks the segment file at `path`.
    pub fn open(path: &Path) -> Result<Segment> {
        Self::open_with(path, Residency::Mapped)
    }

    /// Opens and checks the segment file at `path`, holding its bytes as
    /// `residency` says.
    pub fn open_with(path: &Path, residency: Residency) -> Result<Segment> {
        let file = Framed::open(path, &SEGMENT_FORMAT, residency)?;
        let bad = |reason: String| Error::corrupt(path, reason);
        let h = file.header();
        let dim = h.dim.get() as usize;
        let metric = format::metric_from_code(h.metric)
            .ok_or_else(|| bad(format!("unknown metric code {}", h.metric)))?;
        let id_type = format::id_type_from_code(h.id_type)
            .ok_or_else(|| bad(format!("unknown id type code {}", h.id_type)))?;
        let rows = usize::try_from(h.rows.get()).map_err(|_| bad("row count overflows".into()))?;
        let mut seg = Segment {
            file,
            dim,
            metric,
            id_type,
            rows,
            meta: SegmentMeta::default(),
            id_index: HashMap::new(),
            id_order: std::sync::OnceLock::new(),
        };
        seg.check_lengths()?;
        seg.meta = serde_json::from_slice(seg.section(Section::Meta))
            .map_err(|e| bad(format!("meta section: {e}")))?;
        seg.id_index = seg.build_id_index()?;
        if let Some(Err(e)) = seg.payload_index() {
            return Err(bad(format!("payload index: {e}")));
        }
        Ok(seg)
    }

    fn section(&self, kind: Section) -> &[u8] {
        self.file.section(kind as u32)
    }

    fn typed<T: bytemuck::Pod>(&self, kind: Section) -> &[T] {
        // Lengths and alignment were checked at open; an empty slice can only
        // come from a zero-row segment.
        bytemuck::try_cast_slice(self.section(kind)).unwrap_or(&[])
    }

    fn check_lengths(&self) -> Result<()> {
        let expect = |kind: Section, elem: usize, count: usize| -> Result<()> {
            let bytes = self.section(kind);
            if bytes.len() != elem * count {
                return Err(Error::corrupt(
                    &self.file.path,
                    format!(
                        "section {kind:?} holds {} bytes, expected {}",
                        bytes.len(),
                        elem * count
                    ),
                ));
            }
            Ok(())
        };
        expect(Section::Vectors, 4, self.rows * self.dim)?;
        expect(Section::Partitions, 4, self.rows)?;
        expect(Section::Offsets, 8, self.rows)?;
        expect(Section::PayloadOffsets, 8, self.rows + 1)?;
        match self.id_type {
            IdType::U64 => expect(Section::IdsU64, 8, self.rows)?,
            IdType::String => expect(Section::IdsStrOffsets, 8, self.rows + 1)?,
        }
        let check_offsets = |offsets: &[u64], data_len: usize, what: &str| -> Result<()> {
            let mut prev = 0u64;
            for &o in offsets {
                if o < prev || o as usize > data_len {
                    return Err(Error::corrupt(
                        &self.file.path,
                        format!("{what} offsets are not monotonic"),
                    ));
                }
                prev = o;
            }
            Ok(())
        };
        check_offsets(
            self.typed::<u64>(Section::PayloadOffsets),
            self.section(Section::PayloadBytes).len(),
            "payload",
        )?;
        if self.id_type == IdType::String {
            check_offsets(
                self.typed::<u64>(Section::IdsStrOffsets),
                self.section(Section::IdsStrBytes).len(),
                "id",
            )?;
        }
        Ok(())
    }

    fn build_id_index(&self) -> Result<HashMap<PointId, u32>> {
        let ids = self.ids();
        let mut index = HashMap::with_capacity(self.rows);
        for row in 0..self.rows {
            let id = ids.get(row).ok_or_else(|| {
                Error::corrupt(
                    &self.file.path,
                    format!("id of row {row} is not valid UTF-8"),
                )
            })?;
            // A later row of the same id (an upsert within one seal) wins.
            index.insert(id, row as u32);
        }
        Ok(index)
    }

    /// The payload index, when the collection declared indexed fields at
    /// seal time. The file checksum covers it, so only its structure is
    /// checked here (cheap: header and field table).
    pub fn payload_index(
        &self,
    ) -> Option<std::result::Result<eddy_filter::PayloadIndexView<'_>, eddy_filter::IndexError>>
    {
        let bytes = self.section(Section::PayloadIndex);
        (!bytes.is_empty()).then(|| eddy_filter::PayloadIndexView::open_unverified(bytes))
    }

    /// The file this segment was mapped from.
    pub fn path(&self) -> &Path {
        &self.file.path
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The metric the vectors were prepared for.
    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// The id type.
    pub fn id_type(&self) -> IdType {
        self.id_type
    }

    /// Number of rows (deleted ones included; deletes live in the manifest).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Size of the mapped file in bytes.
    pub fn file_len(&self) -> usize {
        self.file.len()
    }

    /// Offset ranges and creation time.
    pub fn meta(&self) -> &SegmentMeta {
        &self.meta
    }

    /// All vectors, row-major.
    pub fn vectors(&self) -> &[f32] {
        self.typed(Section::Vectors)
    }

    /// The vector of `row`.
    pub fn vector(&self, row: u32) -> &[f32] {
        let start = row as usize * self.dim;
        &self.vectors()[start..start + self.dim]
    }

    /// The id column.
    pub fn ids(&self) -> Ids<'_> {
        match self.id_type {
            IdType::U64 => Ids::U64(self.typed(Section::IdsU64)),
            IdType::String => Ids::Str {
                offsets: self.typed(Section::IdsStrOffsets),
                bytes: self.section(Section::IdsStrBytes),
            },
        }
    }

    /// The id of `row`.
    pub fn id(&self, row: u32) -> Option<PointId> {
        self.ids().get(row as usize)
    }

    /// The row holding `id` (the last one, if the segment holds several).
    pub fn row_of(&self, id: &PointId) -> Option<u32> {
        self.id_index.get(id).copied()
    }

    /// The current row of each id (see [`Segment::is_current`]), in id
    /// order: built once per segment on first use (n log n), so a scroll
    /// page seeks its cursor instead of visiting every row.
    pub fn rows_in_id_order(&self) -> &[u32] {
        self.id_order.get_or_init(|| {
            let mut pairs: Vec<(&PointId, u32)> =
                self.id_index.iter().map(|(id, row)| (id, *row)).collect();
            pairs.sort_unstable();
            pairs.into_iter().map(|(_, row)| row).collect()
        })
    }

    /// The position in [`Segment::rows_in_id_order`] of the first id after
    /// `after` (all of them for none).
    pub fn id_order_after(&self, after: Option<&PointId>) -> usize {
        let Some(after) = after else { return 0 };
        self.rows_in_id_order()
            .partition_point(|&row| self.id(row).is_some_and(|id| id <= *after))
    }

    /// Whether `row` is the current row of its id in this segment (false for
    /// a row superseded by a later row of the same id in the same segment).
    pub fn is_current(&self, row: u32) -> bool {
        self.id(row).and_then(|id| self.row_of(&id)) == Some(row)
    }

    /// Source partition of `row`.
    pub fn partition(&self, row: u32) -> u32 {
        self.typed::<u32>(Section::Partitions)[row as usize]
    }

    /// Source offset of `row`.
    pub fn offset(&self, row: u32) -> i64 {
        self.typed::<i64>(Section::Offsets)[row as usize]
    }

    /// The JSON payload object of `row` (empty bytes for no payload).
    pub fn payload_json(&self, row: u32) -> &[u8] {
        let offsets = self.typed::<u64>(Section::PayloadOffsets);
        let (start, end) = (
            offsets[row as usize] as usize,
            offsets[row as usize + 1] as usize,
        );
        &self.section(Section::PayloadBytes)[start..end]
    }
}
