//! The producer and the query driver against a real broker and both
//! services: the 10k sample published half as JSON, half as protobuf (every
//! event counted), exact closed-loop and open-loop runs over HTTP and Flight
//! (recall@10 = 1.0 tie-aware, the open loop's books balanced), freshness
//! probes beside a background writer, and the `produce` command line
//! publishing Arrow IPC messages that read back as DESIGN.md's batches.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::RecordBatch;
use arrow_ipc::reader::StreamReader;
use arrow_schema::DataType;
use eddy_loadtest::driver::{self, Api, Load, PhaseResult, QueryArgs};
use eddy_loadtest::encode::{Format, CONTENT_TYPE_ARROW};
use eddy_loadtest::offsets::DeliveredOffsets;
use eddy_loadtest::produce::{self, ProduceArgs};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use crate::cluster::{Cluster, PARTITIONS};

/// The collection (and topic).
const COLLECTION: &str = "lt";
/// Points in the committed sample.
const SAMPLE_POINTS: u64 = 10_000;
/// Half of them, published in each format.
const HALF: usize = 5_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_and_driver_end_to_end() {
    let _serial = crate::SERIAL.lock().await;
    let cluster = Cluster::start(&[COLLECTION]).await;
    let files = tempfile::tempdir().expect("tempdir");
    // Half the sample as JSON, the other half as protobuf: the count reaches
    // the sample's size only if every event of both formats was taken.
    publish_half(&cluster, 0, Format::Json, files.path()).await;
    let offsets = publish_half(&cluster, HALF, Format::Protobuf, files.path()).await;
    cluster.wait_count(COLLECTION, SAMPLE_POINTS).await;
    eprintln!("published and counted; closed loop");
    closed_loop_is_exact(&cluster, &offsets).await;
    eprintln!("open loop, probes and writer");
    open_loop_balances_its_books(&cluster).await;
    eprintln!("open loop done");
    // The probes and the writer upserted existing ids only.
    cluster.wait_count(COLLECTION, SAMPLE_POINTS).await;

    arrow_from_the_command_line(&cluster, files.path());
    cluster.shutdown().await;
}

/// Publishes half the sample from row `first` on (paced); checks the
/// summary and the offsets file, whose offsets account for every record
/// published to the topic so far.
async fn publish_half(
    cluster: &Cluster,
    first: usize,
    format: Format,
    dir: &Path,
) -> std::path::PathBuf {
    let mut args = ProduceArgs::new(&cluster.tansu.bootstrap(), COLLECTION);
    args.format = format;
    args.first_row = first;
    args.limit = Some(HALF);
    // Paced, so records go in small batches: Tansu's SQLite storage serves
    // fetches of large batches slowly while producers write. A produce
    // request that timed out on a busy machine would be retried and its
    // records doubled, so the request timeout is long.
    args.rate = 500.0;
    // A broker that stalls for two minutes fails the run instead of holding it.
    args.kafka = vec![
        ("request.timeout.ms".into(), "120000".into()),
        ("message.timeout.ms".into(), "120000".into()),
    ];
    let path = dir.join(format!("{}-offsets.json", format.name()));
    args.offsets_out = Some(path.clone());
    let report = produce::produce(&args, &AtomicBool::new(false))
        .await
        .expect("produce");
    let p = &report.publish;
    let half = HALF as u64;
    assert_eq!((p.records, p.events), (half, half), "{format:?}");
    assert_eq!(p.ack.map(|a| a.count), Some(half), "{format:?}");
    assert!(p.bytes > half * 384 * 4, "{format:?}: {} bytes", p.bytes);
    let written = DeliveredOffsets::read(&path).expect("offsets file");
    assert_eq!(written, p.offsets);
    assert_eq!(written.topic, COLLECTION);
    assert_eq!(written.min_offsets.len(), PARTITIONS as usize);
    // A new topic's partitions start at offset 0, so the last offsets
    // account for every record so far.
    let records: i64 = written.min_offsets.values().map(|last| last + 1).sum();
    assert_eq!(records, (first + HALF) as i64, "{format:?}: {written:?}");
    path
}

fn assert_exact_recall(p: &PhaseResult) {
    let recall = p.recall.expect("answers were scored");
    assert_eq!(recall.at1, Some(1.0), "{p:?}");
    assert_eq!(recall.at10, Some(1.0), "{p:?}");
    assert_eq!(recall.at100, None, "k = 10 does not reach 100");
}

/// Closed loop, exact, HTTP and DoExchange (3 input batches of 5 queries
/// streamed through each exchange), after a read-your-writes wait.
async fn closed_loop_is_exact(cluster: &Cluster, offsets: &Path) {
    let mut args = QueryArgs::new(&cluster.http(), &cluster.flight(), COLLECTION);
    args.api = vec![Api::Http, Api::DoExchange];
    args.exact = true;
    args.queries = Some(40);
    args.workers = 2;
    args.requests = Some(20);
    args.exchange_batch = 5;
    args.exchange_batches = 3;
    args.duration = 120.0;
    args.warmup = 0.0;
    args.min_offsets = Some(offsets.to_owned());
    let report = driver::drive(&args).await.expect("closed loop");
    assert_eq!(report.phases.len(), 2);
    for (p, batch) in report.phases.iter().zip([1, 15]) {
        assert_eq!(p.load, Load::Closed { workers: 2 });
        assert_eq!(p.errors, 0, "{:?}", p.first_error);
        assert_eq!((p.sent, p.answered, p.batch), (20, 20, batch), "{p:?}");
        assert_eq!(p.latency.map(|l| l.count), Some(20));
        assert!(p.queries_per_s > 0.0);
        assert_exact_recall(p);
    }
    let text = driver::render(&report);
    assert!(
        text.contains("do-exchange") && text.contains("closed x2"),
        "{text}"
    );
}

