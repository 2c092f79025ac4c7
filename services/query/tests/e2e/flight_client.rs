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
pub async fn client(cluster: &Cluster) -> FlightClient {
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
pub fn query_batch(queries: &[Vec<f32>]) -> RecordBatch {
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
/// row, across batches (searched two at a time, answered in input order);
/// an input column named like a result column is INVALID_ARGUMENT.
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
        vec![
            keyed_batch(&queries[..5], 0),
            keyed_batch(&queries[5..6], 5),
            keyed_batch(&queries[6..10], 6),
            keyed_batch(&queries[10..], 10),
        ],
    )
    .await;
    check(&rows(&out), &queries, points, 4);
    let order: Vec<u32> = rows(&out).iter().map(|r| r.0).collect();
    assert!(
        order.windows(2).all(|w| w[0] <= w[1]),
        "answers in input order: {order:?}"
    );
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
