//! The tail is bounded: with no ingest sealing, it stops reading at
//! `--max-tail-rows`, answers say they may miss events, `/readyz` says why;
//! once a seal makes room (the next snapshot prunes what it holds) it reads
//! on, never holding more than the bound.

use std::time::{Duration, Instant};

use eddy_loadtest::broker::Tansu;
use eddy_manifest::Store;
use eddy_model::{CollectionDef, Metric};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use serde_json::{json, Value};

use crate::cluster::{vector, DIM};
use crate::quarantine::seal;

const COLLECTION: &str = "bounded";
const BOUND: u64 = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_tail_stops_reading_says_so_and_reads_on_after_a_seal() {
    let tansu = tokio::task::spawn_blocking(Tansu::start)
        .await
        .expect("join")
        .expect("tansu");
    tansu.create_topic(COLLECTION, 1).expect("topic");
    let brokers = tansu.bootstrap();
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("acks", "all")
        .create()
        .expect("producer");
    for id in 0..3 * BOUND {
        let value = json!({"id": id, "vector": vector(id)}).to_string();
        let key = id.to_string();
        producer
            .send(
                FutureRecord::to(COLLECTION).key(&key).payload(&value),
                Duration::from_secs(10),
            )
            .await
            .expect("delivered");
    }
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("store");
    let mut def = CollectionDef::new(COLLECTION, DIM as u32);
    def.metric = Metric::L2;
    store.create_collection(&def).expect("collection");

    let flags = [
        "--store".to_owned(),
        dir.path().display().to_string(),
        "--max-tail-rows".to_owned(),
        BOUND.to_string(),
    ];
    let query = crate::cluster::start_query(&brokers, &flags).await;
    let http = reqwest::Client::new();
    let url = |path: &str| format!("http://{}{path}", query.http_addr());

    // Full: not ready, saying why.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = http.get(url("/readyz")).send().await.expect("readyz");
        let text = r.text().await.unwrap_or_default();
        if text.contains("at its bound") {
            break;
        }
        assert!(Instant::now() < deadline, "tail never at its bound: {text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let info: Value = http
        .get(url(&format!("/v1/collections/{COLLECTION}")))
        .send()
        .await
        .expect("info")
        .json()
        .await
        .expect("json");
    assert_eq!(info["status"]["tail_rows"], BOUND, "{info}");
    assert_eq!(info["status"]["tail_paused"], true, "{info}");
    let answer: Value = http
        .post(url(&format!("/v1/collections/{COLLECTION}/search")))
        .json(&json!({"vector": vector(0)}))
        .send()
        .await
        .expect("search")
        .json()
        .await
        .expect("json");
    assert!(
        answer["stale"][0]
            .as_str()
            .is_some_and(|s| s.contains("at its bound")),
        "{answer}"
    );
    // Flight answers say so too.
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", query.flight_addr()))
        .expect("url")
        .connect()
        .await
        .expect("flight connects");
    let mut flight = arrow_flight::FlightClient::new(channel);
    let ticket = json!({"collection": COLLECTION, "vectors": [vector(0)], "k": 1});
    let (said, _) = crate::flight_reads::answer_metadata(
        flight
            .do_get(arrow_flight::Ticket::new(ticket.to_string()))
            .await
            .expect("do_get"),
    )
    .await;
    assert!(
        said[0]["stale"][0]
            .as_str()
            .is_some_and(|s| s.contains("at its bound")),
        "{said:?}"
    );
    let metrics = http
        .get(url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains(&format!(
            "eddy_query_tail_paused{{collection=\"{COLLECTION}\"}} 1"
        )),
        "the gauge says so"
    );

    // A seal of the first rows makes room: the tail reads the next ones,
    // and stops at the bound again.
    seal(&store, &def, DIM, 0..BOUND);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let count: Value = http
            .post(url(&format!("/v1/collections/{COLLECTION}/count")))
            .json(&json!({}))
            .send()
            .await
            .expect("count")
            .json()
            .await
            .expect("json");
        if count["count"] == 2 * BOUND {
            break;
        }
        assert!(Instant::now() < deadline, "no room made: {count}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let info: Value = http
        .get(url(&format!("/v1/collections/{COLLECTION}")))
        .send()
        .await
        .expect("info")
        .json()
        .await
        .expect("json");
    assert_eq!(info["status"]["tail_rows"], BOUND, "{info}");
    query.shutdown().await;
}
