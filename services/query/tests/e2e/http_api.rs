//! HTTP API checks.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::cluster::{exact_top_k, l2, metric_sum, vector, Cluster};

async fn search(cluster: &Cluster, collection: &str, body: Value) -> (u16, Value) {
    let r = cluster
        .http
        .post(cluster.url(&format!("/v1/collections/{collection}/search")))
        .json(&body)
        .send()
        .await
        .expect("search request");
    let status = r.status().as_u16();
    (status, r.json().await.expect("json body"))
}

/// Every point's own vector finds it first, with distance 0.
pub async fn every_point_is_found_with_its_exact_score(
    cluster: &Cluster,
    collection: &str,
    points: &BTreeMap<u64, Vec<f32>>,
) {
    let searches: Vec<Value> = points
        .values()
        .map(|v| json!({"vector": v, "k": 1}))
        .collect();
    let r: Value = cluster
        .post(
            &format!("/v1/collections/{collection}/search/batch"),
            &json!({ "searches": searches }),
        )
        .await;
    let results = r["results"].as_array().expect("results array");
    assert_eq!(results.len(), points.len());
    for ((id, _), res) in points.iter().zip(results) {
        let top = &res["result"][0];
        assert_eq!(top["id"], json!(id), "point {id} not found first: {res}");
        assert_eq!(
            top["score"].as_f64(),
            Some(0.0),
            "point {id} distance to itself: {res}"
        );
    }
}

/// Top-10 ids and scores equal an exact f64 reference.
pub async fn search_matches_exact_top_k(
    cluster: &Cluster,
    collection: &str,
    points: &BTreeMap<u64, Vec<f32>>,
) {
    for seed in 0..20u64 {
        let q = vector(1_000_000 + seed);
        let (status, r) = search(
            cluster,
            collection,
            json!({"vector": q, "k": 10, "with_payload": ["kind"]}),
        )
        .await;
        assert_eq!(status, 200, "{r}");
        let want = exact_top_k(points, &q, 10);
        let got = r["result"].as_array().expect("result array");
        assert_eq!(got.len(), 10);
        for (g, (id, score)) in got.iter().zip(&want) {
            assert_eq!(g["id"], json!(id), "query {seed}: {r}");
            let s = g["score"].as_f64().expect("score") as f32;
            assert!(
                (s - score).abs() <= 1e-4 * score.max(1.0),
                "query {seed}: score {s} vs exact {score}"
            );
            assert_eq!(g["payload"]["kind"], json!(format!("k{}", id % 3)));
        }
        assert!(
            r["offsets"].is_object(),
            "responses report the offsets they reflect"
        );
    }
}

/// Tombstones remove ids; upserts replace vectors and payloads, in the tail
/// at once and in segments after the seal.
pub async fn deletes_and_upserts_apply(
    cluster: &Cluster,
    collection: &str,
    points: &mut BTreeMap<u64, Vec<f32>>,
) {
    for id in 0..20u64 {
        cluster.produce(&id.to_string(), None).await;
        points.remove(&id);
    }
    let mut last = (0, 0);
    for id in 20..30u64 {
        let v = vector(5_000 + id);
        last = cluster.upsert(id, &v, json!({"kind": "updated"})).await;
        points.insert(id, v);
    }
    // Read-your-writes: this search waits until the last upsert is visible.
    let (status, r) = search(
        cluster,
        collection,
        json!({"vector": points[&29], "k": 1, "min_offsets": {last.0.to_string(): last.1}}),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["result"][0]["id"], json!(29), "{r}");
    cluster.wait_count(collection, points.len() as u64).await;
    for phase in ["tail", "sealed"] {
        if phase == "sealed" {
            cluster.wait_sealed(collection).await;
        }
        for id in 0..20u64 {
            let (_, r) = search(cluster, collection, json!({"vector": vector(id), "k": 5})).await;
            let ids: Vec<&Value> = r["result"]
                .as_array()
                .expect("array")
                .iter()
                .map(|h| &h["id"])
                .collect();
            assert!(
                !ids.contains(&&json!(id)),
                "{phase}: deleted id {id} returned: {r}"
            );
            let status = cluster.point_status(collection, id).await;
            assert_eq!(status, 404, "{phase}: deleted point {id} still readable");
        }
        for id in 20..30u64 {
            let p: Value = cluster
                .http
                .get(cluster.url(&format!("/v1/collections/{collection}/points/{id}")))
                .send()
                .await
                .expect("get")
                .json()
                .await
                .expect("json");
            assert_eq!(p["payload"]["kind"], "updated", "{phase}: {p}");
            let v: Vec<f32> = serde_json::from_value(p["vector"].clone()).expect("vector");
            assert_eq!(v, points[&id], "{phase}: point {id} has its new vector");
            // The old vector must not find the old copy any more.
            let (_, r) = search(cluster, collection, json!({"vector": vector(id), "k": 1})).await;
            let top = &r["result"][0];
            if top["id"] == json!(id) {
                let d = top["score"].as_f64().expect("score") as f32;
                assert!(
                    (d - l2(&vector(id), &points[&id])).abs() < 1e-4,
                    "{phase}: stale copy of {id} served"
                );
            }
        }
        assert_eq!(
            cluster.count(collection).await,
            points.len() as u64,
            "{phase}: count"
        );
    }
}

