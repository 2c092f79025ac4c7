//! The growing buffer: rows not yet sealed, with upsert and delete semantics.
//!
//! Ingest appends events here and seals the live rows into a segment; the
//! query service keeps one as its tail of fresh events. Both need the same
//! rules: a later event for an id replaces the earlier row, a tombstone
//! removes it, and every id the buffer has seen an event for is "touched", so
//! older copies in sealed segments can be masked.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use eddy_hnsw::{exact_scan, ScanRows, Vectors};
use eddy_model::{FieldType, IdType, Metric, PointId};

use crate::scan_codes::ScanCodes;
use crate::search::{neighbors, Neighbor};
use crate::{Result, SegmentWriter};

/// A borrowed row.
#[derive(Debug, Clone, Copy)]
pub struct RowRef<'a> {
    /// The point id.
    pub id: &'a PointId,
    /// The vector.
    pub vector: &'a [f32],
    /// Source partition.
    pub partition: u32,
    /// Source offset.
    pub offset: i64,
    /// The payload as a JSON object (empty for none).
    pub payload_json: &'a [u8],
}

/// Where an event came from: its partition and offset, its row within the
/// message (an Arrow message carries many), and its timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Origin {
    /// The event's timestamp in ms since the Unix epoch (0 when unknown).
    pub timestamp_ms: i64,
    /// Partition of the event.
    pub partition: u32,
    /// Offset of the event.
    pub offset: i64,
    /// Row within the message (0 for single-point events).
    pub row: u32,
}

impl Origin {
    /// An origin with no timestamp, for row 0 of `partition`/`offset`.
    pub fn at(partition: u32, offset: i64) -> Self {
        Self {
            timestamp_ms: 0,
            partition,
            offset,
            row: 0,
        }
    }

    /// The order in which two events for one id take effect when they
    /// arrived on different partitions (DESIGN.md, "The Kafka event"):
    /// latest timestamp, then partition, then offset, then row. The derived
    /// `Ord` is exactly this order.
    pub fn supersedes(&self, other: &Origin) -> bool {
        self > other
    }
}

/// The latest event the buffer saw for an id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Touch {
    /// Partition of the event.
    pub partition: u32,
    /// Offset of the event.
    pub offset: i64,
    /// Whether the event was a delete (else an upsert, now a live row).
    pub deleted: bool,
    /// Where exactly the event came from.
    pub origin: Origin,
}

/// Rows in memory, searchable by exact scan.
#[derive(Debug, Clone)]
pub struct Growing {
    dim: usize,
    metric: Metric,
    id_type: IdType,
    vectors: Vec<f32>,
    ids: Vec<PointId>,
    partitions: Vec<u32>,
    offsets: Vec<i64>,
    payload_offsets: Vec<usize>,
    payload_bytes: Vec<u8>,
    live: Vec<bool>,
    live_rows: usize,
    current: HashMap<PointId, u32>,
    touched: HashMap<PointId, Touch>,
    /// From how many rows on the buffer keeps scan codes (None: never).
    quantize_from: Option<usize>,
    /// Ids touched since the owner last took them (None: not kept).
    journal: Option<Vec<PointId>>,
    /// Scan codes of every row once kept, for [`Growing::search_quantized`].
    codes: Option<ScanCodes>,
}

impl Growing {
    /// An empty buffer.
    pub fn new(dim: usize, metric: Metric, id_type: IdType) -> Self {
        Self {
            dim,
            metric,
            id_type,
            vectors: Vec::new(),
            ids: Vec::new(),
            partitions: Vec::new(),
            offsets: Vec::new(),
            payload_offsets: vec![0],
            payload_bytes: Vec::new(),
            live: Vec::new(),
            live_rows: 0,
            current: HashMap::new(),
            touched: HashMap::new(),
            quantize_from: None,
            journal: None,
            codes: None,
        }
    }

    /// Keeps scan codes of the rows ([`ScanCodes`]: SQ8, and sign bits for
    /// cosine embeddings) from the moment the buffer holds `min_rows` rows
    /// (trained on the rows then held), so [`Growing::search_quantized`]
    /// reads a fraction of the bytes an f32 scan reads. For a buffer that is searched while it grows (the query
    /// tail); ingest's buffer is only sealed and never pays for codes.
    pub fn with_quantized_scan(mut self, min_rows: usize) -> Self {
        self.quantize_from = Some(min_rows.max(1));
        self.encode_new_rows();
        self
    }

    /// Keeps a journal of the ids each upsert and delete touches, which
    /// [`Growing::take_touched_since`] hands over: for an owner that keeps
    /// its own view of what the buffer shadows (the query tail marks the
    /// sealed rows it supersedes) and catches up per batch instead of
    /// walking every touch.
    pub fn with_touch_journal(mut self) -> Self {
        self.journal = Some(Vec::new());
        self
    }

