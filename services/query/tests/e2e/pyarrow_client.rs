//! Python clients against the service: pyarrow's Flight client checked
//! with numpy, and the documented DuckDB job example.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;

use crate::cluster::Cluster;

/// Runs the Python `script` (path from the crate root) against the
/// cluster's Flight endpoint with `--collection` and `--points` (the
/// points as JSON); on a secured cluster also `--tls-root` and a read
/// `--key`. Asserts it succeeds and prints `expect`.
async fn run_script(
    cluster: &Cluster,
    script: &str,
    collection: &str,
    points: &BTreeMap<u64, Vec<f32>>,
    expect: &str,
) {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("points.json");
    let ids: Vec<u64> = points.keys().copied().collect();
    let vectors: Vec<&Vec<f32>> = points.values().collect();
    std::fs::write(&data, json!({"ids": ids, "vectors": vectors}).to_string())
        .expect("write points");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let location = cluster
        .flight_url()
        .replace("https://", "grpc+tls://")
        .replace("http://", "grpc://");
    let mut command = tokio::process::Command::new(&python);
    command.arg(&script);
    if let Some(secured) = &cluster.secured {
        command
            .arg("--tls-root")
            .arg(&secured.cert)
            .args(["--key", &secured.read_key]);
    }
    let output = command
        .args([
            "--location",
            &location,
            "--collection",
            collection,
            "--points",
        ])
        .arg(&data)
        .output()
        .await
        .unwrap_or_else(|e| panic!("running {python}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{} failed ({}); install pyarrow, numpy and duckdb (pip install pyarrow numpy duckdb)\nstdout:\n{stdout}\nstderr:\n{stderr}",
        script.display(),
        output.status
    );
    assert!(stdout.contains(expect), "{stdout}");
}

/// Runs `tests/pyarrow_flight_client.py`: DoGet and DoExchange through
/// pyarrow, results compared with a numpy exact search over the same points.
pub async fn pyarrow_matches_numpy(
    cluster: &Cluster,
    collection: &str,
    points: &BTreeMap<u64, Vec<f32>>,
) {
    let script = "tests/pyarrow_flight_client.py";
    run_script(cluster, script, collection, points, "pyarrow flight: ok").await;
}

/// Runs the README's job example `examples/flight_job_duckdb.py`: a DuckDB
/// table's documents searched over DoExchange with their `doc_key` column
/// carried through, and joined back by it.
pub async fn duckdb_job_joins_answers_by_key(
    cluster: &Cluster,
    collection: &str,
    points: &BTreeMap<u64, Vec<f32>>,
) {
    let script = "examples/flight_job_duckdb.py";
    run_script(cluster, script, collection, points, "duckdb job: ok").await;
}
