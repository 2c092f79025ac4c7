//! Sustained ingest throughput of 384-d events through eddy's own path:
//! decode + apply into the growing buffer + seal (segment written, fsynced
//! and published), without a broker — what the worker does per record.
//! The broker-side rate is measured with a Kafka producer (see README).
//!
//! ```text
//! cargo run --release -p eddy-ingest --example ingest_throughput -- json 200000
//! cargo run --release -p eddy-ingest --example ingest_throughput -- protobuf 500000
//! cargo run --release -p eddy-ingest --example ingest_throughput -- arrow 1000000
//! # through a broker: produce first (untimed), then time eddy-ingest
//! cargo run --release -p eddy-ingest --example ingest_throughput -- protobuf 200000 127.0.0.1:9092
//! ```
//!
//! With `EDDY_BENCH_S3=1` the store is an S3 bucket on moto's server on
//! loopback (segments uploaded at each seal) instead of a local directory;
//! with `EDDY_BENCH_S3_URL=s3://bucket/prefix` too, the bucket that URL
//! names (reached with the `AWS_*` variables) instead of moto.
//!
//! `EDDY_BENCH_SEAL=wait` holds the loop at each seal until it is
//! published, instead of writing the segment off the loop as the worker
//! does (the behaviour before seals were pipelined, for A/B runs).
//!
//! `EDDY_BENCH_GROW=1` grows each buffer's graph while its events arrive,
//! with eddy-ingest's default settings (`--grow-graphs`), instead of
//! sealing flat; it prints how many seals kept their graph.
//!
//! `EDDY_BENCH_WRITES=buffered` writes segments through the page cache
//! instead of with `O_DIRECT` (the default).
//!
//! Prints events (rows) per second over the whole run and the process's
//! resident memory at each tenth, to show it stays flat.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray, UInt64Array};
use arrow_ipc::writer::StreamWriter;
use eddy_event::Message;
use eddy_ingest::{CollectionState, IngestMetrics, SealPolicy};
use eddy_kafka::{Place, Record};
use eddy_manifest::Store;
use eddy_model::{CollectionDef, FieldType, Metric};
use eddy_proto::v1::{payload_value::Kind, point_event::Id, PayloadValue, PointEvent};
use prost::Message as _;

const DIM: usize = 384;
const ARROW_ROWS: usize = 1_000;

fn vector(id: u64) -> Vec<f32> {
    let mut state = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..DIM)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 20_000) as f32 / 10_000.0 - 1.0
        })
        .collect()
}

fn json_event(id: u64) -> Vec<u8> {
    let v = vector(id);
    serde_json::to_vec(&serde_json::json!({
        "id": id, "vector": v, "payload": {"section": format!("s{}", id % 50), "size": id % 1000}
    }))
    .expect("json")
}

fn protobuf_event(id: u64) -> Vec<u8> {
    let mut event = PointEvent {
        id: Some(Id::NumId(id)),
        vector: vec![],
        vector_le: vector(id).iter().flat_map(|f| f.to_le_bytes()).collect(),
        payload: Default::default(),
    };
    event.payload.insert(
        "section".into(),
        PayloadValue {
            kind: Some(Kind::Keyword(format!("s{}", id % 50))),
        },
    );
    event.payload.insert(
        "size".into(),
        PayloadValue {
            kind: Some(Kind::Integer((id % 1000) as i64)),
        },
    );
    event.encode_to_vec()
}

fn arrow_batch(first: u64) -> Vec<u8> {
    let ids = first..first + ARROW_ROWS as u64;
    let mut vectors = FixedSizeListBuilder::new(Float32Builder::new(), DIM as i32);
    for id in ids.clone() {
        vectors.values().append_slice(&vector(id));
        vectors.append(true);
    }
    let batch = RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(UInt64Array::from_iter_values(ids.clone())) as ArrayRef,
        ),
        ("vector", Arc::new(vectors.finish()) as ArrayRef),
        (
            "section",
            Arc::new(StringArray::from_iter_values(
                ids.clone().map(|i| format!("s{}", i % 50)),
            )) as ArrayRef,
        ),
        (
            "size",
            Arc::new(Int64Array::from_iter_values(ids.map(|i| (i % 1000) as i64))) as ArrayRef,
        ),
    ])
    .expect("batch");
    let mut out = Vec::new();
    let mut writer = StreamWriter::try_new(&mut out, &batch.schema()).expect("writer");
    writer.write(&batch).expect("write");
    writer.finish().expect("finish");
    drop(writer);
    out
}

fn rss_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb / 1024)
}

