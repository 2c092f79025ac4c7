//! The dead-letter topic: every rejected event is produced, unchanged, to
//! `<topic>.dlq` with headers naming the reason and its source, and the
//! write is acknowledged before any manifest covers the event's offset
//! (DESIGN.md, "Kafka event"). A bad event therefore never stalls its
//! partition and is never silently dropped.

use std::time::Duration;

use eddy_kafka::KafkaSettings;
use parking_lot::Mutex;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientConfig, ClientContext, Message};
use tracing::{info, warn};

use crate::error::{Error, Result};
use crate::metrics::IngestMetrics;

/// Header naming the rejection reason (closed set, e.g. `non_finite`).
pub const HEADER_REASON: &str = "eddy-reason";
/// Header with the human-readable detail.
pub const HEADER_DETAIL: &str = "eddy-detail";
/// Header with the source topic.
pub const HEADER_TOPIC: &str = "eddy-source-topic";
/// Header with the source partition (decimal).
pub const HEADER_PARTITION: &str = "eddy-source-partition";
/// Header with the source offset (decimal).
pub const HEADER_OFFSET: &str = "eddy-source-offset";

/// Attempts to deliver a dead letter before a seal gives up (and waits for
/// the next seal attempt).
const FLUSH_ATTEMPTS: usize = 3;

/// A dead letter kept until the broker acknowledged it.
#[derive(Debug, Clone)]
struct Letter {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Vec<u8>)>,
}

impl Letter {
    fn headers(&self) -> OwnedHeaders {
        self.headers
            .iter()
            .fold(OwnedHeaders::new(), |h, (key, value)| {
                h.insert(Header {
                    key,
                    value: Some(value),
                })
            })
    }
}

/// Records failed deliveries so a flush can send them again.
struct DlqContext {
    failed: Mutex<Vec<Letter>>,
}

impl ClientContext for DlqContext {}

impl ProducerContext for DlqContext {
    type DeliveryOpaque = Box<Letter>;

    fn delivery(&self, result: &DeliveryResult<'_>, letter: Self::DeliveryOpaque) {
        if let Err((e, msg)) = result {
            warn!(topic = msg.topic(), error = %e, "dead letter not delivered; will retry");
            self.failed.lock().push(*letter);
        }
    }
}

/// The dead-letter producer of one collection's worker.
pub(crate) struct DeadLetters {
    topic: String,
    collection: String,
    producer: BaseProducer<DlqContext>,
    metrics: IngestMetrics,
    timeout: Duration,
}

impl DeadLetters {
    /// A producer for `<source_topic>.dlq`; creates the topic if missing.
    pub(crate) fn new(
        kafka: &KafkaSettings,
        source_topic: &str,
        collection: &str,
        metrics: IngestMetrics,
    ) -> Result<Self> {
        let topic = format!("{source_topic}.dlq");
        let producer: BaseProducer<DlqContext> = kafka
            .dead_letter_producer()
            .create_with_context(DlqContext {
                failed: Mutex::new(Vec::new()),
            })
            .map_err(Error::kafka("creating the dead-letter producer"))?;
        create_topic(&kafka.admin(), &topic);
        Ok(Self {
            topic,
            collection: collection.to_owned(),
            producer,
            metrics,
            timeout: Duration::from_secs(10),
        })
    }

    /// Queues a rejected event for the dead-letter topic (counted as
    /// `produced`; [`DeadLetters::flush`] waits for its acknowledgement).
    pub(crate) fn send(
        &self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        content_type: Option<&str>,
        source: (&str, u32, i64),
        rejection: &eddy_event::Rejection,
    ) {
        let (source_topic, partition, offset) = source;
        let mut headers = vec![
            (
                HEADER_REASON.to_owned(),
                rejection.reason.as_str().as_bytes().to_vec(),
            ),
            (
                HEADER_DETAIL.to_owned(),
                rejection.detail.as_bytes().to_vec(),
            ),
            (HEADER_TOPIC.to_owned(), source_topic.as_bytes().to_vec()),
            (
                HEADER_PARTITION.to_owned(),
                partition.to_string().into_bytes(),
            ),
            (HEADER_OFFSET.to_owned(), offset.to_string().into_bytes()),
        ];
        if let Some(ct) = content_type {
            headers.push(("content-type".to_owned(), ct.as_bytes().to_vec()));
        }
        self.enqueue(Letter {
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
            headers,
        });
        self.metrics
            .dlq
            .with_label_values(&[&self.collection, "produced"])
            .inc();
    }

    fn enqueue(&self, letter: Letter) {
        let headers = letter.headers();
        let boxed = Box::new(letter);
        let mut record: BaseRecord<'_, [u8], [u8], Box<Letter>> =
            BaseRecord::with_opaque_to(&self.topic, boxed.clone()).headers(headers);
        if let Some(k) = &boxed.key {
            record = record.key(k.as_slice());
        }
        if let Some(v) = &boxed.value {
            record = record.payload(v.as_slice());
        }
        if let Err((e, record)) = self.producer.send(record) {
            // Queue full or a local error: keep it for the next flush.
            warn!(topic = %self.topic, error = %e, "queueing a dead letter failed; will retry");
            self.producer
                .context()
                .failed
                .lock()
                .push(*record.delivery_opaque);
        }
        self.producer.poll(Duration::ZERO);
    }

    /// Waits until every dead letter sent so far is acknowledged (resending
    /// failed ones). A seal must not publish offsets past a rejected event
    /// before this succeeds.
    pub(crate) fn flush(&self) -> Result<()> {
        for attempt in 0..FLUSH_ATTEMPTS {
            let flushed = self.producer.flush(self.timeout);
            let failed = std::mem::take(&mut *self.producer.context().failed.lock());
            if flushed.is_ok() && failed.is_empty() {
                return Ok(());
            }
            warn!(topic = %self.topic, attempt, failed = failed.len(), "dead letters pending; retrying");
            self.metrics
                .dlq
                .with_label_values(&[&self.collection, "retried"])
                .inc_by(failed.len() as u64);
            for letter in failed {
                self.enqueue(letter);
            }
        }
        let queued = self.producer.in_flight_count().max(0) as usize;
        Err(Error::DeadLettersPending {
            topic: self.topic.clone(),
            pending: queued + self.producer.context().failed.lock().len(),
        })
    }
}

/// Creates `topic` (one partition) unless it exists. Failures are logged:
/// the topic may be auto-created, or pre-created by an operator.
fn create_topic(client: &ClientConfig, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = match client.create() {
        Ok(a) => a,
        Err(e) => {
            warn!(%topic, error = %e, "admin client for the dead-letter topic");
            return;
        }
    };
    let new = NewTopic::new(topic, 1, TopicReplication::Fixed(-1));
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let created = futures::executor::block_on(admin.create_topics([&new], &opts));
    match created {
        Ok(results) => {
            for r in results {
                match r {
                    Ok(t) => info!(topic = %t, "dead-letter topic created"),
                    Err((t, RDKafkaErrorCode::TopicAlreadyExists)) => {
                        tracing::debug!(topic = %t, "dead-letter topic exists")
                    }
                    Err((t, code)) => {
                        warn!(topic = %t, error = %code, "creating the dead-letter topic")
                    }
                }
            }
        }
        Err(e) => warn!(%topic, error = %e, "creating the dead-letter topic"),
    }
}
