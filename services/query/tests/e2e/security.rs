//! A secured eddy-query: TLS on both doors, read and admin keys, the topic
//! allow-list and the collection cap, checked with real clients (reqwest
//! over TLS, the Rust Flight client over TLS, pyarrow in `pyarrow_client`).

use clap::Parser as _;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::cluster::Cluster;
use crate::flight_client::client_with_key;

fn secured(cluster: &Cluster) -> &crate::cluster::Secured {
    cluster.secured.as_ref().expect("a secured cluster")
}

/// HTTP: no key is 401 (with `WWW-Authenticate`), a read key reads, health
/// and readiness need no key, and plain HTTP gets no answer from the TLS
/// port.
pub async fn http_needs_a_key(cluster: &Cluster, collection: &str) {
    let s = secured(cluster);
    let anonymous = s.client();
    let search = json!({"vector": vec![0.0f32; crate::cluster::DIM], "k": 3});
    let search_url = cluster.url(&format!("/v1/collections/{collection}/search"));
    let r = anonymous
        .post(&search_url)
        .json(&search)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        r.headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok()),
        Some("Bearer")
    );
    let body: Value = r.json().await.expect("json error");
    assert_eq!(body["error"]["code"], "unauthorized", "{body}");

    for path in ["/v1/collections", "/metrics"] {
        let r = anonymous
            .get(cluster.url(path))
            .send()
            .await
            .expect("request");
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    let wrong = anonymous
        .get(cluster.url("/v1/collections"))
        .bearer_auth("not-a-key-of-this-service")
        .send()
        .await
        .expect("request");
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    for path in ["/healthz", "/readyz"] {
        let r = anonymous
            .get(cluster.url(path))
            .send()
            .await
            .expect("request");
        assert_eq!(r.status(), StatusCode::OK, "{path} needs no key");
    }

    // Both header forms carry a read key.
    let r = anonymous
        .post(&search_url)
        .bearer_auth(&s.read_key)
        .json(&search)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), StatusCode::OK);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["result"].as_array().map(Vec::len), Some(3), "{body}");
    let r = anonymous
        .get(cluster.url("/metrics"))
        .header("api-key", &s.read_key)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), StatusCode::OK);
    let metrics = r.text().await.expect("text");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("eddy_query_requests_total")
                && l.contains("api=\"http_auth\"")
                && l.contains("status=\"unauthorized\"")),
        "refusals are counted"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("eddy_query_requests_total")
                && l.contains("api=\"http_search\"")
                && l.contains(&format!("collection=\"{collection}\""))),
        "searches are counted per collection"
    );

    // The TLS port does not answer plain HTTP.
    let plain = cluster.url("/healthz").replace("https://", "http://");
    assert!(reqwest::get(&plain).await.is_err(), "plain HTTP on {plain}");
}

/// Creating collections: admin only (a read key gets 403), never on an
/// internal topic, only on allowed topics, and no more than the cap.
/// The cluster runs with `--topic-allow secure*,jobs-*` and
/// `--max-collections 3` and holds one collection.
pub async fn creating_collections_is_admin_only_and_bounded(cluster: &Cluster) {
    let s = secured(cluster);
    let client = s.client();
    let put = |name: &str, topic: &str, key: &str| {
        client
            .put(cluster.url(&format!("/v1/collections/{name}")))
            .bearer_auth(key)
            .json(&json!({"topic": topic, "dimension": 4}))
            .send()
    };
    let status = |r: reqwest::Result<reqwest::Response>| r.expect("request").status();
    assert_eq!(
        status(put("jobs-a", "jobs-a", &s.read_key).await),
        StatusCode::FORBIDDEN,
        "a read key cannot create"
    );
    assert_eq!(
        status(put("offsets", "__consumer_offsets", &s.admin_key).await),
        StatusCode::BAD_REQUEST,
        "an internal topic"
    );
    assert_eq!(
        status(put("payroll", "payroll", &s.admin_key).await),
        StatusCode::FORBIDDEN,
        "a topic outside the allow-list"
    );
    assert_eq!(
        status(put("jobs-a", "jobs-a", &s.admin_key).await),
        StatusCode::CREATED
    );
    // Declaring it again is not a new collection.
    assert_eq!(
        status(put("jobs-a", "jobs-a", &s.admin_key).await),
        StatusCode::OK
    );
    assert_eq!(
        status(put("jobs-b", "jobs-b", &s.admin_key).await),
        StatusCode::CREATED
    );
    let over = put("jobs-c", "jobs-c", &s.admin_key)
        .await
        .expect("request");
    assert_eq!(over.status(), StatusCode::CONFLICT, "over the cap of 3");
    let body: Value = over.json().await.expect("json");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("at most 3")),
        "{body}"
    );
}

