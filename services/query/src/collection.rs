//! A served collection: the installed snapshot of sealed segments plus the
//! in-memory tail, behind one lock so a query sees both consistently.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use eddy_manifest::{Manifest, SegmentEntry, Store};
use eddy_model::{CollectionDef, PointId};
use eddy_segment::{Growing, Residency, Segment, SegmentIndex};
use parking_lot::RwLock;
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
    pub index: Option<Arc<SegmentIndex>>,
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
}

impl Snapshot {
    /// Loads `manifest`, reusing segments and delete bitmaps `previous` has;
    /// new files are held as `residency` says.
    pub fn load(
        store: &Store,
        manifest: &Manifest,
        previous: &Snapshot,
        residency: Residency,
    ) -> eddy_manifest::Result<Snapshot> {
        let mut segments = Vec::with_capacity(manifest.segments.len());
        for entry in &manifest.segments {
            let old = previous.segments.iter().find(|s| s.entry.id == entry.id);
            let segment = match old {
                Some(s) => s.segment.clone(),
                None => Arc::new(Segment::open_with(
                    &store.segment_path(&manifest.collection, &entry.id),
                    residency,
                )?),
            };
            let deleted = match (old, &entry.deletes) {
                (Some(s), _) if s.entry.deletes == entry.deletes => s.deleted.clone(),
                (_, Some(name)) => Arc::new(store.read_deletes(&manifest.collection, name)?),
                (_, None) => Arc::new(RoaringBitmap::new()),
            };
            let index = match (old, &entry.index) {
                (Some(s), Some(_)) if s.entry.index == entry.index => s.index.clone(),
                (_, Some(name)) => {
                    load_index(store, &manifest.collection, name, &segment, residency)
                }
                (_, None) => None,
            };
            segments.push(LoadedSegment {
                entry: entry.clone(),
                segment,
                deleted,
                index,
            });
        }
        segments.sort_by_key(|s| std::cmp::Reverse(s.entry.rows));
        Ok(Snapshot {
            version: manifest.version,
            segments,
            cutoffs: manifest
                .partitions
                .iter()
                .map(|(p, s)| (*p, s.next_offset))
                .collect(),
        })
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
) -> Option<Arc<SegmentIndex>> {
    let path = store.index_path(collection, name);
    let loaded = SegmentIndex::open_with(&path, segment.rows(), segment.dim(), residency)
        .and_then(|index| eddy_segment::check_index(segment, &index).map(|()| index));
    match loaded {
        Ok(index) => Some(Arc::new(index)),
        Err(e) => {
            tracing::error!(collection, index = name, error = %e, "segment index unusable; searching the segment exactly");
            None
        }
    }
}

/// What a collection serves: the installed snapshot plus the tail;
/// everything a query reads, changed only under the write lock.
#[derive(Debug)]
pub struct Served {
    /// The installed snapshot.
    pub snapshot: Arc<Snapshot>,
    /// Fresh events not yet in the snapshot's segments.
    pub tail: Growing,
    /// Per partition, the next offset the tail will apply.
    pub applied: BTreeMap<u32, i64>,
    /// Partitions the tail cannot follow (their offset left the log, or a
    /// gap): queries there see the sealed segments only, and the
    /// `eddy_query_partition_stale` metric says so.
    pub stale: BTreeMap<u32, eddy_kafka::StopReason>,
}

impl Served {
    /// Per partition, the first offset a query does not reflect yet.
    pub fn visible_offsets(&self) -> BTreeMap<u32, i64> {
        let mut out = self.snapshot.cutoffs.clone();
        for (p, off) in &self.applied {
            let e = out.entry(*p).or_insert(*off);
            *e = (*e).max(*off);
        }
        out
    }

    /// Whether every `(partition, offset)` in `min` is visible.
    pub fn reflects(&self, min: &BTreeMap<u32, i64>) -> bool {
        let visible = self.visible_offsets();
        min.iter()
            .all(|(p, off)| visible.get(p).is_some_and(|v| v > off))
    }

    /// Live rows: sealed rows not masked by the tail, plus the tail's rows.
    pub fn count(&self) -> u64 {
        let masked = self
            .tail
            .touches()
            .filter(|(id, _)| self.snapshot.find(id).is_some())
            .count() as u64;
        self.snapshot.sealed_rows() - masked + self.tail.live_rows() as u64
    }
}

/// A collection being served.
#[derive(Debug)]
pub struct Collection {
    /// Its definition.
    pub def: CollectionDef,
    /// Snapshot and tail.
    pub served: RwLock<Served>,
    /// Woken whenever the tail applies events or a snapshot is installed.
    pub changed: tokio::sync::Notify,
    /// Set once the first snapshot is installed.
    pub snapshot_ready: AtomicBool,
    /// Set once the tail is assigned its partitions.
    pub tail_ready: AtomicBool,
    /// Set to stop the collection's tail and watcher.
    pub stop: AtomicBool,
}

impl Collection {
    /// A collection with nothing loaded yet.
    pub fn new(def: CollectionDef) -> Self {
        let tail = Growing::new(def.dimension as usize, def.metric, def.id_type);
        Self {
            def,
            served: RwLock::new(Served {
                snapshot: Arc::new(Snapshot::default()),
                tail,
                applied: BTreeMap::new(),
                stale: BTreeMap::new(),
            }),
            changed: tokio::sync::Notify::new(),
            snapshot_ready: AtomicBool::new(false),
            tail_ready: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        }
    }

    /// Installs a newer snapshot and drops the tail rows it now covers, in
    /// one step, so no query sees a row twice or misses one.
    pub fn install(&self, snapshot: Snapshot) {
        let mut served = self.served.write();
        if snapshot.version < served.snapshot.version {
            return;
        }
        served.tail.prune_below(&snapshot.cutoffs);
        served.snapshot = Arc::new(snapshot);
        drop(served);
        self.snapshot_ready.store(true, Ordering::Release);
        self.changed.notify_waiters();
    }

    /// Whether the collection serves queries (snapshot installed, tail running).
    pub fn is_ready(&self) -> bool {
        self.snapshot_ready.load(Ordering::Acquire) && self.tail_ready.load(Ordering::Acquire)
    }
}
