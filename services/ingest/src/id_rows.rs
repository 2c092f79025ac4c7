//! The id → row map of one collection: where the current row of every id
//! is among the sealed segments, so a seal can delete the rows its events
//! replace. Entries whose row was deleted since stay in the map and are
//! filtered on lookup, so syncing a delete file costs nothing per row.

use std::collections::{HashMap, HashSet};

use eddy_manifest::{Manifest, Store};
use eddy_model::PointId;
use eddy_segment::Segment;
use roaring::RoaringBitmap;

/// Current sealed row of each id, and each segment's delete bitmap.
#[derive(Debug, Default)]
pub struct IdRows {
    /// id -> (segment slot, row).
    rows: HashMap<PointId, (u32, u32)>,
    /// Segment id of each slot.
    slots: Vec<String>,
    slot_of: HashMap<String, u32>,
    /// Deleted rows per slot, as the newest synced manifest has them.
    deleted: Vec<RoaringBitmap>,
    /// Delete file name per slot, to tell when it changed.
    delete_files: Vec<Option<String>>,
}

impl IdRows {
    /// Brings the map up to `manifest`: loads segments it has not seen and
    /// re-reads delete files that changed. A manifest that dropped segments
    /// (a merge) rebuilds the map from scratch.
    pub fn sync(&mut self, store: &Store, manifest: &Manifest) -> eddy_manifest::Result<()> {
        let listed: HashSet<&str> = manifest.segments.iter().map(|s| s.id.as_str()).collect();
        if self.slots.iter().any(|s| !listed.contains(s.as_str())) {
            *self = IdRows::default();
        }
        for entry in &manifest.segments {
            let slot = match self.slot_of.get(&entry.id) {
                Some(&slot) => slot,
                None => {
                    let seg = Segment::open(&store.segment_path(&manifest.collection, &entry.id))?;
                    let ids = (0..seg.rows() as u32).filter_map(|row| seg.id(row));
                    self.add_segment(&entry.id, ids)
                }
            };
            let s = slot as usize;
            if self.delete_files[s] != entry.deletes {
                let bits = match &entry.deletes {
                    Some(name) => store.read_deletes(&manifest.collection, name)?,
                    None => RoaringBitmap::new(),
                };
                self.deleted[s] = bits;
                self.delete_files[s] = entry.deletes.clone();
            }
        }
        Ok(())
    }

    /// Registers segment `segment` whose row `i` holds the `i`-th id, without
    /// reading it back (a seal knows what it just wrote).
    pub fn add_segment(&mut self, segment: &str, ids: impl Iterator<Item = PointId>) -> u32 {
        if let Some(&slot) = self.slot_of.get(segment) {
            return slot;
        }
        let slot = self.slots.len() as u32;
        for (row, id) in ids.enumerate() {
            self.rows.insert(id, (slot, row as u32));
        }
        self.slots.push(segment.to_owned());
        self.slot_of.insert(segment.to_owned(), slot);
        self.deleted.push(RoaringBitmap::new());
        self.delete_files.push(None);
        slot
    }

    /// Where the current sealed row of `id` is, as (segment id, row).
    pub fn get(&self, id: &PointId) -> Option<(&str, u32)> {
        let &(slot, row) = self.rows.get(id)?;
        if self.deleted[slot as usize].contains(row) {
            return None;
        }
        Some((self.slots[slot as usize].as_str(), row))
    }

    /// The delete bitmap of segment `id` as last synced.
    pub fn deleted(&self, segment: &str) -> RoaringBitmap {
        self.slot_of
            .get(segment)
            .map(|&s| self.deleted[s as usize].clone())
            .unwrap_or_default()
    }
}