/// Flight over TLS: a call without a key or with an unknown one is
/// UNAUTHENTICATED; a basic-token handshake answers a bearer token that
/// then works.
pub async fn flight_needs_a_key(cluster: &Cluster, collection: &str) {
    let s = secured(cluster);
    let descriptor =
        arrow_flight::FlightDescriptor::new_path(vec!["collections".into(), collection.to_owned()]);
    let mut anonymous = client_with_key(cluster, None).await;
    let err = anonymous
        .get_flight_info(descriptor.clone())
        .await
        .expect_err("no key");
    assert!(
        matches!(&err, arrow_flight::error::FlightError::Tonic(s) if s.code() == tonic::Code::Unauthenticated),
        "{err:?}"
    );
    let mut wrong = client_with_key(cluster, Some("not-a-key-of-this-service")).await;
    assert!(wrong.get_flight_info(descriptor.clone()).await.is_err());

    // The handshake: the key as the payload; the token comes back.
    let mut fresh = client_with_key(cluster, None).await;
    let token = fresh
        .handshake(bytes::Bytes::from(s.read_key.clone()))
        .await
        .expect("handshake with a key");
    assert_eq!(token, bytes::Bytes::from(s.read_key.clone()));
    fresh
        .add_header("authorization", &format!("Bearer {}", s.read_key))
        .expect("header");
    let info = fresh
        .get_flight_info(descriptor)
        .await
        .expect("flight info with the token");
    assert!(info.total_records > 0);
    let mut refused = client_with_key(cluster, None).await;
    assert!(refused
        .handshake(bytes::Bytes::from_static(b"not-a-key-of-this-service"))
        .await
        .is_err());
}

/// An open service (no keys) refuses to listen where other hosts reach it,
/// unless told `--insecure-no-auth`; a TLS key without its certificate, or
/// one that does not match, stops the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_or_misconfigured_service_does_not_start() {
    let store = tempfile::tempdir().expect("tmp");
    let store_path = store.path().to_str().expect("utf-8").to_owned();
    let config = |extra: &[&str]| {
        let mut args = vec![
            "eddy-query",
            "--store",
            &store_path,
            "--http-addr",
            "0.0.0.0:0",
            "--flight-addr",
            "127.0.0.1:0",
        ];
        args.extend_from_slice(extra);
        eddy_query::QueryConfig::parse_from(args)
    };
    let err = eddy_query::start(config(&[]))
        .await
        .err()
        .expect("no keys on 0.0.0.0");
    assert!(err.to_string().contains("no API keys"), "{err}");
    let open = eddy_query::start(config(&["--insecure-no-auth"]))
        .await
        .expect("starts when told");
    open.shutdown().await;
    let keyed = eddy_query::start(config(&["--read-api-keys", "read-0123456789abcdef"]))
        .await
        .expect("starts with a key");
    keyed.shutdown().await;

    let secured = crate::cluster::Secured::generate();
    let other = crate::cluster::Secured::generate();
    let cert = secured.cert.display().to_string();
    let wrong_key = other.key.display().to_string();
    let err = eddy_query::start(config(&[
        "--insecure-no-auth",
        "--tls-cert",
        &cert,
        "--tls-key",
        &wrong_key,
    ]))
    .await
    .err()
    .expect("a key that does not match the certificate");
    assert!(err.to_string().contains("TLS"), "{err}");
}