/// CPU seconds this process has used (user + system), from /proc.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the
    // 12th and 13th of them, in clock ticks (100 per second on Linux).
    let rest = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn main() {
    let mut args = std::env::args().skip(1);
    let format = args.next().unwrap_or_else(|| "protobuf".into());
    let events: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(200_000);
    if let Ok(mode) = std::env::var("EDDY_BENCH_WRITES") {
        eddy_segment::set_write_mode(mode.parse().expect("EDDY_BENCH_WRITES"));
    }
    if let Some(brokers) = args.next() {
        tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .init();
        through_broker(&format, events, &brokers);
        return;
    }
    let (content_type, per_message) = match format.as_str() {
        "json" => (eddy_event::CONTENT_TYPE_JSON, 1),
        "protobuf" => (eddy_event::CONTENT_TYPE_PROTOBUF, 1),
        "arrow" => (eddy_event::CONTENT_TYPE_ARROW, ARROW_ROWS as u64),
        other => panic!("format {other}: json, protobuf or arrow"),
    };
    // A pool of pre-encoded messages (encoding is not timed), reused
    // round-robin: 50,000 distinct ids (one seal's worth), so each seal holds
    // new rows and the next round upserts them again (delete bits on the
    // older segment), as a stream of updates would.
    let distinct = if per_message == 1 { 50_000 } else { 64 };
    let pool: Vec<Vec<u8>> = (0..distinct)
        .map(|i| match format.as_str() {
            "json" => json_event(i),
            "protobuf" => protobuf_event(i),
            _ => arrow_batch(i * ARROW_ROWS as u64),
        })
        .collect();
    let dir = tempfile::tempdir().expect("tmp");
    let s3 = std::env::var_os("EDDY_BENCH_S3")
        .map(|_| eddy_loadtest::s3_server::BenchS3::from_env("bench").expect("S3 server"));
    let store = match &s3 {
        None => Store::open(dir.path()).expect("store"),
        Some(server) => {
            let location =
                eddy_manifest::StoreLocation::parse(&server.store_url("ingest")).expect("url");
            Store::open_location_with(&location, dir.path(), &server.env()).expect("S3 store")
        }
    };
    eprintln!("store: {}", store.location());
    let mut def = CollectionDef::new("bench", DIM as u32);
    def.metric = Metric::Cosine;
    def.payload_fields
        .insert("section".into(), FieldType::Keyword);
    def.payload_fields.insert("size".into(), FieldType::Integer);
    store.create_collection(&def).expect("collection");
    let policy = SealPolicy {
        max_rows: 50_000,
        max_bytes: 256 << 20,
        max_age: Duration::from_secs(10),
        write_lease: Duration::from_secs(600),
        quiet: None,
        grow: None,
    };
    let policy = if std::env::var("EDDY_BENCH_GROW").is_ok_and(|v| v == "1") {
        use clap::Parser as _;
        let defaults = eddy_ingest::IngestConfig::parse_from([
            "eddy-ingest",
            "--store",
            "unused",
            "--brokers",
            "unused",
        ]);
        SealPolicy {
            grow: defaults.seal_policy().grow,
            ..policy
        }
    } else {
        policy
    };
    let grows = policy.grow.is_some();
    let metrics = IngestMetrics::new(&prometheus::Registry::new()).expect("metrics");
    let builds = metrics.clone();
    let mut state = CollectionState::new(def, store, policy, metrics).expect("state");
    state
        .assign(&[0], &std::collections::BTreeMap::from([(0, 0)]))
        .expect("assign");
    let messages = events / per_message;
    let wait_for_seals = std::env::var("EDDY_BENCH_SEAL").is_ok_and(|v| v == "wait");
    let started = Instant::now();
    let cpu_start = cpu_seconds();
    let mut seals = 0;
    for offset in 0..messages {
        let value = &pool[(offset % pool.len() as u64) as usize];
        let record = Record {
            message: Message {
                key: None,
                value: Some(value),
                content_type: Some(content_type),
            },
            place: Place {
                partition: 0,
                offset: offset as i64,
                timestamp_ms: 0,
            },
        };
        let applied = state.apply(record);
        assert_eq!(
            applied,
            eddy_ingest::Applied::Done,
            "event {offset} applied"
        );
        // As the worker does: a written seal publishes, a due one starts
        // (written on its own thread), or with EDDY_BENCH_SEAL=wait the
        // seal holds the loop until published.
        state.poll_seal().expect("publish");
        if state.should_seal() {
            if wait_for_seals {
                state.seal().expect("seal");
            } else {
                state.start_seal().expect("seal");
            }
            seals += 1;
        }
        if (offset + 1) % (messages / 10).max(1) == 0 {
            eprintln!(
                "{:>3}%  {:>8.0} rows/s  rss {} MiB",
                (offset + 1) * 100 / messages,
                ((offset + 1) * per_message) as f64 / started.elapsed().as_secs_f64(),
                rss_mib()
            );
        }
    }
    state.seal().expect("final seal");
    let took = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu_start;
    let rows = (messages * per_message) as f64;
    println!(
        "{format}: {rows} rows in {took:.2} s = {:.0} rows/s wall, {:.0} rows per CPU-second ({} seals + 1, durable and published)",
        rows / took,
        rows / cpu.max(0.01),
        seals
    );
    if grows {
        let outcomes = ["grown", "grown_behind", "grown_failed"].map(|outcome| {
            let count = builds
                .index_builds
                .with_label_values(&["bench", outcome])
                .get();
            format!("{outcome} {count}")
        });
        println!("graphs grown with the seals: {}", outcomes.join(", "));
    }
}

