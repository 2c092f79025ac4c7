//! Peers in the same run: the Python scripts that measure them, run as
//! child processes, and their JSON read back as curves.
//!
//! - in process, one thread: `loadtest/bench/peers.py` (eddy's engine
//!   through `eddy-bench`, hnswlib, faiss, usearch, Qdrant's engine via
//!   `qdrant-edge-py`);
//! - served, from one Python client: `loadtest/scripts/served_peers.py`
//!   (eddy over HTTP and DoExchange, Milvus over pymilvus, Qdrant's server
//!   over REST when `EDDY_QDRANT_BIN` names a binary built from its source).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _};
use serde::{Deserialize, Serialize};

use super::matched::{mean_spread, Curve, CurvePoint};
use crate::process::file_tail;

/// How the peer scripts are run.
#[derive(Debug, Clone)]
pub struct PeerRun {
    /// The Python interpreter.
    pub python: String,
    /// The repository root (the scripts live under `loadtest/`).
    pub repo: PathBuf,
    /// Dataset directory.
    pub dataset: PathBuf,
    /// Queries used (default: all).
    pub queries: Option<usize>,
    /// Rounds (A/B/A/B).
    pub rounds: usize,
    /// The `ef` sweep.
    pub ef: Vec<usize>,
    /// Where the scripts' JSON and logs go.
    pub out: PathBuf,
}

/// What a peer script gave: curves, versions, and what could not run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PeerResults {
    /// One curve per engine and access path.
    pub curves: Vec<Curve>,
    /// Package versions.
    pub versions: BTreeMap<String, String>,
    /// Set-up times (e.g. Milvus's insert and index build), seconds.
    pub setup: BTreeMap<String, f64>,
    /// Engines that could not run, with the reason.
    pub unavailable: BTreeMap<String, String>,
}

impl PeerResults {
    /// Adds `other`'s curves, versions, set-up times and reasons.
    pub fn merge(&mut self, other: PeerResults) {
        self.curves.extend(other.curves);
        self.versions.extend(other.versions);
        self.setup.extend(other.setup);
        self.unavailable.extend(other.unavailable);
    }
}

/// The Python packages whose versions the report prints.
const PACKAGES: [&str; 8] = [
    "hnswlib",
    "faiss-cpu",
    "usearch",
    "qdrant-edge-py",
    "milvus",
    "pymilvus",
    "numpy",
    "pyarrow",
];

/// Versions of the peers' Python packages (those installed).
pub fn versions(python: &str) -> BTreeMap<String, String> {
    let code = format!(
        "import importlib.metadata as m\nfor p in {PACKAGES:?}:\n    try: print(p, m.version(p))\n    except Exception: pass\n"
    );
    let Ok(out) = Command::new(python).arg("-c").arg(code).output() else {
        return BTreeMap::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(p, v)| (p.to_owned(), v.to_owned()))
        .collect()
}

/// Runs `peers.py` (engines in process, one search thread) with eddy's
/// engine from `eddy_bench` when it exists.
pub fn in_process(run: &PeerRun, eddy_bench: &Path) -> PeerResults {
    let mut engines = vec!["hnswlib", "faiss", "usearch", "qdrant-edge"];
    let mut res = PeerResults::default();
    if eddy_bench.is_file() {
        engines.insert(0, "eddy");
    } else {
        res.unavailable.insert(
            "eddy (in process)".into(),
            format!(
                "{} not found (build it: `cargo build --release -p eddy-bench`)",
                eddy_bench.display()
            ),
        );
    }
    let json = run.out.join("peers-in-process.json");
    let mut cmd = Command::new(&run.python);
    cmd.arg(run.repo.join("loadtest/bench/peers.py"))
        .arg("--dataset")
        .arg(&run.dataset)
        .arg("--eddy-bin")
        .arg(eddy_bench)
        .arg("--engines")
        .arg(engines.join(","))
        // eddy's modes on two threads too: what DoExchange batches are
        // measured against.
        .arg("--eddy-two-threads")
        .arg("--rounds")
        .arg(run.rounds.to_string())
        .arg("--ef")
        .arg(join(&run.ef))
        .arg("--json-out")
        .arg(&json);
    if let Some(q) = run.queries {
        cmd.arg("--queries").arg(q.to_string());
    }
    match script(&mut cmd, &run.out.join("peers-in-process.log"))
        .and_then(|()| read_in_process(&json))
    {
        Ok(r) => res.merge(r),
        Err(e) => {
            res.unavailable
                .insert("in-process peers".into(), format!("{e:#}"));
        }
    }
    res
}

