//! End-to-end tests on real parts: a Tansu broker, rdkafka producers,
//! eddy-ingest and eddy-query in-process, checked over HTTP, over Flight
//! (Rust client) and with pyarrow's Flight client.
//!
//! One cluster serves the steps in order (starting a broker per step would
//! cost more than the steps); each step's assertions name what failed.
//! `dashboards` needs no broker: it checks that the shipped dashboards and
//! alert rules name only metrics the services register. `tail_stale` runs
//! its own brokers: the tail reports a partition beyond its log as stale,
//! and still reads a broker whose fetches answer slowly.
//! `secured_cluster` runs its own cluster with TLS and API keys;
//! `object_store_cluster` its own on an S3 server, nothing shared on disk.

mod alter;
mod cluster;
mod dashboards;
mod dead_letters;
mod flight_client;
mod flight_reads;
mod fuzz;
mod http_api;
mod limits;
mod object_store;
mod pyarrow_client;
mod quarantine;
mod recall;
mod security;
mod shard_pins;
mod shard_reads;
mod shards;
mod tail_bound;
mod tail_stale;

use std::collections::BTreeMap;

use cluster::{vector, Cluster, Secured};
use serde_json::json;

/// Points produced in the first phase.
const POINTS: u64 = 300;
const COLLECTION: &str = "items";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_to_http_and_flight() {
    let cluster = Cluster::start(COLLECTION, 3).await;
    let mut points: BTreeMap<u64, Vec<f32>> = BTreeMap::new();
    for id in 0..POINTS {
        let v = vector(id);
        cluster
            .upsert(id, &v, json!({"kind": format!("k{}", id % 3), "i": id}))
            .await;
        points.insert(id, v);
    }
    eprintln!("step: produced");
    cluster.wait_count(COLLECTION, POINTS).await;
    eprintln!("step: counted");

    // Fresh rows are served from the tail and from segments alike; check
    // both before and after everything is sealed.
    eprintln!("step: every_point_is_found_with_its_exact_score");
    http_api::every_point_is_found_with_its_exact_score(&cluster, COLLECTION, &points).await;
    eprintln!("step: filtered_search_matches_exact (tail)");
    http_api::filtered_search_matches_exact(&cluster, COLLECTION, &points).await;
    eprintln!("step: filtered_count_and_scroll (tail)");
    http_api::filtered_count_and_scroll(&cluster, COLLECTION, &points).await;
    cluster.wait_sealed(COLLECTION).await;
    let indexed = cluster.wait_indexed(COLLECTION).await;
    eprintln!("step: {indexed} segments indexed; every_point_is_found_with_its_exact_score");
    http_api::every_point_is_found_with_its_exact_score(&cluster, COLLECTION, &points).await;
    eprintln!("step: search_matches_exact_top_k");
    http_api::search_matches_exact_top_k(&cluster, COLLECTION, &points).await;
    eprintln!("step: filtered_search_matches_exact (graphs)");
    http_api::filtered_search_matches_exact(&cluster, COLLECTION, &points).await;
    eprintln!("step: filtered_count_and_scroll");
    http_api::filtered_count_and_scroll(&cluster, COLLECTION, &points).await;
    eprintln!("step: scan_streams_every_live_point");
    flight_reads::scan_streams_every_live_point(&cluster, COLLECTION, &points).await;
    eprintln!("step: a_pinned_snapshot_stays_the_same");
    flight_reads::a_pinned_snapshot_stays_the_same(&cluster, COLLECTION, &mut points).await;

    eprintln!("step: do_get_and_exchange_match_exact");
    flight_client::do_get_and_exchange_match_exact(&cluster, COLLECTION, &points).await;
    eprintln!("step: answers_carry_their_offsets");
    flight_reads::answers_carry_their_offsets(&cluster, COLLECTION).await;
    eprintln!("step: pyarrow_matches_numpy");
    pyarrow_client::pyarrow_matches_numpy(&cluster, COLLECTION, &points).await;
    eprintln!("step: duckdb_job_joins_answers_by_key");
    pyarrow_client::duckdb_job_joins_answers_by_key(&cluster, COLLECTION, &points).await;
    eprintln!("step: exchange_carries_input_columns");
    flight_client::exchange_carries_input_columns(&cluster, COLLECTION, &points).await;
    eprintln!("step: exchange_takes_per_row_k_and_filter");
    flight_client::exchange_takes_per_row_k_and_filter(&cluster, COLLECTION, &points).await;

    eprintln!("step: altering_indexes_a_new_field");
    alter::altering_indexes_a_new_field(&cluster, COLLECTION, &mut points).await;

    eprintln!("step: deletes_and_upserts_apply");
    http_api::deletes_and_upserts_apply(&cluster, COLLECTION, &mut points).await;
    eprintln!("step: bad_events_are_counted_and_skipped");
    dead_letters::bad_events_are_counted_and_skipped(&cluster, COLLECTION, &mut points).await;
    eprintln!("step: bad_requests_get_clear_4xx");
    http_api::bad_requests_get_clear_4xx(&cluster, COLLECTION).await;
    eprintln!("step: bad_flight_requests_are_invalid_argument");
    flight_client::bad_flight_requests_are_invalid_argument(&cluster, COLLECTION).await;
    eprintln!("step: fuzzing_finds_no_server_error");
    fuzz::fuzzing_finds_no_server_error(&cluster, COLLECTION).await;

    cluster.stop().await;
}