/// Open loop over HTTP and DoGet with freshness probes and a writer beside it.
async fn open_loop_balances_its_books(cluster: &Cluster) {
    let mut args = QueryArgs::new(&cluster.http(), &cluster.flight(), COLLECTION);
    args.api = vec![Api::Http, Api::DoGet];
    args.exact = true;
    args.queries = Some(40);
    args.rate = Some(20.0);
    args.requests = Some(20);
    args.duration = 120.0;
    args.max_in_flight = 4;
    args.warmup = 0.0;
    args.side.brokers = Some(cluster.tansu.bootstrap());
    args.side.format = Format::Protobuf;
    args.side.freshness = 5;
    args.side.freshness_rate = 10.0;
    args.side.write_rate = 100.0;
    // A stalled broker fails the run within a minute instead of holding it.
    args.side.kafka = vec![("message.timeout.ms".into(), "60000".into())];
    let report = driver::drive(&args).await.expect("open loop");
    assert_eq!(report.phases.len(), 2);
    for p in &report.phases {
        assert!(matches!(p.load, Load::Open { rate, fraction: None } if rate == 20.0));
        assert_eq!(p.scheduled, 20, "{p:?}");
        assert_eq!(p.sent + p.dropped, p.scheduled, "{p:?}");
        assert_eq!(p.answered + p.errors, p.sent, "{p:?}");
        assert_eq!(p.errors, 0, "{:?}", p.first_error);
        assert!(p.answered > 0, "{p:?}");
        // Every answer is in the histograms; every send has a dispatch lag.
        assert_eq!(p.latency.map(|l| l.count), Some(p.answered));
        assert_eq!(p.service.map(|l| l.count), Some(p.answered));
        assert_eq!(p.dispatch_lag.map(|l| l.count), Some(p.sent));
        // Measured from the scheduled time, latency is never below service time.
        let (l, s) = (p.latency.expect("latency"), p.service.expect("service"));
        assert!(l.max_ms >= s.max_ms * 0.999, "{l:?} vs {s:?}");
        assert_exact_recall(p);
    }
    let f = report.freshness.expect("freshness ran");
    assert_eq!((f.visible, f.timed_out), (5, 0), "{f:?}");
    assert_eq!(f.produce_to_visible.map(|s| s.count), Some(5));
    assert_eq!(f.append_to_visible.map(|s| s.count), Some(5));
    assert_eq!(f.acked.map(|s| s.count), Some(5));
    let w = report.writer.expect("writer ran");
    assert!(w.events > 0 && w.events == w.records, "{w:?}");
}

/// `eddy-loadtest produce --format arrow`: 100 rows in messages of 40, read
/// back as Arrow IPC streams with the contract's columns.
fn arrow_from_the_command_line(cluster: &Cluster, dir: &Path) {
    const TOPIC: &str = "lt_arrow";
    tokio::task::block_in_place(|| cluster.tansu.create_topic(TOPIC, 1)).expect("arrow topic");
    let summary = dir.join("arrow.json");
    let output = Command::new(env!("CARGO_BIN_EXE_eddy-loadtest"))
        .args(["produce", "--topic", TOPIC, "--format", "arrow"])
        .args(["--arrow-rows", "40", "--limit", "100", "--brokers"])
        .arg(cluster.tansu.bootstrap())
        .arg("--json")
        .arg(&summary)
        .output()
        .expect("run eddy-loadtest");
    assert!(
        output.status.success(),
        "eddy-loadtest produce failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("100 in 3 records"), "{stdout}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).expect("summary")).expect("json");
    assert_eq!(json["publish"]["events"], 100);
    assert_eq!(json["format"], "arrow");

    let batches = consume_arrow(&cluster.tansu.bootstrap(), TOPIC, 3);
    let rows: Vec<usize> = batches.iter().map(RecordBatch::num_rows).collect();
    assert_eq!(rows, [40, 40, 20]);
    let schema = batches[0].schema();
    assert_eq!(schema.field(0).name(), "id");
    assert_eq!(schema.field(0).data_type(), &DataType::UInt64);
    assert!(matches!(
        schema.field(1).data_type(),
        DataType::FixedSizeList(_, 384)
    ));
    assert!(schema.field_with_name("section").is_ok(), "{schema:?}");
    let ids = batches[2].column(0).as_primitive::<UInt64Type>();
    assert_eq!((ids.value(0), ids.value(19)), (80, 99));
}

/// Reads `n` records of `topic` (partition 0) and decodes each as one Arrow
/// IPC stream holding one batch; checks the content-type header.
fn consume_arrow(bootstrap: &str, topic: &str, n: usize) -> Vec<RecordBatch> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "eddy-loadtest-arrow-test")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .expect("partition");
    consumer.assign(&tpl).expect("assign");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut batches = Vec::new();
    while batches.len() < n {
        assert!(
            Instant::now() < deadline,
            "{} of {n} records in 30 s",
            batches.len()
        );
        let Some(msg) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let msg = msg.expect("consume");
        let header = msg
            .headers()
            .and_then(|h| h.iter().find(|h| h.key == "content-type"));
        assert_eq!(
            header.and_then(|h| h.value),
            Some(CONTENT_TYPE_ARROW.as_bytes())
        );
        let value = msg.payload().expect("value");
        let mut stream: Vec<RecordBatch> = StreamReader::try_new(value, None)
            .expect("an IPC stream")
            .collect::<Result<_, _>>()
            .expect("batches");
        assert_eq!(stream.len(), 1, "one batch per message");
        batches.append(&mut stream);
    }
    batches
}
