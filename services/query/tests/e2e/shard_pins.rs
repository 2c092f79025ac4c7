//! A pinned snapshot of a split collection, pinned on a node that serves
//! one shard: a peer pins the other shard, and every read naming the pin
//! (searches, counts, scrolls, the pin's Flight ticket) answers from the
//! pinned state of both shards while new events land in both. The pin of
//! the other shard lives on that one peer: when it dies, the pin's reads
//! of that shard are refused (or partial when allowed), never answered by
//! a replica's live data.

use std::collections::BTreeMap;

use arrow_flight::FlightDescriptor;
use serde_json::{json, Value};

use crate::cluster::{vector, Cluster};
use crate::flight_reads::scanned_ids;
use crate::shard_reads::{assert_top_ids, post, scroll_ids, wait_search_answers};
use crate::shards::{answers_exactly, flight_client, shard_points};

/// A pin taken across shards, as the test holds it.
pub struct ShardPin {
    /// The token reads name.
    pub token: String,
    /// The Flight URL of the peer holding the pin of shard 1.
    pub peer: String,
    /// The points the pin reflects.
    pub points: BTreeMap<u64, Vec<f32>>,
    /// Their partitions.
    pub partition_of: BTreeMap<u64, u32>,
}

/// The points, their partitions and the read-your-writes offsets of the
/// cluster's split collection, as the test tracks them.
pub struct Published<'a> {
    pub all: &'a mut BTreeMap<u64, Vec<f32>>,
    pub partition_of: &'a mut BTreeMap<u64, u32>,
    /// `{"min_offsets": {partition: offset}}`, the newest event of each
    /// partition published.
    pub min_offsets: &'a mut Value,
}

/// A node serving shard 1: its HTTP and Flight URLs.
pub struct Shard1Node {
    pub http: String,
    pub flight: String,
}

/// Pins `collection` through node 0 (`http0`, `flight0`: serving shard 0,
/// with peers for shard 1) once every node serving shard 1 reflects
/// everything published, until each of them holds a pin of shard 1;
/// publishes new points to both shards; and checks that every read of
/// every pin answers exactly as pinned. The pins, one per shard-1 node.
pub async fn a_pin_spans_shards(
    cluster: &Cluster,
    collection: &str,
    (http0, flight0): (&str, &str),
    shard1: &[Shard1Node],
    published: Published<'_>,
) -> Vec<ShardPin> {
    for node in shard1 {
        wait_reflects(&node.http, collection, published.min_offsets).await;
    }
    // Peers serving the same shards take turns, so pins land on each.
    let mut pins: Vec<(ShardPin, arrow_flight::Ticket)> = Vec::new();
    for attempt in 0.. {
        if shard1
            .iter()
            .all(|n| pins.iter().any(|(p, _)| p.peer == n.flight))
        {
            break;
        }
        assert!(attempt < 16, "pins never landed on every shard-1 node");
        let (pin, ticket) = pin_through(flight0, collection, &published).await;
        if pins.iter().all(|(p, _)| p.peer != pin.peer) {
            pins.push((pin, ticket));
        }
    }

    // New events in both shards; the live collection answers with them.
    let mut new_per_shard = [0; 2];
    let mut id = 950_000;
    while new_per_shard.iter().any(|n| *n < 3) {
        let v = vector(id);
        let (partition, offset) = cluster.upsert(id, &v, json!({"kind": "new", "i": 0})).await;
        published.all.insert(id, v);
        published.partition_of.insert(id, partition as u32);
        new_per_shard[partition as usize % 2] += 1;
        let newest = &mut published.min_offsets["min_offsets"][partition.to_string()];
        *newest = json!(offset.max(newest.as_i64().unwrap_or(-1)));
        id += 1;
    }
    answers_exactly(http0, collection, published.all, published.min_offsets).await;
    eprintln!("step: live answers hold the points published since the pins");

    // Every read of a pin answers as pinned, from both shards.
    for (pin, ticket) in &pins {
        let at_pin = json!({"snapshot": pin.token});
        answers_exactly(http0, collection, &pin.points, &at_pin).await;
        let counted = post(
            format!("{http0}/v1/collections/{collection}/count"),
            &at_pin,
        )
        .await;
        assert_eq!(counted["count"], json!(pin.points.len()), "{counted}");
        let (ids, _) = scroll_ids(http0, collection, &at_pin, 37).await;
        assert_eq!(ids, pin.points.keys().copied().collect::<Vec<_>>());
        let scanned = scanned_ids(&mut flight_client(flight0).await, ticket.clone()).await;
        assert_eq!(scanned, ids, "the pin's ticket scans the pinned points");
    }
    eprintln!("step: searches, counts, scrolls and the scan of each pin answer as pinned");
    pins.into_iter().map(|(pin, _)| pin).collect()
}

