//! The dead-letter producer against a real broker: a missing topic blocks
//! until it exists and loses nothing, a broker that is down leaves nothing
//! pending that was never sent, and an oversize letter is sent as a
//! reference.

use eddy_event::{Reason, Rejection};
use eddy_loadtest::broker::Tansu;
use prometheus::Registry;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};

use super::*;

fn dead_letters(tansu: &Tansu, topic: &str, properties: &[(&str, &str)]) -> DeadLetters {
    let settings = KafkaSettings::new(
        tansu.bootstrap(),
        properties
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
    .expect("settings");
    let metrics = IngestMetrics::new(&Registry::new()).expect("metrics");
    DeadLetters::connect(&settings, topic.to_owned(), "c", metrics).expect("producer")
}

fn rejection() -> Rejection {
    Rejection {
        reason: Reason::Oversize,
        detail: "too big".into(),
    }
}

fn first_letter(tansu: &Tansu, topic: &str) -> OwnedMessage {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", tansu.bootstrap())
        .set("group.id", "dlq-test-reader")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .expect("tpl");
    consumer.assign(&tpl).expect("assign");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "no letter in {topic}");
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            return m.detach();
        }
    }
}

fn header(letter: &OwnedMessage, name: &str) -> Option<String> {
    letter.headers().and_then(|h| {
        h.iter()
            .find(|x| x.key == name)
            .and_then(|x| x.value.map(|v| String::from_utf8_lossy(v).into_owned()))
    })
}

#[test]
fn a_missing_topic_blocks_until_it_exists_and_nothing_is_lost() {
    let tansu = Tansu::start().expect("tansu");
    // The broker does not auto-create topics: a letter for a topic that
    // was never created (creation failed, or was not allowed) waits.
    // The producer gives the topic up as missing after 1 s here (30 s
    // by default): from then on it learns of the topic only from a
    // metadata refresh, which must come soon, not in librdkafka's
    // default 5 minutes.
    let dlq = dead_letters(
        &tansu,
        "missing.dlq",
        &[
            ("message.timeout.ms", "2000"),
            ("topic.metadata.propagation.max.ms", "1000"),
        ],
    );
    dlq.send(
        Some(b"k"),
        Some(b"bad"),
        None,
        ("missing", 0, 41),
        &rejection(),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while !dlq.poll() {
        assert!(Instant::now() < deadline, "never reported blocked");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        dlq.flush(Duration::from_millis(100)).is_err(),
        "a seal must wait"
    );
    assert_eq!(
        dlq.pending(),
        1,
        "one letter kept, not re-queued without bound"
    );

    tansu.create_topic("missing.dlq", 1).expect("topic");
    // The producer learns of the new topic at its next metadata refresh
    // (every 5 s for dead letters), which a busy broker can delay.
    let deadline = Instant::now() + Duration::from_secs(120);
    while dlq.poll() || dlq.pending() > 0 {
        assert!(Instant::now() < deadline, "never unblocked");
        std::thread::sleep(Duration::from_millis(100));
    }
    dlq.flush(Duration::from_secs(5)).expect("acknowledged");
    let letter = first_letter(&tansu, "missing.dlq");
    assert_eq!(letter.payload(), Some(&b"bad"[..]));
    assert_eq!(header(&letter, HEADER_OFFSET).as_deref(), Some("41"));
}

/// With no letter sent, none is pending, whatever else waits in the
/// producer's queue (while the broker is down, its connection errors
/// wait there to be served): a seal is never postponed for a letter
/// that does not exist.
#[test]
fn nothing_sent_is_nothing_pending_while_the_broker_is_down() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let settings = KafkaSettings::new(
        closed.to_string(),
        [
            ("reconnect.backoff.ms", "10"),
            ("reconnect.backoff.max.ms", "50"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect(),
    )
    .expect("settings");
    let metrics = IngestMetrics::new(&Registry::new()).expect("metrics");
    let dlq =
        DeadLetters::connect(&settings, "down.dlq".to_owned(), "c", metrics).expect("producer");
    // Connection attempts fail and their errors queue up unserved.
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(dlq.pending(), 0, "no letter was sent");
    assert!(!dlq.poll(), "nothing blocks consumption");
    dlq.flush(Duration::from_millis(100))
        .expect("nothing to wait for");
}

#[test]
fn an_oversize_letter_is_sent_as_a_reference() {
    let tansu = Tansu::start().expect("tansu");
    tansu.create_topic("big.dlq", 1).expect("topic");
    let dlq = dead_letters(&tansu, "big.dlq", &[("message.max.bytes", "200000")]);
    let value = vec![b'x'; 300_000];
    dlq.send(
        None,
        Some(&value),
        Some("application/json"),
        ("big", 2, 9),
        &rejection(),
    );
    dlq.flush(Duration::from_secs(10)).expect("acknowledged");
    let letter = first_letter(&tansu, "big.dlq");
    assert_eq!(letter.payload(), None, "no value");
    assert_eq!(header(&letter, HEADER_LETTER).as_deref(), Some("reference"));
    assert_eq!(header(&letter, HEADER_SIZE).as_deref(), Some("300000"));
    assert_eq!(header(&letter, HEADER_TOPIC).as_deref(), Some("big"));
    assert_eq!(header(&letter, HEADER_PARTITION).as_deref(), Some("2"));
    assert_eq!(header(&letter, HEADER_OFFSET).as_deref(), Some("9"));
    assert_eq!(header(&letter, HEADER_REASON).as_deref(), Some("oversize"));
}
