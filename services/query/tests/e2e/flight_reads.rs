//! Flight reads for jobs: scans that export a collection, pinned
//! snapshots that stay the same while ingest moves on, and the metadata
//! every answer carries (offsets, `stale`).

use std::collections::BTreeMap;

use arrow_array::{Array, FixedSizeListArray, Float32Array, RecordBatch, UInt64Array};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::{FlightClient, FlightDescriptor, Ticket};
use futures::TryStreamExt;
use serde_json::json;

use crate::cluster::{vector, Cluster};
use crate::flight_client::{client, query_batch};

/// The answers' metadata of a Flight stream (the JSON `app_metadata` of
/// each record-batch message that carries one: offsets and `stale`), and
/// the rows it holds.
pub async fn answer_metadata(
    stream: arrow_flight::decode::FlightRecordBatchStream,
) -> (Vec<serde_json::Value>, usize) {
    let mut decoder = stream.into_inner();
    let (mut metadata, mut rows) = (Vec::new(), 0);
    while let Some(data) = decoder.try_next().await.expect("flight data") {
        if let arrow_flight::decode::DecodedPayload::RecordBatch(batch) = &data.payload {
            rows += batch.num_rows();
            if !data.inner.app_metadata.is_empty() {
                metadata.push(serde_json::from_slice(&data.inner.app_metadata).expect("json"));
            }
        }
    }
    (metadata, rows)
}

/// Every Flight answer says which offsets it reflects, as HTTP answers
/// do: DoGet's one answer, each DoExchange batch's, a scan's.
pub async fn answers_carry_their_offsets(cluster: &Cluster, collection: &str) {
    let mut c = client(cluster).await;
    let info = cluster.info(collection).await;
    let offsets = &info["status"]["offsets"];
    assert!(offsets.as_object().is_some_and(|o| !o.is_empty()), "{info}");
    let ticket = json!({"collection": collection, "vectors": [vector(1), vector(2)], "k": 3});
    let (got, rows) = answer_metadata(
        c.do_get(Ticket::new(ticket.to_string()))
            .await
            .expect("do_get"),
    )
    .await;
    assert_eq!((got.len(), rows), (1, 6), "{got:?}");
    assert_eq!(&got[0]["offsets"], offsets, "{got:?}");
    assert!(got[0].get("stale").is_none(), "{got:?}");

    let request = FlightDataEncoderBuilder::new()
        .with_flight_descriptor(Some(FlightDescriptor::new_cmd(
            json!({"collection": collection, "k": 2}).to_string(),
        )))
        .build(futures::stream::iter(
            [
                query_batch(&[vector(3)]),
                query_batch(&[vector(4), vector(5)]),
            ]
            .into_iter()
            .map(Ok),
        ));
    let (got, rows) = answer_metadata(c.do_exchange(request).await.expect("do_exchange")).await;
    assert_eq!(
        (got.len(), rows),
        (2, 6),
        "one per input batch (the client sends no empty ones): {got:?}"
    );
    assert!(got.iter().all(|m| &m["offsets"] == offsets), "{got:?}");

    let scan = json!({"scan": collection, "filter": {"must": [{"key": "kind", "match": {"value": "none-such"}}]}});
    let (got, rows) =
        answer_metadata(c.do_get(Ticket::new(scan.to_string())).await.expect("scan")).await;
    assert_eq!(
        (got.len(), rows),
        (1, 0),
        "an empty scan still says: {got:?}"
    );
    assert_eq!(&got[0]["offsets"], offsets, "{got:?}");
}

/// A DoGet scan ticket streams every live point once, with its vector and
/// the asked payload fields; a filter narrows it.
pub async fn scan_streams_every_live_point(
    cluster: &Cluster,
    collection: &str,
    points: &BTreeMap<u64, Vec<f32>>,
) {
    scan_through(client(cluster).await, collection, points).await;
}

/// [`scan_streams_every_live_point`] through the node `c` talks to.
pub async fn scan_through(mut c: FlightClient, collection: &str, points: &BTreeMap<u64, Vec<f32>>) {
    let ticket = json!({"scan": collection, "with_vector": true, "with_payload": ["kind", "i"]});
    let batches: Vec<RecordBatch> = c
        .do_get(Ticket::new(ticket.to_string()))
        .await
        .expect("scan")
        .try_collect()
        .await
        .expect("batches");
    let mut seen = BTreeMap::new();
    for b in &batches {
        let ids = b
            .column(0)
            .as_any()
            .downcast_ref::<UInt64Array>()
            .expect("ids");
        let vectors = b
            .column_by_name("vector")
            .and_then(|v| v.as_any().downcast_ref::<FixedSizeListArray>())
            .expect("vectors");
        let kinds = b
            .column_by_name("kind")
            .and_then(|v| v.as_any().downcast_ref::<arrow_array::StringArray>())
            .expect("kind");
        let is = b
            .column_by_name("i")
            .and_then(|v| v.as_any().downcast_ref::<arrow_array::Int64Array>())
            .expect("i");
        for row in 0..b.num_rows() {
            let id = ids.value(row);
            let v = vectors.value(row);
            let v = v.as_any().downcast_ref::<Float32Array>().expect("f32");
            assert_eq!(kinds.value(row), format!("k{}", id % 3));
            assert_eq!(is.value(row), id as i64);
            assert!(seen.insert(id, v.values().to_vec()).is_none(), "{id} twice");
        }
    }
    assert_eq!(&seen, points, "every live point with its vector");

    let filtered = json!({"scan": collection,
        "filter": {"must": [{"key": "kind", "match": {"value": "k1"}}]}, "with_payload": false});
    let ids = scanned_ids(&mut c, Ticket::new(filtered.to_string())).await;
    let want: Vec<u64> = points.keys().copied().filter(|id| id % 3 == 1).collect();
    assert_eq!(ids, want);
}

