//! Fuzzing the live server: schemathesis generates HTTP requests from the
//! served OpenAPI document, and a seeded generator sends malformed and
//! extreme Flight tickets, commands and batches. Neither may get a server
//! error (HTTP 5xx, gRPC INTERNAL / UNKNOWN) or a hang.
//!
//! The fuzzed eddy-query runs on a copy of the cluster's store with no
//! broker, so collections the fuzzer creates stay out of the cluster.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{
    ArrayRef, FixedSizeListArray, Float32Array, Int32Array, RecordBatch, StringArray,
};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::{FlightClient, FlightDescriptor, Ticket};
use arrow_schema::{DataType, Field, Schema};
use clap::Parser as _;
use futures::TryStreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::cluster::{Cluster, DIM};

/// Copies the directory tree `from` to `to`.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// Whether a Flight outcome is a server error (a panic that took the
/// connection down shows as UNKNOWN or UNAVAILABLE).
fn server_error(e: &FlightError) -> Option<String> {
    match e {
        FlightError::Tonic(s)
            if matches!(
                s.code(),
                tonic::Code::Internal | tonic::Code::Unknown | tonic::Code::Unavailable
            ) =>
        {
            Some(s.to_string())
        }
        _ => None,
    }
}

/// A JSON value of a random shape: what a careless or hostile client sends
/// where a number, a list or an object belongs.
fn junk(rng: &mut StdRng, depth: u32) -> Value {
    match rng.random_range(0..9) {
        0 => Value::Null,
        1 => json!(rng.random::<bool>()),
        2 => json!(rng.random_range(-5i64..20_000_000)),
        3 => json!(i64::MIN),
        4 => json!(rng.random::<f64>() * 1e30),
        5 => json!("x".repeat(rng.random_range(0..40))),
        6 if depth > 0 => Value::Array(
            (0..rng.random_range(0..DIM + 2))
                .map(|_| junk(rng, depth - 1))
                .collect(),
        ),
        7 if depth > 0 => json!({"must": [{"key": "kind", "match": junk(rng, depth - 1)}]}),
        _ => json!(vec![0.25f32; DIM]),
    }
}

/// A search ticket or exchange command with random fields set to junk.
fn request(rng: &mut StdRng, collection: &str) -> Value {
    let mut r = json!({"collection": collection});
    for key in [
        "vector",
        "vectors",
        "k",
        "ef",
        "exact",
        "quantization",
        "oversampling",
        "rescore",
        "with_payload",
        "filter",
        "min_offsets",
        "snapshot",
        "unknown",
    ] {
        if rng.random_bool(0.3) {
            r[key] = junk(rng, 2);
        }
    }
    if rng.random_bool(0.5) {
        r["vectors"] = json!([vec![0.5f32; DIM]]);
    }
    r
}

/// An input batch with a random (often wrong) `vector` column.
fn batch(rng: &mut StdRng) -> RecordBatch {
    let rows = rng.random_range(0..5);
    let width = if rng.random_bool(0.7) {
        DIM as i32
    } else {
        rng.random_range(1..20)
    };
    let (field, column): (Field, ArrayRef) = match rng.random_range(0..3) {
        0 => {
            let item = Arc::new(Field::new("item", DataType::Float32, true));
            let values: Float32Array = (0..rows * width as usize)
                .map(|i| (i % 3 != 0 || rng.random_bool(0.9)).then_some(rng.random::<f32>()))
                .collect();
            let list = FixedSizeListArray::new(item.clone(), width, Arc::new(values), None);
            (
                Field::new("vector", DataType::FixedSizeList(item, width), true),
                Arc::new(list),
            )
        }
        1 => (
            Field::new("vector", DataType::Utf8, true),
            Arc::new(StringArray::from(vec!["not a vector"; rows])),
        ),
        _ => (
            Field::new("other", DataType::Int32, true),
            Arc::new(Int32Array::from(vec![7; rows])),
        ),
    };
    RecordBatch::try_new(Arc::new(Schema::new(vec![field])), vec![column]).expect("batch")
}

