//! One manifest version as served: its segments mapped (or held in huge
//! pages) and checked against the collection, their index files checked,
//! their delete bitmaps loaded. A segment that cannot be served (damaged,
//! or written for another dimension, metric or id type) is quarantined:
//! left out and reported, while the rest of the version is served.

use std::collections::BTreeMap;
use std::sync::Arc;

use eddy_manifest::{Manifest, SegmentEntry, Store};
use eddy_model::{CollectionDef, FieldType, PointId};
use eddy_segment::{train_scan_codes, IndexFile, LazySignBits, Residency, ScanCodes, Segment};
use roaring::RoaringBitmap;

/// A sealed segment as served: the map and its delete bitmap.
#[derive(Debug, Clone)]
pub struct LoadedSegment {
    /// The manifest's entry.
    pub entry: SegmentEntry,
    /// The shard whose manifest chain lists it (0 for an unsplit
    /// collection).
    pub shard: u32,
    /// The mapped file.
    pub segment: Arc<Segment>,
    /// Deleted rows.
    pub deleted: Arc<RoaringBitmap>,
    /// The mapped index file (graph, codes), once ingest has built it.
    pub index: Option<Arc<IndexFile>>,
    /// Until the index file comes: SQ8 codes of the segment's rows, trained
    /// and held in memory at load (from [`eddy_segment::SCAN_CODES_FROM_ROWS`] rows), so a
    /// search scans them instead of every f32 row.
    pub scan_codes: Option<Arc<ScanCodes>>,
    /// The deleted rows as one bit per row (empty when none is deleted):
    /// with the rows the tail shadows, what a search refuses, tested per
    /// candidate and listed by a scan of the accepted rows
    /// ([`super::Shadows`]).
    pub deleted_bits: Arc<Vec<u64>>,
    /// The sign bits of its rows, made once most of them are refused (a
    /// scan of the accepted rows ranks them by these first); kept across
    /// reloads of the same segment.
    pub sign_bits: Arc<LazySignBits>,
    /// The payload fields its payload index covers, with their types (a
    /// filter on any other field reads the segment's payloads).
    pub indexed_fields: Arc<BTreeMap<String, FieldType>>,
    /// How its segment and index files are held: a load asking for another
    /// residency opens them again (a node that starts serving from mapped
    /// files moves them into huge pages this way).
    pub residency: Residency,
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

/// One manifest version, loaded; for a split collection, one version of
/// each served shard's chain, together.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Manifest version (0 = nothing sealed); for a split collection the
    /// sum of its chains' versions (it grows with every publish of any).
    pub version: u64,
    /// Per manifest chain loaded, its version.
    pub chains: BTreeMap<String, u64>,
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

/// `deleted` as one bit per row of a segment of `rows` rows (empty when
/// none is deleted).
pub(super) fn deleted_bits(deleted: &RoaringBitmap, rows: usize) -> Vec<u64> {
    if deleted.is_empty() {
        return Vec::new();
    }
    let mut bits = vec![0u64; rows.div_ceil(64)];
    for row in deleted.iter() {
        if let Some(word) = bits.get_mut(row as usize / 64) {
            *word |= 1 << (row % 64);
        }
    }
    bits
}

/// Opens one listed segment and checks it against `def`.
fn open_checked(
    store: &Store,
    def: &CollectionDef,
    chain: &str,
    entry: &SegmentEntry,
    residency: Residency,
) -> Result<Segment, String> {
    let path = store
        .fetch_segment(chain, &entry.id)
        .map_err(|e| e.to_string())?;
    let segment = Segment::open_with(&path, residency).map_err(|e| e.to_string())?;
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
    ///
    /// # Errors
    /// On an object store, a failed request for one of the version's new
    /// files (the store unreachable, a server error): the version is not
    /// loaded, the caller keeps serving the previous one and tries again,
    /// rather than quarantining segments that are not damaged.
    pub fn load(
        store: &Store,
        def: &CollectionDef,
        manifest: &Manifest,
        previous: &Snapshot,
        residency: Residency,
    ) -> eddy_manifest::Result<Snapshot> {
        Self::load_shards(store, def, &[(0, manifest)], previous, residency)
    }

    /// Loads one manifest per served shard (`(shard, its chain's manifest)`)
    /// as one snapshot: their segments together (each knowing its shard)
    /// and their partitions' cut-offs (shards never share a partition).
    /// Errors as [`Snapshot::load`].
    pub fn load_shards(
        store: &Store,
        def: &CollectionDef,
        manifests: &[(u32, &Manifest)],
        previous: &Snapshot,
        residency: Residency,
    ) -> eddy_manifest::Result<Snapshot> {
        let mut out = Snapshot::default();
        for (shard, manifest) in manifests {
            let one = Self::load_chain(store, def, *shard, manifest, previous, residency)?;
            out.version += one.version;
            out.chains.insert(manifest.collection.clone(), one.version);
            out.segments.extend(one.segments);
            out.cutoffs.extend(one.cutoffs);
            out.quarantined.extend(one.quarantined);
        }
        out.segments
            .sort_by_key(|s| std::cmp::Reverse(s.entry.rows));
        Ok(out)
    }

    fn load_chain(
        store: &Store,
        def: &CollectionDef,
        shard: u32,
        manifest: &Manifest,
        previous: &Snapshot,
        residency: Residency,
    ) -> eddy_manifest::Result<Snapshot> {
        if store.is_remote() {
            fetch_new_files(store, manifest, previous)?;
        }
        let mut segments = Vec::with_capacity(manifest.segments.len());
        let mut quarantined = Vec::new();
        for entry in &manifest.segments {
            let old = previous.segments.iter().find(|s| s.entry.id == entry.id);
            // Files held otherwise than asked are opened again; what was
            // derived from them (codes, bits, fields) is kept.
            let held = old.filter(|s| s.residency == residency);
            let segment = match held {
                Some(s) => Ok(s.segment.clone()),
                None => {
                    open_checked(store, def, &manifest.collection, entry, residency).map(Arc::new)
                }
            };
            let deleted = match (old, &entry.deletes) {
                (Some(s), _) if s.entry.deletes == entry.deletes => Ok(s.deleted.clone()),
                (_, Some(name)) => match store.read_deletes(&manifest.collection, name) {
                    Err(e) if store.is_remote() && e.is_transient() => return Err(e),
                    read => read
                        .map(Arc::new)
                        .map_err(|e| format!("its delete file {name}: {e}")),
                },
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
            let index = match (held, &entry.index) {
                (Some(s), Some(_)) if s.entry.index == entry.index => s.index.clone(),
                (_, Some(name)) => {
                    load_index(store, &manifest.collection, name, &segment, residency)
                }
                (_, None) => None,
            };
            let scan_codes = match (&index, old) {
                (Some(_), _) => None,
                (
                    None,
                    Some(LoadedSegment {
                        scan_codes: Some(codes),
                        ..
                    }),
                ) => Some(codes.clone()),
                (None, _) => train_scan_codes(segment.vectors(), segment.dim(), segment.metric())
                    .map(Arc::new),
            };
            let deleted_bits = match old {
                Some(s) if s.entry.deletes == entry.deletes => s.deleted_bits.clone(),
                _ => Arc::new(deleted_bits(&deleted, segment.rows())),
            };
            let sign_bits = old.map(|s| s.sign_bits.clone()).unwrap_or_default();
            let indexed_fields = match old {
                Some(s) => s.indexed_fields.clone(),
                None => Arc::new(indexed_fields(&segment)),
            };
            segments.push(LoadedSegment {
                entry: entry.clone(),
                shard,
                segment,
                deleted,
                index,
                scan_codes,
                deleted_bits,
                sign_bits,
                indexed_fields,
                residency,
            });
        }
        if !quarantined.is_empty() {
            refuse_if_superseded(store, manifest)?;
        }
        Ok(Snapshot {
            version: manifest.version,
            chains: BTreeMap::new(),
            segments,
            cutoffs: manifest
                .partitions
                .iter()
                .map(|(p, s)| (*p, s.next_offset))
                .collect(),
            quarantined,
        })
    }

    /// Bytes of the segment and index files this snapshot holds, plus the
    /// scan codes of segments still without an index, the deleted-row bits
    /// and the sign bits of mostly refused ones.
    pub fn file_bytes(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| {
                let index = s.index.as_ref().map_or(0, |i| i.file_len());
                let codes = s.scan_codes.as_ref().map_or(0, |c| c.bytes());
                let deleted = s.deleted_bits.len() * std::mem::size_of::<u64>();
                let signs = s
                    .sign_bits
                    .get()
                    .map_or(0, |b| std::mem::size_of_val(b.codes()));
                (s.segment.file_len() + index + codes + deleted + signs) as u64
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

/// A version with files it cannot serve is damaged only if it is still
/// the newest: one that newer versions superseded while it loaded may have
/// lost files to garbage collection (they name none of them), and serving
/// it would claim its cut-offs without those rows. Then the newest is
/// loaded instead (the error says so).
fn refuse_if_superseded(store: &Store, manifest: &Manifest) -> eddy_manifest::Result<()> {
    let newest = store.latest_manifest(&manifest.collection)?.version;
    if newest > manifest.version {
        return Err(eddy_manifest::Error::Superseded {
            collection: manifest.collection.clone(),
            version: manifest.version,
            newest,
        });
    }
    Ok(())
}

/// Brings the files of `manifest` that `previous` does not hold into the
/// object store's local cache, failing on a failed request (a transient
/// error) and leaving missing or damaged files to the per-segment checks,
/// which quarantine them.
fn fetch_new_files(
    store: &Store,
    manifest: &Manifest,
    previous: &Snapshot,
) -> eddy_manifest::Result<()> {
    let mut names = Vec::new();
    for entry in &manifest.segments {
        let old = previous.segments.iter().find(|s| s.entry.id == entry.id);
        if old.is_none() {
            names.push(format!("{}.seg", entry.id));
        }
        if let Some(index) = &entry.index {
            if old.is_none_or(|s| s.entry.index != entry.index) {
                names.push(index.clone());
            }
        }
    }
    for fetched in store.fetch_files(&manifest.collection, &names) {
        match fetched {
            Err(e) if e.is_transient() => return Err(e),
            _ => {}
        }
    }
    Ok(())
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
    let loaded = store
        .fetch_file(collection, name)
        .map_err(|e| e.to_string())
        .and_then(|path| {
            IndexFile::open_with(&path, segment.rows(), segment.dim(), residency)
                .and_then(|index| eddy_segment::check_index(segment, &index).map(|()| index))
                .map_err(|e| e.to_string())
        });
    match loaded {
        Ok(index) => Some(Arc::new(index)),
        Err(e) => {
            tracing::error!(collection, index = name, error = %e, "segment index unusable; searching the segment exactly");
            None
        }
    }
}

#[cfg(test)]
mod tests;
