//! The query tail checks offsets as ingest does: a partition whose
//! manifest offset is above its log's high watermark (the topic was
//! re-created) is reported stale instead of being skipped over, and
//! restarts from the manifest's offset once an operator resumes it; a
//! broker slow to answer fetches is still read.

use std::time::{Duration, Instant};

use eddy_loadtest::broker::{SlowFetchTansu, Tansu};
use eddy_manifest::{PartitionState, Store};
use eddy_model::{CollectionDef, Metric};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;

use crate::cluster::{vector, DIM};

const COLLECTION: &str = "stale";

async fn metric(http: &reqwest::Client, query: &eddy_query::Query, series: &str) -> Option<f64> {
    let text = http
        .get(format!("http://{}/metrics", query.http_addr()))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

async fn wait_metric(http: &reqwest::Client, query: &eddy_query::Query, series: &str, want: f64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(http, query, series).await != Some(want) {
        assert!(Instant::now() < deadline, "{series} never became {want}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Publishes points 0, 1 and 2 (JSON, no header) to `topic`.
async fn produce_three(brokers: &str, topic: &str) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("acks", "all")
        .create()
        .expect("producer");
    for id in 0..3u64 {
        let value = serde_json::json!({"id": id, "vector": vector(id)}).to_string();
        let key = id.to_string();
        producer
            .send(
                FutureRecord::to(topic).key(&key).payload(&value),
                Duration::from_secs(10),
            )
            .await
            .expect("delivered");
    }
}

/// A store in `dir` holding an empty l2 collection `name`.
fn l2_store(dir: &std::path::Path, name: &str) -> Store {
    let store = Store::open(dir).expect("store");
    let mut def = CollectionDef::new(name, DIM as u32);
    def.metric = Metric::L2;
    store.create_collection(&def).expect("collection");
    store
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_beyond_its_log_is_stale_until_resumed() {
    let tansu = tokio::task::spawn_blocking(Tansu::start)
        .await
        .expect("join")
        .expect("tansu");
    tansu.create_topic(COLLECTION, 1).expect("topic");
    let brokers = tansu.bootstrap();
    produce_three(&brokers, COLLECTION).await;
    // The manifest says 100 events of partition 0 are sealed; the log has 3.
    let dir = tempfile::tempdir().expect("tmp");
    let store = l2_store(dir.path(), COLLECTION);
    let mut manifest = store.latest_manifest(COLLECTION).expect("v0").successor();
    manifest.partitions.insert(
        0,
        PartitionState {
            next_offset: 100,
            owner_epoch: 1,
        },
    );
    store.publish(&manifest).expect("v1");

    let flags = ["--store".to_owned(), dir.path().display().to_string()];
    let query = crate::cluster::start_query(&brokers, &flags).await;
    let http = reqwest::Client::new();
    let stale = format!(
        "eddy_query_partition_stale{{collection=\"{COLLECTION}\",partition=\"0\",reason=\"above_high_watermark\"}}"
    );
    wait_metric(&http, &query, &stale, 1.0).await;
    let rows = format!("eddy_query_tail_rows{{collection=\"{COLLECTION}\"}}");
    assert_ne!(
        metric(&http, &query, &rows).await,
        Some(3.0),
        "nothing read past the log"
    );

    // Answers say so.
    let answer: serde_json::Value = http
        .post(format!(
            "http://{}/v1/collections/{COLLECTION}/search",
            query.http_addr()
        ))
        .json(&serde_json::json!({"vector": vector(0)}))
        .send()
        .await
        .expect("search")
        .json()
        .await
        .expect("json");
    assert!(
        answer["stale"][0]
            .as_str()
            .is_some_and(|s| s.contains("partition 0 is stale: above_high_watermark")),
        "{answer}"
    );

    eddy_ingest::resume_partition(&store, COLLECTION, 0, 0, "e2e", "topic re-created")
        .expect("resume");
    wait_metric(&http, &query, &stale, 0.0).await;
    wait_metric(&http, &query, &rows, 3.0).await;
    query.shutdown().await;
}

/// A broker that takes seconds to answer a fetch (as Tansu does reading a
/// long backlog): the tail's offset watch must not cut off the fetch its
/// log-range reads would queue behind. It did: the reads went out on the
/// tail consumer's connection, librdkafka closed it when they timed out
/// (after 500 ms), and the fetch died with it, every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_slower_than_the_offset_watch_still_reaches_the_tail() {
    const TOPIC: &str = "slowtail";
    // Longer than the watch's period (2 s) plus its read timeout.
    const FETCH_DELAY: Duration = Duration::from_secs(4);
    let broker = tokio::task::spawn_blocking(|| SlowFetchTansu::start(&[(TOPIC, 1)], FETCH_DELAY))
        .await
        .expect("join")
        .expect("slow-fetch broker");
    let brokers = broker.bootstrap();
    produce_three(&brokers, TOPIC).await;
    let dir = tempfile::tempdir().expect("tmp");
    l2_store(dir.path(), TOPIC);
    let flags = ["--store".to_owned(), dir.path().display().to_string()];
    let query = crate::cluster::start_query(&brokers, &flags).await;
    let http = reqwest::Client::new();
    let rows = format!("eddy_query_tail_rows{{collection=\"{TOPIC}\"}}");
    wait_metric(&http, &query, &rows, 3.0).await;
    assert!(
        broker.fetches_delayed() > 0,
        "the fetches went through the proxy"
    );
    query.shutdown().await;
}
