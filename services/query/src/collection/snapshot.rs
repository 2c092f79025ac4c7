//! One manifest version as served: its segments mapped (or held in huge
//! pages) and checked against the collection, their index files checked,
//! their delete bitmaps loaded. A segment that cannot be served (damaged,
//! or written for another dimension, metric or id type) is quarantined:
//! left out and reported, while the rest of the version is served.

use std::collections::BTreeMap;
use std::sync::Arc;

use eddy_manifest::{Manifest, SegmentEntry, Store};
use eddy_model::{CollectionDef, FieldType, PointId};
use eddy_segment::{IndexFile, Residency, Segment};
use roaring::RoaringBitmap;

/// A sealed segment as served: the map and its delete bitmap.
#[derive(Debug, Clone)]
pub struct LoadedSegment {
    /// The manifest's entry.
    pub entry: SegmentEntry,
    /// The mapped file.
    pub segment: Arc<Segment>,
    /// Deleted rows.
    pub deleted: Arc<RoaringBitmap>,
    /// The mapped index file (graph, codes), once ingest has built it.
    pub index: Option<Arc<IndexFile>>,
    /// The payload fields its payload index covers, with their types (a
    /// filter on any other field reads the segment's payloads).
    pub indexed_fields: Arc<BTreeMap<String, FieldType>>,
}

impl LoadedSegment {
    /// Whether its payload index covers every field `def` indexes (false
    /// while eddy-ingest has yet to re-index it after an alteration).
    pub fn covers(&self, def: &CollectionDef) -> bool {
        def.payload_fields
            .iter()
            .all(|(f, t)| self.indexed_fields.get(f) == Some(t))
    }
}

/// The payload fields `segment`'s payload index covers.
fn indexed_fields(segment: &Segment) -> BTreeMap<String, FieldType> {
    match segment.payload_index() {
        Some(Ok(index)) => index.fields().map(|(f, t)| (f.to_owned(), t)).collect(),
        _ => BTreeMap::new(),
    }
}

/// One manifest version, loaded.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Manifest version (0 = nothing sealed).
    pub version: u64,
    /// The segments the manifest lists, largest first (searching the
    /// largest first gives the others a tighter bound).
    pub segments: Vec<LoadedSegment>,
    /// Per partition, the first offset not in the segments: the tail serves
    /// events from here on.
    pub cutoffs: BTreeMap<u32, i64>,
    /// Segments of the manifest left out, with the reason: their rows are
    /// missing from answers until the segment is repaired or replaced.
    pub quarantined: Vec<Quarantined>,
}

/// A segment the manifest lists that is not served.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Quarantined {
    /// The segment id.
    pub segment: String,
    /// Why (the open error, or the mismatch).
    pub reason: String,
}

/// Opens one listed segment and checks it against `def`.
fn open_checked(
    store: &Store,
    def: &CollectionDef,
    entry: &SegmentEntry,
    residency: Residency,
) -> Result<Segment, String> {
    let segment = Segment::open_with(&store.segment_path(&def.name, &entry.id), residency)
        .map_err(|e| e.to_string())?;
    let mismatch = |what: &str, got: String, want: String| {
        format!("written for {what} {got}, the collection has {want}")
    };
    if segment.dim() != def.dimension as usize {
        return Err(mismatch(
            "dimension",
            segment.dim().to_string(),
            def.dimension.to_string(),
        ));
    }
    if segment.metric() != def.metric {
        return Err(mismatch(
            "metric",
            format!("{:?}", segment.metric()),
            format!("{:?}", def.metric),
        ));
    }
    if segment.id_type() != def.id_type {
        return Err(mismatch(
            "id type",
            format!("{:?}", segment.id_type()),
            format!("{:?}", def.id_type),
        ));
    }
    if segment.rows() as u64 != entry.rows {
        return Err(format!(
            "holds {} rows, the manifest says {}",
            segment.rows(),
            entry.rows
        ));
    }
    Ok(segment)
}

