//! Arrow Flight checks with the Rust client.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::types::Float32Type;
use arrow_array::{Array, FixedSizeListArray, Float32Array, RecordBatch, UInt32Array, UInt64Array};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::{FlightClient, FlightDescriptor, Ticket};
use arrow_schema::{DataType, Field, Schema};
use futures::TryStreamExt;
use serde_json::json;

use crate::cluster::{exact_top_k, vector, Cluster, DIM};

/// A Flight client of the cluster; on a secured one it speaks TLS and
/// sends the read key.
async fn client(cluster: &Cluster) -> FlightClient {
    let key = cluster.secured.as_ref().map(|s| s.read_key.clone());
    client_with_key(cluster, key.as_deref()).await
}

/// A Flight client of the cluster sending `key` (none: no key).
pub async fn client_with_key(cluster: &Cluster, key: Option<&str>) -> FlightClient {
    let mut endpoint =
        tonic::transport::Channel::from_shared(cluster.flight_url()).expect("valid url");
    if let Some(secured) = &cluster.secured {
        let tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&secured.cert_pem))
            .domain_name("localhost");
        endpoint = endpoint.tls_config(tls).expect("tls config");
    }
    let channel = endpoint.connect().await.expect("flight connects");
    let mut client = FlightClient::new(channel);
    if let Some(key) = key {
        client
            .add_header("authorization", &format!("Bearer {key}"))
            .expect("header");
    }
    client
}

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

/// (query_index, rank, id, score) rows of result batches.
fn rows(batches: &[RecordBatch]) -> Vec<(u32, u32, u64, f32)> {
    let mut out = Vec::new();
    for b in batches {
        let col = |name: &str| {
            b.column_by_name(name)
                .unwrap_or_else(|| panic!("column {name}"))
                .clone()
        };
        let qi = col("query_index");
        let rank = col("rank");
        let id = col("id");
        let score = col("score");
        let qi = qi.as_any().downcast_ref::<UInt32Array>().expect("u32");
        let rank = rank.as_any().downcast_ref::<UInt32Array>().expect("u32");
        let id = id.as_any().downcast_ref::<UInt64Array>().expect("u64");
        let score = score.as_any().downcast_ref::<Float32Array>().expect("f32");
        for i in 0..b.num_rows() {
            out.push((qi.value(i), rank.value(i), id.value(i), score.value(i)));
        }
    }
    out
}

fn check(
    rows: &[(u32, u32, u64, f32)],
    queries: &[Vec<f32>],
    points: &BTreeMap<u64, Vec<f32>>,
    k: usize,
) {
    assert_eq!(rows.len(), queries.len() * k, "one row per (query, rank)");
    for (qi, q) in queries.iter().enumerate() {
        let want = exact_top_k(points, q, k);
        let got: Vec<_> = rows.iter().filter(|r| r.0 as usize == qi).collect();
        for (r, (id, score)) in got.iter().zip(&want) {
            assert_eq!(r.2, *id, "query {qi} rank {}", r.1);
            assert!(
                (r.3 - score).abs() <= 1e-4 * score.max(1.0),
                "query {qi}: {} vs {score}",
                r.3
            );
        }
    }
}

/// One DoExchange: `command` as the descriptor, `batches` of query vectors in.
async fn exchange(
    c: &mut FlightClient,
    command: serde_json::Value,
    batches: Vec<RecordBatch>,
) -> Vec<RecordBatch> {
    let request = FlightDataEncoderBuilder::new()
        .with_flight_descriptor(Some(FlightDescriptor::new_cmd(command.to_string())))
        .build(futures::stream::iter(batches.into_iter().map(Ok)));
    c.do_exchange(request)
        .await
        .expect("do_exchange")
        .try_collect()
        .await
        .expect("exchange batches")
}

/// A DoExchange input batch: one `vector` row per query.
fn query_batch(queries: &[Vec<f32>]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "vector",
        DataType::FixedSizeList(
            Arc::new(Field::new("item", DataType::Float32, true)),
            DIM as i32,
        ),
        false,
    )]));
    let list = FixedSizeListArray::from_iter_primitive::<Float32Type, _, _>(
        queries
            .iter()
            .map(|q| Some(q.iter().map(|x| Some(*x)).collect::<Vec<_>>())),
        DIM as i32,
    );
    RecordBatch::try_new(schema, vec![Arc::new(list)]).expect("batch")
}

