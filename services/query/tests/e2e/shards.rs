//! A collection split into shards: ingest seals each shard's partitions
//! into its own manifest chain, a node serving every shard answers exactly
//! as an unsplit collection would, and a node serving one shard (`--shards`)
//! refuses a search it cannot answer whole, or with `allow_partial` answers
//! from its shard, marked partial.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cluster::{exact_top_k, vector, Cluster};
use crate::http_api;

/// Checks `cluster` (serving every shard of `collection`, split into
/// `shards`), whose points arrived on the partitions `partition_of` says.
pub async fn split_collection_is_served_whole_and_by_shard(
    cluster: &Cluster,
    collection: &str,
    shards: u32,
    points: &BTreeMap<u64, Vec<f32>>,
    partition_of: &BTreeMap<u64, u32>,
) {
    http_api::every_point_is_found_with_its_exact_score(cluster, collection, points).await;
    http_api::search_matches_exact_top_k(cluster, collection, points).await;

    // Each shard's chain holds its own partitions' rows, and only those.
    let store = cluster.open_store();
    let def = store
        .collection(collection)
        .expect("store")
        .expect("collection");
    assert_eq!(def.shards, shards);
    let mut live = 0;
    for shard in 0..shards {
        let chain = def.chain(shard);
        let manifest = store.latest_manifest(&chain).expect("manifest");
        assert!(manifest.version > 0, "shard {shard} published nothing");
        assert!(
            manifest.partitions.keys().all(|p| p % shards == shard),
            "shard {shard}'s chain names partitions of another shard: {:?}",
            manifest.partitions
        );
        let (report, rows) = eddy_manifest::fsck(&store, &chain).expect("fsck");
        assert!(report.is_clean(), "{chain}: {report:?}");
        live += rows.len();
    }
    assert_eq!(live, points.len(), "every point in exactly one shard");

    // A node serving shard 0 only.
    let node = start_node(cluster, &["--shards", "0"]).await;
    let http = format!("http://{}", node.http_addr());
    let shard0: BTreeMap<u64, Vec<f32>> = points
        .iter()
        .filter(|(id, _)| partition_of[id].is_multiple_of(shards))
        .map(|(id, v)| (*id, v.clone()))
        .collect();
    assert!(!shard0.is_empty() && shard0.len() < points.len());
    wait_count(&http, collection, shard0.len() as u64).await;
    let client = reqwest::Client::new();
    let q = vector(3_000_000);
    let whole = client
        .post(format!("{http}/v1/collections/{collection}/search"))
        .json(&json!({"vector": q, "k": 10}))
        .send()
        .await
        .expect("search");
    assert_eq!(
        whole.status().as_u16(),
        503,
        "a search it cannot answer whole"
    );
    let why: Value = whole.json().await.expect("json");
    assert!(
        why.to_string().contains("allow_partial"),
        "the refusal says what to do: {why}"
    );
    for seed in 0..10u64 {
        let q = vector(3_000_000 + seed);
        let r: Value = client
            .post(format!("{http}/v1/collections/{collection}/search"))
            .json(&json!({"vector": q, "k": 10, "allow_partial": true}))
            .send()
            .await
            .expect("search")
            .json()
            .await
            .expect("json");
        assert_eq!(
            r["missing_shards"],
            json!((1..shards).collect::<Vec<_>>()),
            "{r}"
        );
        assert!(
            r["stale"].to_string().contains("partial"),
            "a partial answer says so: {r}"
        );
        let got: Vec<u64> = r["result"]
            .as_array()
            .expect("result")
            .iter()
            .map(|h| h["id"].as_u64().expect("id"))
            .collect();
        let want: Vec<u64> = exact_top_k(&shard0, &q, 10)
            .iter()
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(got, want, "query {seed}: the exact answer over shard 0");
    }
    let info: Value = client
        .get(format!("{http}/v1/collections/{collection}"))
        .send()
        .await
        .expect("info")
        .json()
        .await
        .expect("json");
    assert_eq!(info["shards"], json!(shards), "{info}");
    assert_eq!(info["served_shards"], json!([0]), "{info}");
    node.shutdown().await;
}

/// Starts another eddy-query on `cluster`'s broker and store with `extra`
/// flags.
async fn start_node(cluster: &Cluster, extra: &[&str]) -> eddy_query::Query {
    let brokers = cluster.brokers();
    let store = cluster.store_path().display().to_string();
    let args: Vec<&str> = [
        "eddy-query",
        "--brokers",
        &brokers,
        "--store",
        &store,
        "--http-addr",
        "127.0.0.1:0",
        "--flight-addr",
        "127.0.0.1:0",
        "--manifest-poll-ms",
        "50",
        "--collection-poll-ms",
        "100",
    ]
    .into_iter()
    .chain(extra.iter().copied())
    .collect();
    eddy_query::start(<eddy_query::QueryConfig as clap::Parser>::parse_from(args))
        .await
        .expect("query node starts")
}

/// Waits until `http` counts `n` points in `collection`.
async fn wait_count(http: &str, collection: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r: Option<Value> = async {
            reqwest::Client::new()
                .post(format!("{http}/v1/collections/{collection}/count"))
                .json(&json!({}))
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
        assert!(Instant::now() < deadline, "count never reached {n}: {r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
