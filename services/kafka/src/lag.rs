//! Consumer lag: how far a consumer's positions trail each partition's high
//! watermark.

use std::time::Duration;

use rdkafka::consumer::{Consumer, ConsumerContext};
use rdkafka::error::KafkaResult;

/// The lag of one partition: its high watermark minus the consumer's
/// position (the next offset it will read), never negative.
pub fn lag(high_watermark: i64, position: i64) -> i64 {
    (high_watermark - position).max(0)
}

/// For each `(partition, position)` of `topic`, the partition's lag, or the
/// error fetching its watermarks (each fetch waits at most `timeout`).
pub fn partition_lags<C, K>(
    consumer: &K,
    topic: &str,
    positions: impl IntoIterator<Item = (u32, i64)>,
    timeout: Duration,
) -> Vec<(u32, KafkaResult<i64>)>
where
    C: ConsumerContext + 'static,
    K: Consumer<C>,
{
    positions
        .into_iter()
        .map(|(partition, position)| {
            let watermarks = consumer.fetch_watermarks(topic, partition as i32, timeout);
            (partition, watermarks.map(|(_, high)| lag(high, position)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_the_distance_to_the_high_watermark_and_never_negative() {
        assert_eq!(lag(100, 40), 60);
        assert_eq!(lag(100, 100), 0);
        assert_eq!(lag(5, 9), 0, "a position past a truncated log is no lag");
    }
}