/// DoGet with a JSON ticket and DoExchange with batches of query vectors
/// both return the exact top-k.
pub async fn do_get_and_exchange_match_exact(
    cluster: &Cluster,
    collection: &str,
    points: &BTreeMap<u64, Vec<f32>>,
) {
    let mut c = client(cluster).await;
    let infos: Vec<_> = c
        .list_flights(bytes::Bytes::new())
        .await
        .expect("list_flights")
        .try_collect()
        .await
        .expect("infos");
    assert!(infos.iter().any(|i| i
        .flight_descriptor
        .as_ref()
        .is_some_and(|d| d.path == ["collections", collection])));

    let queries: Vec<Vec<f32>> = (0..25).map(|s| vector(2_000_000 + s)).collect();
    let ticket = json!({"collection": collection, "vectors": queries, "k": 5}).to_string();
    let batches: Vec<RecordBatch> = c
        .do_get(Ticket::new(ticket))
        .await
        .expect("do_get")
        .try_collect()
        .await
        .expect("batches");
    check(&rows(&batches), &queries, points, 5);

    let out = exchange(
        &mut c,
        json!({"collection": collection, "k": 5}),
        vec![query_batch(&queries[..10]), query_batch(&queries[10..])],
    )
    .await;
    check(&rows(&out), &queries, points, 5);
    assert!(out.iter().all(|b| b.column(0).null_count() == 0));

    // Filters and graph options in all three request forms: JSON ticket,
    // protobuf ticket, DoExchange command.
    let filter = json!({"must": [{"key": "kind", "match": {"value": "k2"}}]});
    let subset: BTreeMap<u64, Vec<f32>> = points
        .iter()
        .filter(|(id, _)| *id % 3 == 2)
        .map(|(id, v)| (*id, v.clone()))
        .collect();
    let ticket = json!({"collection": collection, "vectors": queries, "k": 5,
        "filter": filter, "ef": 64, "quantization": "none"})
    .to_string();
    let batches: Vec<RecordBatch> = c
        .do_get(Ticket::new(ticket))
        .await
        .expect("filtered do_get")
        .try_collect()
        .await
        .expect("batches");
    check(&rows(&batches), &queries, &subset, 5);

    let proto = eddy_proto::v1::SearchTicket {
        collection: collection.to_owned(),
        options: Some(eddy_proto::v1::SearchOptions {
            k: 5,
            filter_json: filter.to_string(),
            quantization: "sq8".into(),
            oversampling: 4.0,
            ..Default::default()
        }),
        vectors: queries.iter().flatten().copied().collect(),
    };
    let batches: Vec<RecordBatch> = c
        .do_get(Ticket::new(prost::Message::encode_to_vec(&proto)))
        .await
        .expect("protobuf filtered do_get")
        .try_collect()
        .await
        .expect("batches");
    check(&rows(&batches), &queries, &subset, 5);

    let out = exchange(
        &mut c,
        json!({"collection": collection, "k": 5, "filter": filter}),
        vec![query_batch(&queries)],
    )
    .await;
    check(&rows(&out), &queries, &subset, 5);
}

/// Malformed tickets and commands get INVALID_ARGUMENT, unknown collections NOT_FOUND.
pub async fn bad_flight_requests_are_invalid_argument(cluster: &Cluster, collection: &str) {
    let mut c = client(cluster).await;
    let cases = [
        ("{not json".to_owned(), tonic::Code::InvalidArgument),
        (
            json!({"collection": collection, "vectors": [[1.0, 2.0]]}).to_string(),
            tonic::Code::InvalidArgument,
        ),
        (
            json!({"collection": collection, "vectors": [vector(1)], "k": 0}).to_string(),
            tonic::Code::InvalidArgument,
        ),
        (
            json!({"collection": "nope", "vectors": [vector(1)]}).to_string(),
            tonic::Code::NotFound,
        ),
    ];
    for (ticket, code) in cases {
        let err = match c.do_get(Ticket::new(ticket.clone())).await {
            Ok(stream) => stream.try_collect::<Vec<_>>().await.expect_err("must fail"),
            Err(e) => e,
        };
        let status = match err {
            arrow_flight::error::FlightError::Tonic(s) => *s,
            other => panic!("{ticket}: expected a gRPC status, got {other}"),
        };
        assert_eq!(status.code(), code, "{ticket}: {status}");
        assert!(!status.message().is_empty());
    }
}

