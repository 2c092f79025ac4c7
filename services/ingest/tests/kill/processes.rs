//! Ingest child processes for the kill tests: how one is started
//! ([`IngestSpec`]), the process ([`Ingest`], SIGKILLed when dropped), what
//! its log says about its partitions, and a consumer [`Group`] of them
//! restarted in turn.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::DIM;

/// An eddy-ingest child process, killed with SIGKILL when dropped.
pub struct Ingest {
    /// The process.
    pub child: Child,
}

impl Ingest {
    /// SIGKILL, then reap.
    pub fn kill(&mut self) {
        // Already exited is fine: the point is that it no longer runs.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends `signal` (`STOP`, `CONT`) with kill(1).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill(1) runs");
        assert!(status.success(), "kill -{signal}");
    }
}

impl Drop for Ingest {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How an ingest process is started.
#[derive(Debug, Clone)]
pub struct IngestSpec {
    /// The store directory.
    pub store: PathBuf,
    /// Bootstrap servers.
    pub brokers: String,
    /// The collection (its topic has the same name).
    pub collection: String,
    /// Static group member id.
    pub instance: String,
    /// Flags beyond the store, brokers, collection and instance.
    pub args: Vec<String>,
    /// Extra environment (e.g. `EDDY_CRASH_AT`).
    pub env: Vec<(String, String)>,
    /// Store flags that replace `--store <store>` (an object store; `store`
    /// is then the process's cache directory).
    pub store_flags: Option<Vec<String>>,
    /// Options appended to the collection spec (e.g. `,shards=2`).
    pub collection_options: String,
}

impl IngestSpec {
    /// A spec with small seals, merges of two segments, indexes from 64
    /// rows and garbage collection every 300 ms with a one-second grace.
    pub fn small(store: &Path, brokers: &str, collection: &str, instance: &str) -> Self {
        let args = [
            "--seal-rows",
            "97",
            "--seal-age-ms",
            "150",
            "--merge-min-segments",
            "2",
            "--min-graph-rows",
            "64",
            "--index-poll-ms",
            "50",
            "--gc-interval-ms",
            "300",
            "--gc-grace-secs",
            "1",
            "--gc-keep-versions",
            "2",
            "--write-lease-secs",
            "30",
            "--metrics-addr",
            "127.0.0.1:0",
            "--collection-poll-ms",
            "100",
        ];
        Self {
            store: store.to_owned(),
            brokers: brokers.to_owned(),
            collection: collection.to_owned(),
            instance: instance.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            env: Vec::new(),
            store_flags: None,
            collection_options: String::new(),
        }
    }

    /// Sets flag `--name` to `value`, replacing an earlier value.
    pub fn set(&mut self, name: &str, value: &str) -> &mut Self {
        let flag = format!("--{name}");
        match self.args.iter().position(|a| *a == flag) {
            Some(i) => self.args[i + 1] = value.to_owned(),
            None => self.args.extend([flag, value.to_owned()]),
        }
        self
    }

