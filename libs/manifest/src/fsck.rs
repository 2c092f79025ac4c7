//! `fsck`: checks over the stored segments themselves that every point is
//! stored exactly once (query results deduplicate, so they cannot prove it).

use std::collections::HashMap;

use eddy_model::PointId;
use eddy_segment::Segment;

use crate::{Result, Store};

/// What [`fsck`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FsckReport {
    /// Manifest version checked.
    pub version: u64,
    /// Segments checked.
    pub segments: usize,
    /// Live rows over all segments.
    pub live_rows: u64,
    /// Ids with more than one live row, and how many.
    pub duplicates: Vec<(PointId, u32)>,
    /// Segments whose delete count disagrees with their delete file.
    pub delete_count_mismatches: Vec<String>,
}

impl FsckReport {
    /// Whether nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.duplicates.is_empty() && self.delete_count_mismatches.is_empty()
    }
}

/// Opens every live segment of the newest manifest (checking its checksum),
/// applies the delete files, and counts live rows per id.
pub fn fsck(store: &Store, collection: &str) -> Result<(FsckReport, HashMap<PointId, u32>)> {
    let manifest = store.latest_manifest(collection)?;
    let mut report = FsckReport {
        version: manifest.version,
        segments: manifest.segments.len(),
        ..FsckReport::default()
    };
    let mut counts: HashMap<PointId, u32> = HashMap::new();
    for entry in &manifest.segments {
        let seg = Segment::open(&store.segment_path(collection, &entry.id))?;
        let deleted = match &entry.deletes {
            Some(name) => store.read_deletes(collection, name)?,
            None => Default::default(),
        };
        if deleted.len() != entry.deleted {
            report.delete_count_mismatches.push(entry.id.clone());
        }
        for row in 0..seg.rows() as u32 {
            if deleted.contains(row) || !seg.is_current(row) {
                continue;
            }
            if let Some(id) = seg.id(row) {
                *counts.entry(id).or_default() += 1;
                report.live_rows += 1;
            }
        }
    }
    report.duplicates = counts
        .iter()
        .filter(|(_, &n)| n > 1)
        .map(|(id, &n)| (id.clone(), n))
        .collect();
    report.duplicates.sort();
    Ok((report, counts))
}
