//! A collection split into shards: ingest seals each shard's partitions
//! into its own manifest chain; a node serving every shard answers exactly
//! as an unsplit collection would; a node serving one shard (`--shards`)
//! fans searches out over Flight to peers serving the other (`--peers`),
//! answers exactly, honours `min_offsets` across shards and, when a peer
//! dies, asks a replica; with no peer left it refuses a search it cannot
//! answer whole, or with `allow_partial` answers from its shard, marked
//! partial. A snapshot pinned there spans both shards ([`shard_pins`]).

use std::collections::BTreeMap;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_flight::{FlightClient, Ticket};
use futures::TryStreamExt;
use serde_json::{json, Value};

use crate::cluster::{
    exact_top_k, start_node, vector, wait_node_count, wait_node_count_with, wait_node_ready,
    Cluster,
};
use crate::shard_reads::{
    assert_top_ids, first_id_in, first_id_not_in, get_json, get_status, post,
    reads_reach_every_shard, scroll_ids, wait_search_answers,
};
use crate::{flight_reads, http_api, shard_pins};

/// A Flight client of the node at `url` (no TLS, no key).
pub async fn flight_client(url: &str) -> FlightClient {
    let channel = tonic::transport::Channel::from_shared(url.to_owned())
        .expect("valid url")
        .connect()
        .await
        .expect("flight connects");
    FlightClient::new(channel)
}

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

    // Two nodes, one shard each; shard 0's node fans out to shard 1's and,
    // as a replica of shard 1, to the cluster's node serving both.
    let store = [
        "--store".to_owned(),
        cluster.store_path().display().to_string(),
    ];
    let node1 = start_node(cluster, &store, &["--shards", "1"]).await;
    let node1_flight = format!("http://{}", node1.flight_addr());
    let peers = format!("{node1_flight},{}", cluster.flight_url());
    let node0 = start_node(
        cluster,
        &store,
        &[
            "--shards",
            "0",
            "--peers",
            &peers,
            "--peer-refresh-ms",
            "100",
        ],
    )
    .await;
    let http0 = format!("http://{}", node0.http_addr());
    let shard0 = shard_points(points, partition_of, shards, 0);
    assert!(!shard0.is_empty() && shard0.len() < points.len());
    // Its count fans out too: every point, and a filtered count exactly.
    wait_node_count(&http0, collection, points.len() as u64).await;
    let k1 = json!({"filter": {"must": [{"key": "kind", "match": {"value": "k1"}}]}});
    let want_k1 = points.keys().filter(|id| *id % 3 == 1).count() as u64;
    wait_node_count_with(&http0, collection, want_k1, &k1).await;
    eprintln!("step: shard 0 node counted both shards");
    wait_fanned_out(&http0, collection).await;
    eprintln!("step: fan-out answers");
    answers_exactly(&http0, collection, points, &json!({})).await;
    eprintln!("step: fan-out exact");
    reads_reach_every_shard(&http0, collection, points).await;
    let flight0 = format!("http://{}", node0.flight_addr());
    flight_reads::scan_through(flight_client(&flight0).await, collection, points).await;
    eprintln!("step: point reads, scrolls and scans reach every shard");

    // Read-your-writes across shards: points published to both shards are
    // in the next answer of shard 0's node that asks for their offsets.
    let mut all = points.clone();
    let mut partition_of = partition_of.clone();
    let mut min_offsets = BTreeMap::new();
    let mut shard1_point = None;
    while shard1_point.is_none() || min_offsets.len() < 2 {
        let id = 900_000 + all.len() as u64;
        let v = vector(id);
        let (partition, offset) = cluster.upsert(id, &v, json!({"kind": "new", "i": 0})).await;
        all.insert(id, v.clone());
        partition_of.insert(id, partition as u32);
        let seen = min_offsets.entry(partition.to_string()).or_insert(offset);
        *seen = offset.max(*seen);
        if !(partition as u32).is_multiple_of(shards) {
            shard1_point = Some((id, v));
        }
    }
    let (id, v) = shard1_point.expect("a point in shard 1");
    let mut min_offsets = json!({ "min_offsets": min_offsets });
    let mut body = json!({"vector": v, "k": 1});
    if let (Some(b), Some(m)) = (body.as_object_mut(), min_offsets.as_object()) {
        b.extend(m.clone());
    }
    let r: Value = post(format!("{http0}/v1/collections/{collection}/search"), &body).await;
    assert_eq!(r["result"][0]["id"], json!(id), "read-your-writes: {r}");
    assert_eq!(r["result"][0]["score"].as_f64(), Some(0.0), "{r}");
    eprintln!("step: read-your-writes across shards");
    answers_exactly(&http0, collection, &all, &min_offsets).await;

    // Snapshots pinned on shard 0's node hold shard 1 pinned on a peer.
    let shard1 = [
        shard_pins::Shard1Node {
            http: format!("http://{}", node1.http_addr()),
            flight: node1_flight.clone(),
        },
        shard_pins::Shard1Node {
            http: cluster.url(""),
            flight: cluster.flight_url(),
        },
    ];
    let pins = shard_pins::a_pin_spans_shards(
        cluster,
        collection,
        (&http0, &flight0),
        &shard1,
        shard_pins::Published {
            all: &mut all,
            partition_of: &mut partition_of,
            min_offsets: &mut min_offsets,
        },
    )
    .await;

    // Shard 1's node dies (its Flight port closes): the replica answers
    // for shard 1 at once, still exactly.
    node1.shutdown().await;
    let gone = tokio::time::timeout(
        Duration::from_secs(10),
        eddy_loadtest::flight::FlightSearch::connect(
            node1_flight.trim_start_matches("http://"),
            Duration::from_secs(2),
        ),
    )
    .await;
    assert!(
        !matches!(gone, Ok(Ok(_))),
        "shard 1's node still takes connections"
    );
    eprintln!("step: shard 1 node stopped");
    answers_exactly(&http0, collection, &all, &min_offsets).await;
    eprintln!("step: replica took over");
    for pin in &pins {
        shard_pins::after_a_peer_died(&http0, collection, pin, &node1_flight).await;
    }
    node0.shutdown().await;

    // A node serving shard 0 whose only peer for shard 1 is gone. Its
    // shard holds the points published since that landed on it, too. It
    // asks its peer what it serves once at start, and then not for an hour.
    let shard0 = shard_points(&all, &partition_of, shards, 0);
    let lone = start_node(
        cluster,
        &store,
        &[
            "--shards",
            "0",
            "--peers",
            &node1_flight,
            "--peer-refresh-ms",
            "3600000",
        ],
    )
    .await;
    let http = format!("http://{}", lone.http_addr());
    let partial = json!({"allow_partial": true});
    wait_node_count_with(&http, collection, shard0.len() as u64, &partial).await;
    let client = reqwest::Client::new();
    let count = client
        .post(format!("{http}/v1/collections/{collection}/count"))
        .json(&json!({}))
        .send()
        .await
        .expect("count");
    assert_eq!(
        count.status().as_u16(),
        503,
        "a count it cannot answer whole"
    );
    let r: Value = post(
        format!("{http}/v1/collections/{collection}/count"),
        &partial,
    )
    .await;
    assert_eq!(r["missing_shards"], json!([1]), "{r}");
    assert!(r["stale"].to_string().contains("partial"), "{r}");
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
        let r: Value = post(
            format!("{http}/v1/collections/{collection}/search"),
            &json!({"vector": q, "k": 10, "allow_partial": true}),
        )
        .await;
        assert_eq!(
            r["missing_shards"],
            json!((1..shards).collect::<Vec<_>>()),
            "{r}"
        );
        assert!(
            r["stale"].to_string().contains("partial"),
            "a partial answer says so: {r}"
        );
        assert_top_ids(
            &shard0,
            &q,
            &r["result"],
            &format!("query {seed} over shard 0"),
        );
    }
    // Reads it cannot answer whole are refused too, never answered from
    // shard 0 alone as if shard 1 were empty.
    let (in0, in1) = (first_id_in(&shard0, &all), first_id_not_in(&shard0, &all));
    let point =
        |id: u64, query: &str| format!("{http}/v1/collections/{collection}/points/{id}{query}");
    assert_eq!(
        get_status(&point(in1, "")).await,
        503,
        "a point of shard 1 is not 'not found'"
    );
    assert_eq!(
        get_status(&point(in1, "?allow_partial=true")).await,
        404,
        "allow_partial: not found at hand"
    );
    let r = get_json(&point(in0, "")).await;
    assert_eq!(r["id"], json!(in0), "a point at hand is read: {r}");
    let scroll = client
        .post(format!("{http}/v1/collections/{collection}/scroll"))
        .json(&json!({"limit": 10}))
        .send()
        .await
        .expect("scroll");
    assert_eq!(
        scroll.status().as_u16(),
        503,
        "a scroll it cannot answer whole"
    );
    let (ids, pages) = scroll_ids(&http, collection, &partial, 13).await;
    assert_eq!(ids, shard0.keys().copied().collect::<Vec<_>>());
    for page in &pages {
        assert_eq!(page["missing_shards"], json!([1]), "{page}");
        assert!(page["stale"].to_string().contains("partial"), "{page}");
    }
    let mut lone_flight = flight_client(&format!("http://{}", lone.flight_addr())).await;
    let whole = json!({"scan": collection});
    let refused = match lone_flight.do_get(Ticket::new(whole.to_string())).await {
        Ok(stream) => stream.try_collect::<Vec<_>>().await.err(),
        Err(e) => Some(e),
    };
    let refused = refused.expect("a scan it cannot answer whole is refused");
    assert!(refused.to_string().contains("allow_partial"), "{refused}");
    let partial_scan = json!({"scan": collection, "allow_partial": true});
    let batches: Vec<RecordBatch> = lone_flight
        .do_get(Ticket::new(partial_scan.to_string()))
        .await
        .expect("partial scan")
        .try_collect()
        .await
        .expect("batches");
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    assert_eq!(rows, shard0.len(), "a partial scan: shard 0's points");
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

    // Shard 1's node comes back at its address: once it serves, the lone
    // node's next search finds it (its view of the peer, an hour from its
    // next refresh, is asked again before shard 1 is given up) and answers
    // whole.
    let back = start_node(
        cluster,
        &store,
        &[
            "--shards",
            "1",
            "--flight-addr",
            node1_flight.trim_start_matches("http://"),
        ],
    )
    .await;
    let shard1 = shard_points(&all, &partition_of, shards, 1);
    let back_http = format!("http://{}", back.http_addr());
    wait_node_count_with(&back_http, collection, shard1.len() as u64, &partial).await;
    wait_node_ready(&client, &back_http).await;
    answers_exactly(&http, collection, &all, &min_offsets).await;
    wait_node_count(&http, collection, all.len() as u64).await;
    eprintln!("step: a peer back at its address answers at once");
    back.shutdown().await;
    lone.shutdown().await;

    // Peers found in the store, no --peers: shard 1's node announces
    // itself in the node registry, shard 0's finds it there and answers
    // whole; a clean stop withdraws the record.
    let discover = ["--peer-discovery", "--peer-discovery-ms", "100"];
    let announced = start_node(
        cluster,
        &store,
        &[&["--shards", "1"][..], &discover].concat(),
    )
    .await;
    let finder = start_node(
        cluster,
        &store,
        &[&["--shards", "0"][..], &discover].concat(),
    )
    .await;
    let registry = cluster.open_store();
    let urls = |nodes: Vec<eddy_manifest::NodeRecord>| -> Vec<String> {
        nodes.into_iter().map(|n| n.flight_url).collect()
    };
    let mut both = vec![
        format!("http://{}", announced.flight_addr()),
        format!("http://{}", finder.flight_addr()),
    ];
    both.sort();
    assert_eq!(urls(registry.announced_nodes().expect("registry")), both);
    let finder_http = format!("http://{}", finder.http_addr());
    wait_fanned_out(&finder_http, collection).await;
    answers_exactly(&finder_http, collection, &all, &min_offsets).await;
    reads_reach_every_shard(&finder_http, collection, &all).await;
    eprintln!("step: a peer found in the store answers");
    announced.shutdown().await;
    assert_eq!(
        urls(registry.announced_nodes().expect("registry")),
        [format!("http://{}", finder.flight_addr())],
        "a stopped node withdraws its record"
    );
    let whole = client
        .post(format!("{finder_http}/v1/collections/{collection}/search"))
        .json(&json!({"vector": vector(1), "k": 10}))
        .send()
        .await
        .expect("search");
    assert_eq!(whole.status().as_u16(), 503, "no node serves shard 1 now");
    finder.shutdown().await;
}