/// `queries` as an input batch with a `key` column (`q<n>`, numbered from
/// `first`) and a `part` column beside `vector`.
fn keyed_batch(queries: &[Vec<f32>], first: usize) -> RecordBatch {
    let vectors = query_batch(queries);
    let keys: arrow_array::StringArray = (first..first + queries.len())
        .map(|n| Some(format!("q{n}")))
        .collect();
    let parts: arrow_array::Int32Array = (first..first + queries.len())
        .map(|n| Some((n % 2) as i32))
        .collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("key", DataType::Utf8, true),
        vectors.schema().field(0).clone(),
        Field::new("part", DataType::Int32, true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![Arc::new(keys), vectors.column(0).clone(), Arc::new(parts)],
    )
    .expect("batch")
}

/// The gRPC status a DoExchange of `command` and `batch` must fail with.
async fn exchange_status(
    c: &mut FlightClient,
    command: serde_json::Value,
    batch: RecordBatch,
) -> tonic::Status {
    let request = FlightDataEncoderBuilder::new()
        .with_flight_descriptor(Some(FlightDescriptor::new_cmd(command.to_string())))
        .build(futures::stream::iter([Ok(batch)]));
    let err = match c.do_exchange(request).await {
        Err(e) => e,
        Ok(stream) => stream
            .try_collect::<Vec<_>>()
            .await
            .expect_err("the exchange must fail"),
    };
    match err {
        arrow_flight::error::FlightError::Tonic(status) => *status,
        other => panic!("expected a gRPC status, got {other:?}"),
    }
}

/// DoExchange carries every input column but `vector` beside each result
/// row, across batches; an input column named like a result column is
/// INVALID_ARGUMENT.
pub async fn exchange_carries_input_columns(
    cluster: &Cluster,
    collection: &str,
    points: &BTreeMap<u64, Vec<f32>>,
) {
    let mut c = client(cluster).await;
    let queries: Vec<Vec<f32>> = (0..12).map(|s| vector(3_000_000 + s)).collect();
    let out = exchange(
        &mut c,
        json!({"collection": collection, "k": 4}),
        vec![keyed_batch(&queries[..5], 0), keyed_batch(&queries[5..], 5)],
    )
    .await;
    check(&rows(&out), &queries, points, 4);
    let mut seen = 0;
    for b in &out {
        let names: Vec<&str> = b
            .schema_ref()
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        assert_eq!(
            names,
            ["query_index", "rank", "id", "score", "key", "part"],
            "result columns, then the carried ones"
        );
        let qi = b
            .column(0)
            .as_any()
            .downcast_ref::<UInt32Array>()
            .expect("u32");
        let keys = b
            .column_by_name("key")
            .and_then(|k| k.as_any().downcast_ref::<arrow_array::StringArray>())
            .expect("key column");
        let parts = b
            .column_by_name("part")
            .and_then(|k| k.as_any().downcast_ref::<arrow_array::Int32Array>())
            .expect("part column");
        for row in 0..b.num_rows() {
            let q = qi.value(row) as usize;
            assert_eq!(keys.value(row), format!("q{q}"));
            assert_eq!(parts.value(row), (q % 2) as i32);
            seen += 1;
        }
    }
    assert_eq!(seen, queries.len() * 4);

    let clash = {
        let b = query_batch(&queries[..2]);
        let schema = Arc::new(Schema::new(vec![
            b.schema().field(0).clone(),
            Field::new("score", DataType::Int32, true),
        ]));
        let scores = arrow_array::Int32Array::from(vec![1, 2]);
        RecordBatch::try_new(schema, vec![b.column(0).clone(), Arc::new(scores)]).expect("batch")
    };
    let status = exchange_status(&mut c, json!({"collection": collection, "k": 4}), clash).await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status}");
    assert!(status.message().contains("`score`"), "{status}");
}

