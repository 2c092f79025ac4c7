//! Protobuf and Arrow events through the broker: they land in segments
//! like JSON ones; a bad Arrow batch goes to the dead-letter topic whole,
//! with the reason, and the good ones around it are kept.

use std::sync::Arc;

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use arrow_array::{ArrayRef, RecordBatch, StringArray, UInt64Array};
use arrow_ipc::writer::StreamWriter;
use eddy_loadtest::broker::Tansu;
use eddy_manifest::Store;
use eddy_model::PointId;
use eddy_proto::v1::{payload_value::Kind, point_event::Id, PayloadValue, PointEvent};
use prost::Message as _;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::*;

const TOPIC: &str = "formats";

/// An Arrow IPC stream of points `ids` (4-d vectors, a `kind` payload
/// column); `bad_row` gets a NaN.
fn arrow_batch(ids: std::ops::Range<u64>, bad_row: Option<usize>) -> Vec<u8> {
    let mut vectors = FixedSizeListBuilder::new(Float32Builder::new(), 4);
    for (row, id) in ids.clone().enumerate() {
        let first = if Some(row) == bad_row {
            f32::NAN
        } else {
            id as f32
        };
        vectors.values().append_slice(&[first, 0.0, 1.0, 0.0]);
        vectors.append(true);
    }
    let kinds: Vec<String> = ids.clone().map(|id| format!("bulk{}", id % 3)).collect();
    let batch = RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(UInt64Array::from_iter_values(ids)) as ArrayRef,
        ),
        ("vector", Arc::new(vectors.finish()) as ArrayRef),
        ("kind", Arc::new(StringArray::from(kinds)) as ArrayRef),
    ])
    .expect("batch");
    let mut out = Vec::new();
    let mut writer = StreamWriter::try_new(&mut out, &batch.schema()).expect("writer");
    writer.write(&batch).expect("write");
    writer.finish().expect("finish");
    drop(writer);
    out
}

