//! Reads of a split collection through a node that serves some of its
//! shards: point reads, scroll pages and their helpers.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::cluster::exact_top_k;

/// Through a node serving one shard (with peers for the other): every
/// point is read by id with its vector and payload, an unknown id is not
/// found, and a scroll pages through every point of both shards in id
/// order, once each, filtered too. Points from 900,000 on were published
/// later, with the payload `{"kind": "new", "i": 0}`.
pub async fn reads_reach_every_shard(
    http: &str,
    collection: &str,
    points: &BTreeMap<u64, Vec<f32>>,
) {
    let payload_i = |id: u64| if id < 900_000 { id } else { 0 };
    for (id, v) in points {
        let r = get_json(&format!("{http}/v1/collections/{collection}/points/{id}")).await;
        assert_eq!(r["id"], json!(id), "point {id}: {r}");
        assert_eq!(r["payload"]["i"], json!(payload_i(*id)), "point {id}: {r}");
        let got: Vec<f32> = serde_json::from_value(r["vector"].clone()).expect("vector");
        assert_eq!(&got, v, "point {id}'s vector");
    }
    assert_eq!(
        get_status(&format!(
            "{http}/v1/collections/{collection}/points/77777777"
        ))
        .await,
        404,
        "asked everywhere, found nowhere"
    );

    let (ids, pages) = scroll_ids(http, collection, &json!({"with_vector": true}), 17).await;
    assert_eq!(
        ids,
        points.keys().copied().collect::<Vec<_>>(),
        "scroll: every point once, in order"
    );
    assert!(pages.len() > 2, "several pages");
    for page in &pages {
        assert!(page.get("missing_shards").is_none(), "{page}");
        for p in page["points"].as_array().expect("points") {
            let id = p["id"].as_u64().expect("id");
            let got: Vec<f32> = serde_json::from_value(p["vector"].clone()).expect("vector");
            assert_eq!(&got, &points[&id], "scrolled point {id}'s vector");
            assert_eq!(p["payload"]["i"], json!(payload_i(id)), "{p}");
        }
    }
    let k1 = json!({"filter": {"must": [{"key": "kind", "match": {"value": "k1"}}]}, "with_payload": false});
    let (ids, _) = scroll_ids(http, collection, &k1, 9).await;
    let want: Vec<u64> = points
        .keys()
        .copied()
        .filter(|id| *id < 900_000 && id % 3 == 1)
        .collect();
    assert_eq!(ids, want, "filtered scroll");
}

/// Scrolls `collection` on `http` to its end (`body`'s options, pages of
/// `limit`): the ids in the order served, and every page's answer.
pub async fn scroll_ids(
    http: &str,
    collection: &str,
    body: &Value,
    limit: usize,
) -> (Vec<u64>, Vec<Value>) {
    let mut ids = Vec::new();
    let mut pages = Vec::new();
    let mut after = Value::Null;
    loop {
        let mut page_body = body.clone();
        page_body["limit"] = json!(limit);
        if !after.is_null() {
            page_body["after"] = after.clone();
        }
        let page: Value = post(
            format!("{http}/v1/collections/{collection}/scroll"),
            &page_body,
        )
        .await;
        let points = page["points"].as_array().expect("points");
        assert!(points.len() <= limit, "{page}");
        ids.extend(points.iter().map(|p| p["id"].as_u64().expect("id")));
        after = page["next_after"].clone();
        pages.push(page);
        if after.is_null() {
            return (ids, pages);
        }
        assert!(pages.len() < 10_000, "the scroll never ends");
    }
}

/// The smallest id of `all` that `shard` holds.
pub fn first_id_in(shard: &BTreeMap<u64, Vec<f32>>, all: &BTreeMap<u64, Vec<f32>>) -> u64 {
    *all.keys()
        .find(|id| shard.contains_key(id))
        .expect("a point in the shard")
}

/// The smallest id of `all` that `shard` does not hold.
pub fn first_id_not_in(shard: &BTreeMap<u64, Vec<f32>>, all: &BTreeMap<u64, Vec<f32>>) -> u64 {
    *all.keys()
        .find(|id| !shard.contains_key(id))
        .expect("a point elsewhere")
}

/// The JSON answer of a GET of `url`.
pub async fn get_json(url: &str) -> Value {
    reqwest::get(url)
        .await
        .expect("get")
        .json()
        .await
        .expect("json")
}

/// The status of a GET of `url`.
pub async fn get_status(url: &str) -> u16 {
    reqwest::get(url).await.expect("get").status().as_u16()
}

/// POSTs `body` to `url`; the JSON answer.
pub async fn post(url: String, body: &Value) -> Value {
    reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json")
}

/// Checks that `hits` (an answer's `result`) hold the ids of the exact top
/// 10 of `points` for `q`, in order.
pub fn assert_top_ids(points: &BTreeMap<u64, Vec<f32>>, q: &[f32], hits: &Value, what: &str) {
    let got: Vec<u64> = hits
        .as_array()
        .expect("result")
        .iter()
        .map(|h| h["id"].as_u64().expect("id"))
        .collect();
    let want: Vec<u64> = exact_top_k(points, q, 10)
        .iter()
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(got, want, "{what}: the exact answer");
}

/// Waits (up to a minute) until `http` answers the search `body` on
/// `collection` with 200; `what` names what is waited for.
pub async fn wait_search_answers(http: &str, collection: &str, body: &Value, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let status = reqwest::Client::new()
            .post(format!("{http}/v1/collections/{collection}/search"))
            .json(body)
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        if status == 200 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{http} never answered {what}: {status}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
