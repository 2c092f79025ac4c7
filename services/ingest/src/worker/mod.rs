//! The Kafka side of one collection's worker: a consumer-group member polled
//! on its own thread, whose rebalance callback takes partitions over from the
//! manifest (never from Kafka's committed offsets) and seals before giving
//! partitions up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eddy_manifest::Store;
use eddy_model::CollectionDef;
use parking_lot::Mutex;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};
use tracing::{error, info, warn};

use crate::dlq::DeadLetters;
use crate::metrics::IngestMetrics;
use crate::state::{CollectionState, SealOutcome};
use crate::{Error, IngestConfig, Result};

/// Consumer context: owns the collection state so the rebalance callback
/// (run inside `poll`, on the worker thread) can seal and re-assign.
pub(crate) struct IngestContext {
    topic: String,
    state: Mutex<CollectionState>,
    dlq: DeadLetters,
    failure: Mutex<Option<Error>>,
}

impl ClientContext for IngestContext {}

impl IngestContext {
    /// Seals once every dead letter so far is acknowledged (a manifest must
    /// never cover a rejected event the dead-letter topic does not hold).
    fn seal(&self) -> Result<Option<SealOutcome>> {
        self.dlq.flush()?;
        self.state.lock().seal()
    }

    fn fail(&self, e: Error) {
        error!(topic = %self.topic, error = %e, "ingest worker failed");
        self.failure.lock().get_or_insert(e);
    }

    fn commit(&self, consumer: &BaseConsumer<Self>, outcome: &SealOutcome, mode: CommitMode) {
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
                let mut state = self.state.lock();
                match state.assign(&partitions) {
                    Ok(starts) => {
                        for (p, start) in &starts {
                            let offset = if *start > 0 {
                                Offset::Offset(*start)
                            } else {
                                Offset::Beginning
                            };
                            if let Err(e) = tpl.set_partition_offset(&self.topic, *p as i32, offset)
                            {
                                warn!(error = %e, "setting the start offset");
                            }
                            if *start > 0 {
                                match consumer.fetch_watermarks(
                                    &self.topic,
                                    *p as i32,
                                    Duration::from_secs(5),
                                ) {
                                    Ok((low, _)) if low > *start => state.stall(*p, low),
                                    Ok(_) => {}
                                    Err(e) => {
                                        warn!(partition = p, error = %e, "fetching watermarks")
                                    }
                                }
                            }
                        }
                    }
                    Err(e) => self.fail(e),
                }
                drop(state);
                let assigned = if cooperative {
                    consumer.incremental_assign(tpl)
                } else {
                    consumer.assign(tpl)
                };
                if let Err(e) = assigned {
                    self.fail(e.into());
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                match self.seal() {
                    Ok(Some(outcome)) => self.commit(consumer, &outcome, CommitMode::Sync),
                    Ok(None) => {}
                    // Not sealed: the next owner resumes from the manifest.
                    Err(e) => {
                        warn!(topic = %self.topic, error = %e, "could not seal before giving partitions up")
                    }
                }
                self.state.lock().revoke(&partitions);
                let revoked = if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                };
                if let Err(e) = revoked {
                    self.fail(e.into());
                }
            }
            other => error!(topic = %self.topic, error = ?other, "rebalance error"),
        }
    }
}