/// Filtered searches (keyword match, integer range, must_not) return exactly
/// the filtered exact top-k, on every graph option.
pub async fn filtered_search_matches_exact(
    cluster: &Cluster,
    collection: &str,
    points: &BTreeMap<u64, Vec<f32>>,
) {
    let filters = [
        (
            json!({"must": [{"key": "kind", "match": {"value": "k1"}}]}),
            Box::new(|id: u64| id % 3 == 1) as Box<dyn Fn(u64) -> bool>,
        ),
        (
            json!({"must": [{"key": "i", "range": {"gte": 40, "lt": 90}}],
                   "must_not": [{"key": "kind", "match": {"any": ["k0"]}}]}),
            Box::new(|id: u64| (40..90).contains(&id) && !id.is_multiple_of(3)),
        ),
        (
            json!({"should": [{"key": "i", "range": {"lt": 5}}, {"key": "kind", "match": {"value": "k2"}}]}),
            Box::new(|id: u64| id < 5 || id % 3 == 2),
        ),
    ];
    for (fi, (filter, keep)) in filters.iter().enumerate() {
        let subset: BTreeMap<u64, Vec<f32>> = points
            .iter()
            .filter(|(id, _)| keep(**id))
            .map(|(id, v)| (*id, v.clone()))
            .collect();
        for options in [
            json!({}),
            json!({"quantization": "none", "ef": 64}),
            json!({"quantization": "sq8", "oversampling": 3}),
            json!({"exact": true}),
        ] {
            for seed in 0..5u64 {
                let q = vector(2_000_000 + seed);
                let mut body = json!({"vector": q, "k": 5, "filter": filter, "with_payload": true});
                for (k, v) in options.as_object().expect("object") {
                    body[k] = v.clone();
                }
                let (status, r) = search(cluster, collection, body).await;
                assert_eq!(status, 200, "filter {fi} {options}: {r}");
                let want: Vec<u64> = exact_top_k(&subset, &q, 5).iter().map(|w| w.0).collect();
                let got: Vec<u64> = r["result"]
                    .as_array()
                    .expect("result array")
                    .iter()
                    .map(|h| h["id"].as_u64().expect("id"))
                    .collect();
                assert_eq!(got, want, "filter {fi} {options} query {seed}: {r}");
            }
        }
    }
}

