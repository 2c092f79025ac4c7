//! A deleted and re-created topic: the partition whose manifest offset is
//! now above the high watermark stops loudly (metric, log) while the other
//! goes on; an operator's resume restarts it from the chosen offset.

use eddy_loadtest::broker::Tansu;
use eddy_manifest::Store;

use super::*;

const TOPIC: &str = "recreated";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_topic_stops_its_partition_until_an_operator_resumes_it() {
    let tansu = Tansu::start().expect("tansu");
    let brokers = tansu.bootstrap();
    tansu.create_topic(TOPIC, 2).expect("topic");
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("store");
    let spec = format!("name={TOPIC},dim=4,metric=l2");
    let producer = producer(&brokers);

    // Ten events on each partition, sealed.
    let ingest = start_ingest(dir.path(), &brokers, &spec).await;
    for id in 0..20 {
        produce(
            &producer,
            TOPIC,
            (id % 2) as i32,
            &id.to_string(),
            &json_event(id),
            None,
        )
        .await;
    }
    let covered = |p0: i64, p1: i64| {
        let m = store.latest_manifest(TOPIC).expect("manifest");
        m.next_offset(0) >= p0 && m.next_offset(1) >= p1
    };
    let manifest = || format!("{:?}", store.latest_manifest(TOPIC).map(|m| m.partitions));
    wait_until(
        60,
        "both partitions are sealed to offset 10",
        || covered(10, 10),
        manifest,
    )
    .await;
    ingest.shutdown().await;

    // The topic is deleted and re-created: partition 0 now holds 3 events
    // (the manifest's offset 10 is above its high watermark), partition 1
    // holds 12 (offsets 10 and 11 are read on).
    // No client that knew the old topic lives on: librdkafka 2.12's
    // metadata cache can crash on a re-created topic (a fresh process, as
    // after a restart, is what this test is about).
    drop(producer);
    delete_topic(&tansu, TOPIC);
    tansu.create_topic(TOPIC, 2).expect("re-created topic");
    let producer = super::producer(&brokers);
    for id in 100..103 {
        produce(&producer, TOPIC, 0, &id.to_string(), &json_event(id), None).await;
    }
    for id in 200..212 {
        produce(&producer, TOPIC, 1, &id.to_string(), &json_event(id), None).await;
    }
    let ingest = start_ingest(dir.path(), &brokers, &spec).await;
    wait_until(
        60,
        "partition 1 goes on to offset 12",
        || covered(10, 12),
        manifest,
    )
    .await;
    let stopped = format!(
        "eddy_ingest_partition_stopped{{collection=\"{TOPIC}\",partition=\"0\",reason=\"above_high_watermark\"}}"
    );
    let mut metrics = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while sample(&metrics, &stopped) != Some(1.0) {
        assert!(Instant::now() < deadline, "no stop metric:\n{metrics}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        metrics = scrape(&ingest).await;
    }
    assert_eq!(
        store
            .latest_manifest(TOPIC)
            .expect("manifest")
            .next_offset(0),
        10,
        "a stopped partition's offset does not move"
    );

    // The operator resumes partition 0 from offset 0 of the new topic.
    eddy_ingest::resume_partition(&store, TOPIC, 0, 0, "edges-test", "topic re-created")
        .expect("resume");
    wait_until(
        60,
        "partition 0 resumes and covers the new 3 events",
        || {
            let m = store.latest_manifest(TOPIC).expect("manifest");
            m.next_offset(0) == 3 && m.resumes.get(&0).is_some_and(|r| r.previous_offset == 10)
        },
        manifest,
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while sample(&metrics, &stopped) != Some(0.0) {
        assert!(
            Instant::now() < deadline,
            "stop metric not cleared:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        metrics = scrape(&ingest).await;
    }
    let (report, counts) = eddy_manifest::fsck(&store, TOPIC).expect("fsck");
    assert!(report.is_clean(), "fsck: {report:?}");
    for id in (0..20).chain(100..103).chain([210, 211]) {
        assert_eq!(
            counts.get(&eddy_model::PointId::Num(id)).map(Vec::len),
            Some(1),
            "id {id}"
        );
    }

    ingest.shutdown().await;
}