/// Runs one collection's worker until `stop` is set or it fails; seals and
/// commits what it holds before returning.
pub(crate) fn run_worker(
    def: CollectionDef,
    store: Store,
    config: &IngestConfig,
    metrics: IngestMetrics,
    stop: Arc<AtomicBool>,
) -> Result<()> {
    let topic = def.topic.clone();
    let name = def.name.clone();
    let state = CollectionState::new(def, store, config.seal_policy(), metrics.clone())?;
    let mut base = ClientConfig::new();
    base.set("bootstrap.servers", &config.common.brokers);
    for (k, v) in config.common.kafka_client_properties() {
        base.set(k, v);
    }
    let dlq = DeadLetters::new(&base, &topic, &name, metrics.clone())?;
    // The consumer's own settings on top of `base`; the user's properties
    // are applied once more below so they win.
    let mut client = base.clone();
    client
        .set("group.id", format!("{}.{}", config.group_prefix, name))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        .set("session.timeout.ms", "10000")
        .set("heartbeat.interval.ms", "1000")
        .set("max.poll.interval.ms", "60000")
        .set("group.instance.id", config.instance_id());
    for (k, v) in config.common.kafka_client_properties() {
        client.set(k, v);
    }
    let context = IngestContext {
        topic: topic.clone(),
        state: Mutex::new(state),
        dlq,
        failure: Mutex::new(None),
    };
    let consumer: BaseConsumer<IngestContext> = client.create_with_context(context)?;
    consumer.subscribe(&[&topic])?;
    info!(collection = %name, topic = %topic, "ingest worker started");
    let ctx = consumer.context();
    let mut last_lag = Instant::now();
    let mut unassigned = UnassignedWatch::new(Duration::from_secs(UNASSIGNED_WARN_SECS));
    let mut backpressure = Backpressure::new(config.max_unindexed_rows);
    while !stop.load(Ordering::Relaxed) {
        let unindexed = metrics.unindexed_rows.with_label_values(&[&name]).get();
        if let Some(pause) = backpressure.update(unindexed.max(0) as u64) {
            set_paused(&consumer, pause, &name, unindexed);
            metrics
                .backpressure
                .with_label_values(&[&name])
                .set(i64::from(pause));
        }
        match consumer.poll(Duration::from_millis(50)) {
            Some(Ok(msg)) => {
                let event = eddy_config::kafka::event_message(&msg);
                let (partition, offset) = (msg.partition() as u32, msg.offset());
                let content_type = event.content_type;
                let rejected = ctx.state.lock().apply(partition, offset, event);
                if let Some(rejection) = rejected {
                    ctx.dlq.send(
                        msg.key(),
                        msg.payload(),
                        content_type,
                        (&topic, partition, offset),
                        &rejection,
                    );
                    ctx.dlq.count_sent();
                }
            }
            Some(Err(e)) => warn!(collection = %name, error = %e, "kafka consumer error"),
            None => {}
        }
        if let Some(e) = ctx.failure.lock().take() {
            return Err(e);
        }
        let due = ctx.state.lock().should_seal();
        let outcome = if due {
            match ctx.seal() {
                Ok(o) => o,
                Err(Error::Kafka(e)) => {
                    // Dead letters not acknowledged: retry at the next turn.
                    warn!(collection = %name, error = %e, "seal postponed");
                    None
                }
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        if let Some(outcome) = outcome {
            ctx.commit(&consumer, &outcome, CommitMode::Async);
        }
        if last_lag.elapsed() >= Duration::from_secs(5) {
            last_lag = Instant::now();
            update_lag(&consumer, &topic, &name, &metrics);
        }
        let owned = ctx.state.lock().owned_offsets().len();
        metrics
            .assigned_partitions
            .with_label_values(&[&name])
            .set(owned as i64);
        if let Some(waited) = unassigned.observe(owned) {
            warn!(
                collection = %name,
                waited_s = waited.as_secs(),
                "subscribed but no partitions assigned: the group coordinator has not \
                 completed a rebalance (other members may own all partitions, or the \
                 broker keeps a dead member in the group)"
            );
        }
    }
    let outcome = ctx.seal()?;
    if let Some(outcome) = outcome {
        // Async: a shutdown must not hang on an unreachable broker, and the
        // manifest (not the group offset) is what a restart resumes from.
        ctx.commit(&consumer, &outcome, CommitMode::Async);
    }
    info!(collection = %name, "ingest worker stopped");
    Ok(())
}

/// Pauses (or resumes) fetching of every assigned partition. Polling goes
/// on, so the group membership and rebalances are unaffected.
fn set_paused(consumer: &BaseConsumer<IngestContext>, pause: bool, name: &str, unindexed: i64) {
    let assignment = match consumer.assignment() {
        Ok(a) => a,
        Err(e) => {
            warn!(collection = %name, error = %e, "reading the assignment to pause it");
            return;
        }
    };
    let result = if pause {
        warn!(collection = %name, unindexed, "backpressure: pausing consumption until the indexer catches up");
        consumer.pause(&assignment)
    } else {
        info!(collection = %name, unindexed, "backpressure released: resuming consumption");
        consumer.resume(&assignment)
    };
    if let Err(e) = result {
        warn!(collection = %name, error = %e, pause, "pausing or resuming partitions");
    }
}

/// Bounds the rows sealed but not yet indexed: consumption pauses above the
/// limit and resumes below half of it (0 = no bound). The query tail keeps
/// serving fresh events from Kafka meanwhile, so freshness is unaffected.
struct Backpressure {
    limit: u64,
    paused: bool,
    last_applied: Option<Instant>,
}

impl Backpressure {
    fn new(limit: u64) -> Self {
        Self {
            limit,
            paused: false,
            last_applied: None,
        }
    }

    /// Returns `Some(pause)` when the consumer's paused state must be
    /// (re)applied: on a change, and once a second while paused (partitions
    /// assigned since the pause start unpaused).
    fn update(&mut self, unindexed: u64) -> Option<bool> {
        if self.limit == 0 {
            return None;
        }
        let want = if self.paused {
            unindexed > self.limit / 2
        } else {
            unindexed > self.limit
        };
        let now = Instant::now();
        let refresh = want
            && self
                .last_applied
                .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1));
        if want != self.paused || refresh {
            self.paused = want;
            self.last_applied = Some(now);
            return Some(want);
        }
        None
    }
}

