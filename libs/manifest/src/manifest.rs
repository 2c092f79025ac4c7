//! The manifest: one immutable version of a collection's state.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// Progress and ownership of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct PartitionState {
    /// First offset not yet covered by sealed segments (and their deletes).
    pub next_offset: i64,
    /// Bumped by each worker that takes the partition over; a publish naming
    /// an older epoch is refused for this partition.
    pub owner_epoch: u64,
}

/// An operator's decision to resume a stopped partition from a chosen
/// offset: who, why, when, and the offsets before and after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionResume {
    /// The offset the partition resumes from (its new `next_offset`).
    pub offset: i64,
    /// The partition's `next_offset` before the resume.
    pub previous_offset: i64,
    /// Who resumed it (operator or tool).
    pub by: String,
    /// Why (free text, e.g. "topic re-created; events 0-99 restored").
    pub reason: String,
    /// When, in ms since the Unix epoch.
    pub at_ms: u64,
}

/// A live segment as the manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentEntry {
    /// Segment id; the file is `segments/<id>.seg`.
    pub id: String,
    /// Rows in the file.
    pub rows: u64,
    /// File size in bytes.
    pub bytes: u64,
    /// Current delete file (`deletes/<name>`), if any row is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletes: Option<String>,
    /// Number of deleted rows.
    #[serde(default)]
    pub deleted: u64,
    /// Per partition, the first and last source offset of the rows.
    pub offset_ranges: BTreeMap<u32, (i64, i64)>,
    /// The segment's index file (`segments/<name>`: graph and codes) once it
    /// is built; until then the segment is searched by exact scan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<String>,
}

impl SegmentEntry {
    /// Rows not deleted.
    pub fn live_rows(&self) -> u64 {
        self.rows.saturating_sub(self.deleted)
    }
}

/// One version of a collection's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Version number, from 1; version 0 is the implicit empty state.
    pub version: u64,
    /// The collection.
    pub collection: String,
    /// Live segments, oldest first.
    pub segments: Vec<SegmentEntry>,
    /// Per partition progress and owner epoch.
    pub partitions: BTreeMap<u32, PartitionState>,
    /// Per partition, the latest operator resume (absent when never resumed).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resumes: BTreeMap<u32, PartitionResume>,
    /// When this version was published, in ms since the Unix epoch.
    pub published_ms: u64,
}

impl Manifest {
    /// The implicit version 0 of a collection: nothing sealed yet.
    pub fn empty(collection: &str) -> Self {
        Self {
            version: 0,
            collection: collection.to_owned(),
            segments: Vec::new(),
            partitions: BTreeMap::new(),
            resumes: BTreeMap::new(),
            published_ms: 0,
        }
    }

    /// The next offset to read for `partition` (0 when never sealed).
    pub fn next_offset(&self, partition: u32) -> i64 {
        self.partitions.get(&partition).map_or(0, |p| p.next_offset)
    }

    /// Live rows over all segments.
    pub fn live_rows(&self) -> u64 {
        self.segments.iter().map(SegmentEntry::live_rows).sum()
    }

    /// Names of every file this version needs: each segment's `<id>.seg`,
    /// its index file and its delete file.
    pub fn file_names(&self) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for s in &self.segments {
            names.insert(format!("{}.seg", s.id));
            names.extend(s.index.clone());
            names.extend(s.deletes.clone());
        }
        names
    }

    /// A copy with the version bumped, ready to be changed and published.
    pub fn successor(&self) -> Self {
        let mut next = self.clone();
        next.version = self.version + 1;
        next.published_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        next
    }
}
