//! The Tansu harness against a real broker: create a 3-partition topic,
//! produce 100 keyed messages, read all of them back.
//!
//! Needs the `tansu` binary (see `eddy_loadtest::broker::TANSU_INSTALL`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use eddy_loadtest::broker::Tansu;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

const TOPIC: &str = "harness";
const PARTITIONS: u32 = 3;
const MESSAGES: u32 = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_and_consume_through_tansu() {
    let _serial = crate::SERIAL.lock().await;
    let tansu = tokio::task::spawn_blocking(|| {
        let tansu = Tansu::start()?;
        tansu.create_topic(TOPIC, PARTITIONS)?;
        Ok::<_, eddy_loadtest::broker::Error>(tansu)
    })
    .await
    .expect("join")
    .expect("start tansu and create the topic");

    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", tansu.bootstrap())
        .set("message.timeout.ms", "20000")
        .create()
        .expect("producer");
    let mut partitions_used = BTreeMap::new();
    for i in 0..MESSAGES {
        let key = i.to_string();
        let value = format!("{{\"id\":{i}}}");
        let delivery = producer
            .send(
                FutureRecord::to(TOPIC).key(&key).payload(&value),
                Duration::from_secs(20),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("produce {i}: {e}; broker log:\n{}", tansu.log_tail()));
        *partitions_used.entry(delivery.partition).or_insert(0u32) += 1;
    }
    assert!(
        partitions_used.len() > 1,
        "keyed messages should spread over partitions: {partitions_used:?}"
    );

    let bootstrap = tansu.bootstrap();
    let received = tokio::task::spawn_blocking(move || consume_all(&bootstrap))
        .await
        .expect("join");
    let missing: Vec<u32> = (0..MESSAGES)
        .filter(|i| !received.contains_key(i))
        .collect();
    assert!(
        missing.is_empty(),
        "missing {} of {MESSAGES} messages ({missing:?}); broker log:\n{}",
        missing.len(),
        tansu.log_tail()
    );
    for (id, (key, value)) in &received {
        assert_eq!(key, &id.to_string());
        assert_eq!(value, &format!("{{\"id\":{id}}}"));
    }
}

/// Reads every partition from the beginning until all messages arrived or 30 s passed.
fn consume_all(bootstrap: &str) -> BTreeMap<u32, (String, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "eddy-harness-test")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        let p = i32::try_from(p).expect("partition fits i32");
        tpl.add_partition_offset(TOPIC, p, Offset::Beginning)
            .expect("add partition");
    }
    consumer.assign(&tpl).expect("assign");
    let mut received = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while received.len() < MESSAGES as usize && Instant::now() < deadline {
        let Some(msg) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let msg = msg.expect("consume");
        let key = String::from_utf8(msg.key().expect("key").to_vec()).expect("utf8 key");
        let value = String::from_utf8(msg.payload().expect("value").to_vec()).expect("utf8 value");
        let id: u32 = key.parse().expect("numeric key");
        received.insert(id, (key, value));
    }
    received
}
