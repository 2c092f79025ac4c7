//! Many points decoded from one message (an Arrow IPC batch), kept in
//! columns: one vector buffer and one payload buffer, not a copy per row.

use eddy_model::PointId;

/// Points in row order, stored column-wise.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Points {
    dim: usize,
    ids: Vec<PointId>,
    vectors: Vec<f32>,
    payload_bytes: Vec<u8>,
    payload_ends: Vec<usize>,
}

/// One row of [`Points`], borrowed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PointRef<'a> {
    /// The point id.
    pub id: &'a PointId,
    /// The vector (validated and normalised like a single event's).
    pub vector: &'a [f32],
    /// The payload as one JSON object's bytes (empty for none).
    pub payload: &'a [u8],
    /// The row's index within its message: the order of its effect.
    pub row: u32,
}

impl Points {
    /// An empty set of `dim`-dimensional points with room for `rows`.
    pub(crate) fn with_capacity(dim: usize, rows: usize) -> Self {
        Self {
            dim,
            ids: Vec::with_capacity(rows),
            vectors: Vec::with_capacity(rows * dim),
            payload_bytes: Vec::new(),
            payload_ends: Vec::with_capacity(rows),
        }
    }

    /// Appends a row whose payload was already written with
    /// [`Points::payload_buffer`].
    pub(crate) fn push(&mut self, id: PointId, vector: &[f32]) {
        self.ids.push(id);
        self.vectors.extend_from_slice(vector);
        self.payload_ends.push(self.payload_bytes.len());
    }

    /// The payload buffer the next row's payload JSON is appended to.
    pub(crate) fn payload_buffer(&mut self) -> &mut Vec<u8> {
        &mut self.payload_bytes
    }

    /// The vector buffer (for validation in place).
    pub(crate) fn vectors_mut(&mut self) -> &mut [f32] {
        &mut self.vectors
    }

    /// Number of points.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Row `row`.
    pub fn get(&self, row: usize) -> Option<PointRef<'_>> {
        let id = self.ids.get(row)?;
        let start = if row == 0 {
            0
        } else {
            self.payload_ends[row - 1]
        };
        Some(PointRef {
            id,
            vector: &self.vectors[row * self.dim..(row + 1) * self.dim],
            payload: &self.payload_bytes[start..self.payload_ends[row]],
            row: row as u32,
        })
    }

    /// The rows in order.
    pub fn iter(&self) -> impl Iterator<Item = PointRef<'_>> {
        (0..self.len()).filter_map(|row| self.get(row))
    }
}
