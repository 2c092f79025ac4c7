//! Query nodes beside a cluster's own: starting them, waiting for them,
//! reading their metrics.

use std::time::{Duration, Instant};

use clap::Parser as _;
use serde_json::{json, Value};

use super::Cluster;

/// The flags every test's eddy-query starts with: `brokers`, ports the OS
/// picks, and fast polls.
pub fn query_args(brokers: &str) -> Vec<String> {
    [
        "eddy-query",
        "--brokers",
        brokers,
        "--http-addr",
        "127.0.0.1:0",
        "--flight-addr",
        "127.0.0.1:0",
        "--manifest-poll-ms",
        "50",
        "--collection-poll-ms",
        "100",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect()
}

/// Starts eddy-query with [`query_args`] for `brokers` plus `flags`
/// (a `--flight-addr` among them replaces the default one).
pub async fn start_query(brokers: &str, flags: &[String]) -> eddy_query::Query {
    let mut args = query_args(brokers);
    if flags.iter().any(|f| f == "--flight-addr") {
        if let Some(at) = args.iter().position(|a| a == "--flight-addr") {
            args.drain(at..at + 2);
        }
    }
    args.extend(flags.iter().cloned());
    eddy_query::start(eddy_query::QueryConfig::parse_from(args))
        .await
        .expect("query node starts")
}

/// Starts another eddy-query on `cluster`'s broker (with its Kafka
/// settings) with `store_flags` (its store, and for an object store its
/// own cache) and `extra` flags.
pub async fn start_node(
    cluster: &Cluster,
    store_flags: &[String],
    extra: &[&str],
) -> eddy_query::Query {
    let flags: Vec<String> = extra
        .iter()
        .map(|a| (*a).to_owned())
        .chain(cluster.kafka_args.iter().cloned())
        .chain(store_flags.iter().cloned())
        .collect();
    start_query(&cluster.brokers(), &flags).await
}

/// Waits until the node at `http` (a base URL) says to `client` it is
/// ready (`/readyz`: every collection's snapshot installed and its tail
/// holding its partitions).
pub async fn wait_node_ready(client: &reqwest::Client, http: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ok = client
            .get(format!("{http}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ok {
            return;
        }
        assert!(Instant::now() < deadline, "{http} not ready within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the node at `http` (a base URL) counts `n` points in
/// `collection`.
pub async fn wait_node_count(http: &str, collection: &str, n: u64) {
    wait_node_count_with(http, collection, n, &json!({})).await;
}

/// [`wait_node_count`] with the count request `body` (a filter,
/// `allow_partial`).
pub async fn wait_node_count_with(http: &str, collection: &str, n: u64, body: &Value) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r: Option<Value> = async {
            reqwest::Client::new()
                .post(format!("{http}/v1/collections/{collection}/count"))
                .json(body)
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()
        }
        .await;
        if r.as_ref().and_then(|r| r["count"].as_u64()) == Some(n) {
            return;
        }
        assert!(Instant::now() < deadline, "{http} never counted {n}: {r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sum of a metric's samples whose label set contains every `labels` pair.
pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter(|l| l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
