//! Dead letters that cannot be written pause the worker, which resumes once
//! they can: the dead-letter topic is missing (ingest may not create it), a
//! bad event arrives, and nothing after it is sealed until the topic exists.
//! (The topic is not deleted under a running client instead: librdkafka
//! 2.12's metadata cache can crash on a re-created topic.)

use eddy_loadtest::broker::Tansu;
use eddy_manifest::Store;

use super::*;

const TOPIC: &str = "letters";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_dead_letter_topic_pauses_consumption_until_it_exists() {
    let tansu = Tansu::start().expect("tansu");
    let brokers = tansu.bootstrap();
    tansu.create_topic(TOPIC, 1).expect("topic");
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("store");
    let ingest = start_ingest_with(
        dir.path(),
        &brokers,
        &format!("name={TOPIC},dim=4,metric=l2"),
        &["--create-dead-letter-topic", "false"],
    )
    .await;
    let producer = producer(&brokers);
    produce(&producer, TOPIC, 0, "1", &json_event(1), None).await;
    let next = || {
        store
            .latest_manifest(TOPIC)
            .expect("manifest")
            .next_offset(0)
    };
    let manifest = || format!("{:?}", store.latest_manifest(TOPIC).map(|m| m.partitions));
    wait_until(60, "the first event is sealed", || next() >= 1, manifest).await;

    produce(
        &producer,
        TOPIC,
        0,
        "2",
        br#"{"id": 2, "vector": [1, 2]}"#,
        None,
    )
    .await;
    for id in 3..40 {
        produce(&producer, TOPIC, 0, &id.to_string(), &json_event(id), None).await;
    }
    let blocked = format!("eddy_ingest_dead_letters_blocked{{collection=\"{TOPIC}\"}}");
    let mut metrics = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while sample(&metrics, &blocked) != Some(1.0) {
        assert!(Instant::now() < deadline, "never blocked:\n{metrics}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        metrics = scrape(&ingest).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(next(), 1, "nothing past an unwritten dead letter is sealed");

    tansu
        .create_topic(&format!("{TOPIC}.dlq"), 1)
        .expect("dead-letter topic");
    wait_until(
        90,
        "every event is sealed once letters are written",
        || next() >= 39,
        manifest,
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while sample(&metrics, &blocked) != Some(0.0) {
        assert!(Instant::now() < deadline, "never unblocked:\n{metrics}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        metrics = scrape(&ingest).await;
    }
    let (report, _) = eddy_manifest::fsck(&store, TOPIC).expect("fsck");
    assert_eq!(
        report.live_rows, 38,
        "ids 1 and 3..39; the bad event is a dead letter"
    );
    ingest.shutdown().await;
}
