//! The dead-letter topic: every rejected event is produced, unchanged, to
//! `<topic>.dlq` with headers naming the reason and its source, and the
//! write is acknowledged before any manifest covers the event's offset
//! (DESIGN.md, "The Kafka event"). A bad event therefore never stalls its
//! partition and is never silently dropped.
//!
//! Dead letters cannot wedge the worker either: a letter larger than the
//! producer's (or the broker's) limit is sent as a *reference* — the
//! headers plus its size, no value — and while letters cannot be written
//! at all (missing topic, denied ACL, broker down) the worker pauses
//! consumption ([`DeadLetters::blocked`]), so memory stays bounded; it
//! resumes once they are acknowledged. No event's outcome is decided by a
//! retry loop: a rejected event is a dead letter, written sooner or later.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use eddy_kafka::KafkaSettings;
use parking_lot::Mutex;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
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
/// Header with the size of the rejected value in bytes (decimal): set on
/// every letter, so a reference letter still says how large the event was.
pub const HEADER_SIZE: &str = "eddy-source-size";
/// Header present (value `reference`) on a letter that carries no value
/// because the value exceeds what the dead-letter topic takes; the event
/// is still in the source topic at the named offset.
pub const HEADER_LETTER: &str = "eddy-letter";

/// Room kept for the key, headers and record framing within the producer's
/// `message.max.bytes`.
const LETTER_OVERHEAD: usize = 64 << 10;
/// Letters unacknowledged for longer than this block consumption.
const BLOCKED_AFTER: Duration = Duration::from_secs(2);
/// How often failed letters are handed to the producer again.
const RESEND_EVERY: Duration = Duration::from_secs(1);

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

    /// This letter as a reference: the headers, no value.
    fn into_reference(mut self) -> Letter {
        self.value = None;
        if !self.headers.iter().any(|(k, _)| k == HEADER_LETTER) {
            self.headers
                .push((HEADER_LETTER.to_owned(), b"reference".to_vec()));
        }
        self
    }
}

/// Counts the letters awaiting their delivery report and records failed
/// deliveries so they can be sent again.
struct DlqContext {
    /// Letters handed to the producer whose delivery report has not been
    /// served: librdkafka's own queue length also counts its requests and
    /// unserved events (connection errors while the broker is down), so it
    /// cannot say how many letters wait.
    queued: AtomicUsize,
    failed: Mutex<Vec<Letter>>,
}

impl ClientContext for DlqContext {}

impl ProducerContext for DlqContext {
    type DeliveryOpaque = Box<Letter>;

    fn delivery(&self, result: &DeliveryResult<'_>, letter: Self::DeliveryOpaque) {
        self.queued.fetch_sub(1, Ordering::AcqRel);
        if let Err((e, msg)) = result {
            let letter = if is_too_large(e) {
                warn!(topic = msg.topic(), error = %e, "dead letter too large for the topic: sending a reference instead");
                letter.into_reference()
            } else {
                warn!(topic = msg.topic(), error = %e, "dead letter not delivered; will resend");
                *letter
            };
            self.failed.lock().push(letter);
        }
    }
}

/// Whether a produce error says the record is over a size limit.
fn is_too_large(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(RDKafkaErrorCode::MessageSizeTooLarge)
    )
}

/// The dead-letter producer of one collection's worker.
pub(crate) struct DeadLetters {
    topic: String,
    collection: String,
    producer: BaseProducer<DlqContext>,
    metrics: IngestMetrics,
    /// Largest value sent as is; larger ones go as references.
    max_value_bytes: usize,
    /// Since when some letter has been waiting for its acknowledgement.
    pending_since: Mutex<Option<Instant>>,
    last_resend: Mutex<Instant>,
}

impl DeadLetters {
    /// A producer for `<source_topic>.dlq`; creates the topic if missing
    /// when `create` is set.
    pub(crate) fn new(
        kafka: &KafkaSettings,
        source_topic: &str,
        collection: &str,
        create: bool,
        metrics: IngestMetrics,
    ) -> Result<Self> {
        let topic = format!("{source_topic}.dlq");
        if create {
            create_topic(&kafka.admin(), &topic);
        }
        Self::connect(kafka, topic, collection, metrics)
    }

    /// A producer for the existing topic `topic`.
    pub(crate) fn connect(
        kafka: &KafkaSettings,
        topic: String,
        collection: &str,
        metrics: IngestMetrics,
    ) -> Result<Self> {
        let producer: BaseProducer<DlqContext> = kafka
            .dead_letter_producer()
            .create_with_context(DlqContext {
                queued: AtomicUsize::new(0),
                failed: Mutex::new(Vec::new()),
            })
            .map_err(Error::kafka("creating the dead-letter producer"))?;
        Ok(Self {
            topic,
            collection: collection.to_owned(),
            producer,
            metrics,
            max_value_bytes: kafka
                .dead_letter_max_bytes()
                .saturating_sub(LETTER_OVERHEAD),
            pending_since: Mutex::new(None),
            last_resend: Mutex::new(Instant::now()),
        })
    }

