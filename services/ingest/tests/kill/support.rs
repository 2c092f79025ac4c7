//! What the kill, fencing and crash-point tests share: ingest child
//! processes, a seeded workload of upserts and tombstones, the model of the
//! final state computed by reading the topic itself, and the two checks of
//! a store against it — `eddy fsck` with broker access, and eddy-query.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser as _;
use eddy_manifest::Store;
use eddy_model::CollectionDef;
use rand::seq::SliceRandom as _;
use rand::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message as _;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde_json::{json, Value};

/// Vector dimension of every test collection.
pub const DIM: usize = 4;

/// One produced event: an upsert carrying `value` (written to the payload
/// as `v`), or a tombstone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ev {
    /// The point id (the message key).
    pub id: u64,
    /// The payload's `v`, `None` for a tombstone.
    pub value: Option<u64>,
}

/// A seeded stream: `rounds` passes over `ids` ids in a shuffled order,
/// every event carrying a unique value; about one in six events of the
/// middle rounds is a tombstone (the id is re-created by a later round),
/// and one id in ten ends deleted.
pub fn workload(ids: u64, rounds: u64, rng: &mut ChaCha8Rng) -> Vec<Ev> {
    let mut events = Vec::with_capacity((ids * rounds) as usize);
    let mut order: Vec<u64> = (0..ids).collect();
    for round in 0..rounds {
        order.shuffle(rng);
        for &id in &order {
            let last = round + 1 == rounds;
            let delete = if last {
                id % 10 == 3
            } else {
                round > 0 && rng.random_ratio(1, 6)
            };
            let value = (!delete).then_some(events.len() as u64);
            events.push(Ev { id, value });
        }
    }
    events
}

/// The state the topic implies: per id, the value of its last event, or
/// `None` when that was a tombstone. Computed by reading the topic back.
pub type Model = BTreeMap<u64, Option<u64>>;

/// A producer that waits for every acknowledgement.
pub struct Producer(FutureProducer);

impl Producer {
    /// An idempotent, fully acknowledged producer.
    pub fn new(brokers: &str) -> Self {
        let producer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .create()
            .expect("producer");
        Self(producer)
    }

    /// Produces `events` to `topic` (keyed by id) and waits until all are
    /// acknowledged.
    pub async fn send(&self, topic: &str, events: &[Ev]) {
        for chunk in events.chunks(2_000) {
            let sends = chunk.iter().map(|ev| {
                let key = ev.id.to_string();
                let value = ev.value.map(|v| {
                    let vector: Vec<f32> = (0..DIM)
                        .map(|d| ((ev.id * 31 + v * 7 + d as u64) % 1000) as f32 / 1000.0)
                        .collect();
                    json!({"id": ev.id, "vector": vector, "payload": {"v": v}}).to_string()
                });
                let producer = &self.0;
                async move {
                    let mut record: FutureRecord<'_, str, str> = FutureRecord::to(topic).key(&key);
                    if let Some(v) = &value {
                        record = record.payload(v);
                    }
                    producer
                        .send(record, Duration::from_secs(30))
                        .await
                        .expect("delivered");
                }
            });
            futures::future::join_all(sends).await;
        }
    }
}

/// Reads `topic` back to its high watermarks and returns the model.
pub fn read_model(brokers: &str, topic: &str, partitions: u32) -> Model {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "kill-test-model")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    let mut ends = BTreeMap::new();
    for p in 0..partitions {
        let (_, high) = consumer
            .fetch_watermarks(topic, p as i32, Duration::from_secs(10))
            .expect("watermarks");
        ends.insert(p as i32, high);
        tpl.add_partition_offset(topic, p as i32, Offset::Beginning)
            .expect("tpl");
    }
    consumer.assign(&tpl).expect("assign");
    let mut last: BTreeMap<u64, ((i32, i64), Option<u64>)> = BTreeMap::new();
    let mut next: BTreeMap<i32, i64> = ends.keys().map(|p| (*p, 0)).collect();
    let deadline = Instant::now() + Duration::from_secs(300);
    while next.iter().any(|(p, o)| *o < ends[p]) {
        assert!(
            Instant::now() < deadline,
            "reading {topic} back: {next:?} of {ends:?}"
        );
        let Some(msg) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let msg = msg.expect("message");
        next.insert(msg.partition(), msg.offset() + 1);
        let id: u64 = std::str::from_utf8(msg.key().expect("key"))
            .expect("utf-8")
            .parse()
            .expect("numeric key");
        let value = msg.payload().map(|p| {
            let v: Value = serde_json::from_slice(p).expect("json");
            v["payload"]["v"].as_u64().expect("payload v")
        });
        let source = (msg.partition(), msg.offset());
        let entry = last.entry(id).or_insert((source, value));
        if source >= entry.0 {
            *entry = (source, value);
        }
    }
    last.into_iter().map(|(id, (_, v))| (id, v)).collect()
}

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
                &format!("name={},dim={DIM},metric=l2", self.collection),
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