/// Produces `events` (untimed) to a fresh topic on `brokers`, then starts
/// eddy-ingest in this process and times it until the manifest covers them.
fn through_broker(format: &str, events: u64, brokers: &str) {
    use clap::Parser as _;
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

    let (content_type, per_message) = match format {
        "json" => (eddy_event::CONTENT_TYPE_JSON, 1),
        "protobuf" => (eddy_event::CONTENT_TYPE_PROTOBUF, 1),
        _ => (eddy_event::CONTENT_TYPE_ARROW, ARROW_ROWS as u64),
    };
    let topic = format!("bench-{format}-{}", std::process::id());
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        rdkafka::ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .create()
            .expect("admin");
    let new = rdkafka::admin::NewTopic::new(&topic, 1, rdkafka::admin::TopicReplication::Fixed(1));
    let created = futures::executor::block_on(
        admin.create_topics([&new], &rdkafka::admin::AdminOptions::new()),
    );
    eprintln!("topic {topic}: {created:?}");
    std::thread::sleep(Duration::from_secs(1));
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "20")
        .set("batch.size", "1000000")
        .set("message.max.bytes", "20000000")
        .set("queue.buffering.max.kbytes", "1048576")
        .create()
        .expect("producer");
    let messages = events / per_message;
    let produced = Instant::now();
    for m in 0..messages {
        let first = m * per_message;
        let value = match format {
            "json" => json_event(first),
            "protobuf" => protobuf_event(first),
            _ => arrow_batch(first),
        };
        let headers = OwnedHeaders::new().insert(Header {
            key: "content-type",
            value: Some(content_type),
        });
        let mut record = BaseRecord::<'_, [u8], [u8]>::to(&topic)
            .payload(&value)
            .headers(headers);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(600)).expect("flushed");
    eprintln!(
        "produced {messages} messages in {:.1} s",
        produced.elapsed().as_secs_f64()
    );
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("store");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let spec = format!(
        "name=bench,topic={topic},dim={DIM},metric=cosine,field.section=keyword,field.size=integer"
    );
    let config = eddy_ingest::IngestConfig::parse_from([
        "eddy-ingest",
        "--store",
        dir.path().to_str().expect("utf-8"),
        "--brokers",
        brokers,
        "--collection",
        &spec,
        "--metrics-addr",
        "127.0.0.1:0",
        "--max-unindexed-rows",
        "0",
        "--merge-min-segments",
        "0",
    ]);
    let started = Instant::now();
    let ingest = runtime
        .block_on(eddy_ingest::start(config))
        .expect("ingest starts");
    let mut peak_rss = 0;
    loop {
        peak_rss = peak_rss.max(rss_mib());
        let covered = store
            .latest_manifest("bench")
            .map_or(0, |m| m.next_offset(0));
        if covered as u64 >= messages {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = started.elapsed().as_secs_f64();
    println!(
        "{format} via broker: {} rows in {took:.2} s = {:.0} rows/s sealed and published (peak rss {peak_rss} MiB, graphs built in the background)",
        messages * per_message,
        (messages * per_message) as f64 / took
    );
    let metrics = runtime
        .block_on(async {
            reqwest::get(format!("http://{}/metrics", ingest.metrics_addr()))
                .await?
                .text()
                .await
        })
        .unwrap_or_default();
    for line in metrics.lines().filter(|l| {
        l.starts_with("eddy_ingest_unindexed_rows") || l.starts_with("eddy_ingest_segments{")
    }) {
        println!("  at that moment: {line}");
    }
    runtime.block_on(ingest.shutdown());
}