/// Dropping: admin only; the collection leaves at once (404, its name
/// refused until its files are collected, its slot under the cap freed),
/// marked in the store. Flight actions do the same for Flight-only
/// clients: `ListActions`, `collection_stats` with a read key,
/// `create_collection` / `drop_collection` / `alter_collection` (and HTTP
/// `PATCH`) with an admin key only.
/// Runs after [`creating_collections_is_admin_only_and_bounded`] (the
/// cluster holds `secure`, `jobs-a`, `jobs-b`, the cap is 3).
pub async fn dropping_collections_and_flight_actions(cluster: &Cluster) {
    let s = secured(cluster);
    let client = s.client();
    let delete = |name: &str, key: &str| {
        client
            .delete(cluster.url(&format!("/v1/collections/{name}")))
            .bearer_auth(key)
            .send()
    };
    let status = |r: reqwest::Result<reqwest::Response>| r.expect("request").status();
    assert_eq!(
        status(delete("jobs-b", &s.read_key).await),
        StatusCode::FORBIDDEN
    );
    // Ingest runs a worker for it (its gauges say so) until the drop.
    let series = "collection=\"jobs-b\"";
    wait_for_ingest_series(cluster, series, true, "jobs-b's worker started").await;
    let dropped: Value = delete("jobs-b", &s.admin_key)
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    assert_eq!(dropped, json!({"dropped": "jobs-b"}));
    assert_eq!(
        status(delete("jobs-b", &s.admin_key).await),
        StatusCode::NOT_FOUND,
        "gone"
    );
    let get = client
        .get(cluster.url("/v1/collections/jobs-b"))
        .bearer_auth(&s.read_key)
        .send()
        .await;
    assert_eq!(status(get), StatusCode::NOT_FOUND);
    assert!(cluster
        .store_path()
        .join("collections/jobs-b/dropped.json")
        .exists());
    wait_for_ingest_series(cluster, series, false, "jobs-b's worker stopped").await;
    let put = |name: &str| {
        client
            .put(cluster.url(&format!("/v1/collections/{name}")))
            .bearer_auth(&s.admin_key)
            .json(&json!({"topic": name, "dimension": 4}))
            .send()
    };
    assert_eq!(
        status(put("jobs-b").await),
        StatusCode::CONFLICT,
        "the name waits for its files to be collected"
    );
    assert_eq!(
        status(put("jobs-c").await),
        StatusCode::CREATED,
        "room under the cap"
    );

    // The same through Flight actions.
    let mut reader = client_with_key(cluster, Some(&s.read_key)).await;
    let actions: Vec<arrow_flight::ActionType> =
        futures::TryStreamExt::try_collect(reader.list_actions().await.expect("list_actions"))
            .await
            .expect("actions");
    let names: Vec<&str> = actions.iter().map(|a| a.r#type.as_str()).collect();
    assert_eq!(
        names,
        [
            "create_collection",
            "drop_collection",
            "alter_collection",
            "collection_stats",
            "served_shards",
            "search_shards",
            "count_shards",
            "get_point_shards",
            "scroll_shards",
            "pin_shards"
        ]
    );
    let action =
        |kind: &str, body: Value| arrow_flight::Action::new(kind.to_owned(), body.to_string());
    let stats: Vec<bytes::Bytes> = futures::TryStreamExt::try_collect(
        reader
            .do_action(action("collection_stats", json!({"name": "jobs-a"})))
            .await
            .expect("stats"),
    )
    .await
    .expect("stats body");
    let info: Value = serde_json::from_slice(&stats[0]).expect("json");
    assert_eq!(info["name"], "jobs-a");
    for (kind, body) in [
        ("drop_collection", json!({"name": "jobs-a"})),
        (
            "alter_collection",
            json!({"name": "jobs-a", "payload_fields": {"tag": "keyword"}}),
        ),
    ] {
        let refused = reader
            .do_action(action(kind, body))
            .await
            .err()
            .expect("a read key cannot drop or alter");
        assert!(
            matches!(&refused, arrow_flight::error::FlightError::Tonic(s) if s.code() == tonic::Code::PermissionDenied),
            "{kind}: {refused:?}"
        );
    }
    let patched = client
        .patch(cluster.url("/v1/collections/jobs-a"))
        .bearer_auth(&s.read_key)
        .json(&json!({"payload_fields": {"tag": "keyword"}}))
        .send()
        .await;
    assert_eq!(
        status(patched),
        StatusCode::FORBIDDEN,
        "PATCH is admin only"
    );
    let mut admin = client_with_key(cluster, Some(&s.admin_key)).await;
    async fn run(
        admin: &mut arrow_flight::FlightClient,
        request: arrow_flight::Action,
    ) -> Result<Value, arrow_flight::error::FlightError> {
        let answers: Vec<bytes::Bytes> =
            futures::TryStreamExt::try_collect(admin.do_action(request).await?).await?;
        Ok(serde_json::from_slice(&answers[0]).expect("json"))
    }
    let dropped = run(
        &mut admin,
        action("drop_collection", json!({"name": "jobs-c"})),
    )
    .await
    .expect("drop");
    assert_eq!(dropped["dropped"], "jobs-c");
    let again = admin
        .do_action(action("drop_collection", json!({"name": "jobs-c"})))
        .await
        .err()
        .expect("dropped already");
    assert!(
        matches!(&again, arrow_flight::error::FlightError::Tonic(s) if s.code() == tonic::Code::NotFound),
        "{again:?}"
    );
    let created = run(
        &mut admin,
        action(
            "create_collection",
            json!({"name": "jobs-d", "dimension": 4, "metric": "l2"}),
        ),
    )
    .await
    .expect("create");
    assert_eq!(created["created"], true);
    assert_eq!(created["info"]["dimension"], 4);
    let altered = run(
        &mut admin,
        action(
            "alter_collection",
            json!({"name": "jobs-d", "payload_fields": {"tag": "keyword"}}),
        ),
    )
    .await
    .expect("alter");
    assert_eq!(altered["altered"], true, "{altered}");
    assert_eq!(altered["info"]["payload_fields"], json!({"tag": "keyword"}));
    let unknown = admin
        .do_action(action("no_such_action", json!({})))
        .await
        .err()
        .expect("unknown action");
    assert!(
        matches!(&unknown, arrow_flight::error::FlightError::Tonic(s) if s.code() == tonic::Code::InvalidArgument),
        "{unknown:?}"
    );
}

/// Polls the ingest metrics until they show `series` (`present`) or no
/// longer show it (at most 120 s: a worker starts only after its topic's
/// metadata, which a slow broker can stretch past 30 s). On a timeout it
/// names the series' lines still exported.
async fn wait_for_ingest_series(cluster: &Cluster, series: &str, present: bool, what: &str) {
    let mut metrics = String::new();
    for _ in 0..1200 {
        metrics = cluster.ingest_metrics().await;
        if metrics.contains(series) == present {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let lines: Vec<&str> = metrics.lines().filter(|l| l.contains(series)).collect();
    panic!("timed out waiting for: {what}; ingest exports {lines:#?}");
}

/// The secured cluster's broker lets in only what eddy was given: a
/// client over TLS without credentials, or with a wrong password, gets no
/// metadata, one with the user's password does (as ingest, the query tail
/// and the test producer did to get this far).
pub async fn kafka_wants_tls_and_scram(cluster: &Cluster) {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let broker = cluster.secured_kafka().expect("a secured broker");
    let metadata = |config: rdkafka::ClientConfig| {
        tokio::task::spawn_blocking(move || {
            let consumer: BaseConsumer = config.create().expect("client");
            consumer
                .fetch_metadata(None, std::time::Duration::from_secs(5))
                .map(|m| m.brokers().len())
        })
    };
    let mut anonymous = rdkafka::ClientConfig::new();
    anonymous
        .set("bootstrap.servers", broker.bootstrap())
        .set("security.protocol", "SSL")
        .set(
            "ssl.ca.location",
            cluster
                .secured
                .as_ref()
                .expect("tls")
                .cert
                .display()
                .to_string(),
        );
    let mut wrong = broker.client_config();
    wrong.set("sasl.password", "not-the-password");
    assert!(
        metadata(anonymous).await.expect("join").is_err(),
        "TLS without SCRAM credentials is refused"
    );
    assert!(
        metadata(wrong).await.expect("join").is_err(),
        "a wrong password is refused"
    );
    assert_eq!(metadata(broker.client_config()).await.expect("join"), Ok(1));
}