fn protobuf_event(id: u64) -> Vec<u8> {
    let mut event = PointEvent {
        id: Some(Id::NumId(id)),
        vector: vec![],
        vector_le: [id as f32, 2.0, 0.0, 0.0]
            .iter()
            .flat_map(|f| f.to_le_bytes())
            .collect(),
        payload: Default::default(),
    };
    event.payload.insert(
        "kind".into(),
        PayloadValue {
            kind: Some(Kind::Keyword("proto".into())),
        },
    );
    event.encode_to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_and_arrow_events_go_through_the_broker_into_segments() {
    let tansu = Tansu::start().expect("tansu");
    let brokers = tansu.bootstrap();
    tansu.create_topic(TOPIC, 1).expect("topic");
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("store");
    let ingest = start_ingest(
        dir.path(),
        &brokers,
        &format!("name={TOPIC},dim=4,metric=l2,field.kind=keyword"),
    )
    .await;
    let producer = producer(&brokers);
    let proto = Some(eddy_event::CONTENT_TYPE_PROTOBUF);
    let arrow = Some(eddy_event::CONTENT_TYPE_ARROW);
    produce(&producer, TOPIC, 0, "1", &protobuf_event(1), proto).await;
    produce(
        &producer,
        TOPIC,
        0,
        "bulk",
        &arrow_batch(100..1100, None),
        arrow,
    )
    .await;
    produce(
        &producer,
        TOPIC,
        0,
        "bad",
        &arrow_batch(2000..2010, Some(7)),
        arrow,
    )
    .await;
    produce(&producer, TOPIC, 0, "2", &protobuf_event(2), proto).await;
    produce(&producer, TOPIC, 0, "3", &json_event(3), None).await;

    let manifest = || format!("{:?}", store.latest_manifest(TOPIC).map(|m| m.partitions));
    wait_until(
        60,
        "the five messages are sealed",
        || {
            store
                .latest_manifest(TOPIC)
                .expect("manifest")
                .next_offset(0)
                >= 5
        },
        manifest,
    )
    .await;
    let (report, counts) = eddy_manifest::fsck(&store, TOPIC).expect("fsck");
    assert!(report.is_clean(), "fsck: {report:?}");
    assert_eq!(
        report.live_rows,
        1 + 1000 + 1 + 1,
        "the bad batch is not indexed"
    );
    for id in [1, 2, 3, 100, 577, 1099] {
        assert_eq!(
            counts.get(&PointId::Num(id)).map(Vec::len),
            Some(1),
            "id {id}"
        );
    }
    assert!(
        !counts.contains_key(&PointId::Num(2000)),
        "no row of the bad batch"
    );
    let latest = store.latest_manifest(TOPIC).expect("manifest");
    let segment_of = |id: &PointId| {
        latest.segments.iter().find_map(|entry| {
            let seg = eddy_segment::Segment::open(&store.segment_path(TOPIC, &entry.id)).ok()?;
            let row = seg.row_of(id)?;
            Some(seg.payload_json(row).to_vec())
        })
    };
    assert_eq!(
        segment_of(&PointId::Num(1)).as_deref(),
        Some(&br#"{"kind":"proto"}"#[..])
    );
    assert_eq!(
        segment_of(&PointId::Num(101)).as_deref(),
        Some(&br#"{"kind":"bulk2"}"#[..])
    );
    assert_eq!(
        segment_of(&PointId::Num(3)).as_deref(),
        Some(&br#"{"n": 3}"#[..]),
        "a JSON payload is stored as the bytes it arrived as"
    );

    // The bad batch is in the dead-letter topic whole, with its reason.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("group.id", "formats-dlq-reader")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&format!("{TOPIC}.dlq"), 0, Offset::Beginning)
        .expect("tpl");
    consumer.assign(&tpl).expect("assign");
    let deadline = Instant::now() + Duration::from_secs(30);
    let letter = loop {
        assert!(Instant::now() < deadline, "no dead letter");
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            break m.detach();
        }
    };
    assert_eq!(
        letter.payload(),
        Some(&arrow_batch(2000..2010, Some(7))[..])
    );
    let header = |name: &str| {
        letter.headers().and_then(|h| {
            h.iter()
                .find(|x| x.key == name)
                .and_then(|x| x.value.map(|v| String::from_utf8_lossy(v).into_owned()))
        })
    };
    assert_eq!(header("eddy-reason").as_deref(), Some("non_finite"));
    assert_eq!(header("eddy-source-offset").as_deref(), Some("2"));
    assert!(header("eddy-detail").is_some_and(|d| d.contains("row 7")));
    ingest.shutdown().await;
}

/// A collection that declares `format=protobuf` takes protobuf events
/// without a `content-type` header (producers that cannot set headers); an
/// event with a header is still read by its header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collections_declared_format_reads_events_without_a_header() {
    const PLAIN: &str = "plainproto";
    let tansu = Tansu::start().expect("tansu");
    let brokers = tansu.bootstrap();
    tansu.create_topic(PLAIN, 1).expect("topic");
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("store");
    let ingest = start_ingest(
        dir.path(),
        &brokers,
        &format!("name={PLAIN},dim=4,metric=l2,format=protobuf"),
    )
    .await;
    let producer = producer(&brokers);
    produce(&producer, PLAIN, 0, "1", &protobuf_event(1), None).await;
    produce(&producer, PLAIN, 0, "2", &protobuf_event(2), None).await;
    let json = Some(eddy_event::CONTENT_TYPE_JSON);
    produce(&producer, PLAIN, 0, "3", &json_event(3), json).await;
    wait_until(
        60,
        "the three events are sealed",
        || {
            store
                .latest_manifest(PLAIN)
                .is_ok_and(|m| m.next_offset(0) >= 3)
        },
        || format!("{:?}", store.latest_manifest(PLAIN).map(|m| m.partitions)),
    )
    .await;
    let (report, counts) = eddy_manifest::fsck(&store, PLAIN).expect("fsck");
    assert!(report.is_clean(), "fsck: {report:?}");
    assert_eq!(report.live_rows, 3, "none went to the dead-letter topic");
    for id in 1..=3 {
        assert_eq!(
            counts.get(&PointId::Num(id)).map(Vec::len),
            Some(1),
            "id {id}"
        );
    }
    ingest.shutdown().await;
}