/// Seconds without any assigned partition before the worker warns.
const UNASSIGNED_WARN_SECS: u64 = 30;

/// Tracks how long the worker has owned no partition, to warn (repeatedly,
/// once per `every`) when a rebalance never completes.
struct UnassignedWatch {
    every: Duration,
    since: Option<Instant>,
    last_warned: Option<Instant>,
}

impl UnassignedWatch {
    fn new(every: Duration) -> Self {
        Self {
            every,
            since: Some(Instant::now()),
            last_warned: None,
        }
    }

    /// Records the owned-partition count; returns how long nothing has been
    /// owned when it is time to warn.
    fn observe(&mut self, owned: usize) -> Option<Duration> {
        let now = Instant::now();
        if owned > 0 {
            self.since = None;
            self.last_warned = None;
            return None;
        }
        let since = *self.since.get_or_insert(now);
        let due = match self.last_warned {
            None => now.duration_since(since) >= self.every,
            Some(last) => now.duration_since(last) >= self.every,
        };
        if due {
            self.last_warned = Some(now);
            Some(now.duration_since(since))
        } else {
            None
        }
    }
}

fn update_lag(
    consumer: &BaseConsumer<IngestContext>,
    topic: &str,
    name: &str,
    metrics: &IngestMetrics,
) {
    let owned = consumer.context().state.lock().owned_offsets();
    for (p, next) in owned {
        if let Ok((_, high)) =
            consumer.fetch_watermarks(topic, p as i32, Duration::from_millis(500))
        {
            metrics
                .lag
                .with_label_values(&[name, &p.to_string()])
                .set((high - next).max(0));
        }
    }
}

impl From<KafkaError> for Error {
    fn from(e: KafkaError) -> Self {
        Error::Kafka(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backpressure_pauses_above_the_limit_and_resumes_below_half() {
        let mut b = Backpressure::new(100);
        assert_eq!(b.update(50), None);
        assert_eq!(b.update(101), Some(true));
        assert_eq!(b.update(80), None, "still above half: stays paused");
        assert_eq!(b.update(50), Some(false));
        assert_eq!(b.update(60), None);
        let mut off = Backpressure::new(0);
        assert_eq!(off.update(u64::MAX), None, "0 = unbounded");
    }

    #[test]
    fn unassigned_watch_warns_once_per_period_and_resets() {
        let mut watch = UnassignedWatch::new(Duration::ZERO);
        assert!(watch.observe(0).is_some(), "zero period: due at once");
        assert!(watch.observe(3).is_none(), "owning partitions never warns");
        let mut slow = UnassignedWatch::new(Duration::from_secs(3600));
        assert!(slow.observe(0).is_none(), "not yet due");
        assert!(slow.observe(1).is_none());
        assert!(slow.since.is_none(), "owning resets the clock");
    }
}
