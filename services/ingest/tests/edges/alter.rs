//! A collection altered while ingest runs: the running worker takes the
//! new definition (events whose new field has the wrong type go to the
//! dead-letter topic, new segments index the field), and maintenance
//! re-indexes the segments sealed before.

use std::collections::BTreeMap;

use eddy_manifest::Store;
use eddy_model::{FieldType, PointId};
use eddy_segment::Segment;

use super::{produce, producer, sample, scrape, start_ingest_with, wait_until};
use eddy_loadtest::broker::Tansu;

const TOPIC: &str = "edges-alter";

/// Point `id` with a `color` payload (`color` as JSON text).
fn event(id: u64, color: &str) -> Vec<u8> {
    format!(r#"{{"id": {id}, "vector": [{id}, 1, 0, 0], "payload": {{"color": {color}}}}}"#)
        .into_bytes()
}

/// Whether every segment `store` lists for the collection has a payload
/// index covering `color` as a keyword.
fn all_cover_color(store: &Store) -> bool {
    let manifest = store.latest_manifest(TOPIC).expect("manifest");
    !manifest.segments.is_empty()
        && manifest.segments.iter().all(|s| {
            let seg = Segment::open(&store.segment_path(TOPIC, &s.id)).expect("segment");
            match seg.payload_index() {
                Some(Ok(index)) => index.field_type("color") == Some(FieldType::Keyword),
                _ => false,
            }
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_altered_collection_is_taken_by_the_running_worker_and_old_segments_reindexed() {
    let tansu = Tansu::start().expect("tansu");
    let brokers = tansu.bootstrap();
    tansu.create_topic(TOPIC, 1).expect("topic");
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("store");
    let ingest = start_ingest_with(
        dir.path(),
        &brokers,
        &format!("name={TOPIC},dim=4,metric=l2"),
        &["--index-poll-ms", "50", "--min-graph-rows", "4"],
    )
    .await;
    let producer = producer(&brokers);
    // Before: color is not declared, so any value is accepted (a number
    // too), and sealed without a payload index.
    for (id, color) in [(1, r#""red""#), (2, r#""blue""#), (3, "7"), (4, r#""red""#)] {
        produce(
            &producer,
            TOPIC,
            0,
            &id.to_string(),
            &event(id, color),
            None,
        )
        .await;
    }
    let next = || {
        store
            .latest_manifest(TOPIC)
            .expect("manifest")
            .next_offset(0)
    };
    wait_until(
        60,
        "the first four events are sealed",
        || next() >= 4,
        || format!("{}", next()),
    )
    .await;
    assert!(!all_cover_color(&store));

    let fields = BTreeMap::from([("color".to_owned(), FieldType::Keyword)]);
    store.add_payload_fields(TOPIC, &fields).expect("altered");
    // The worker takes the definition at a supervisor poll (100 ms here):
    // until then a number color is still accepted. Probe until one is
    // refused, so the rest runs against the new definition.
    let rejected =
        format!("eddy_ingest_rejected_total{{collection=\"{TOPIC}\",reason=\"payload_type\"}}");
    let mut expected: Vec<u64> = vec![1, 2, 3, 4];
    let mut offset = 4;
    for probe in 1_000..1_100u64 {
        produce(
            &producer,
            TOPIC,
            0,
            &probe.to_string(),
            &event(probe, "9"),
            None,
        )
        .await;
        offset += 1;
        wait_until(
            60,
            "the probe is sealed or refused",
            || next() >= offset,
            || format!("{}", next()),
        )
        .await;
        if sample(&scrape(&ingest).await, &rejected) == Some(1.0) {
            break;
        }
        assert!(
            probe < 1_099,
            "the worker never took the altered definition"
        );
        expected.push(probe);
    }
    for (id, color) in [
        (5, r#""green""#),
        (6, "8"),
        (7, r#""red""#),
        (8, r#""blue""#),
        (9, r#""red""#),
    ] {
        produce(
            &producer,
            TOPIC,
            0,
            &id.to_string(),
            &event(id, color),
            None,
        )
        .await;
    }
    offset += 5;
    wait_until(
        60,
        "the later events are sealed",
        || next() >= offset,
        || format!("{}", next()),
    )
    .await;
    let metrics = scrape(&ingest).await;
    assert_eq!(
        sample(&metrics, &rejected),
        Some(2.0),
        "a number color after the alteration is a dead letter:\n{metrics}"
    );
    expected.extend([5, 7, 8, 9]);
    expected.sort_unstable();

    wait_until(
        60,
        "every segment indexes color",
        || all_cover_color(&store),
        || format!("{:?}", store.latest_manifest(TOPIC).map(|m| m.segments)),
    )
    .await;
    let (report, rows) = eddy_manifest::fsck(&store, TOPIC).expect("fsck");
    assert!(report.is_clean(), "fsck: {report:?}");
    let mut live: Vec<u64> = rows
        .iter()
        .filter(|(_, at)| at.len() == 1)
        .filter_map(|(id, _)| match id {
            PointId::Num(n) => Some(*n),
            PointId::Str(_) => None,
        })
        .collect();
    live.sort_unstable();
    assert_eq!(
        live, expected,
        "each once (the probes accepted before the worker took the alteration included); 6 went to the dead letters"
    );
    ingest.shutdown().await;
}