/// Runs `served_peers.py` against the running eddy (`http`, `flight`,
/// `collection`) and Milvus's embedded server.
pub fn served(
    run: &PeerRun,
    http: &str,
    flight: &str,
    collection: &str,
    batch: usize,
) -> PeerResults {
    let json = run.out.join("peers-served.json");
    let mut cmd = Command::new(&run.python);
    cmd.arg(run.repo.join("loadtest/scripts/served_peers.py"))
        .arg("--dataset")
        .arg(&run.dataset)
        .arg("--eddy-http")
        .arg(http)
        .arg("--eddy-flight")
        .arg(flight)
        .arg("--collection")
        .arg(collection)
        .arg("--rounds")
        .arg(run.rounds.to_string())
        .arg("--ef")
        .arg(join(&run.ef))
        .arg("--batch")
        .arg(batch.to_string())
        .arg("--json-out")
        .arg(&json);
    if let Some(q) = run.queries {
        cmd.arg("--queries").arg(q.to_string());
    }
    match script(&mut cmd, &run.out.join("peers-served.log")).and_then(|()| read_served(&json)) {
        Ok(r) => r,
        Err(e) => {
            let mut r = PeerResults::default();
            r.unavailable
                .insert("served peers".into(), format!("{e:#}"));
            r
        }
    }
}

fn join(ef: &[usize]) -> String {
    ef.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Runs a script with its output in `log`; fails with the log's tail.
fn script(cmd: &mut Command, log: &Path) -> anyhow::Result<()> {
    let file = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let err = file.try_clone().context("cloning a log handle")?;
    tracing::info!(?cmd, log = %log.display(), "running a peer script");
    let status = cmd
        .stdout(file)
        .stderr(err)
        .status()
        .with_context(|| format!("starting {cmd:?}"))?;
    if !status.success() {
        bail!("{status}; log tail:\n{}", file_tail(log, 1500));
    }
    Ok(())
}

#[derive(Deserialize)]
struct InProcessJson {
    summary: BTreeMap<String, InProcessEngine>,
}

#[derive(Deserialize)]
struct InProcessEngine {
    build: Vec<f64>,
    points: Vec<InProcessPoint>,
    runs: Vec<InProcessRun>,
}

#[derive(Deserialize)]
struct InProcessRun {
    points: Vec<InProcessPoint>,
}

#[derive(Deserialize)]
struct InProcessPoint {
    ef: usize,
    recall10: f64,
    qps1: f64,
    #[serde(default)]
    spread: f64,
}

/// Reads `peers.py --json-out`.
pub fn read_in_process(path: &Path) -> anyhow::Result<PeerResults> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let json: InProcessJson =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let mut res = PeerResults::default();
    for (name, e) in json.summary {
        res.curves.push(Curve {
            name: format!("{name} (in process)"),
            batch: 1,
            build_s: (!e.build.is_empty()).then(|| mean_spread(&e.build).0),
            points: e
                .points
                .iter()
                .map(|p| CurvePoint {
                    ef: p.ef,
                    recall10: p.recall10,
                    qps: p.qps1,
                    spread: p.spread,
                    p50_ms: None,
                    p99_ms: None,
                })
                .collect(),
            rounds: e
                .runs
                .iter()
                .map(|r| r.points.iter().map(|p| p.qps1).collect())
                .collect(),
        });
    }
    Ok(res)
}

#[derive(Deserialize)]
struct ServedJson {
    /// `null` for a peer that did not run (Qdrant's server without its binary).
    #[serde(default)]
    versions: BTreeMap<String, Option<String>>,
    #[serde(default)]
    setup: BTreeMap<String, BTreeMap<String, f64>>,
    #[serde(default)]
    series: Vec<ServedSeries>,
    #[serde(default)]
    unavailable: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct ServedSeries {
    name: String,
    batch: usize,
    points: Vec<ServedPoint>,
    #[serde(default)]
    rounds: Vec<Vec<ServedPoint>>,
}

#[derive(Deserialize)]
struct ServedPoint {
    ef: usize,
    recall10: f64,
    qps: f64,
    #[serde(default)]
    spread: f64,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
}

/// Reads `served_peers.py --json-out`.
pub fn read_served(path: &Path) -> anyhow::Result<PeerResults> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let json: ServedJson =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let curves = json
        .series
        .into_iter()
        .map(|s| Curve {
            name: format!("{} (Python client)", served_name(&s.name, s.batch)),
            batch: s.batch,
            build_s: None,
            points: s
                .points
                .iter()
                .map(|p| CurvePoint {
                    ef: p.ef,
                    recall10: p.recall10,
                    qps: p.qps,
                    spread: p.spread,
                    p50_ms: p.p50_ms,
                    p99_ms: p.p99_ms,
                })
                .collect(),
            rounds: s
                .rounds
                .iter()
                .map(|r| r.iter().map(|p| p.qps).collect())
                .collect(),
        })
        .collect();
    let setup = json
        .setup
        .into_iter()
        .flat_map(|(engine, times)| {
            times
                .into_iter()
                .map(move |(what, s)| (format!("{engine} {what}"), s))
        })
        .collect();
    Ok(PeerResults {
        curves,
        versions: json
            .versions
            .into_iter()
            .filter_map(|(package, version)| Some((package, version?)))
            .collect(),
        setup,
        unavailable: json.unavailable,
    })
}