/// Waits until the newest manifest of `collection` covers its topic's high
/// watermarks on every partition.
pub fn wait_covered(
    store: &Store,
    brokers: &str,
    collection: &str,
    partitions: u32,
    timeout: Duration,
    logs: &[PathBuf],
) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "kill-test-watermarks")
        .create()
        .expect("consumer");
    let deadline = Instant::now() + timeout;
    loop {
        let manifest = store.latest_manifest(collection).expect("manifest");
        let behind: Vec<(u32, i64, i64)> = (0..partitions)
            .filter_map(|p| {
                let (_, high) = consumer
                    .fetch_watermarks(collection, p as i32, Duration::from_secs(10))
                    .expect("watermarks");
                let next = manifest.next_offset(p);
                (next < high).then_some((p, next, high))
            })
            .collect();
        if behind.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "manifest v{} never covered {collection}: (partition, next_offset, high) {behind:?}\n{}",
            manifest.version,
            log_tails(logs)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `eddy fsck` with broker access over `collection`: asserts that every
/// offset is accounted for (nothing lost, nothing doubled, every delete
/// honoured) and that the live rows are exactly the model's live ids.
/// Returns the report, one per manifest chain.
pub fn fsck_against(
    store: &Store,
    brokers: &str,
    collection: &str,
    model: &Model,
) -> Vec<eddy_admin::CollectionFsck> {
    let def: CollectionDef = store
        .collection(collection)
        .expect("store")
        .expect("collection");
    let kafka = eddy_kafka::KafkaSettings::new(brokers.to_owned(), Vec::new()).expect("settings");
    let checked = eddy_admin::fsck_collection(store, &def, Some(&kafka)).expect("fsck runs");
    assert!(
        checked.iter().all(eddy_admin::CollectionFsck::is_clean),
        "eddy fsck:\n{}",
        eddy_admin::report::render(&checked)
    );
    let live = model.values().filter(|v| v.is_some()).count() as u64;
    let found: u64 = checked.iter().map(|c| c.store.live_rows).sum();
    assert_eq!(found, live, "live rows against the model");
    checked
}

/// Through eddy-query: the count equals the model's live ids, and every
/// `step`-th id answers with its last value (or 404 once deleted).
pub async fn query_against(
    store_dir: &Path,
    brokers: &str,
    collection: &str,
    model: &Model,
    step: usize,
) {
    let flags = ["--store".to_owned(), store_dir.display().to_string()];
    query_on(&flags, brokers, collection, model, step).await;
}

/// [`query_against`] with eddy-query's store given by `store_flags`.
pub async fn query_on(
    store_flags: &[String],
    brokers: &str,
    collection: &str,
    model: &Model,
    step: usize,
) {
    let mut args: Vec<String> = [
        "eddy-query",
        "--brokers",
        brokers,
        "--http-addr",
        "127.0.0.1:0",
        "--flight-addr",
        "127.0.0.1:0",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    args.extend(store_flags.iter().cloned());
    let query = eddy_query::start(eddy_query::QueryConfig::parse_from(args))
        .await
        .expect("query starts");
    let http = reqwest::Client::new();
    let base = format!("http://{}/v1/collections/{collection}", query.http_addr());
    let live = model.values().filter(|v| v.is_some()).count();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r: Value = http
            .post(format!("{base}/count"))
            .json(&json!({}))
            .send()
            .await
            .expect("count")
            .json()
            .await
            .expect("json");
        if r["count"] == json!(live) {
            break;
        }
        assert!(Instant::now() < deadline, "count {r}, the model has {live}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (id, value) in model.iter().step_by(step.max(1)) {
        let r = http
            .get(format!("{base}/points/{id}"))
            .send()
            .await
            .expect("get");
        match value {
            None => assert_eq!(r.status(), 404, "deleted id {id} is visible"),
            Some(v) => {
                let p: Value = r.json().await.expect("json");
                assert_eq!(p["payload"]["v"], json!(v), "id {id}: {p}");
            }
        }
    }
    query.shutdown().await;
}

/// A seeded random generator: `EDDY_KILL_SEED=<n>` picks the seed,
/// `EDDY_KILL_SEED=random` one from the clock, unset a fixed one; the seed
/// is printed so a run can be replayed.
pub fn seeded_rng(test: &str) -> ChaCha8Rng {
    let seed = match std::env::var("EDDY_KILL_SEED").ok().as_deref() {
        None => 0x5eed_0010,
        Some("random") => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
        Some(s) => s.parse().expect("EDDY_KILL_SEED is a number or `random`"),
    };
    println!("{test}: seed {seed} (replay with EDDY_KILL_SEED={seed})");
    ChaCha8Rng::seed_from_u64(seed)
}

/// A random pause in `[0, max_ms)` ms from `rng`.
pub fn random_pause(rng: &mut ChaCha8Rng, max_ms: u64) -> Duration {
    Duration::from_millis(rng.random_range(0..max_ms.max(1)))
}