/// Every id a DoGet on `ticket` streams, sorted.
pub async fn scanned_ids(c: &mut FlightClient, ticket: Ticket) -> Vec<u64> {
    let batches: Vec<RecordBatch> = c
        .do_get(ticket)
        .await
        .expect("scan")
        .try_collect()
        .await
        .expect("batches");
    let mut ids: Vec<u64> = batches
        .iter()
        .flat_map(|b| {
            let ids = b
                .column(0)
                .as_any()
                .downcast_ref::<UInt64Array>()
                .expect("ids");
            ids.values().to_vec()
        })
        .collect();
    ids.sort_unstable();
    ids
}

/// `GetFlightInfo` pins what the collection serves: its ticket, searches
/// and counts naming the pin keep answering from it while new events are
/// sealed into later versions, and a store lease keeps the version's files.
/// The new points are added to `points`.
pub async fn a_pinned_snapshot_stays_the_same(
    cluster: &Cluster,
    collection: &str,
    points: &mut BTreeMap<u64, Vec<f32>>,
) {
    let mut c = client(cluster).await;
    // Pin while a fresh event is still in the tail (ingest seals within
    // 300 ms, so an attempt may miss it and is made again): the pin holds
    // the tail's copy, and keeps answering with it after the live tail is
    // sealed and pruned.
    let mut attempt = 0u64;
    let (info, metadata) = loop {
        let id = 9_000 + attempt;
        let v = vector(id);
        cluster
            .upsert(id, &v, json!({"kind": format!("k{}", id % 3), "i": id}))
            .await;
        points.insert(id, v);
        cluster.wait_count(collection, points.len() as u64).await;
        let info = c
            .get_flight_info(FlightDescriptor::new_path(vec![
                "collections".into(),
                collection.to_owned(),
            ]))
            .await
            .expect("flight info");
        let metadata: serde_json::Value =
            serde_json::from_slice(&info.app_metadata).expect("app metadata");
        if metadata["snapshot"]["tail_rows"].as_u64() > Some(0) || attempt == 20 {
            break (info, metadata);
        }
        attempt += 1;
    };
    assert!(
        metadata["snapshot"]["tail_rows"].as_u64() > Some(0),
        "no pin caught a tail row in 20 attempts: {metadata}"
    );
    eprintln!(
        "pinned with {} tail row(s) after {} attempt(s)",
        metadata["snapshot"]["tail_rows"],
        attempt + 1
    );
    let token = metadata["snapshot"]["token"]
        .as_str()
        .expect("a snapshot token")
        .to_owned();
    let version = metadata["snapshot"]["version"].as_u64().expect("version");
    let store = eddy_manifest::Store::open(cluster.store_path()).expect("store");
    let leases = store.leases(collection).expect("leases");
    assert!(
        leases.iter().any(|l| l.manifest == Some(version)),
        "a lease keeps version {version}: {leases:?}"
    );
    let ticket = info.endpoint[0].ticket.clone().expect("ticket");
    let before = scanned_ids(&mut c, ticket.clone()).await;
    assert_eq!(before, points.keys().copied().collect::<Vec<_>>());
    assert_eq!(info.total_records, before.len() as i64);

    // New events, sealed into later manifest versions.
    for id in 10_000..10_040u64 {
        let v = vector(id);
        cluster
            .upsert(id, &v, json!({"kind": format!("k{}", id % 3), "i": id}))
            .await;
        points.insert(id, v);
    }
    cluster.wait_count(collection, points.len() as u64).await;
    let sealed = cluster.wait_sealed(collection).await;
    assert!(sealed["status"]["manifest_version"].as_u64() > Some(version));

    assert_eq!(
        scanned_ids(&mut c, ticket).await,
        before,
        "the pin does not move"
    );
    let fresh = vector(10_000);
    let search = |snapshot: Option<&str>| {
        let mut body = json!({"vector": fresh, "k": 1});
        if let Some(s) = snapshot {
            body["snapshot"] = json!(s);
        }
        cluster
            .http
            .post(cluster.url(&format!("/v1/collections/{collection}/search")))
            .json(&body)
            .send()
    };
    let live: serde_json::Value = search(None)
        .await
        .expect("search")
        .json()
        .await
        .expect("json");
    assert_eq!(live["result"][0]["id"], 10_000);
    let pinned: serde_json::Value = search(Some(&token))
        .await
        .expect("search")
        .json()
        .await
        .expect("json");
    assert_ne!(pinned["result"][0]["id"], 10_000, "{pinned}");
    // The event that was in the tail when pinned is still found there.
    let tail_id = 9_000 + attempt;
    let in_tail: serde_json::Value = cluster
        .post(
            &format!("/v1/collections/{collection}/search"),
            &json!({"vector": vector(tail_id), "k": 1, "snapshot": token}),
        )
        .await;
    assert_eq!(in_tail["result"][0]["id"], tail_id, "{in_tail}");
    let counted: serde_json::Value = cluster
        .post(
            &format!("/v1/collections/{collection}/count"),
            &json!({"snapshot": token}),
        )
        .await;
    assert_eq!(counted["count"], before.len(), "{counted}");
    let unknown = search(Some("no-such-snapshot")).await.expect("search");
    assert_eq!(unknown.status(), reqwest::StatusCode::NOT_FOUND);
}
