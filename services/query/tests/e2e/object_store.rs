//! eddy on an S3-compatible object store, nothing shared on disk: ingest
//! and eddy-query each keep their own cache directory; segments, index
//! files, delete files and manifests live in the bucket (moto on loopback).
//! A second query node started later with an empty cache catches up from
//! the bucket alone and answers exactly; `fsck` over the bucket finds every
//! row once.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::cluster::{exact_top_k, start_node, vector, wait_node_count, Cluster};
use crate::http_api;

/// The services' store flags for `server`'s bucket; the credentials go in
/// a secrets file written into `dir`, as a deployment would mount them.
pub fn store_args(
    server: &eddy_loadtest::s3_server::S3Server,
    prefix: &str,
    dir: &std::path::Path,
) -> Vec<String> {
    let mut args = vec!["--store".to_owned(), server.store_url(prefix)];
    let mut secrets = String::from("# test credentials (moto accepts any)\n");
    for (name, value) in server.env() {
        let key = name.to_ascii_lowercase();
        if key.contains("secret") {
            secrets.push_str(&format!("{key}={value}\n"));
        } else {
            args.extend(["--store-option".to_owned(), format!("{key}={value}")]);
        }
    }
    let file = dir.join("store-secrets");
    std::fs::write(&file, secrets).expect("secrets file");
    args.extend([
        "--store-secrets-file".to_owned(),
        file.display().to_string(),
    ]);
    args
}

/// Searches `http` (a query node's base URL) and checks the answer against
/// the exact top 10 of `points`.
async fn answers_exactly(http: &str, collection: &str, points: &BTreeMap<u64, Vec<f32>>) {
    let client = reqwest::Client::new();
    for seed in 0..10u64 {
        let q = vector(2_000_000 + seed);
        let r: Value = client
            .post(format!("{http}/v1/collections/{collection}/search"))
            .json(&json!({"vector": q, "k": 10}))
            .send()
            .await
            .expect("search")
            .json()
            .await
            .expect("json");
        let got: Vec<u64> = r["result"]
            .as_array()
            .expect("result")
            .iter()
            .map(|h| h["id"].as_u64().expect("id"))
            .collect();
        let want: Vec<u64> = exact_top_k(points, &q, 10)
            .iter()
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(got, want, "query {seed} on {http}: {r}");
    }
}

/// Runs the object-store steps on `cluster` (started on `server`'s bucket).
pub async fn serves_from_the_bucket_alone(
    cluster: &Cluster,
    collection: &str,
    points: &BTreeMap<u64, Vec<f32>>,
    query_store_args: &[String],
) {
    http_api::search_matches_exact_top_k(cluster, collection, points).await;
    http_api::every_point_is_found_with_its_exact_score(cluster, collection, points).await;

    // fsck over the bucket: every row of the store once, none lost.
    let store = cluster.open_store();
    assert!(store.is_remote());
    let (report, live) = eddy_manifest::fsck(&store, collection).expect("fsck");
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(live.len() as u64, points.len() as u64, "{report:?}");

    // A new node with an empty cache: everything comes from the bucket.
    let cache = tempfile::tempdir().expect("tmp");
    let mut flags = query_store_args.to_vec();
    flags.extend([
        "--store-cache".to_owned(),
        cache.path().display().to_string(),
    ]);
    let node = start_node(cluster, &flags, &[]).await;
    let http = format!("http://{}", node.http_addr());
    wait_node_count(&http, collection, points.len() as u64).await;
    answers_exactly(&http, collection, points).await;
    let fetched = walk_files(
        &cache
            .path()
            .join("collections")
            .join(collection)
            .join("segments"),
    );
    assert!(
        fetched.iter().any(|f| f.ends_with(".seg")) && fetched.iter().any(|f| f.ends_with(".idx")),
        "the new node fetched segments and index files into its cache: {fetched:?}"
    );
    node.shutdown().await;
}

fn walk_files(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().to_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}