/// The report's name of a served series.
fn served_name(name: &str, batch: usize) -> String {
    match name {
        "eddy-http" => "eddy HTTP".to_owned(),
        "eddy-http-lean" => "eddy HTTP, lean client".to_owned(),
        "eddy-exchange" => format!("eddy DoExchange ×{batch}"),
        "milvus" => "Milvus".to_owned(),
        "milvus-batch" => format!("Milvus batch ×{batch}"),
        "qdrant-http" => "Qdrant HTTP".to_owned(),
        "qdrant-http-lean" => "Qdrant HTTP, lean client".to_owned(),
        "qdrant-batch" => format!("Qdrant batch ×{batch}"),
        other => other.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_scripts_json_shapes_read_as_curves() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("in.json");
        std::fs::write(
            &p,
            r#"{"summary": {"hnswlib": {"build": [10.0, 12.0],
                "points": [{"ef": 16, "recall10": 0.9, "qps1": 5000.0, "spread": 0.1}],
                "runs": [{"build_secs": 10.0, "points": [{"ef": 16, "recall10": 0.9, "qps1": 4800.0}]},
                         {"build_secs": 12.0, "points": [{"ef": 16, "recall10": 0.9, "qps1": 5200.0}]}]}},
                "ratios": {}}"#,
        )
        .expect("write");
        let r = read_in_process(&p).expect("reads");
        assert_eq!(r.curves.len(), 1);
        let c = &r.curves[0];
        assert_eq!(c.name, "hnswlib (in process)");
        assert_eq!(c.build_s, Some(11.0));
        assert_eq!(c.rounds, vec![vec![4800.0], vec![5200.0]]);

        let p = dir.path().join("served.json");
        std::fs::write(
            &p,
            r#"{"client": "python", "versions": {"milvus": "2.3.5"},
                "setup": {"milvus": {"insert_s": 3.5, "index_s": 20.0}},
                "series": [{"name": "milvus-batch", "engine": "milvus", "api": "grpc", "batch": 100,
                  "points": [{"ef": 32, "recall10": 0.95, "qps": 9000.0, "spread": 0.02, "p50_ms": 10.0, "p99_ms": 14.0}],
                  "rounds": [[{"ef": 32, "recall10": 0.95, "qps": 8900.0}]]}],
                "unavailable": {"qdrant-server": "not built"}}"#,
        )
        .expect("write");
        let r = read_served(&p).expect("reads");
        assert_eq!(r.curves[0].name, "Milvus batch ×100 (Python client)");
        assert_eq!(r.curves[0].rounds, vec![vec![8900.0]]);
        assert_eq!(r.setup.get("milvus index_s"), Some(&20.0));
        assert_eq!(
            r.unavailable.get("qdrant-server").map(String::as_str),
            Some("not built")
        );
    }

    /// Without Qdrant's server the script writes its version as `null`:
    /// the served curves (Milvus, eddy) are still read, the version left
    /// out (the run of 2026-12-04 lost its whole served section to this).
    #[test]
    fn a_peer_without_a_version_keeps_the_served_curves() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("served.json");
        std::fs::write(
            &p,
            r#"{"client": "python", "versions": {"milvus": "2.3.5", "qdrant": null},
                "series": [{"name": "milvus", "engine": "milvus", "api": "grpc", "batch": 1,
                  "points": [{"ef": 32, "recall10": 0.95, "qps": 450.0}]}]}"#,
        )
        .expect("write");
        let r = read_served(&p).expect("reads");
        assert_eq!(r.curves.len(), 1);
        assert_eq!(r.versions.get("milvus").map(String::as_str), Some("2.3.5"));
        assert!(!r.versions.contains_key("qdrant"));
    }
}