/// Malformed requests get 400/404 with a message saying what is wrong.
pub async fn bad_requests_get_clear_4xx(cluster: &Cluster, collection: &str) {
    let cases: Vec<(String, &str, u16, &str)> = vec![
        (
            format!("/v1/collections/{collection}/search"),
            "{\"vector\": [1, 2",
            400,
            "invalid request body",
        ),
        (
            format!("/v1/collections/{collection}/search"),
            "{\"vector\": [1, 2]}",
            400,
            "dimension",
        ),
        (
            format!("/v1/collections/{collection}/search"),
            "{\"vector\": [1,2,3,4,5,6,7,8], \"k\": 0}",
            400,
            "k must be",
        ),
        (
            format!("/v1/collections/{collection}/search"),
            "{\"vector\": [1,2,3,4,5,6,7,8], \"kk\": 3}",
            400,
            "kk",
        ),
        (
            format!("/v1/collections/{collection}/search"),
            "{\"vector\": [1,2,3,4,5,6,7,8], \"filter\": {\"must\": [{\"key\": \"undeclared\", \"match\": {\"value\": \"red\"}}]}}",
            400,
            "not an indexed payload field",
        ),
        (
            format!("/v1/collections/{collection}/search"),
            "{\"vector\": [1,2,3,4,5,6,7,8], \"filter\": {\"must\": [{\"key\": \"i\", \"match\": {\"value\": \"x\"}}]}}",
            400,
            "filter.must[0]",
        ),
        (
            format!("/v1/collections/{collection}/search"),
            "{\"vector\": [1,2,3,4,5,6,7,8], \"quantization\": \"pq9\"}",
            400,
            "unknown quantization",
        ),
        (
            format!("/v1/collections/{collection}/search"),
            "{\"vector\": [1,2,3,4,5,6,7,8], \"ef\": 0}",
            400,
            "ef must be",
        ),
        (
            "/v1/collections/nope/search".to_owned(),
            "{\"vector\": [1,2,3,4,5,6,7,8]}",
            404,
            "does not exist",
        ),
    ];
    for (path, body, status, needle) in cases {
        let r = cluster
            .http
            .post(cluster.url(&path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request");
        assert_eq!(r.status().as_u16(), status, "{path} {body}");
        let j: Value = r.json().await.expect("error body is JSON");
        let msg = j["error"]["message"].as_str().expect("message");
        assert!(
            msg.contains(needle),
            "{path} {body}: message {msg:?} should mention {needle:?}"
        );
    }
    let r = cluster
        .http
        .get(cluster.url(&format!("/v1/collections/{collection}/points/not-a-number")))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 400);
    let r = cluster
        .http
        .put(cluster.url("/v1/collections/bad"))
        .json(&json!({"dimension": 0}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 400);
    let m = cluster.metrics_text(cluster.url("/metrics")).await;
    assert!(
        metric_sum(
            &m,
            "eddy_query_requests_total",
            &[("api", "http_search"), ("status", "400")]
        ) >= 3.0,
        "{m}"
    );
}

/// `count` with a filter counts what a search would find; `scroll` pages
/// through the live points in id order (a filter narrowing them, vectors
/// when asked), each page resuming after the previous one's `next_after`.
pub async fn filtered_count_and_scroll(
    cluster: &Cluster,
    collection: &str,
    points: &BTreeMap<u64, Vec<f32>>,
) {
    let k2 = json!({"must": [{"key": "kind", "match": {"value": "k2"}}]});
    let want: Vec<u64> = points.keys().copied().filter(|id| id % 3 == 2).collect();
    let counted: Value = cluster
        .post(
            &format!("/v1/collections/{collection}/count"),
            &json!({"filter": k2}),
        )
        .await;
    assert_eq!(counted["count"], want.len(), "{counted}");

    let mut seen: Vec<u64> = Vec::new();
    let mut after = Value::Null;
    let mut pages = 0;
    loop {
        let mut body =
            json!({"filter": k2, "limit": 17, "with_vector": true, "with_payload": ["i"]});
        if !after.is_null() {
            body["after"] = after.clone();
        }
        let page: Value = cluster
            .http
            .post(cluster.url(&format!("/v1/collections/{collection}/scroll")))
            .json(&body)
            .send()
            .await
            .expect("scroll")
            .json()
            .await
            .expect("json");
        pages += 1;
        for p in page["points"].as_array().expect("points") {
            let id = p["id"].as_u64().expect("id");
            assert_eq!(p["payload"]["i"], id, "{p}");
            let vector: Vec<f32> = serde_json::from_value(p["vector"].clone()).expect("vector");
            assert_eq!(&vector, &points[&id], "the stored vector of {id}");
            seen.push(id);
        }
        after = page["next_after"].clone();
        if after.is_null() {
            break;
        }
        assert!(pages < 100, "scroll does not end");
    }
    assert_eq!(seen, want, "every k2 point once, in id order");
    assert_eq!(pages, want.len().div_ceil(17));

    let bad = cluster
        .http
        .post(cluster.url(&format!("/v1/collections/{collection}/scroll")))
        .json(&json!({"limit": 0}))
        .send()
        .await
        .expect("scroll");
    assert_eq!(bad.status(), reqwest::StatusCode::BAD_REQUEST);
}
