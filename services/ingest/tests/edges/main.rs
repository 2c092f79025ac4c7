//! The Kafka edges of eddy-ingest, against a real broker (Tansu): offsets
//! that would jump stop their partition loudly until an operator resumes
//! it, dead letters that cannot be written pause consumption, and protobuf
//! and Arrow events travel through the broker into segments (a bad Arrow
//! batch to the dead-letter topic, whole), and a collection altered while
//! ingest runs takes effect in the running worker and in old segments, and
//! a broker slow to answer fetches is still read.

mod alter;
mod dead_letters;
mod formats;
mod offsets;
mod slow_fetch;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser as _;
use eddy_ingest::{Ingest, IngestConfig};
use eddy_loadtest::broker::Tansu;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;

/// Starts eddy-ingest in this process for `collection` (a `--collection`
/// spec), sealing every few events.
async fn start_ingest(store: &Path, brokers: &str, collection: &str) -> Ingest {
    start_ingest_with(store, brokers, collection, &[]).await
}

/// [`start_ingest`] with more flags.
async fn start_ingest_with(store: &Path, brokers: &str, collection: &str, more: &[&str]) -> Ingest {
    let mut args = vec![
        "eddy-ingest",
        "--store",
        store.to_str().expect("utf-8"),
        "--brokers",
        brokers,
        "--collection",
        collection,
        "--seal-rows",
        "4",
        "--seal-age-ms",
        "150",
        "--metrics-addr",
        "127.0.0.1:0",
        "--collection-poll-ms",
        "100",
        "--gc-interval-ms",
        "0",
        "--instance-id",
        "edges-test",
    ];
    args.extend_from_slice(more);
    let config = IngestConfig::parse_from(args);
    eddy_ingest::start(config).await.expect("ingest starts")
}

/// A producer that waits for every in-sync replica.
fn producer(brokers: &str) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("acks", "all")
        .create()
        .expect("producer")
}

/// Produces one record to `partition` of `topic`.
async fn produce(
    producer: &FutureProducer,
    topic: &str,
    partition: i32,
    key: &str,
    value: &[u8],
    content_type: Option<&str>,
) {
    let mut record: FutureRecord<'_, str, [u8]> = FutureRecord::to(topic)
        .partition(partition)
        .key(key)
        .payload(value);
    if let Some(ct) = content_type {
        record = record.headers(OwnedHeaders::new().insert(Header {
            key: "content-type",
            value: Some(ct),
        }));
    }
    producer
        .send(record, Duration::from_secs(10))
        .await
        .expect("delivered");
}

/// The JSON event of point `id` with a 4-d vector.
fn json_event(id: u64) -> Vec<u8> {
    format!(r#"{{"id": {id}, "vector": [{id}, 1, 0, 0], "payload": {{"n": {id}}}}}"#).into_bytes()
}

/// Waits (up to `secs`) until `done` holds; panics with `what` and the
/// context `explain` gives otherwise.
async fn wait_until(
    secs: u64,
    what: &str,
    mut done: impl FnMut() -> bool,
    explain: impl Fn() -> String,
) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting until {what}: {}",
            explain()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The metrics text of a running ingest.
async fn scrape(ingest: &Ingest) -> String {
    reqwest::get(format!("http://{}/metrics", ingest.metrics_addr()))
        .await
        .expect("metrics reachable")
        .text()
        .await
        .expect("metrics text")
}

/// The value of the sample whose line starts with `series`, if any.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Deletes `topic` with the Tansu CLI.
fn delete_topic(tansu: &Tansu, topic: &str) {
    let bin = eddy_loadtest::broker::find_tansu().expect("tansu");
    let status = Command::new(bin)
        .args(["topic", "delete", topic, "--broker"])
        .arg(tansu.broker_url())
        .current_dir(tansu.data_dir())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("tansu topic delete runs");
    assert!(status.success(), "tansu topic delete {topic}: {status}");
}