    /// The ids touched since the last call, in order (empty without
    /// [`Growing::with_touch_journal`]). A prune that drops rows empties
    /// the journal: the owner rebuilds its view from [`Growing::touches`]
    /// after one.
    pub fn take_touched_since(&mut self) -> Vec<PointId> {
        self.journal
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Whether the buffer keeps scan codes (searches scan them).
    pub fn is_quantized(&self) -> bool {
        self.codes.is_some()
    }

    /// Every row's vector, row-major (replaced and deleted rows included:
    /// row `r` is `r * dim..(r + 1) * dim`).
    pub fn vectors(&self) -> &[f32] {
        &self.vectors
    }

    /// The buffer's scan codes, once kept.
    pub fn scan_codes(&self) -> Option<&ScanCodes> {
        self.codes.as_ref()
    }

    /// The buffer's codes and vectors, for a scan joint with other rows
    /// without a graph ([`crate::scan_many`], rows taken where
    /// [`Growing::is_live`]); `None` where [`Growing::search_quantized`]
    /// answers alone (no codes kept, or no live row).
    pub fn code_scan_parts(&self) -> Option<(&ScanCodes, Vectors<'_>)> {
        let codes = self.codes.as_ref().filter(|_| self.live_rows > 0)?;
        Some((codes, Vectors::new(&self.vectors, self.dim, self.metric)))
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The metric rows are scored with.
    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// Rows currently live (not replaced or deleted).
    pub fn live_rows(&self) -> usize {
        self.live_rows
    }

    /// Rows stored, dead ones included.
    pub fn rows(&self) -> usize {
        self.ids.len()
    }

    /// Whether no event has been applied since creation or the last prune.
    pub fn is_empty(&self) -> bool {
        self.touched.is_empty()
    }

    /// Approximate heap bytes held by rows.
    pub fn approx_bytes(&self) -> usize {
        let codes = self.codes.as_ref().map_or(0, ScanCodes::bytes);
        self.vectors.len() * 4 + self.payload_bytes.len() + self.ids.len() * 48 + codes
    }

    /// Inserts or replaces the point `id`.
    pub fn upsert(
        &mut self,
        id: PointId,
        vector: &[f32],
        payload_json: &[u8],
        partition: u32,
        offset: i64,
    ) {
        self.upsert_from(id, vector, payload_json, Origin::at(partition, offset));
    }

    /// Inserts or replaces the point `id` with an event from `origin`.
    pub fn upsert_from(
        &mut self,
        id: PointId,
        vector: &[f32],
        payload_json: &[u8],
        origin: Origin,
    ) {
        let Origin {
            partition, offset, ..
        } = origin;
        debug_assert_eq!(vector.len(), self.dim);
        self.kill_current(&id);
        let row = self.ids.len() as u32;
        self.vectors.extend_from_slice(vector);
        self.partitions.push(partition);
        self.offsets.push(offset);
        self.payload_bytes.extend_from_slice(payload_json);
        self.payload_offsets.push(self.payload_bytes.len());
        self.live.push(true);
        self.live_rows += 1;
        self.current.insert(id.clone(), row);
        if let Some(journal) = &mut self.journal {
            journal.push(id.clone());
        }
        self.touched.insert(
            id.clone(),
            Touch {
                partition,
                offset,
                deleted: false,
                origin,
            },
        );
        self.ids.push(id);
        self.encode_new_rows();
    }

    /// Brings the codes up to the rows: trains them once the buffer reaches
    /// its `quantize_from` rows, then encodes each new row. Vectors are
    /// checked finite before they get here; if encoding still fails, the
    /// buffer stops keeping codes and its searches scan f32.
    fn encode_new_rows(&mut self) {
        let Some(from) = self.quantize_from else {
            return;
        };
        let dim = self.dim;
        let codes = match self.codes.take() {
            Some(codes) => Some(codes),
            None if self.ids.len() >= from => ScanCodes::trained(&self.vectors, dim, self.metric),
            None => return,
        };
        let Some(mut codes) = codes else {
            self.quantize_from = None;
            return;
        };
        let encoded = codes.len();
        for v in self.vectors[encoded * dim..].chunks_exact(dim) {
            if codes.push(v).is_err() {
                self.quantize_from = None;
                return;
            }
        }
        self.codes = Some(codes);
    }

    /// Deletes the point `id` (a tombstone at `partition`/`offset`).
    pub fn delete(&mut self, id: PointId, partition: u32, offset: i64) {
        self.delete_from(id, Origin::at(partition, offset));
    }

    /// Deletes the point `id` with a tombstone from `origin`.
    pub fn delete_from(&mut self, id: PointId, origin: Origin) {
        self.kill_current(&id);
        if let Some(journal) = &mut self.journal {
            journal.push(id.clone());
        }
        self.touched.insert(
            id,
            Touch {
                partition: origin.partition,
                offset: origin.offset,
                deleted: true,
                origin,
            },
        );
    }

    fn kill_current(&mut self, id: &PointId) {
        if let Some(old) = self.current.remove(id) {
            self.live[old as usize] = false;
            self.live_rows -= 1;
        }
    }

    /// The latest event seen for `id`, if any.
    pub fn touched(&self, id: &PointId) -> Option<Touch> {
        self.touched.get(id).copied()
    }

    /// Every id with an event in the buffer, and its latest event.
    pub fn touches(&self) -> impl Iterator<Item = (&PointId, &Touch)> {
        self.touched.iter()
    }

    /// Whether `row` is live.
    pub fn is_live(&self, row: u32) -> bool {
        self.live.get(row as usize).copied().unwrap_or(false)
    }

    /// The live row of `id`, if any.
    pub fn row_of(&self, id: &PointId) -> Option<u32> {
        self.current.get(id).copied()
    }

    /// Row `row` (live or not).
    pub fn row(&self, row: u32) -> RowRef<'_> {
        let r = row as usize;
        RowRef {
            id: &self.ids[r],
            vector: &self.vectors[r * self.dim..(r + 1) * self.dim],
            partition: self.partitions[r],
            offset: self.offsets[r],
            payload_json: &self.payload_bytes[self.payload_offsets[r]..self.payload_offsets[r + 1]],
        }
    }

    /// Live rows in row order: the order a sealed segment stores them in.
    pub fn live_row_refs(&self) -> impl Iterator<Item = RowRef<'_>> {
        (0..self.ids.len() as u32)
            .filter(|&r| self.live[r as usize])
            .map(|r| self.row(r))
    }