impl Snapshot {
    /// Loads `manifest` of the collection `def`, reusing segments and
    /// delete bitmaps `previous` has; new files are held as `residency`
    /// says. A segment that cannot be served is quarantined (see the
    /// module), never an error for the whole version.
    pub fn load(
        store: &Store,
        def: &CollectionDef,
        manifest: &Manifest,
        previous: &Snapshot,
        residency: Residency,
    ) -> Snapshot {
        let mut segments = Vec::with_capacity(manifest.segments.len());
        let mut quarantined = Vec::new();
        for entry in &manifest.segments {
            let old = previous.segments.iter().find(|s| s.entry.id == entry.id);
            let segment = match old {
                Some(s) => Ok(s.segment.clone()),
                None => open_checked(store, def, entry, residency).map(Arc::new),
            };
            let deleted = match (old, &entry.deletes) {
                (Some(s), _) if s.entry.deletes == entry.deletes => Ok(s.deleted.clone()),
                (_, Some(name)) => store
                    .read_deletes(&manifest.collection, name)
                    .map(Arc::new)
                    .map_err(|e| format!("its delete file {name}: {e}")),
                (_, None) => Ok(Arc::new(RoaringBitmap::new())),
            };
            let (segment, deleted) = match (segment, deleted) {
                (Ok(segment), Ok(deleted)) => (segment, deleted),
                (Err(reason), _) | (_, Err(reason)) => {
                    tracing::error!(collection = %def.name, segment = %entry.id, %reason, "segment quarantined: the rest of the collection is served without it");
                    quarantined.push(Quarantined {
                        segment: entry.id.clone(),
                        reason,
                    });
                    continue;
                }
            };
            let index = match (old, &entry.index) {
                (Some(s), Some(_)) if s.entry.index == entry.index => s.index.clone(),
                (_, Some(name)) => {
                    load_index(store, &manifest.collection, name, &segment, residency)
                }
                (_, None) => None,
            };
            let indexed_fields = match old {
                Some(s) => s.indexed_fields.clone(),
                None => Arc::new(indexed_fields(&segment)),
            };
            segments.push(LoadedSegment {
                entry: entry.clone(),
                segment,
                deleted,
                index,
                indexed_fields,
            });
        }
        segments.sort_by_key(|s| std::cmp::Reverse(s.entry.rows));
        Snapshot {
            version: manifest.version,
            segments,
            cutoffs: manifest
                .partitions
                .iter()
                .map(|(p, s)| (*p, s.next_offset))
                .collect(),
            quarantined,
        }
    }

    /// Bytes of the segment and index files this snapshot holds.
    pub fn file_bytes(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| {
                let index = s.index.as_ref().map_or(0, |i| i.file_len());
                (s.segment.file_len() + index) as u64
            })
            .sum()
    }

    /// Live rows over the segments (deletes applied, tail masking not).
    pub fn sealed_rows(&self) -> u64 {
        self.segments.iter().map(|s| s.entry.live_rows()).sum()
    }

    /// Where the live sealed row of `id` is, as (segment index, row).
    pub fn find(&self, id: &PointId) -> Option<(usize, u32)> {
        self.segments.iter().enumerate().find_map(|(i, s)| {
            s.segment
                .row_of(id)
                .filter(|row| !s.deleted.contains(*row))
                .map(|row| (i, row))
        })
    }
}

/// Opens and checks a segment's index file. A damaged index is logged and
/// skipped: the segment stays searchable by exact scan.
fn load_index(
    store: &Store,
    collection: &str,
    name: &str,
    segment: &Segment,
    residency: Residency,
) -> Option<Arc<IndexFile>> {
    let path = store.index_path(collection, name);
    let loaded = IndexFile::open_with(&path, segment.rows(), segment.dim(), residency)
        .and_then(|index| eddy_segment::check_index(segment, &index).map(|()| index));
    match loaded {
        Ok(index) => Some(Arc::new(index)),
        Err(e) => {
            tracing::error!(collection, index = name, error = %e, "segment index unusable; searching the segment exactly");
            None
        }
    }
}
