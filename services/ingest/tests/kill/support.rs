//! What the kill, fencing, crash-point and drill tests share besides the
//! processes (`processes.rs`): a seeded workload of upserts and tombstones,
//! the topic read back (the state at any offsets), the S3 store, and the
//! two checks of a store against the topic — `eddy fsck` with broker
//! access, and eddy-query.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser as _;
use eddy_loadtest::s3_server::S3Server;
use eddy_manifest::{Store, StoreLocation};
use eddy_model::CollectionDef;
use rand::seq::SliceRandom as _;
use rand::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message as _;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde_json::{json, Value};

use crate::processes::log_tails;

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

/// The vector of id `id`'s event carrying value `v`.
pub fn vector_of(id: u64, v: u64) -> Vec<f32> {
    (0..DIM)
        .map(|d| ((id * 31 + v * 7 + d as u64) % 1000) as f32 / 1000.0)
        .collect()
}

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
                    let vector = vector_of(ev.id, v);
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
    read_log(brokers, topic, partitions).state_before(&BTreeMap::new())
}

/// The events of a topic, per partition in offset order: `(offset, id,
/// value)`, the value `None` for a tombstone.
#[derive(Debug, Default)]
pub struct EventLog(pub BTreeMap<u32, Vec<(i64, u64, Option<u64>)>>);

impl EventLog {
    /// The state the events before `offsets` imply (per partition the first
    /// offset left out; a partition not named counts whole): per id, the
    /// value of its last event. Each id's events are on one partition.
    pub fn state_before(&self, offsets: &BTreeMap<u32, i64>) -> Model {
        let mut state = Model::new();
        for (p, events) in &self.0 {
            let end = offsets.get(p).copied().unwrap_or(i64::MAX);
            for (_, id, value) in events.iter().take_while(|(o, _, _)| *o < end) {
                state.insert(*id, *value);
            }
        }
        state
    }
}

/// Reads `topic` back to its high watermarks.
pub fn read_log(brokers: &str, topic: &str, partitions: u32) -> EventLog {
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
    let mut log = EventLog::default();
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
        if msg.offset() >= ends[&msg.partition()] {
            continue;
        }
        next.insert(msg.partition(), msg.offset() + 1);
        let id: u64 = std::str::from_utf8(msg.key().expect("key"))
            .expect("utf-8")
            .parse()
            .expect("numeric key");
        let value = msg.payload().map(|p| {
            let v: Value = serde_json::from_slice(p).expect("json");
            v["payload"]["v"].as_u64().expect("payload v")
        });
        log.0
            .entry(msg.partition() as u32)
            .or_default()
            .push((msg.offset(), id, value));
    }
    log
}

/// Waits until the newest manifests of `collection` (each partition's
/// shard's chain) cover its topic's high watermarks on every partition.
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
    let def: CollectionDef = store
        .collection(collection)
        .expect("store")
        .expect("collection");
    let deadline = Instant::now() + timeout;
    loop {
        // Each partition is covered by its shard's chain.
        let manifests: Vec<_> = def
            .chains()
            .iter()
            .map(|chain| store.latest_manifest(chain).expect("manifest"))
            .collect();
        let behind: Vec<(u32, i64, i64)> = (0..partitions)
            .filter_map(|p| {
                let (_, high) = consumer
                    .fetch_watermarks(collection, p as i32, Duration::from_secs(10))
                    .expect("watermarks");
                let next = manifests[def.shard_of(p) as usize].next_offset(p);
                (next < high).then_some((p, next, high))
            })
            .collect();
        if behind.is_empty() {
            return;
        }
        let versions: Vec<u64> = manifests.iter().map(|m| m.version).collect();
        assert!(
            Instant::now() < deadline,
            "manifests {versions:?} never covered {collection}: (partition, next_offset, high) {behind:?}\n{}",
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
        let r = post_json(&http, format!("{base}/count"), &json!({})).await;
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

/// POSTs `body` to `url`; the JSON answer (whatever its status).
pub async fn post_json(http: &reqwest::Client, url: String, body: &Value) -> Value {
    http.post(&url)
        .json(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"))
        .json()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: not JSON: {e}"))
}

/// The store flags of a process whose store is `prefix` in `server`'s
/// bucket (settings as flags, the secret, which moto checks not, in a file
/// under `dir`, as a deployment would mount it), and the test's own handle
/// on that store (its cache under `dir`).
pub fn s3_store(server: &S3Server, prefix: &str, dir: &Path) -> (Vec<String>, Store) {
    let mut flags = vec!["--store".to_owned(), server.store_url(prefix)];
    let secrets = dir.join(format!("{prefix}-store-secrets"));
    let mut secret_lines = String::new();
    for (name, value) in server.env() {
        let key = name.to_ascii_lowercase();
        if key.contains("secret") {
            secret_lines.push_str(&format!("{key}={value}\n"));
        } else {
            flags.extend(["--store-option".to_owned(), format!("{key}={value}")]);
        }
    }
    std::fs::write(&secrets, secret_lines).expect("secrets file");
    flags.extend([
        "--store-secrets-file".to_owned(),
        secrets.display().to_string(),
    ]);
    let location = StoreLocation::parse(&server.store_url(prefix)).expect("url");
    let store = Store::open_location_with(
        &location,
        &dir.join(format!("{prefix}-test-cache")),
        &server.env(),
    )
    .expect("S3 store");
    (flags, store)
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
