//! Partitions' log ranges (low and high watermarks), read over a client of
//! their own.
//!
//! A broker answers one connection's requests in order. A watermark read
//! sent on a consumer's connection waits behind that consumer's fetch, and
//! when it times out there librdkafka closes the connection, killing the
//! fetch with it: on a broker slow to answer fetches (a long backlog on
//! slow storage) the consumer never receives one and its partitions never
//! move. A separate client reads the ranges on connections no fetch uses.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaResult;

use crate::KafkaSettings;

/// Reads `[low, high)` of partitions on its own broker connections.
pub struct LogRanges {
    client: BaseConsumer,
}

impl std::fmt::Debug for LogRanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogRanges").finish_non_exhaustive()
    }
}

impl LogRanges {
    /// A reader with the user's connection settings (brokers, security).
    pub fn new(settings: &KafkaSettings) -> KafkaResult<Self> {
        Ok(Self {
            client: settings.log_range_reader().create()?,
        })
    }

    /// The log range `(low, high)` of `partition` of `topic`: the first
    /// offset the log holds and the next offset it will be given. Waits at
    /// most `timeout`.
    pub fn read(&self, topic: &str, partition: u32, timeout: Duration) -> KafkaResult<(i64, i64)> {
        // Serves queued client events (errors, statistics), which nothing
        // else polls on this client.
        let _ = self.client.poll(Duration::ZERO);
        self.client
            .fetch_watermarks(topic, partition as i32, timeout)
    }
}