/// DoExchange input columns `k` and `filter` set each row's own options
/// (null: the command's); rows answer as if searched alone, a bad row
/// option is INVALID_ARGUMENT.
pub async fn exchange_takes_per_row_k_and_filter(
    cluster: &Cluster,
    collection: &str,
    points: &BTreeMap<u64, Vec<f32>>,
) {
    let mut c = client(cluster).await;
    let queries: Vec<Vec<f32>> = (0..9).map(|s| vector(4_000_000 + s)).collect();
    let filter = json!({"must": [{"key": "kind", "match": {"value": "k2"}}]}).to_string();
    // Row r: k = 2 + r % 3 (null for r % 4 == 3: the command's 6); the
    // filter on odd rows.
    let ks: arrow_array::Int64Array = (0..queries.len())
        .map(|r| (r % 4 != 3).then_some(2 + (r % 3) as i64))
        .collect();
    let filters: arrow_array::StringArray = (0..queries.len())
        .map(|r| (r % 2 == 1).then(|| filter.clone()))
        .collect();
    let vectors = query_batch(&queries);
    let schema = Arc::new(Schema::new(vec![
        vectors.schema().field(0).clone(),
        Field::new("k", DataType::Int64, true),
        Field::new("filter", DataType::Utf8, true),
    ]));
    let input = RecordBatch::try_new(
        schema,
        vec![vectors.column(0).clone(), Arc::new(ks), Arc::new(filters)],
    )
    .expect("batch");
    let out = exchange(
        &mut c,
        json!({"collection": collection, "k": 6}),
        vec![input.clone()],
    )
    .await;
    let got = rows(&out);
    let subset: BTreeMap<u64, Vec<f32>> = points
        .iter()
        .filter(|(id, _)| *id % 3 == 2)
        .map(|(id, v)| (*id, v.clone()))
        .collect();
    let mut expected_rows = 0;
    for (r, q) in queries.iter().enumerate() {
        let k = if r % 4 == 3 { 6 } else { 2 + r % 3 };
        let from = if r % 2 == 1 { &subset } else { points };
        let want = exact_top_k(from, q, k);
        let mine: Vec<_> = got.iter().filter(|g| g.0 as usize == r).collect();
        assert_eq!(mine.len(), k, "row {r}: its own k");
        for (g, (id, _)) in mine.iter().zip(&want) {
            assert_eq!(g.2, *id, "row {r} rank {}", g.1);
        }
        expected_rows += k;
    }
    assert_eq!(got.len(), expected_rows);
    assert!(
        out.iter().all(|b| b.schema().field_with_name("k").is_ok()),
        "the option columns are carried like any other"
    );

    let bad = {
        let schema = Arc::new(Schema::new(vec![
            input.schema().field(0).clone(),
            Field::new("k", DataType::Int64, true),
        ]));
        let ks = arrow_array::Int64Array::from(vec![0; queries.len()]);
        RecordBatch::try_new(schema, vec![input.column(0).clone(), Arc::new(ks)]).expect("batch")
    };
    let status = exchange_status(&mut c, json!({"collection": collection}), bad).await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status}");
    assert!(status.message().contains("k must be"), "{status}");
}

/// A DoGet scan ticket streams every live point once, with its vector and
/// the asked payload fields; a filter narrows it.
pub async fn scan_streams_every_live_point(
    cluster: &Cluster,
    collection: &str,
    points: &BTreeMap<u64, Vec<f32>>,
) {
    let mut c = client(cluster).await;
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
async fn scanned_ids(c: &mut FlightClient, ticket: Ticket) -> Vec<u64> {
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
        .http
        .post(cluster.url(&format!("/v1/collections/{collection}/search")))
        .json(&json!({"vector": vector(tail_id), "k": 1, "snapshot": token}))
        .send()
        .await
        .expect("search")
        .json()
        .await
        .expect("json");
    assert_eq!(in_tail["result"][0]["id"], tail_id, "{in_tail}");
    let counted: serde_json::Value = cluster
        .http
        .post(cluster.url(&format!("/v1/collections/{collection}/count")))
        .json(&json!({"snapshot": token}))
        .send()
        .await
        .expect("count")
        .json()
        .await
        .expect("json");
    assert_eq!(counted["count"], before.len(), "{counted}");
    let unknown = search(Some("no-such-snapshot")).await.expect("search");
    assert_eq!(unknown.status(), reqwest::StatusCode::NOT_FOUND);
}
