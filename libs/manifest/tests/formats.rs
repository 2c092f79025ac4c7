//! Format guarantees of the store's own files — manifest versions,
//! collection definitions and delete files: golden files of the current
//! formats reopen, and a newer version, a damaged or a truncated file is
//! refused with an error that names the file and what is wrong.
//!
//! Regenerate the golden files only on a deliberate format change (with a
//! version bump): `EDDY_WRITE_GOLDEN=1 cargo test -p eddy-manifest --test formats`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use eddy_manifest::{
    Error, Manifest, PartitionState, SegmentEntry, Store, COLLECTION_FORMAT,
    DELETES_FORMAT_VERSION, MANIFEST_FORMAT,
};
use eddy_model::{CollectionDef, FieldType, IdType, Metric};
use roaring::RoaringBitmap;

const MANIFEST_FILE: &str = "00000000000000000001.json";
const DELETES_FILE: &str = "s1.golden.del";

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn golden_collection() -> CollectionDef {
    let mut def = CollectionDef::new("c", 3);
    def.topic = "events".to_owned();
    def.metric = Metric::L2;
    def.id_type = IdType::U64;
    def.payload_fields = BTreeMap::from([("name".to_owned(), FieldType::Keyword)]);
    def
}

fn golden_manifest() -> Manifest {
    Manifest {
        version: 1,
        collection: "c".to_owned(),
        segments: vec![SegmentEntry {
            id: "s1".to_owned(),
            rows: 3,
            bytes: 4096,
            deletes: Some(DELETES_FILE.to_owned()),
            deleted: 2,
            offset_ranges: BTreeMap::from([(0, (100, 102)), (1, (200, 200))]),
            index: Some("s1-golden.idx".to_owned()),
        }],
        partitions: BTreeMap::from([
            (
                0,
                PartitionState {
                    next_offset: 103,
                    owner_epoch: 2,
                },
            ),
            (
                1,
                PartitionState {
                    next_offset: 201,
                    owner_epoch: 1,
                },
            ),
        ]),
        resumes: BTreeMap::new(),
        published_ms: 1_700_000_000_000,
    }
}

fn golden_deletes() -> RoaringBitmap {
    [0u32, 2].into_iter().collect()
}

/// Where each golden file lives in a store's collection `c`.
fn golden_files() -> [(&'static str, String); 3] {
    [
        ("collection-v1.json", "collection.json".to_owned()),
        ("manifest-v1.json", format!("manifests/{MANIFEST_FILE}")),
        ("deletes-v1.del", format!("deletes/{DELETES_FILE}")),
    ]
}

/// Writes the golden files through the store's own writers.
fn write_golden() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("store");
    store
        .create_collection(&golden_collection())
        .expect("collection");
    store.publish(&golden_manifest()).expect("manifest");
    let name = store
        .write_deletes("c", "s1", &golden_deletes())
        .expect("deletes");
    let collection = dir.path().join("collections/c");
    fs::rename(
        collection.join("deletes").join(name),
        collection.join("deletes").join(DELETES_FILE),
    )
    .expect("rename");
    for (golden, in_store) in golden_files() {
        fs::copy(collection.join(in_store), data(golden)).expect("copy golden");
    }
}

/// A store whose collection `c` holds the golden files.
fn golden_store(dir: &Path) -> Store {
    let store = Store::open(dir).expect("store");
    let collection = dir.join("collections/c");
    for (golden, in_store) in golden_files() {
        let to = collection.join(in_store);
        fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
        fs::copy(data(golden), to).expect("copy golden");
    }
    store
}

