//! A broker that takes seconds to answer a fetch (as Tansu does reading a
//! long backlog): the offset watch's log-range reads, which time out after
//! a second, must not cut off the fetch they would queue behind. They did:
//! they went out on the consumer's own connection, librdkafka closed it when
//! they timed out, the fetch died with it and was sent again, and the
//! partition never moved.

use std::time::Duration;

use eddy_loadtest::broker::SlowFetchTansu;
use eddy_manifest::Store;

use super::*;

const TOPIC: &str = "slowfetch";
/// Longer than the offset watch's period (5 s) plus its read timeout, so a
/// watch always fires while a fetch is outstanding.
const FETCH_DELAY: Duration = Duration::from_secs(7);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_slower_than_the_offset_watch_still_delivers() {
    let broker = tokio::task::spawn_blocking(|| SlowFetchTansu::start(&[(TOPIC, 1)], FETCH_DELAY))
        .await
        .expect("broker start joined")
        .expect("slow-fetch broker");
    let brokers = broker.bootstrap();
    let producer = producer(&brokers);
    for id in 0..10 {
        produce(&producer, TOPIC, 0, &id.to_string(), &json_event(id), None).await;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("store");
    let ingest = start_ingest(
        dir.path(),
        &brokers,
        &format!("name={TOPIC},dim=4,metric=l2"),
    )
    .await;
    wait_until(
        90,
        "the ten events are sealed",
        || {
            store
                .latest_manifest(TOPIC)
                .is_ok_and(|m| m.next_offset(0) >= 10)
        },
        || {
            format!(
                "manifest {:?}; {} fetch responses held back",
                store.latest_manifest(TOPIC).map(|m| m.partitions),
                broker.fetches_delayed()
            )
        },
    )
    .await;
    ingest.shutdown().await;
}
