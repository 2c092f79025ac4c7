//! pyarrow's Flight client against the service, checked with numpy.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;

use crate::cluster::Cluster;

/// Runs `tests/pyarrow_flight_client.py`: DoGet and DoExchange through
/// pyarrow, results compared with a numpy exact search over the same points.
pub async fn pyarrow_matches_numpy(
    cluster: &Cluster,
    collection: &str,
    points: &BTreeMap<u64, Vec<f32>>,
) {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("points.json");
    let ids: Vec<u64> = points.keys().copied().collect();
    let vectors: Vec<&Vec<f32>> = points.values().collect();
    std::fs::write(&data, json!({"ids": ids, "vectors": vectors}).to_string())
        .expect("write points");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pyarrow_flight_client.py");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let location = cluster
        .flight_url()
        .replace("https://", "grpc+tls://")
        .replace("http://", "grpc://");
    let mut command = tokio::process::Command::new(&python);
    if let Some(secured) = &cluster.secured {
        command
            .arg(&script)
            .arg("--tls-root")
            .arg(&secured.cert)
            .args(["--key", &secured.read_key]);
    } else {
        command.arg(&script);
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
        "pyarrow client failed ({}); install pyarrow and numpy (pip install pyarrow numpy)\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    assert!(stdout.contains("pyarrow flight: ok"), "{stdout}");
}
