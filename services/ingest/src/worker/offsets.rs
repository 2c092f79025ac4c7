//! The worker's offset watch: every few seconds (and at once after the
//! consumer reports an offset out of range) it reads each owned
//! partition's log range, reports consumer lag and manifest lag, stops a
//! partition whose offset left the log, and restarts a stopped partition
//! an operator resumed.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::{Offset, TopicPartitionList};
use tracing::{error, info, warn};

use super::Worker;
use crate::error::Result;

/// How long one log-range read waits (on connections of its own, so no
/// fetch holds it up: [`eddy_kafka::LogRanges`]).
const WATERMARK_TIMEOUT: Duration = Duration::from_millis(1_000);
/// How long a seek to a resumed partition's offset waits.
const SEEK_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether a consumer error says a fetch offset is outside the log (with
/// `auto.offset.reset=error`, librdkafka reports it instead of jumping).
pub(super) fn is_out_of_range(e: &KafkaError) -> bool {
    matches!(
        e,
        KafkaError::MessageConsumption(
            RDKafkaErrorCode::OffsetOutOfRange | RDKafkaErrorCode::AutoOffsetReset
        ) | KafkaError::MessageConsumptionFatal(
            RDKafkaErrorCode::OffsetOutOfRange | RDKafkaErrorCode::AutoOffsetReset
        )
    )
}

/// Pauses (or resumes) fetching of `partitions` of `topic`.
pub(super) fn pause_partitions<C: ConsumerContext + 'static>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partitions: &[u32],
    pause: bool,
) {
    if partitions.is_empty() {
        return;
    }
    let mut tpl = TopicPartitionList::new();
    for p in partitions {
        tpl.add_partition(topic, *p as i32);
    }
    let result = if pause {
        consumer.pause(&tpl)
    } else {
        consumer.resume(&tpl)
    };
    if let Err(e) = result {
        warn!(%topic, ?partitions, error = %e, pause, "pausing or resuming partitions");
    }
}

impl Worker {
    /// Reads the log range of every owned partition: sets consumer lag and
    /// manifest lag, and stops (pauses) partitions whose next offset left
    /// the log. A range that cannot be read is logged as an error and read
    /// again next time.
    pub(super) fn check_offsets(&self) {
        let (owned, manifest) = {
            let state = self.context().state.lock();
            (state.owned_offsets(), state.manifest_offsets())
        };
        let mut newly_stopped = Vec::new();
        for (partition, next) in owned {
            let label = partition.to_string();
            let range = self
                .context()
                .log_ranges
                .read(&self.topic, partition, WATERMARK_TIMEOUT);
            let (low, high) = match range {
                Ok(range) => range,
                Err(e) => {
                    error!(collection = %self.name, partition, error = %e, "reading the partition's log range failed; offsets unchecked until it succeeds");
                    continue;
                }
            };
            self.metrics
                .lag
                .with_label_values(&[&self.name, &label])
                .set(eddy_kafka::lag(high, next));
            let covered = manifest.get(&partition).copied().unwrap_or(0);
            self.metrics
                .manifest_lag
                .with_label_values(&[&self.name, &label])
                .set(eddy_kafka::lag(high, covered));
            if self
                .context()
                .state
                .lock()
                .check_log_range(partition, low, high)
            {
                newly_stopped.push(partition);
            }
        }
        pause_partitions(&self.consumer, &self.topic, &newly_stopped, true);
    }

    /// Restarts every partition an operator resumed since this worker took
    /// it over ([`crate::resume_partition`] recorded it in the manifest and
    /// fenced this worker): seals what the buffer holds (the fenced
    /// partition's rows are published deleted), takes the partition over
    /// again from the resumed offset, and fetches from there.
    pub(super) fn restart_resumed(&self) -> Result<()> {
        let ctx = self.context();
        let resumed = ctx.state.lock().resumed()?;
        if resumed.is_empty() {
            return Ok(());
        }
        if let Some(outcome) = ctx.seal()? {
            ctx.commit(
                &self.consumer,
                &outcome,
                rdkafka::consumer::CommitMode::Async,
            );
        }
        let mut logs = BTreeMap::new();
        for p in &resumed {
            let range = ctx
                .log_ranges
                .read(&self.topic, *p, WATERMARK_TIMEOUT)
                .map_err(crate::error::Error::kafka(
                    "fetching watermarks of a resumed partition",
                ))?;
            logs.insert(*p, range);
        }
        let mut state = ctx.state.lock();
        state.revoke(&resumed);
        let log_starts = logs.iter().map(|(p, (low, _))| (*p, *low)).collect();
        let starts = state.assign(&resumed, &log_starts)?;
        for (p, start) in starts {
            let (low, high) = logs.get(&p).copied().unwrap_or((0, 0));
            if state.check_log_range(p, low, high) {
                continue;
            }
            self.consumer
                .seek(&self.topic, p as i32, Offset::Offset(start), SEEK_TIMEOUT)
                .map_err(crate::error::Error::kafka("seeking to a resumed offset"))?;
            pause_partitions(&self.consumer, &self.topic, &[p], false);
            info!(collection = %self.name, partition = p, offset = start, "stopped partition resumed by an operator");
        }
        Ok(())
    }
}
