//! The id → row map of one collection: where the current row of every id
//! is among the sealed segments, so a seal can delete the rows its events
//! replace.
//!
//! Every sealed copy of an id is kept, and the current one is the live
//! copy (not deleted) from the newest source — the (partition, offset) of
//! the event that wrote it — never the one loaded last: a merge re-lists
//! old rows in a new segment after newer ones, and a deleted copy it
//! carried must not hide the newer live row (issue 10); neither may the
//! pre-deleted copy a fenced worker published late. A seal deletes the
//! older live copy whenever it publishes a newer one, so at most one copy
//! is live; the source only breaks ties should that ever fail. Deleted
//! copies stay in the map and are filtered on lookup, so syncing a delete
//! file costs nothing per row; a merge (which drops deleted rows) rebuilds
//! the map.

use std::collections::{HashMap, HashSet};

use eddy_manifest::{Manifest, Store};
use eddy_model::PointId;
use eddy_segment::Segment;
use roaring::RoaringBitmap;

/// Where an event came from: (partition, offset). Within a partition the
/// larger offset is newer; an id seen on two partitions is resolved by
/// partition, then offset, so every process picks the same copy.
pub type Source = (u32, i64);

/// One sealed copy of an id.
#[derive(Debug, Clone, Copy)]
struct Copy {
    slot: u32,
    row: u32,
    source: Source,
}

/// Current sealed row of each id, and each segment's delete bitmap.
#[derive(Debug, Default)]
pub struct IdRows {
    /// id -> its sealed copy from the newest source.
    rows: HashMap<PointId, Copy>,
    /// id -> its other sealed copies (most ids have none).
    older: HashMap<PointId, Vec<Copy>>,
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
                    let seg =
                        Segment::open(&store.fetch_segment(&manifest.collection, &entry.id)?)?;
                    let rows = (0..seg.rows() as u32).filter_map(|row| {
                        let id = seg.id(row).filter(|_| seg.is_current(row))?;
                        Some((row, id, (seg.partition(row), seg.offset(row))))
                    });
                    self.add_rows(&entry.id, rows)
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

    /// Registers segment `segment` whose row `i` holds the `i`-th id, from
    /// the event at the given source, without reading it back (a seal knows
    /// what it just wrote).
    pub fn add_segment(
        &mut self,
        segment: &str,
        ids: impl Iterator<Item = (PointId, Source)>,
    ) -> u32 {
        let rows = ids
            .enumerate()
            .map(|(row, (id, source))| (row as u32, id, source));
        self.add_rows(segment, rows)
    }

    /// Registers the given rows of segment `segment`; each becomes the
    /// current copy of its id unless a copy from a newer source is known.
    fn add_rows(
        &mut self,
        segment: &str,
        rows: impl Iterator<Item = (u32, PointId, Source)>,
    ) -> u32 {
        if let Some(&slot) = self.slot_of.get(segment) {
            return slot;
        }
        let slot = self.slots.len() as u32;
        for (row, id, source) in rows {
            let copy = Copy { slot, row, source };
            match self.rows.get_mut(&id) {
                None => {
                    self.rows.insert(id, copy);
                }
                Some(newest) => {
                    let older = if source >= newest.source {
                        std::mem::replace(newest, copy)
                    } else {
                        copy
                    };
                    self.older.entry(id).or_default().push(older);
                }
            }
        }
        self.slots.push(segment.to_owned());
        self.slot_of.insert(segment.to_owned(), slot);
        self.deleted.push(RoaringBitmap::new());
        self.delete_files.push(None);
        slot
    }

    /// Where the current sealed row of `id` is, as (segment id, row): its
    /// live copy from the newest source, `None` when every copy is deleted.
    pub fn get(&self, id: &PointId) -> Option<(&str, u32)> {
        let newest = self.rows.get(id)?;
        let live = |c: &&Copy| !self.deleted[c.slot as usize].contains(c.row);
        let copy = match Some(newest).filter(live) {
            Some(c) => c,
            None => self
                .older
                .get(id)?
                .iter()
                .filter(live)
                .max_by_key(|c| c.source)?,
        };
        Some((self.slots[copy.slot as usize].as_str(), copy.row))
    }

    /// The delete bitmap of segment `id` as last synced.
    pub fn deleted(&self, segment: &str) -> RoaringBitmap {
        self.slot_of
            .get(segment)
            .map(|&s| self.deleted[s as usize].clone())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(id: u64) -> PointId {
        PointId::Num(id)
    }

    #[test]
    fn the_newest_source_wins_whatever_the_load_order() {
        let mut rows = IdRows::default();
        // A seal wrote id 1 at offset 50; a merge then lists an older copy
        // (offset 10, deleted in the merged segment) after it.
        rows.add_segment("seal", [(n(1), (0, 50))].into_iter());
        let merged = rows.add_segment("merged", [(n(1), (0, 10)), (n(2), (0, 11))].into_iter());
        rows.deleted[merged as usize].insert(0);
        assert_eq!(rows.get(&n(1)), Some(("seal", 0)));
        assert_eq!(rows.get(&n(2)), Some(("merged", 1)));
        // Loaded the other way round, the same answer.
        let mut other = IdRows::default();
        let merged = other.add_segment("merged", [(n(1), (0, 10)), (n(2), (0, 11))].into_iter());
        other.deleted[merged as usize].insert(0);
        other.add_segment("seal", [(n(1), (0, 50))].into_iter());
        assert_eq!(other.get(&n(1)), Some(("seal", 0)));
    }

    #[test]
    fn an_older_live_copy_is_found_behind_a_deleted_newer_one() {
        let mut rows = IdRows::default();
        // A new owner sealed id 7 at offset 3; the fenced old owner then
        // published its copy of a later event pre-deleted.
        rows.add_segment("owner", [(n(7), (1, 3))].into_iter());
        let fenced = rows.add_segment("fenced", [(n(7), (1, 9))].into_iter());
        rows.deleted[fenced as usize].insert(0);
        assert_eq!(rows.get(&n(7)), Some(("owner", 0)));
        let owner = rows.slot_of["owner"];
        rows.deleted[owner as usize].insert(0);
        assert_eq!(rows.get(&n(7)), None, "every copy deleted");
    }
}