/// The points of `points` on the partitions of `shard` (of `shards`).
pub fn shard_points(
    points: &BTreeMap<u64, Vec<f32>>,
    partition_of: &BTreeMap<u64, u32>,
    shards: u32,
    shard: u32,
) -> BTreeMap<u64, Vec<f32>> {
    points
        .iter()
        .filter(|(id, _)| partition_of[id] % shards == shard)
        .map(|(id, v)| (*id, v.clone()))
        .collect()
}

/// Searches `http` with `extra` options and checks every answer (ids and
/// scores) against the exact top 10 of `points`; a batch too.
pub async fn answers_exactly(
    http: &str,
    collection: &str,
    points: &BTreeMap<u64, Vec<f32>>,
    extra: &Value,
) {
    let mut searches = Vec::new();
    for seed in 0..10u64 {
        let q = vector(4_000_000 + seed);
        let mut body = json!({"vector": q, "k": 10});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        searches.push(body.clone());
        let r: Value = post(format!("{http}/v1/collections/{collection}/search"), &body).await;
        check_exact(points, &q, &r["result"], &r);
        assert!(r.get("missing_shards").is_none(), "{r}");
    }
    let r: Value = post(
        format!("{http}/v1/collections/{collection}/search/batch"),
        &json!({ "searches": searches }),
    )
    .await;
    for (seed, res) in (0..10u64).zip(r["results"].as_array().expect("results")) {
        check_exact(points, &vector(4_000_000 + seed), &res["result"], &r);
    }
}

fn check_exact(points: &BTreeMap<u64, Vec<f32>>, q: &[f32], hits: &Value, whole: &Value) {
    let got: Vec<(u64, f64)> = hits
        .as_array()
        .expect("result")
        .iter()
        .map(|h| {
            (
                h["id"].as_u64().expect("id"),
                h["score"].as_f64().expect("score"),
            )
        })
        .collect();
    let want = exact_top_k(points, q, 10);
    assert_eq!(
        got.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        want.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        "{whole}"
    );
    for ((_, g), (_, w)) in got.iter().zip(&want) {
        assert!((g - f64::from(*w)).abs() < 1e-3, "scores: {whole}");
    }
}

/// Waits until `http` answers a whole search (its peers are known).
async fn wait_fanned_out(http: &str, collection: &str) {
    let body = json!({"vector": vector(1), "k": 1});
    wait_search_answers(http, collection, &body, "whole").await;
}
