//! Altering a live collection: its definition in numbered generations.
//!
//! `collection.json` is generation 0, written once at create. Each
//! alteration writes the next generation, `definitions/<n>.json`, with the
//! same exclusive create that publishes manifests, so two racing
//! alterations can never both write generation n (the loser reads the
//! winner's and applies its change on top). Readers take the highest
//! generation. The only alteration is adding indexed payload fields
//! ([`CollectionDef::with_payload_fields`]): segments sealed before it lack
//! the new fields' payload index, answer filters on them by reading
//! payloads, and are re-indexed in the background by eddy-ingest's
//! maintenance.

use std::collections::BTreeMap;

use eddy_model::{CollectionDef, FieldType};

use crate::envelope::COLLECTION_FORMAT;
use crate::store::collection_key;
use crate::{Error, Result, Store};

/// Directory of a collection's definition generations above 0.
const DEFINITIONS: &str = "definitions";

/// File name of definition generation `generation` (> 0).
fn generation_file(generation: u64) -> String {
    format!("{generation:020}.json")
}

/// What an alteration did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Altered {
    /// The definition now in force.
    pub def: CollectionDef,
    /// Its generation (0 = as created).
    pub generation: u64,
    /// Whether this call wrote it (false: it already said as much).
    pub changed: bool,
}

impl Store {
    /// The newest definition generation of `collection` above 0, if any.
    fn latest_generation(&self, collection: &str) -> Result<Option<u64>> {
        Ok(self
            .backend
            .list(&collection_key(collection, DEFINITIONS))?
            .iter()
            .filter_map(|f| f.name.strip_suffix(".json")?.parse::<u64>().ok())
            .max())
    }

    /// The definition in force for `collection` and its generation: the
    /// newest of `definitions/`, else `collection.json` (generation 0).
    /// `None` if the collection does not exist.
    pub(crate) fn definition(&self, collection: &str) -> Result<Option<(u64, CollectionDef)>> {
        let (generation, key) = match self.latest_generation(collection)? {
            Some(g) => (
                g,
                collection_key(collection, &format!("{DEFINITIONS}/{}", generation_file(g))),
            ),
            None => (0, collection_key(collection, "collection.json")),
        };
        let Some(bytes) = self.backend.read(&key)? else {
            return Ok(None);
        };
        let path = self.backend.describe(&key);
        let def: CollectionDef = COLLECTION_FORMAT.decode(&path, &bytes)?;
        if def.name != collection {
            return Err(Error::Corrupt {
                path,
                reason: format!("names collection {:?}", def.name),
            });
        }
        Ok(Some((generation, def)))
    }

    /// Adds indexed payload fields to `collection` (see the module):
    /// compare-and-swap on the next generation, retried on a race.
    pub fn add_payload_fields(
        &self,
        collection: &str,
        fields: &BTreeMap<String, FieldType>,
    ) -> Result<Altered> {
        loop {
            if self.is_dropped(collection) {
                return Err(Error::Dropped(collection.to_owned()));
            }
            let (generation, def) = self
                .definition(collection)?
                .ok_or_else(|| Error::UnknownCollection(collection.to_owned()))?;
            let altered = def.with_payload_fields(fields)?;
            if altered == def {
                return Ok(Altered {
                    def,
                    generation,
                    changed: false,
                });
            }
            let key = collection_key(
                collection,
                &format!("{DEFINITIONS}/{}", generation_file(generation + 1)),
            );
            let bytes = COLLECTION_FORMAT.encode(&self.backend.describe(&key), &altered)?;
            if self.backend.create(&key, &bytes)? {
                tracing::info!(collection, generation = generation + 1, fields = ?fields.keys().collect::<Vec<_>>(), "collection altered: payload fields added");
                return Ok(Altered {
                    def: altered,
                    generation: generation + 1,
                    changed: true,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, FieldType)]) -> BTreeMap<String, FieldType> {
        pairs.iter().map(|(f, t)| ((*f).to_owned(), *t)).collect()
    }

    #[test]
    fn alterations_are_generations_readers_take_the_newest() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path()).expect("store");
        let mut def = CollectionDef::new("c", 4);
        def.payload_fields = fields(&[("kind", FieldType::Keyword)]);
        store.create_collection(&def).expect("created");

        let altered = store
            .add_payload_fields("c", &fields(&[("size", FieldType::Integer)]))
            .expect("altered");
        assert!(altered.changed);
        assert_eq!(altered.generation, 1);
        let read = store.collection("c").expect("read").expect("exists");
        assert_eq!(read, altered.def);
        assert_eq!(read.payload_fields.len(), 2);
        assert_eq!(store.collections().expect("list"), vec![read.clone()]);

        // The same fields again change nothing; a retype is refused.
        let again = store
            .add_payload_fields("c", &fields(&[("size", FieldType::Integer)]))
            .expect("same");
        assert!(!again.changed);
        assert_eq!(again.generation, 1);
        let err = store
            .add_payload_fields("c", &fields(&[("kind", FieldType::Float)]))
            .expect_err("retype");
        assert!(matches!(
            err,
            Error::Model(eddy_model::Error::FieldTypeConflict { .. })
        ));

        // Creating with the original definition now conflicts; with the
        // altered one it is confirmed.
        assert!(matches!(
            store.create_collection(&def),
            Err(Error::CollectionConflict(_))
        ));
        assert_eq!(
            store.create_collection(&read).expect("same"),
            crate::CreateOutcome::Exists
        );
        assert!(matches!(
            store.add_payload_fields("nope", &fields(&[("a", FieldType::Bool)])),
            Err(Error::UnknownCollection(_))
        ));
    }

    #[test]
    fn racing_alterations_both_take_effect() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path()).expect("store");
        store
            .create_collection(&CollectionDef::new("c", 4))
            .expect("created");
        let names: Vec<String> = (0..8).map(|i| format!("f{i}")).collect();
        std::thread::scope(|s| {
            for name in &names {
                let store = store.clone();
                s.spawn(move || {
                    store
                        .add_payload_fields("c", &fields(&[(name, FieldType::Keyword)]))
                        .expect("altered")
                });
            }
        });
        let def = store.collection("c").expect("read").expect("exists");
        assert_eq!(
            def.payload_fields.keys().cloned().collect::<Vec<_>>(),
            names,
            "no alteration lost"
        );
        assert_eq!(store.latest_generation("c").expect("generation"), Some(8));
    }
}
