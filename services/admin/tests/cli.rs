//! `eddy fsck` as a command: exit 0 and a readable report on a sound store,
//! exit 1 naming the damaged file when one is damaged, JSON with `--json`;
//! `eddy partition resume` records the resume in a new manifest version.

use std::collections::BTreeMap;
use std::process::Command;

use eddy_manifest::{SegmentEntry, Store};
use eddy_model::{CollectionDef, IdType, Metric, PointId};
use eddy_segment::Growing;

/// A store with collection `c`: one segment of three points.
fn store() -> (tempfile::TempDir, Store, String) {
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("store");
    store
        .create_collection(&CollectionDef::new("c", 2))
        .expect("collection");
    let mut rows = Growing::new(2, Metric::Cosine, IdType::U64);
    for id in 0..3u64 {
        rows.upsert(PointId::Num(id), &[1.0, id as f32], b"", 0, id as i64);
    }
    let (id, path) = store.new_segment("c");
    let bytes = rows
        .write_segment(&path, &BTreeMap::new())
        .expect("segment")
        .bytes;
    let updated = store
        .update::<eddy_manifest::Error>("c", |latest| {
            let mut next = latest.successor();
            next.segments.push(SegmentEntry {
                id: id.clone(),
                rows: 3,
                bytes,
                deletes: None,
                deleted: 0,
                offset_ranges: BTreeMap::from([(0, (0, 2))]),
                index: None,
            });
            next.partitions.entry(0).or_default().next_offset = 3;
            Ok(Some(next))
        })
        .expect("published");
    assert!(updated.published.is_some());
    (dir, store, id)
}

fn eddy(store: &Store, extra: &[&str]) -> (i32, String) {
    run(&["fsck"], store, extra)
}

fn run(command: &[&str], store: &Store, extra: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_eddy"))
        .args(command)
        .args(["--store", store.root().to_str().expect("utf-8")])
        .args(extra)
        .output()
        .expect("eddy runs");
    let code = out.status.code().expect("exit code");
    (code, String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn a_sound_store_is_clean_and_a_damaged_segment_is_named() {
    let (_dir, store, segment) = store();
    let (code, text) = eddy(&store, &[]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("collection c: clean"), "{text}");
    assert!(text.contains("3 live rows"), "{text}");

    let path = store.segment_path("c", &segment);
    let mut bytes = std::fs::read(&path).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&path, bytes).expect("damage");
    let (code, text) = eddy(&store, &["--collection", "c"]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("PROBLEMS FOUND") && text.contains(&segment),
        "{text}"
    );

    let (code, json) = eddy(&store, &["--json"]);
    assert_eq!(code, 1);
    let report: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(report[0]["collection"], "c");
    assert_eq!(
        report[0]["store"]["damaged_files"].as_array().map(Vec::len),
        Some(1)
    );
}

#[test]
fn an_unknown_collection_cannot_be_checked() {
    let (_dir, store, _) = store();
    let (code, _) = eddy(&store, &["--collection", "nope"]);
    assert_eq!(code, 2);
}

#[test]
fn a_resume_is_published_with_who_and_why() {
    let (_dir, store, _) = store();
    let before = store.latest_manifest("c").expect("manifest");
    let (code, text) = run(
        &["partition", "resume"],
        &store,
        &[
            "--collection",
            "c",
            "--partition",
            "0",
            "--offset",
            "10",
            "--by",
            "ops",
            "--reason",
            "topic re-created",
        ],
    );
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("resumed at offset 10 (was 3)"), "{text}");
    let after = store.latest_manifest("c").expect("manifest");
    assert_eq!(after.version, before.version + 1);
    assert_eq!(after.next_offset(0), 10);
    let resume = &after.resumes[&0];
    assert_eq!(
        (
            resume.by.as_str(),
            resume.reason.as_str(),
            resume.previous_offset
        ),
        ("ops", "topic re-created", 3)
    );
    let (code, _) = run(
        &["partition", "resume"],
        &store,
        &[
            "--collection",
            "nope",
            "--partition",
            "0",
            "--offset",
            "0",
            "--by",
            "ops",
            "--reason",
            "x",
        ],
    );
    assert_eq!(code, 2, "an unknown collection is refused");
}