/// Pins `collection` through the node at `flight0` (serving shard 0):
/// the pin and its scan ticket, checked to hold one peer's pin of shard 1
/// and offsets for every partition published.
async fn pin_through(
    flight0: &str,
    collection: &str,
    published: &Published<'_>,
) -> (ShardPin, arrow_flight::Ticket) {
    let info = flight_client(flight0)
        .await
        .get_flight_info(FlightDescriptor::new_path(vec![
            "collections".into(),
            collection.to_owned(),
        ]))
        .await
        .expect("a pin across shards");
    let metadata: Value = serde_json::from_slice(&info.app_metadata).expect("app metadata");
    let pin = &metadata["snapshot"];
    let remote = pin["remote"].as_array().expect("the peers' pins");
    assert_eq!(remote.len(), 1, "one peer pins shard 1: {pin}");
    assert_eq!(remote[0]["shards"], json!([1]), "{pin}");
    assert!(remote[0].get("token").is_none(), "peer tokens stay inside");
    for p in published.partition_of.values() {
        assert!(
            pin["offsets"].get(p.to_string()).is_some(),
            "partition {p} in the pin's offsets: {pin}"
        );
    }
    let peer = remote[0]["peer"].as_str().expect("peer").to_owned();
    eprintln!("step: pinned across shards, shard 1 on {peer}");
    let pinned = ShardPin {
        token: pin["token"].as_str().expect("token").to_owned(),
        peer,
        points: published.all.clone(),
        partition_of: published.partition_of.clone(),
    };
    (pinned, info.endpoint[0].ticket.clone().expect("ticket"))
}

/// Checks the pin's reads after its shard-1 peer `dead` (a Flight URL)
/// stopped: when that peer held the pin, a read is refused (its replica
/// holds no such snapshot), and with `allow_partial` answers exactly over
/// shard 0 as pinned; otherwise the pin answers whole as before.
pub async fn after_a_peer_died(http0: &str, collection: &str, pin: &ShardPin, dead: &str) {
    let at_pin = json!({"snapshot": pin.token});
    if pin.peer != dead {
        answers_exactly(http0, collection, &pin.points, &at_pin).await;
        eprintln!("step: the pin's peer lives on; the pin answers whole");
        return;
    }
    let q = vector(5_000_000);
    let refused = reqwest::Client::new()
        .post(format!("{http0}/v1/collections/{collection}/search"))
        .json(&json!({"vector": q, "k": 10, "snapshot": pin.token}))
        .send()
        .await
        .expect("search");
    assert_eq!(refused.status().as_u16(), 503, "the pin's peer is gone");
    let partial: Value = post(
        format!("{http0}/v1/collections/{collection}/search"),
        &json!({"vector": q, "k": 10, "snapshot": pin.token, "allow_partial": true}),
    )
    .await;
    assert_eq!(partial["missing_shards"], json!([1]), "{partial}");
    let shard0 = shard_points(&pin.points, &pin.partition_of, 2, 0);
    assert_top_ids(&shard0, &q, &partial["result"], "the pinned shard 0");
    eprintln!("step: the pin's peer died; its shard is missing, not read live elsewhere");
}

/// Waits until the node at `http` reflects `min_offsets` (a search body's
/// `{"min_offsets": ...}`) for the partitions it serves.
async fn wait_reflects(http: &str, collection: &str, min_offsets: &Value) {
    let mut body = json!({"vector": vector(1), "k": 1, "allow_partial": true});
    body["min_offsets"] = min_offsets["min_offsets"].clone();
    wait_search_answers(http, collection, &body, &format!("with {min_offsets}")).await;
}