/// Sends `cases` random Flight requests; returns how many were sent.
async fn fuzz_flight(flight: &str, collection: &str, cases: usize) -> usize {
    let channel = tonic::transport::Channel::from_shared(flight.to_owned())
        .expect("url")
        .connect()
        .await
        .expect("flight connects");
    let mut c = FlightClient::new(channel);
    let mut rng = StdRng::seed_from_u64(0xEDD1);
    let limit = Duration::from_secs(20);
    for case in 0..cases {
        let outcome = match case % 3 {
            0 => {
                let bytes: Vec<u8> = if rng.random_bool(0.2) {
                    (0..rng.random_range(0..64)).map(|_| rng.random()).collect()
                } else if rng.random_bool(0.3) {
                    let scan = json!({"scan": collection, "filter": junk(&mut rng, 2),
                        "limit": junk(&mut rng, 0), "with_vector": rng.random::<bool>()});
                    scan.to_string().into_bytes()
                } else {
                    request(&mut rng, collection).to_string().into_bytes()
                };
                tokio::time::timeout(limit, async {
                    match c.do_get(Ticket::new(bytes)).await {
                        Ok(s) => s.try_collect::<Vec<_>>().await.map(|_| ()),
                        Err(e) => Err(e),
                    }
                })
                .await
            }
            1 => {
                let mut command = request(&mut rng, collection);
                if let Some(o) = command.as_object_mut() {
                    o.remove("vectors");
                    o.remove("vector");
                }
                let batches: Vec<_> = (0..rng.random_range(0..3))
                    .map(|_| Ok(batch(&mut rng)))
                    .collect();
                let input = FlightDataEncoderBuilder::new()
                    .with_flight_descriptor(Some(FlightDescriptor::new_cmd(command.to_string())))
                    .build(futures::stream::iter(batches));
                tokio::time::timeout(limit, async {
                    match c.do_exchange(input).await {
                        Ok(s) => s.try_collect::<Vec<_>>().await.map(|_| ()),
                        Err(e) => Err(e),
                    }
                })
                .await
            }
            _ => {
                let path = if rng.random_bool(0.5) {
                    vec!["collections".to_owned(), collection.to_owned()]
                } else {
                    vec![String::from_utf8_lossy(&[rng.random::<u8>(); 3]).into_owned()]
                };
                tokio::time::timeout(limit, c.get_flight_info(FlightDescriptor::new_path(path)))
                    .await
                    .map(|r| r.map(|_| ()))
            }
        };
        match outcome {
            Err(_) => panic!("Flight fuzz case {case} hung for {limit:?}"),
            Ok(Err(e)) => {
                if let Some(what) = server_error(&e) {
                    panic!("Flight fuzz case {case}: a server error: {what}");
                }
            }
            Ok(Ok(())) => {}
        }
    }
    cases
}

/// Runs the Flight fuzzer, then schemathesis against the served OpenAPI
/// document for a bounded time (it may drop the collection: last); fails
/// on any server error or hang.
pub async fn fuzzing_finds_no_server_error(cluster: &Cluster, collection: &str) {
    let dir = tempfile::tempdir().expect("tmp");
    copy_tree(cluster.store_path(), dir.path());
    let store = dir.path().to_str().expect("utf-8").to_owned();
    let query = eddy_query::start(eddy_query::QueryConfig::parse_from([
        "eddy-query",
        "--store",
        &store,
        "--brokers",
        "127.0.0.1:1",
        "--http-addr",
        "127.0.0.1:0",
        "--flight-addr",
        "127.0.0.1:0",
        "--max-collections",
        "3",
        "--request-timeout-ms",
        "10000",
    ]))
    .await
    .expect("fuzzed query service starts");

    let sent = fuzz_flight(&format!("http://{}", query.flight_addr()), collection, 600).await;
    eprintln!("flight fuzz: {sent} requests, no server error, no hang");
    let seconds = std::env::var("EDDY_FUZZ_SECONDS").unwrap_or_else(|_| "30".into());
    let schema = format!("http://{}/v1/openapi.json", query.http_addr());
    // Through the interpreter: pip may put the `schemathesis` script off PATH.
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let output = tokio::process::Command::new(&python)
        .args([
            "-c",
            "import sys; from schemathesis.cli import schemathesis; sys.exit(schemathesis())",
            "run",
            &schema,
            "--checks",
            "not_a_server_error",
            "--max-time",
            &seconds,
            "--workers",
            "2",
            "--request-timeout",
            "20",
            "--seed",
            "7",
        ])
        // Its cache (.schemathesis/) goes with the temporary directory.
        .current_dir(dir.path())
        .output()
        .await
        .unwrap_or_else(|e| {
            panic!("running schemathesis: {e} (install it: pip install schemathesis)")
        });
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("generated") || l.contains("passed") || l.contains("failed"))
        .collect();
    eprintln!("schemathesis ({seconds} s): {}", summary.join(" | "));
    assert!(
        output.status.success(),
        "schemathesis found server errors or hangs:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );

    query.shutdown().await;
}