    /// Starts the process, appending its stderr to `log`.
    pub fn spawn(&self, log: &Path) -> Ingest {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("log file");
        let store = self.store.to_str().expect("utf-8").to_owned();
        let store_flags = match &self.store_flags {
            None => vec!["--store".to_owned(), store],
            Some(flags) => {
                let mut flags = flags.clone();
                flags.extend(["--store-cache".to_owned(), store]);
                flags
            }
        };
        let child = Command::new(env!("CARGO_BIN_EXE_eddy-ingest"))
            .args(&store_flags)
            .args(["--brokers", &self.brokers])
            .args([
                "--collection",
                &format!(
                    "name={},dim={DIM},metric=l2{}",
                    self.collection, self.collection_options
                ),
            ])
            .args(["--instance-id", &self.instance])
            .args(&self.args)
            .env(
                "RUST_LOG",
                std::env::var("EDDY_TEST_LOG")
                    .unwrap_or_else(|_| "info,librdkafka=warn,rdkafka=warn".to_owned()),
            )
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("eddy-ingest starts");
        Ingest { child }
    }
}

/// The last lines of each log, for a failure message.
pub fn log_tails(logs: &[PathBuf]) -> String {
    logs.iter()
        .map(|log| {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(40)..].join("\n");
            format!("--- {}:\n{tail}", log.display())
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Occurrences of `text` in the log at `log`.
pub fn log_count(log: &Path, text: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .matches(text)
        .count()
}

/// Waits until `log` shows at least `n` partition assignments (Tansu 0.6
/// never expires a member killed mid-join, so a test kills only members
/// whose join completed; see tests/restart.rs).
pub async fn wait_assigned(ingest: &mut Ingest, log: &Path, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while log_count(log, "partitions assigned") < n {
        if let Some(status) = ingest.child.try_wait().expect("try_wait") {
            panic!(
                "ingest exited ({status}) before assignment #{n}; log:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "no assignment #{n}; log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How many partitions `log`'s worker holds now: the size of its newest
/// assignment, or 0 while its newest rebalance event is a revocation (or
/// there is none).
fn held_partitions(log: &Path) -> usize {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let assigned = text.rfind("partitions assigned");
    let revoked = text.rfind("partitions revoked");
    let Some(at) = assigned.filter(|a| revoked.is_none_or(|r| r < *a)) else {
        return 0;
    };
    // The rest of the line names its starts as `{partition: offset, ...}`.
    let line = text[at..].split('\n').next().unwrap_or("");
    line.find('{')
        .and_then(|open| {
            line[open..]
                .find('}')
                .map(|close| &line[open..open + close])
        })
        .map_or(0, |starts| starts.matches(':').count())
}

/// Waits until the consumer group of the workers logging to `logs` is
/// stable: each one's newest rebalance event is an assignment and together
/// they hold all `partitions`. A member killed while a rebalance is still
/// under way can leave Tansu 0.6's group unable to rebalance for good
/// (README, Known issues), so a test kills only between rebalances.
pub async fn wait_group_stable(logs: &[PathBuf], partitions: usize) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let held: Vec<usize> = logs.iter().map(|l| held_partitions(l)).collect();
        if held.iter().all(|h| *h > 0) && held.iter().sum::<usize>() == partitions {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the group did not settle on {partitions} partitions: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Ingest processes of one consumer group, each started from its spec
/// and logging to its log; a restarted one waits for its assignment and
/// the group to settle (a member is killed only between rebalances).
pub struct Group {
    /// How each is started.
    pub specs: Vec<IngestSpec>,
    /// Each one's log.
    pub logs: Vec<PathBuf>,
    workers: Vec<Ingest>,
    spawns: Vec<usize>,
    partitions: usize,
}

impl Group {
    /// Starts one process per spec, each waited for in turn, and waits
    /// until together they hold all `partitions`.
    pub async fn start(specs: Vec<IngestSpec>, logs: Vec<PathBuf>, partitions: usize) -> Self {
        let mut workers = Vec::new();
        for (spec, log) in specs.iter().zip(&logs) {
            let mut worker = spec.spawn(log);
            wait_assigned(&mut worker, log, 1).await;
            workers.push(worker);
        }
        wait_group_stable(&logs, partitions).await;
        Self {
            spawns: vec![1; workers.len()],
            specs,
            logs,
            workers,
            partitions,
        }
    }

    /// SIGKILLs worker `w`, starts it again and waits until the group has
    /// settled with it.
    pub async fn restart(&mut self, w: usize) {
        self.workers[w].kill();
        self.workers[w] = self.specs[w].spawn(&self.logs[w]);
        self.spawns[w] += 1;
        wait_assigned(&mut self.workers[w], &self.logs[w], self.spawns[w]).await;
        wait_group_stable(&self.logs, self.partitions).await;
    }

    /// SIGKILLs every worker.
    pub fn kill_all(&mut self) {
        self.workers.iter_mut().for_each(Ingest::kill);
    }
}