    /// Queues a rejected event for the dead-letter topic (counted as
    /// `produced`, or `reference` when its value is too large to carry;
    /// [`DeadLetters::flush`] waits for its acknowledgement).
    pub(crate) fn send(
        &self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        content_type: Option<&str>,
        source: (&str, u32, i64),
        rejection: &eddy_event::Rejection,
    ) {
        let (source_topic, partition, offset) = source;
        let size = value.map_or(0, <[u8]>::len);
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
            (HEADER_SIZE.to_owned(), size.to_string().into_bytes()),
        ];
        if let Some(ct) = content_type {
            headers.push(("content-type".to_owned(), ct.as_bytes().to_vec()));
        }
        let letter = Letter {
            key: key.map(<[u8]>::to_vec),
            value: None,
            headers,
        };
        let (letter, outcome) = match value {
            Some(v) if v.len() > self.max_value_bytes => (letter.into_reference(), "reference"),
            Some(v) => (
                Letter {
                    value: Some(v.to_vec()),
                    ..letter
                },
                "produced",
            ),
            None => (letter, "produced"),
        };
        self.enqueue(letter);
        self.metrics
            .dlq
            .with_label_values(&[&self.collection, outcome])
            .inc();
    }

    fn enqueue(&self, letter: Letter) {
        self.pending_since.lock().get_or_insert_with(Instant::now);
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
        // Counted before the send: its delivery report may be served at once.
        self.producer
            .context()
            .queued
            .fetch_add(1, Ordering::AcqRel);
        if let Err((e, record)) = self.producer.send(record) {
            self.producer
                .context()
                .queued
                .fetch_sub(1, Ordering::AcqRel);
            let letter = *record.delivery_opaque;
            let letter = if is_too_large(&e) {
                letter.into_reference()
            } else {
                warn!(topic = %self.topic, error = %e, "queueing a dead letter failed; will resend");
                letter
            };
            self.producer.context().failed.lock().push(letter);
        }
        self.producer.poll(Duration::ZERO);
    }

    /// Serves delivery reports, hands failed letters to the producer again
    /// (at most once per [`RESEND_EVERY`]) and says whether letters have
    /// waited so long that consumption must pause. Call once per turn.
    pub(crate) fn poll(&self) -> bool {
        self.producer.poll(Duration::ZERO);
        let mut last = self.last_resend.lock();
        if last.elapsed() >= RESEND_EVERY {
            *last = Instant::now();
            let failed = std::mem::take(&mut *self.producer.context().failed.lock());
            if !failed.is_empty() {
                self.metrics
                    .dlq
                    .with_label_values(&[&self.collection, "retried"])
                    .inc_by(failed.len() as u64);
            }
            for letter in failed {
                self.enqueue(letter);
            }
        }
        drop(last);
        let pending = self.pending();
        self.metrics
            .dead_letters_pending
            .with_label_values(&[&self.collection])
            .set(pending as i64);
        let mut since = self.pending_since.lock();
        if pending == 0 {
            *since = None;
        }
        since.is_some_and(|s| s.elapsed() >= BLOCKED_AFTER)
    }

    /// Letters not yet acknowledged (in flight or failed).
    fn pending(&self) -> usize {
        let context = self.producer.context();
        context.queued.load(Ordering::Acquire) + context.failed.lock().len()
    }

    /// Waits up to `timeout` until every dead letter sent so far is
    /// acknowledged (failed ones are handed to the producer again once). A
    /// seal must not publish offsets past a rejected event before this
    /// succeeds.
    pub(crate) fn flush(&self, timeout: Duration) -> Result<()> {
        let failed = std::mem::take(&mut *self.producer.context().failed.lock());
        for letter in failed {
            self.enqueue(letter);
        }
        self.producer.poll(Duration::ZERO);
        if self.pending() > 0 {
            // librdkafka's flush waits for its whole queue, events included:
            // only when letters wait. A timeout is not an error here: what
            // is still pending is counted below.
            let _ = self.producer.flush(timeout);
            self.producer.poll(Duration::ZERO);
        }
        match self.pending() {
            0 => {
                *self.pending_since.lock() = None;
                Ok(())
            }
            pending => Err(Error::DeadLettersPending {
                topic: self.topic.clone(),
                pending,
            }),
        }
    }
}

/// Creates `topic` (one partition) unless it exists. Failures are logged:
/// the topic may be auto-created, or pre-created by an operator; if it is
/// missing, letters wait and consumption pauses until it exists.
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

#[cfg(test)]
mod tests;
