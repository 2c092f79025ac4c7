//! Altering a live collection: an indexed payload field added over HTTP
//! `PATCH` is usable in filters at once (segments sealed before it read
//! their payloads), and eddy-ingest indexes the old segments in the
//! background until none is pending.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cluster::{exact_top_k, vector, Cluster};

const COLORS: [&str; 3] = ["red", "blue", "green"];

/// Points with a `color` the collection does not index yet.
const FIRST: u64 = 20_000;
const POINTS: u64 = 30;

async fn patch(cluster: &Cluster, collection: &str, body: Value) -> (u16, Value) {
    let r = cluster
        .http
        .patch(cluster.url(&format!("/v1/collections/{collection}")))
        .json(&body)
        .send()
        .await
        .expect("patch request");
    let status = r.status().as_u16();
    (status, r.json().await.expect("json body"))
}

/// Searches filtered on `color` = red (as `options` says) and checks the
/// answer against exact top-k over the red points.
async fn red_matches_exact(
    cluster: &Cluster,
    collection: &str,
    points: &BTreeMap<u64, Vec<f32>>,
    when: &str,
) {
    let red: BTreeMap<u64, Vec<f32>> = points
        .iter()
        .filter(|(id, _)| (FIRST..FIRST + POINTS).contains(*id) && *id % 3 == 0)
        .map(|(id, v)| (*id, v.clone()))
        .collect();
    let filter = json!({"must": [{"key": "color", "match": {"value": "red"}}]});
    for options in [json!({}), json!({"exact": true})] {
        for seed in 0..3u64 {
            let q = vector(3_000_000 + seed);
            let mut body = json!({"vector": q, "k": 4, "filter": filter});
            for (k, v) in options.as_object().expect("object") {
                body[k] = v.clone();
            }
            let r: Value = cluster
                .http
                .post(cluster.url(&format!("/v1/collections/{collection}/search")))
                .json(&body)
                .send()
                .await
                .expect("search")
                .json()
                .await
                .expect("json");
            let got: Vec<u64> = r["result"]
                .as_array()
                .unwrap_or_else(|| panic!("{when}: no result: {r}"))
                .iter()
                .map(|h| h["id"].as_u64().expect("id"))
                .collect();
            let want: Vec<u64> = exact_top_k(&red, &q, 4).iter().map(|w| w.0).collect();
            assert_eq!(got, want, "{when} {options} query {seed}: {r}");
        }
    }
    let counted: Value = cluster
        .post(
            &format!("/v1/collections/{collection}/count"),
            &json!({"filter": filter}),
        )
        .await;
    assert_eq!(counted["count"], red.len(), "{when}: {counted}");
}

/// See the module. The new points are added to `points`.
pub async fn altering_indexes_a_new_field(
    cluster: &Cluster,
    collection: &str,
    points: &mut BTreeMap<u64, Vec<f32>>,
) {
    let filter = json!({"must": [{"key": "color", "match": {"value": "red"}}]});
    let before = cluster
        .http
        .post(cluster.url(&format!("/v1/collections/{collection}/search")))
        .json(&json!({"vector": vector(1), "k": 1, "filter": filter}))
        .send()
        .await
        .expect("search");
    assert_eq!(before.status().as_u16(), 400, "color is not indexed yet");

    for id in FIRST..FIRST + POINTS {
        let v = vector(id);
        let color = COLORS[(id % 3) as usize];
        cluster
            .upsert(
                id,
                &v,
                json!({"kind": format!("k{}", id % 3), "i": id, "color": color}),
            )
            .await;
        points.insert(id, v);
    }
    cluster.wait_count(collection, points.len() as u64).await;
    // Sealed without a payload index for color.
    cluster.wait_sealed(collection).await;

    let (status, altered) = patch(
        cluster,
        collection,
        json!({"payload_fields": {"color": "keyword"}}),
    )
    .await;
    assert_eq!(status, 200, "{altered}");
    assert_eq!(altered["altered"], true, "{altered}");
    assert_eq!(altered["info"]["payload_fields"]["color"], "keyword");
    let store = eddy_manifest::Store::open(cluster.store_path()).expect("store");
    let def = store.collection(collection).expect("read").expect("exists");
    assert_eq!(
        def.payload_fields.get("color"),
        Some(&eddy_model::FieldType::Keyword)
    );

    // Usable at once: the old segments answer by reading payloads.
    red_matches_exact(cluster, collection, points, "right after the alteration").await;

    // Maintenance rewrites the segments that lack the field's index.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let info = cluster.info(collection).await;
        let latest = store.latest_manifest(collection).expect("manifest").version;
        if info["status"]["payload_index_pending"] == 0
            && info["status"]["manifest_version"].as_u64() >= Some(latest)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "old segments not re-indexed within 90 s: {info}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    red_matches_exact(cluster, collection, points, "once re-indexed").await;

    // The same fields again change nothing; a retype, an empty or unknown
    // body, an unknown collection are refused with what is wrong.
    let (status, again) = patch(
        cluster,
        collection,
        json!({"payload_fields": {"color": "keyword"}}),
    )
    .await;
    assert_eq!((status, &again["altered"]), (200, &json!(false)), "{again}");
    for (body, want) in [
        (json!({"payload_fields": {"kind": "integer"}}), 409),
        (json!({"payload_fields": {}}), 400),
        (json!({"payload_fields": {"x": "colour"}}), 400),
        (json!({"fields": {"x": "keyword"}}), 400),
        (
            json!({"name": "other", "payload_fields": {"x": "keyword"}}),
            400,
        ),
    ] {
        let (status, r) = patch(cluster, collection, body.clone()).await;
        assert_eq!(status, want, "{body}: {r}");
        assert!(
            r["error"].is_object() || r["error"].is_string(),
            "{body}: {r}"
        );
    }
    let (status, r) = patch(
        cluster,
        "no-such-collection",
        json!({"payload_fields": {"x": "keyword"}}),
    )
    .await;
    assert_eq!(status, 404, "{r}");
}
