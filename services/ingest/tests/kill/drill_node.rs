//! A query node of the drill (`drill.rs`) as a process of its own: this
//! test binary run again with its arguments in `EDDY_DRILL_NODE`, so a kill
//! is a real SIGKILL; started, killed and restarted through [`Node`].

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use clap::Parser as _;

use crate::drill::TOPIC;

/// The variable that carries a drill query node's arguments (one per
/// line) into its process.
const NODE_ENV: &str = "EDDY_DRILL_NODE";

/// Not a test of its own: the body of a drill query node process. Run by
/// the drill with `EDDY_DRILL_NODE` set to the node's arguments (one per
/// line), it serves until it is killed; without it, it returns at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a query node process of the drill, started by it"]
async fn drill_query_node() {
    let Ok(args) = std::env::var(NODE_ENV) else {
        return;
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = args.lines().map(str::to_owned).collect();
    let _query = eddy_query::start(eddy_query::QueryConfig::parse_from(args))
        .await
        .expect("query node starts");
    std::future::pending::<()>().await;
}

/// A free loopback port (bound and released; the drill's processes take
/// theirs at once).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// One query node: its ports, arguments and (while it runs) its process.
pub(crate) struct Node {
    pub(crate) name: &'static str,
    pub(crate) http: u16,
    pub(crate) flight: u16,
    pub(crate) args: Vec<String>,
    pub(crate) log: PathBuf,
    pub(crate) child: Option<Child>,
}

impl Node {
    pub(crate) fn new(name: &'static str, dir: &Path) -> Self {
        Self {
            name,
            http: free_port(),
            flight: free_port(),
            args: Vec::new(),
            log: dir.join(format!("{name}.log")),
            child: None,
        }
    }

    pub(crate) fn flight_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.flight)
    }

    pub(crate) fn base(&self) -> String {
        format!("http://127.0.0.1:{}/v1/collections/{TOPIC}", self.http)
    }

    /// Starts the process (its log appended to) and waits until it serves
    /// the collection and says it is ready (snapshot installed, tail
    /// holding its partitions).
    pub(crate) async fn start(&mut self) {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let err = file.try_clone().expect("log file");
        let exe = std::env::current_exe().expect("the test binary");
        let child = Command::new(exe)
            .args([
                "drill_node::drill_query_node",
                "--exact",
                "--ignored",
                "--nocapture",
            ])
            .env(NODE_ENV, self.args.join("\n"))
            .env(
                "RUST_LOG",
                std::env::var("EDDY_TEST_LOG")
                    .unwrap_or_else(|_| "info,librdkafka=warn,rdkafka=warn".to_owned()),
            )
            .stdout(file)
            .stderr(err)
            .spawn()
            .expect("the query node starts");
        self.child = Some(child);
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let ready = format!("http://127.0.0.1:{}/readyz", self.http);
            let serving = http.get(self.base()).send().await;
            if serving.is_ok_and(|r| r.status().is_success())
                && http
                    .get(ready)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
            {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("{} exited ({status}):\n{}", self.name, tail(&self.log));
            }
            assert!(
                Instant::now() < deadline,
                "{} never served {TOPIC}:\n{}",
                self.name,
                tail(&self.log)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGKILL, then reap.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last lines of a log.
pub(crate) fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
