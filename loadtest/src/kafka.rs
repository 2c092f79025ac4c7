//! The Kafka producer the load tools share: created with throughput-minded
//! defaults that user properties override, and a send that waits while
//! librdkafka's local queue is full instead of failing.

use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use tokio::time::Instant;

/// How long a send waits for room in a full local queue before it fails.
const QUEUE_FULL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a send sleeps between tries while the queue is full.
const QUEUE_FULL_BACKOFF: Duration = Duration::from_millis(2);

/// Errors of the producer helpers.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The producer could not be created (a bad property, usually).
    #[error("creating the Kafka producer for {brokers}: {source}")]
    Create {
        /// The bootstrap servers.
        brokers: String,
        /// The underlying error.
        source: Box<KafkaError>,
    },
    /// A record could not be enqueued.
    #[error("producing record {key} to {topic}: {source}")]
    Send {
        /// The topic.
        topic: String,
        /// The record's key.
        key: String,
        /// The underlying error.
        source: Box<KafkaError>,
    },
    /// The broker did not accept a record.
    #[error("the broker rejected a record: {0}")]
    Delivery(Box<KafkaError>),
    /// The producer dropped a delivery report (it was shut down).
    #[error("the producer dropped a delivery report")]
    Canceled,
}

/// Result alias for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Parses a `key=value` librdkafka property from the command line.
pub fn parse_property(s: &str) -> std::result::Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.to_owned())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

/// A producer for `brokers`: `linger.ms=5` (batches fill at high rates, a
/// lone event waits at most 5 ms), `acks=all`, librdkafka's 5-minute
/// delivery timeout (a flat-out run queues many records behind a slow
/// broker); then `properties`, which override these.
pub fn producer(brokers: &str, properties: &[(String, String)]) -> Result<FutureProducer> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "5")
        .set("acks", "all");
    for (key, value) in properties {
        config.set(key, value);
    }
    config.create().map_err(|source| Error::Create {
        brokers: brokers.to_owned(),
        source: Box::new(source),
    })
}

/// Enqueues one record, with a `content-type` header when one is given
/// (without, the collection's declared format applies), a tombstone when
/// `value` is `None`; waits while the local queue is full.
pub async fn send(
    producer: &FutureProducer,
    topic: &str,
    key: &str,
    value: Option<&[u8]>,
    content_type: Option<&str>,
) -> Result<DeliveryFuture> {
    let mut record: FutureRecord<'_, str, [u8]> = FutureRecord::to(topic).key(key);
    if let Some(content_type) = content_type {
        record = record.headers(OwnedHeaders::new().insert(Header {
            key: "content-type",
            value: Some(content_type),
        }));
    }
    if let Some(value) = value {
        record = record.payload(value);
    }
    let deadline = Instant::now() + QUEUE_FULL_TIMEOUT;
    loop {
        match producer.send_result(record) {
            Ok(delivery) => return Ok(delivery),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                if Instant::now() < deadline =>
            {
                record = back;
                tokio::time::sleep(QUEUE_FULL_BACKOFF).await;
            }
            Err((source, _)) => {
                return Err(Error::Send {
                    topic: topic.to_owned(),
                    key: key.to_owned(),
                    source: Box::new(source),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_parse() {
        assert_eq!(
            parse_property("compression.type=lz4"),
            Ok(("compression.type".into(), "lz4".into()))
        );
        assert_eq!(parse_property("a=b=c"), Ok(("a".into(), "b=c".into())));
        assert!(parse_property("novalue").is_err());
        assert!(parse_property("=x").is_err());
    }

    #[test]
    fn bad_properties_fail_at_creation() {
        let err = producer("127.0.0.1:1", &[("no.such.property".into(), "1".into())])
            .err()
            .expect("an unknown property is an error");
        assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
    }
}