    /// Writes the live rows as a segment file, with a payload index over
    /// `indexed` fields; its size and CRC-32.
    pub fn write_segment(
        &self,
        path: &Path,
        indexed: &BTreeMap<String, FieldType>,
    ) -> Result<crate::WrittenFile> {
        let mut writer =
            SegmentWriter::new(self.dim, self.metric, self.id_type).with_payload_index(indexed);
        for row in self.live_row_refs() {
            writer.push(row)?;
        }
        writer.finish(path)
    }

    /// Drops every row and touch whose offset is below its partition's
    /// cut-off: those events are now covered by sealed segments.
    pub fn prune_below(&mut self, cutoffs: &BTreeMap<u32, i64>) {
        if let Some(pruned) = self.pruned_below(cutoffs) {
            *self = pruned;
        }
    }

    /// This buffer without the rows and touches [`Growing::prune_below`]
    /// drops, built beside it (`None`: it drops none), so a reader can
    /// prepare it while searches still read this one.
    pub fn pruned_below(&self, cutoffs: &BTreeMap<u32, i64>) -> Option<Growing> {
        let keep =
            |partition: u32, offset: i64| cutoffs.get(&partition).is_none_or(|&c| offset >= c);
        if self.touched.values().all(|t| keep(t.partition, t.offset)) {
            return None;
        }
        let mut next = Growing::new(self.dim, self.metric, self.id_type);
        // The pruned buffer keeps the trained range: no retraining per prune.
        next.quantize_from = self.quantize_from;
        next.codes = self.codes.as_ref().map(ScanCodes::emptied);
        for r in 0..self.ids.len() as u32 {
            let row = self.row(r);
            if self.live[r as usize] && keep(row.partition, row.offset) {
                let origin = self
                    .touched
                    .get(row.id)
                    .map_or(Origin::at(row.partition, row.offset), |t| t.origin);
                next.upsert_from(row.id.clone(), row.vector, row.payload_json, origin);
            }
        }
        for (id, t) in &self.touched {
            if t.deleted && keep(t.partition, t.offset) {
                next.touched.insert(id.clone(), *t);
            }
        }
        next.journal = self.journal.as_ref().map(|_| Vec::new());
        Some(next)
    }
}

impl Growing {
    /// The `k` closest live rows to `query` among those `accept` lets
    /// through, closest first, by exact scan (`accept` is asked only about
    /// rows that would enter the top `k`). `query` is already normalised for
    /// cosine; a query of the wrong length finds nothing.
    pub fn search(&self, query: &[f32], k: usize, accept: &dyn Fn(u32) -> bool) -> Vec<Neighbor> {
        if self.live_rows == 0 {
            return Vec::new();
        }
        let vectors = Vectors::new(&self.vectors, self.dim, self.metric);
        let live = |row: u32| self.live[row as usize] && accept(row);
        neighbors(exact_scan(&vectors, query, k, ScanRows::All(&live)))
    }

    /// The `k` closest live rows like [`Growing::search`], found by scanning
    /// the codes and rescoring the best `keep` exactly, once the buffer
    /// keeps codes ([`Growing::with_quantized_scan`], [`ScanCodes::search`]);
    /// exactly until then. Scores are exact; a true top-`k` row is missed
    /// only when its codes rank it out of the shortlist or below `keep`.
    pub fn search_quantized(
        &self,
        query: &[f32],
        k: usize,
        keep: usize,
        accept: &dyn Fn(u32) -> bool,
    ) -> Vec<Neighbor> {
        // Nothing to find: not even the query's codes are made (a tail
        // whose rows were all sealed and replaced cost 2 % of eddy-query's
        // CPU under DoExchange batches preparing them).
        if self.live_rows == 0 {
            return Vec::new();
        }
        let Some(codes) = &self.codes else {
            return self.search(query, k, accept);
        };
        let vectors = Vectors::new(&self.vectors, self.dim, self.metric);
        let live = |row: u32| self.live[row as usize] && accept(row);
        neighbors(codes.search(&vectors, query, k, keep, &live))
    }
}

#[cfg(test)]
mod tests;