#[test]
fn golden_files_of_the_current_formats_reopen() {
    if std::env::var_os("EDDY_WRITE_GOLDEN").is_some() {
        write_golden();
    }
    let dir = tempfile::tempdir().expect("tmp");
    let store = golden_store(dir.path());
    assert_eq!(
        store.collection("c").expect("collection"),
        Some(golden_collection())
    );
    assert_eq!(store.manifest("c", 1).expect("manifest"), golden_manifest());
    assert_eq!(
        store.latest_manifest("c").expect("latest"),
        golden_manifest()
    );
    assert_eq!(
        store.read_deletes("c", DELETES_FILE).expect("deletes"),
        golden_deletes()
    );
    let text = fs::read_to_string(data("manifest-v1.json")).expect("golden");
    assert!(
        text.starts_with(r#"{"format_version":1,"kind":"manifest","crc32":"#),
        "{text}"
    );
}

/// Reads collection `c`'s file `in_store` with the store API.
fn read(store: &Store, in_store: &str) -> Result<(), Error> {
    if in_store == "collection.json" {
        store.collection("c").map(drop)
    } else if in_store.starts_with("manifests/") {
        store.manifest("c", 1).map(drop)
    } else {
        store.read_deletes("c", DELETES_FILE).map(drop)
    }
}

/// Replaces collection `c`'s file `in_store` with `bytes` and returns the
/// error reading it gives, after checking that it names the file.
fn refused(store: &Store, in_store: &str, bytes: &[u8]) -> String {
    let path = store.root().join("collections/c").join(in_store);
    fs::write(&path, bytes).expect("write");
    let err = read(store, in_store).expect_err("damaged file read");
    let file_name = in_store.rsplit('/').next().expect("name");
    let message = err.to_string();
    assert!(message.contains(file_name), "names the file: {message}");
    message
}

#[test]
fn damaged_truncated_and_newer_files_are_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = golden_store(dir.path());
    for (golden, in_store) in golden_files() {
        let bytes = fs::read(data(golden)).expect("golden");
        for at in [20, bytes.len() / 2, bytes.len() - 3] {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x01;
            refused(&store, &in_store, &flipped);
        }
        for len in [0, 10, bytes.len() / 2, bytes.len() - 2] {
            refused(&store, &in_store, &bytes[..len]);
        }
    }
}

#[test]
fn a_changed_json_body_fails_its_checksum() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = golden_store(dir.path());
    let text = fs::read_to_string(data("manifest-v1.json")).expect("golden");
    let changed = text.replace("\"next_offset\": 103", "\"next_offset\": 104");
    assert_ne!(changed, text);
    let err = refused(
        &store,
        &format!("manifests/{MANIFEST_FILE}"),
        changed.as_bytes(),
    );
    assert!(err.contains("manifest checksum mismatch"), "{err}");
    let text = fs::read_to_string(data("collection-v1.json")).expect("golden");
    let changed = text.replace("\"dimension\": 3", "\"dimension\": 4");
    assert_ne!(changed, text);
    let err = refused(&store, "collection.json", changed.as_bytes());
    assert!(
        err.contains("collection definition checksum mismatch"),
        "{err}"
    );
}

#[test]
fn newer_versions_are_refused_before_anything_else_is_read() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = golden_store(dir.path());
    for (golden, format) in [
        ("manifest-v1.json", MANIFEST_FORMAT),
        ("collection-v1.json", COLLECTION_FORMAT),
    ] {
        let text = fs::read_to_string(data(golden)).expect("golden");
        let current = format.versions.current;
        let newer = text.replace(
            &format!("\"format_version\":{current},"),
            &format!("\"format_version\":{},", current + 1),
        );
        assert_ne!(newer, text);
        let in_store = &golden_files()
            .into_iter()
            .find(|(g, _)| *g == golden)
            .expect("known")
            .1;
        let err = refused(&store, in_store, newer.as_bytes());
        assert!(
            err.contains(&format!(
                "{} written by a newer eddy: format version {}, this build reads 1..={current}",
                format.what,
                current + 1
            )),
            "{err}"
        );
    }
    let mut bytes = fs::read(data("deletes-v1.del")).expect("golden");
    bytes[8..12].copy_from_slice(&(DELETES_FORMAT_VERSION + 1).to_le_bytes());
    let err = refused(&store, &format!("deletes/{DELETES_FILE}"), &bytes);
    assert!(err.contains("delete file written by a newer eddy"), "{err}");
}
