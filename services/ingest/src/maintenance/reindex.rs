//! The payload re-index job: once a collection is altered (indexed payload
//! fields added), the segments sealed before lack those fields' payload
//! index. Filters on the new fields still answer right on them (by reading
//! payloads), only slower; this job rewrites each such segment, one at a
//! time, through the merge path (a merge of one: deleted rows dropped, the
//! payload index built for the definition in force, the graph rebuilt
//! before it is published), until every segment covers every field.

use std::collections::{BTreeMap, HashMap};

use eddy_manifest::Manifest;
use eddy_model::{CollectionDef, FieldType};
use eddy_segment::Segment;
use tracing::warn;

use super::Maintenance;

/// Per `(collection, segment)`, the payload fields its index covers, read
/// once per segment (segments never change once written).
#[derive(Debug, Default)]
pub(super) struct IndexedFields(HashMap<(String, String), BTreeMap<String, FieldType>>);

impl IndexedFields {
    /// Forgets segments of `manifest`'s collection it no longer lists.
    fn retain_listed(&mut self, manifest: &Manifest) {
        self.0.retain(|(collection, segment), _| {
            collection != &manifest.collection || manifest.segments.iter().any(|s| &s.id == segment)
        });
    }
}

/// Whether `fields` (a segment's payload index) covers every field `def`
/// indexes, with its type.
fn covers(fields: &BTreeMap<String, FieldType>, def: &CollectionDef) -> bool {
    def.payload_fields
        .iter()
        .all(|(f, t)| fields.get(f) == Some(t))
}

impl Maintenance {
    /// The first segment of `manifest` whose payload index lacks a field
    /// `def` indexes, if any. A segment that cannot be opened is skipped
    /// (logged): the index build and fsck report damaged segments.
    pub(super) fn next_to_reindex(
        &self,
        def: &CollectionDef,
        manifest: &Manifest,
        known: &mut IndexedFields,
    ) -> Option<String> {
        if def.payload_fields.is_empty() {
            return None;
        }
        known.retain_listed(manifest);
        for entry in &manifest.segments {
            let key = (def.name.clone(), entry.id.clone());
            if !known.0.contains_key(&key) {
                let fields = match self
                    .store
                    .fetch_segment(&def.name, &entry.id)
                    .map_err(|e| e.to_string())
                    .and_then(|path| Segment::open(&path).map_err(|e| e.to_string()))
                {
                    Ok(seg) => match seg.payload_index() {
                        Some(Ok(index)) => index.fields().map(|(f, t)| (f.to_owned(), t)).collect(),
                        _ => BTreeMap::new(),
                    },
                    Err(e) => {
                        warn!(collection = %def.name, segment = %entry.id, error = %e, "payload re-index: cannot open the segment");
                        continue;
                    }
                };
                known.0.insert(key.clone(), fields);
            }
            if !known.0.get(&key).is_some_and(|f| covers(f, def)) {
                return Some(entry.id.clone());
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use eddy_filter::Filter;
    use roaring::RoaringBitmap;
    use serde_json::json;

    use super::*;
    use crate::maintenance::testing::{maintenance, seal_with, settle};
    use crate::maintenance::Progress;

    /// Two segments sealed before `kind` and `size` were indexed: after the
    /// alteration, maintenance rewrites both with a payload index covering
    /// them (and their graphs), and the index answers as reading payloads
    /// does (a value of the wrong type counts as absent).
    #[test]
    fn an_altered_collection_gets_its_old_segments_indexed() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = crate::maintenance::testing::store_with_collection(dir.path());
        let payload = |id: u64| {
            let size = if id == 5 { json!("big") } else { json!(id) };
            json!({"kind": format!("k{}", id % 3), "size": size})
                .to_string()
                .into_bytes()
        };
        seal_with(&store, 0..64, payload);
        seal_with(&store, 64..128, payload);
        let m = maintenance(&store, "0");
        let mut progress = Progress::default();
        settle(&m, &mut progress);
        let before = store.latest_manifest("c").expect("manifest");
        assert_eq!(before.segments.len(), 2);
        assert!(before.segments.iter().all(|s| s.index.is_some()));

        let fields = BTreeMap::from([
            ("kind".to_owned(), FieldType::Keyword),
            ("size".to_owned(), FieldType::Integer),
        ]);
        let def = store.add_payload_fields("c", &fields).expect("altered").def;
        settle(&m, &mut progress);
        let after = store.latest_manifest("c").expect("manifest");
        assert_eq!(after.segments.len(), 2);
        assert!(
            after
                .segments
                .iter()
                .all(|s| before.segments.iter().all(|b| b.id != s.id)),
            "both segments rewritten"
        );
        assert_eq!(after.segments.iter().map(|s| s.rows).sum::<u64>(), 128);
        let filter = Filter::parse(
            &json!({"must": [{"key": "kind", "match": {"value": "k1"}}, {"key": "size", "range": {"gte": 0}}]}),
            &def.payload_fields,
        )
        .expect("filter");
        let mut matched = Vec::new();
        for entry in &after.segments {
            assert!(entry.index.is_some(), "graph rebuilt before publishing");
            let seg = Segment::open(&store.segment_path("c", &entry.id)).expect("open");
            let index = seg
                .payload_index()
                .expect("a payload index")
                .expect("valid");
            let indexed: BTreeMap<String, FieldType> =
                index.fields().map(|(f, t)| (f.to_owned(), t)).collect();
            assert_eq!(indexed, fields);
            let by_index = index.evaluate(&filter).expect("evaluated");
            let by_payload: RoaringBitmap = (0..seg.rows() as u32)
                .filter(|&row| filter.matches_json(seg.payload_json(row)))
                .collect();
            assert_eq!(by_index, by_payload);
            matched.extend(by_index.iter().filter_map(|row| seg.id(row)));
        }
        matched.sort();
        let expected: Vec<eddy_model::PointId> = (0..128u64)
            .filter(|id| id % 3 == 1 && *id != 5)
            .map(eddy_model::PointId::Num)
            .collect();
        assert_eq!(matched, expected);
        assert!(m
            .next_to_reindex(&def, &after, &mut progress.indexed_fields)
            .is_none());
    }

    #[test]
    fn coverage_needs_every_field_with_its_type() {
        let mut def = CollectionDef::new("c", 2);
        let none = BTreeMap::new();
        assert!(covers(&none, &def), "nothing to index");
        def.payload_fields.insert("kind".into(), FieldType::Keyword);
        assert!(!covers(&none, &def));
        let kind = BTreeMap::from([("kind".to_owned(), FieldType::Keyword)]);
        assert!(covers(&kind, &def));
        let retyped = BTreeMap::from([("kind".to_owned(), FieldType::Integer)]);
        assert!(!covers(&retyped, &def));
        def.payload_fields.insert("size".into(), FieldType::Integer);
        assert!(!covers(&kind, &def));
    }
}
