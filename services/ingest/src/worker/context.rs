//! The consumer context of a worker: it owns the collection state so the
//! rebalance callback (run inside `poll`, on the worker thread) can take
//! partitions over from the manifest (never from Kafka's committed offsets)
//! and seal before giving partitions up.

use std::collections::BTreeMap;
use std::time::Duration;

use parking_lot::Mutex;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tracing::{error, warn};

use super::offsets::pause_partitions;
use crate::dlq::DeadLetters;
use crate::error::{Error, Result};
use crate::state::{SealOutcome, ShardStates};
use eddy_kafka::LogRanges;

/// How long a rebalance waits for a partition's watermarks.
const WATERMARK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a seal waits for dead letters to be acknowledged.
const DEAD_LETTER_WAIT: Duration = Duration::from_secs(2);

/// Consumer context: the collection state, its dead letters, and the first
/// failure of a callback (returned by the poll loop).
pub(crate) struct IngestContext {
    topic: String,
    pub(super) state: Mutex<ShardStates>,
    pub(super) dlq: DeadLetters,
    /// Reads partitions' log ranges off the consumer's connections.
    pub(super) log_ranges: LogRanges,
    failure: Mutex<Option<Error>>,
}

impl ClientContext for IngestContext {}

impl IngestContext {
    /// A context for `topic` over `state`.
    pub(super) fn new(
        topic: String,
        state: ShardStates,
        dlq: DeadLetters,
        log_ranges: LogRanges,
    ) -> Self {
        Self {
            topic,
            state: Mutex::new(state),
            dlq,
            log_ranges,
            failure: Mutex::new(None),
        }
    }

    /// Seals everything consumed and waits for it, once every dead letter
    /// so far is acknowledged (a manifest must never cover a rejected event
    /// the dead-letter topic does not hold).
    pub(super) fn seal(&self) -> Result<Option<SealOutcome>> {
        self.dlq.flush(DEAD_LETTER_WAIT)?;
        self.state.lock().seal()
    }

    /// Starts a seal written off the consume path (see
    /// [`ShardStates::start_seal`]), once every dead letter so far is
    /// acknowledged; the outcome of the earlier seal it waited for.
    pub(super) fn start_seal(&self) -> Result<Option<SealOutcome>> {
        self.dlq.flush(DEAD_LETTER_WAIT)?;
        self.state.lock().start_seal()
    }

    /// The first failure a callback recorded since the last call, as an error.
    pub(super) fn take_failure(&self) -> Result<()> {
        match self.failure.lock().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn fail(&self, e: Error) {
        error!(topic = %self.topic, error = %e, "ingest worker failed");
        self.failure.lock().get_or_insert(e);
    }

    /// Commits the offsets a seal covered, for lag tools (best effort).
    pub(super) fn commit(
        &self,
        consumer: &BaseConsumer<Self>,
        outcome: &SealOutcome,
        mode: CommitMode,
    ) {
        let mut tpl = TopicPartitionList::new();
        for (p, off) in &outcome.committed {
            if *off > 0 {
                if let Err(e) =
                    tpl.add_partition_offset(&self.topic, *p as i32, Offset::Offset(*off))
                {
                    warn!(error = %e, "building the offset commit");
                }
            }
        }
        if tpl.count() > 0 {
            // The manifest is the source of truth; a failed commit only makes
            // lag tools lag. Resumption never reads committed offsets.
            if let Err(e) = consumer.commit(&tpl, mode) {
                warn!(topic = %self.topic, error = %e, "offset commit failed");
            }
        }
    }

    /// Takes `partitions` over: publishes their new owner epochs, points
    /// `tpl` at the manifest's offsets, and assigns them; a partition whose
    /// offset is outside its log is assigned stopped (paused).
    fn take_over(
        &self,
        consumer: &BaseConsumer<Self>,
        tpl: &mut TopicPartitionList,
        partitions: &[u32],
        cooperative: bool,
    ) {
        let Some(stopped) = self.set_start_offsets(tpl, partitions) else {
            return;
        };
        let assigned = if cooperative {
            consumer.incremental_assign(tpl)
        } else {
            consumer.assign(tpl)
        };
        if let Err(source) = assigned {
            self.fail(Error::Kafka {
                action: "assigning partitions",
                source,
            });
            return;
        }
        pause_partitions(consumer, &self.topic, &stopped, true);
    }

    /// Reads each partition's log range, publishes the owner epochs (a
    /// partition never seen starts at its log start), sets each one's start
    /// in `tpl` to the manifest's `next_offset`, and stops those whose
    /// offset is outside the log; returns the stopped ones, or `None` after
    /// a failure (a watermark that cannot be read is a failure, never
    /// skipped: the worker restarts and tries again).
    fn set_start_offsets(
        &self,
        tpl: &mut TopicPartitionList,
        partitions: &[u32],
    ) -> Option<Vec<u32>> {
        let mut logs = BTreeMap::new();
        for p in partitions {
            match self.log_ranges.read(&self.topic, *p, WATERMARK_TIMEOUT) {
                Ok(range) => {
                    logs.insert(*p, range);
                }
                Err(source) => {
                    self.fail(Error::Kafka {
                        action: "fetching watermarks of an assigned partition",
                        source,
                    });
                    return None;
                }
            }
        }
        let log_starts = logs.iter().map(|(p, (low, _))| (*p, *low)).collect();
        let mut state = self.state.lock();
        let starts = match state.assign(partitions, &log_starts) {
            Ok(starts) => starts,
            Err(e) => {
                self.fail(e);
                return None;
            }
        };
        let mut stopped = Vec::new();
        for (p, start) in &starts {
            if let Err(e) = tpl.set_partition_offset(&self.topic, *p as i32, Offset::Offset(*start))
            {
                warn!(error = %e, "setting the start offset");
            }
            let (low, high) = logs.get(p).copied().unwrap_or((0, 0));
            if state.check_log_range(*p, low, high) {
                stopped.push(*p);
            }
        }
        Some(stopped)
    }

    /// Gives `partitions` up: seals what the buffer holds (so the next owner
    /// starts where this one stopped), then unassigns them.
    fn give_up(
        &self,
        consumer: &BaseConsumer<Self>,
        tpl: &TopicPartitionList,
        partitions: &[u32],
        cooperative: bool,
    ) {
        match self.seal() {
            Ok(Some(outcome)) => self.commit(consumer, &outcome, CommitMode::Sync),
            Ok(None) => {}
            // Not sealed: the next owner resumes from the manifest.
            Err(e) => {
                warn!(topic = %self.topic, error = %e, "could not seal before giving partitions up")
            }
        }
        self.state.lock().revoke(partitions);
        let revoked = if cooperative {
            consumer.incremental_unassign(tpl)
        } else {
            consumer.unassign()
        };
        if let Err(source) = revoked {
            self.fail(Error::Kafka {
                action: "unassigning partitions",
                source,
            });
        }
    }
}

impl ConsumerContext for IngestContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let partitions: Vec<u32> = tpl
            .elements()
            .iter()
            .map(|e| e.partition() as u32)
            .collect();
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                self.take_over(consumer, tpl, &partitions, cooperative)
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                self.give_up(consumer, tpl, &partitions, cooperative)
            }
            other => error!(topic = %self.topic, error = ?other, "rebalance error"),
        }
    }
}