/// The same searches through TLS and keys: HTTP (reqwest), Flight (Rust
/// client with a read key, pyarrow with a basic-token handshake), and what
/// a missing, unknown or too weak key gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secured_cluster() {
    const SECURED: &str = "secure";
    let cluster = Cluster::start_with(
        SECURED,
        2,
        Some(Secured::generate()),
        &["--topic-allow", "secure*,jobs-*", "--max-collections", "3"],
    )
    .await;
    let mut points: BTreeMap<u64, Vec<f32>> = BTreeMap::new();
    for id in 0..120 {
        let v = vector(id);
        cluster
            .upsert(id, &v, json!({"kind": format!("k{}", id % 3), "i": id}))
            .await;
        points.insert(id, v);
    }
    cluster.wait_count(SECURED, 120).await;
    // Sealed, so the snapshot GetFlightInfo pins holds every point.
    cluster.wait_sealed(SECURED).await;
    eprintln!("step: kafka_wants_tls_and_scram");
    security::kafka_wants_tls_and_scram(&cluster).await;
    eprintln!("step: http_needs_a_key");
    security::http_needs_a_key(&cluster, SECURED).await;
    eprintln!("step: search_matches_exact_top_k over TLS");
    http_api::search_matches_exact_top_k(&cluster, SECURED, &points).await;
    eprintln!("step: flight_needs_a_key");
    security::flight_needs_a_key(&cluster, SECURED).await;
    eprintln!("step: do_get_and_exchange_match_exact over TLS with a read key");
    flight_client::do_get_and_exchange_match_exact(&cluster, SECURED, &points).await;
    eprintln!("step: pyarrow over TLS with a basic-token handshake");
    pyarrow_client::pyarrow_matches_numpy(&cluster, SECURED, &points).await;
    eprintln!("step: creating_collections_is_admin_only_and_bounded");
    security::creating_collections_is_admin_only_and_bounded(&cluster).await;
    eprintln!("step: dropping_collections_and_flight_actions");
    security::dropping_collections_and_flight_actions(&cluster).await;
    eprintln!("step: limits_hold");
    limits::limits_hold(&cluster, SECURED).await;
    cluster.stop().await;
}

/// A collection split into two shards over four partitions: each shard's
/// chain holds its own partitions, one node serves both exactly, and a
/// node serving one refuses a whole answer or answers its shard, partial.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_collection_cluster() {
    const SPLIT: &str = "split";
    let cluster = Cluster::start_split(SPLIT, 4, 2, None, &[], &[]).await;
    let mut points: BTreeMap<u64, Vec<f32>> = BTreeMap::new();
    let mut partition_of = BTreeMap::new();
    for id in 0..240 {
        let v = vector(id);
        let (partition, _) = cluster
            .upsert(id, &v, json!({"kind": format!("k{}", id % 3), "i": id}))
            .await;
        points.insert(id, v);
        partition_of.insert(id, partition as u32);
    }
    cluster.wait_count(SPLIT, 240).await;
    cluster.wait_sealed(SPLIT).await;
    let indexed = cluster.wait_indexed(SPLIT).await;
    eprintln!("step: {indexed} segments indexed over 2 shards");
    shards::split_collection_is_served_whole_and_by_shard(
        &cluster,
        SPLIT,
        2,
        &points,
        &partition_of,
    )
    .await;
    cluster.stop().await;
}

/// Both services on an S3 server (moto on loopback), each with its own
/// cache directory: ingest seals, indexes and publishes into the bucket,
/// eddy-query serves from it, and a node started later catches up from the
/// bucket alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_store_cluster() {
    const REMOTE: &str = "remote";
    let server = tokio::task::spawn_blocking(|| eddy_loadtest::s3_server::S3Server::start("eddy"))
        .await
        .expect("join")
        .expect("the S3 server starts (install it with `python3 -m pip install 'moto[server]'`)");
    let secrets = tempfile::tempdir().expect("tmp");
    let store_args = object_store::store_args(&server, "e2e", secrets.path());
    let cluster = Cluster::start_on(REMOTE, 2, None, &[], &store_args).await;
    let mut points: BTreeMap<u64, Vec<f32>> = BTreeMap::new();
    for id in 0..200 {
        let v = vector(id);
        cluster
            .upsert(id, &v, json!({"kind": format!("k{}", id % 3), "i": id}))
            .await;
        points.insert(id, v);
    }
    cluster.wait_count(REMOTE, 200).await;
    cluster.wait_sealed(REMOTE).await;
    let indexed = cluster.wait_indexed(REMOTE).await;
    eprintln!("step: {indexed} segments indexed in the bucket; serves_from_the_bucket_alone");
    object_store::serves_from_the_bucket_alone(&cluster, REMOTE, &points, &store_args).await;
    cluster.stop().await;
    drop(server);
}
