use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::Path;

use eddy_model::CollectionDef;

use super::*;
use crate::{Error, Manifest, SegmentEntry};

fn entry(id: &str, index: Option<&str>, deletes: Option<&str>) -> SegmentEntry {
    SegmentEntry {
        id: id.to_owned(),
        rows: 1,
        bytes: 1,
        deletes: deletes.map(str::to_owned),
        deleted: 0,
        offset_ranges: BTreeMap::new(),
        index: index.map(str::to_owned),
    }
}

fn touch(path: &Path, modified: SystemTime) {
    let f = File::create(path).expect("create");
    f.set_modified(modified).expect("set mtime");
}

fn age(path: &Path, modified: SystemTime) {
    let f = File::options().write(true).open(path).expect("open");
    f.set_modified(modified).expect("set mtime");
}

/// A store in a temporary directory (kept alive by the guard) with collection `c`.
fn store_with_collection() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("open");
    store
        .create_collection(&CollectionDef::new("c", 1))
        .expect("create");
    (dir, store)
}

fn exists(store: &Store, rel: &str) -> bool {
    store.root().join("collections/c").join(rel).exists()
}

#[test]
fn removes_what_no_retained_manifest_names_once_past_the_grace() {
    let (_dir, store) = store_with_collection();
    let now = SystemTime::now();
    let old = now - Duration::from_secs(3600);
    let seg = store.root().join("collections/c/segments");
    let del = store.root().join("collections/c/deletes");
    fs::create_dir_all(&seg).expect("mkdir");
    fs::create_dir_all(&del).expect("mkdir");
    for name in ["a.seg", "a-1.idx", "b.seg", "m.seg", "m-2.idx", "x.seg.tmp"] {
        touch(&seg.join(name), old);
    }
    touch(&seg.join("young.seg"), now);
    touch(&del.join("a.1.del"), old);
    touch(&del.join("m.2.del"), old);
    // v1: a (indexed, with deletes) and b; v2: merged into m; v3: m re-deleted.
    let mut m = Manifest::empty("c").successor();
    m.segments = vec![
        entry("a", Some("a-1.idx"), Some("a.1.del")),
        entry("b", None, None),
    ];
    store.publish(&m).expect("v1");
    let mut m = m.successor();
    m.segments = vec![entry("m", Some("m-2.idx"), None)];
    store.publish(&m).expect("v2");
    let mut m = m.successor();
    m.segments = vec![entry("m", Some("m-2.idx"), Some("m.2.del"))];
    store.publish(&m).expect("v3");
    let manifests = store.root().join("collections/c/manifests");
    for v in 1..=3u64 {
        age(&manifests.join(format!("{v:020}.json")), old);
    }
    let policy = GcPolicy {
        keep_versions: 2,
        grace: Duration::from_secs(600),
    };
    let v1_bytes = fs::metadata(manifests.join(format!("{:020}.json", 1)))
        .expect("v1")
        .len();
    let report = store.collect_garbage("c", &policy, now).expect("gc");
    // v1 expired: a, its index and deletes, b and the old temporary file go;
    // v2 and v3 are the newest two; the young file may be an unpublished write.
    assert_eq!(
        report,
        GcReport {
            manifests: 1,
            segments: 2,
            indexes: 1,
            deletes: 1,
            other: 1,
            // The data files are empty here: only the manifest has bytes.
            bytes: v1_bytes,
        }
    );
    for gone in [
        "segments/a.seg",
        "segments/a-1.idx",
        "segments/b.seg",
        "deletes/a.1.del",
    ] {
        assert!(!exists(&store, gone), "{gone} should be removed");
    }
    for kept in [
        "segments/m.seg",
        "segments/m-2.idx",
        "deletes/m.2.del",
        "segments/young.seg",
    ] {
        assert!(exists(&store, kept), "{kept} should be kept");
    }
    assert!(store.manifest("c", 1).is_err());
    assert_eq!(store.latest_manifest("c").expect("latest").version, 3);
    // A second pass finds nothing more.
    let again = store.collect_garbage("c", &policy, now).expect("gc");
    assert_eq!(again.files(), 0);
}

#[test]
fn young_manifests_are_retained_with_their_files() {
    let (_dir, store) = store_with_collection();
    let now = SystemTime::now();
    let seg = store.root().join("collections/c/segments");
    fs::create_dir_all(&seg).expect("mkdir");
    touch(&seg.join("a.seg"), now - Duration::from_secs(3600));
    let mut m = Manifest::empty("c").successor();
    m.segments = vec![entry("a", None, None)];
    store.publish(&m).expect("v1");
    let mut m = m.successor();
    m.segments.clear();
    store.publish(&m).expect("v2");
    // v1 was published just now: a reader may still be loading it.
    let policy = GcPolicy {
        keep_versions: 1,
        grace: Duration::from_secs(600),
    };
    let report = store.collect_garbage("c", &policy, now).expect("gc");
    assert_eq!(report.files(), 0);
    assert!(exists(&store, "segments/a.seg"));
    // Past the grace, both go.
    let later = now + Duration::from_secs(601);
    let report = store.collect_garbage("c", &policy, later).expect("gc");
    assert_eq!((report.manifests, report.segments), (1, 1));
    assert!(!exists(&store, "segments/a.seg"));
}

