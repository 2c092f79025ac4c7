//! Hard limits through the real doors: a second eddy-query on the same
//! store with one request slot and a short DoExchange idle timeout.

use std::time::{Duration, Instant};

use arrow_flight::{FlightClient, FlightData, FlightDescriptor};
use futures::{StreamExt, TryStreamExt};
use reqwest::StatusCode;
use serde_json::json;

use crate::cluster::{Cluster, DIM};

/// With `--max-concurrent-requests 1`, an open DoExchange holds the only
/// slot: HTTP gets 429 with `Retry-After` until the exchange, idle past
/// `--exchange-idle-ms`, ends with DEADLINE_EXCEEDED and frees it. An
/// answer over the hit cap is a 400.
pub async fn limits_hold(cluster: &Cluster, collection: &str) {
    let store = cluster.store_path().to_str().expect("utf-8").to_owned();
    let brokers = cluster.brokers();
    let flags: Vec<String> = [
        "--store",
        &store,
        "--max-concurrent-requests",
        "1",
        "--exchange-idle-ms",
        "3000",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .chain(cluster.kafka_args.iter().cloned())
    .collect();
    let query = crate::cluster::start_query(&brokers, &flags).await;
    let http = reqwest::Client::new();
    let url = |path: &str| format!("http://{}{path}", query.http_addr());
    // The collection under test serves (others on the store, made by
    // earlier steps, have no topic and never get ready).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let info = http
            .get(url(&format!("/v1/collections/{collection}")))
            .send()
            .await
            .expect("request");
        let ready = info.status().is_success()
            && info.json::<serde_json::Value>().await.expect("json")["status"]["ready"] == true;
        if ready {
            break;
        }
        assert!(Instant::now() < deadline, "second service not ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let hits_over_cap = json!({"searches": (0..101)
        .map(|_| json!({"vector": vec![0.5f32; DIM], "k": 10_000}))
        .collect::<Vec<_>>()});
    let r = http
        .post(url(&format!("/v1/collections/{collection}/search/batch")))
        .json(&hits_over_cap)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let body: serde_json::Value = r.json().await.expect("json");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("at most 1000000")),
        "{body}"
    );

    let channel = tonic::transport::Channel::from_shared(format!("http://{}", query.flight_addr()))
        .expect("url")
        .connect()
        .await
        .expect("flight connects");
    let mut client = FlightClient::new(channel);
    let command = json!({"collection": collection, "k": 3}).to_string();
    let first = FlightData::new().with_descriptor(FlightDescriptor::new_cmd(command));
    // The descriptor, then nothing: the client neither sends nor closes.
    let input = futures::stream::once(async move { Ok(first) }).chain(futures::stream::pending());
    let mut answers = client.do_exchange(input).await.expect("exchange opens");

    let busy = http
        .get(url("/v1/collections"))
        .send()
        .await
        .expect("request");
    assert_eq!(
        busy.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "the slot is held"
    );
    assert_eq!(
        busy.headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );

    let ended = tokio::time::timeout(Duration::from_secs(60), answers.try_next())
        .await
        .expect("the idle exchange ends");
    match ended {
        Err(arrow_flight::error::FlightError::Tonic(status)) => {
            assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status}");
        }
        other => panic!("expected DEADLINE_EXCEEDED, got {other:?}"),
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = http
            .get(url("/v1/collections"))
            .send()
            .await
            .expect("request");
        if r.status() == StatusCode::OK {
            break;
        }
        assert!(Instant::now() < deadline, "slot not freed: {}", r.status());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    query.shutdown().await;
}