#[test]
fn leases_protect_files_written_since_and_pinned_versions() {
    let (_dir, store) = store_with_collection();
    let now = SystemTime::now();
    let seg = store.root().join("collections/c/segments");
    let mut m = Manifest::empty("c").successor();
    touch(&seg.join("a.seg"), now - Duration::from_secs(3600));
    m.segments = vec![entry("a", None, None)];
    store.publish(&m).expect("v1");
    let mut m = m.successor();
    m.segments.clear();
    store.publish(&m).expect("v2");
    let manifests = store.root().join("collections/c/manifests");
    for v in 1..=2u64 {
        age(
            &manifests.join(format!("{v:020}.json")),
            now - Duration::from_secs(1800),
        );
    }
    // A reader pinned v1; a writer took a lease, then wrote w.seg.
    let pin = store
        .take_lease("c", "snapshot", Duration::from_secs(3600), Some(1))
        .expect("pin");
    let writer = store
        .take_lease("c", "seal", Duration::from_secs(3600), None)
        .expect("lease");
    touch(&seg.join("w.seg"), now);
    let policy = GcPolicy {
        keep_versions: 1,
        grace: Duration::ZERO,
    };
    let later = now + Duration::from_secs(60);
    let report = store.collect_garbage("c", &policy, later).expect("gc");
    assert_eq!(report.files(), 0, "{report:?}");
    assert!(exists(&store, "segments/a.seg") && exists(&store, "segments/w.seg"));
    // Released, v1 and a go; w stays while it is younger than the
    // oldest retained version.
    drop(pin);
    drop(writer);
    let report = store.collect_garbage("c", &policy, later).expect("gc");
    assert_eq!((report.manifests, report.segments), (1, 1), "{report:?}");
    assert!(exists(&store, "segments/w.seg"));
    // A crashed writer's lease expires and protects nothing.
    let expired = store
        .take_lease("c", "crashed", Duration::from_secs(1), None)
        .expect("lease");
    std::mem::forget(expired);
    touch(&seg.join("x.seg"), now + Duration::from_secs(1));
    let m = m.successor();
    store.publish(&m).expect("v3");
    age(
        &manifests.join(format!("{:020}.json", 3)),
        now + Duration::from_secs(10),
    );
    let report = store
        .collect_garbage("c", &policy, now + Duration::from_secs(3600))
        .expect("gc");
    assert_eq!((report.manifests, report.segments), (1, 2), "{report:?}");
    assert!(
        store.leases("c").expect("leases").is_empty(),
        "and is removed"
    );
}

/// A writer that publishes and releases its lease while a pass runs
/// (after the pass listed the manifests, before it read the leases) keeps
/// its files: the pass finds them through the version it published.
#[cfg(feature = "failpoints")]
#[test]
fn a_lease_released_during_the_pass_still_protects_its_files() {
    let _scenario = fail::FailScenario::setup();
    let (_dir, store) = store_with_collection();
    let now = SystemTime::now();
    let del = store.root().join("collections/c/deletes");
    fs::create_dir_all(&del).expect("mkdir");
    let manifests = store.root().join("collections/c/manifests");
    let mut m = Manifest::empty("c").successor();
    store.publish(&m).expect("v1");
    // A seal takes its lease and writes its delete file; two other
    // versions are published while it works.
    let lease = store
        .take_lease("c", "seal", Duration::from_secs(3600), None)
        .expect("lease");
    touch(&del.join("s.1.del"), now);
    for _ in 0..2 {
        m = m.successor();
        store.publish(&m).expect("publish");
    }
    age(
        &manifests.join(format!("{:020}.json", 1)),
        now - Duration::from_secs(1800),
    );
    for v in 2..=3u64 {
        age(
            &manifests.join(format!("{v:020}.json")),
            now + Duration::from_secs(5),
        );
    }
    // Between the listing and the lease read, the seal publishes v4
    // naming its file and drops its lease.
    let held = std::sync::Mutex::new(Some(lease));
    let (publisher, published) = (store.clone(), m.clone());
    fail::cfg_callback("gc::before_delete", move || {
        if let Some(lease) = held.lock().expect("lock").take() {
            let mut next = published.successor();
            next.segments = vec![entry("s", None, Some("s.1.del"))];
            publisher.publish(&next).expect("v4");
            drop(lease);
        }
    })
    .expect("failpoint");
    let policy = GcPolicy {
        keep_versions: 1,
        grace: Duration::ZERO,
    };
    store
        .collect_garbage("c", &policy, now + Duration::from_secs(60))
        .expect("gc");
    fail::remove("gc::before_delete");
    assert_eq!(store.latest_manifest("c").expect("latest").version, 4);
    assert!(
        exists(&store, "deletes/s.1.del"),
        "v4 names the delete file: it must stay"
    );
}

#[test]
fn an_unreadable_retained_manifest_stops_the_pass() {
    let (_dir, store) = store_with_collection();
    let seg = store.root().join("collections/c/segments");
    fs::create_dir_all(&seg).expect("mkdir");
    let now = SystemTime::now();
    touch(&seg.join("a.seg"), now - Duration::from_secs(3600));
    let manifests = store.root().join("collections/c/manifests");
    fs::create_dir_all(&manifests).expect("mkdir");
    fs::write(manifests.join(format!("{:020}.json", 1)), b"{not json").expect("write");
    let err = store
        .collect_garbage("c", &GcPolicy::default(), now)
        .expect_err("corrupt manifest");
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(exists(&store, "segments/a.seg"));
}
