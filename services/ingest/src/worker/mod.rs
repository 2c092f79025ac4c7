//! One collection's worker: a consumer-group member polled on its own
//! thread (librdkafka is blocking). Each turn of its loop applies
//! backpressure, polls one event into the collection state (a rejected one
//! goes to the dead-letter topic), seals when a limit is reached and reports
//! lag and assignment. Rebalances are handled by its [`context`].

mod backpressure;
mod context;
mod offsets;
mod unassigned;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eddy_kafka::LogRanges;
use eddy_manifest::Store;
use eddy_model::CollectionDef;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{BorrowedMessage, Message};
use tracing::{error, info, warn};

use crate::config::IngestConfig;
use crate::dlq::DeadLetters;
use crate::error::{Error, Result};
use crate::metrics::IngestMetrics;
use crate::state::{Applied, ShardStates};
use backpressure::{set_paused, Backpressure, PauseGate};
use context::IngestContext;
use unassigned::{UnassignedWatch, UNASSIGNED_WARN_SECS};

/// Longest one poll waits for an event.
const POLL_TIMEOUT: Duration = Duration::from_millis(50);
/// Events applied per turn of the loop at most (the pause and the reports
/// are checked between turns; a turn ends early once a seal is due).
const MAX_POLLS_PER_TURN: usize = 256;
/// How often lag is reported and offsets are checked against each log.
const LAG_EVERY: Duration = Duration::from_secs(5);
/// How long reading the topic's `cleanup.policy` waits at start-up.
const TOPIC_CONFIG_TIMEOUT: Duration = Duration::from_secs(5);

/// What stops a worker: the service shutting down, or its collection
/// dropped.
pub(crate) struct StopFlags {
    /// Set at shutdown (and when the service's handle is dropped).
    pub(crate) shutdown: Arc<AtomicBool>,
    /// Set when the worker's collection was dropped.
    pub(crate) dropped: Arc<AtomicBool>,
}

impl StopFlags {
    fn any(&self) -> bool {
        self.shutdown.load(Ordering::Relaxed) || self.dropped.load(Ordering::Relaxed)
    }
}

/// Runs one collection's worker until a stop flag is set or it fails;
/// seals and commits what it holds before returning.
/// `def` carries the collection's definition, and later its alterations
/// (indexed payload fields added), which the worker takes between turns.
pub(crate) fn run_worker(
    mut def: tokio::sync::watch::Receiver<CollectionDef>,
    store: Store,
    config: &IngestConfig,
    metrics: IngestMetrics,
    stop: &StopFlags,
) -> Result<()> {
    let first = def.borrow_and_update().clone();
    let mut worker = Worker::start(first, store, config, metrics)?;
    while !stop.any() {
        if def.has_changed().unwrap_or(false) {
            let altered = def.borrow_and_update().clone();
            worker.context().state.lock().set_def(altered);
        }
        worker.turn()?;
    }
    worker.stop()
}

/// A running worker: its consumer (whose context holds the state) and what
/// its loop keeps between turns.
struct Worker {
    consumer: BaseConsumer<IngestContext>,
    name: String,
    /// The collection's manifest chains (one per shard).
    chains: Vec<String>,
    topic: String,
    metrics: IngestMetrics,
    backpressure: Backpressure,
    /// Whole-consumer pause (backpressure or blocked dead letters).
    pause: PauseGate,
    unassigned: UnassignedWatch,
    last_lag: Instant,
    /// Set when the consumer reported an offset out of range: offsets are
    /// checked against each log at the next turn.
    check_now: bool,
}

impl Worker {
    /// Loads the collection state, creates the dead-letter producer and the
    /// consumer, and subscribes to the collection's topic.
    fn start(
        def: CollectionDef,
        store: Store,
        config: &IngestConfig,
        metrics: IngestMetrics,
    ) -> Result<Self> {
        let topic = def.topic.clone();
        let name = def.name.clone();
        let chains = def.chains();
        let mut state = ShardStates::new(def, &store, config.seal_policy(), &metrics)?;
        let kafka = config.kafka()?;
        match eddy_kafka::topic_gaps(&kafka, &topic, TOPIC_CONFIG_TIMEOUT) {
            Ok(gaps) => state.set_gaps(gaps),
            Err(e) => {
                warn!(collection = %name, topic = %topic, error = %e, "reading the topic's cleanup.policy failed: treating it as not compacted (an offset gap stops its partition)")
            }
        }
        let dlq = DeadLetters::new(
            &kafka,
            &topic,
            &name,
            config.create_dead_letter_topic,
            metrics.clone(),
        )?;
        let log_ranges =
            LogRanges::new(&kafka).map_err(Error::kafka("creating the log-range reader"))?;
        let context = IngestContext::new(topic.clone(), state, dlq, log_ranges);
        let consumer: BaseConsumer<IngestContext> = kafka
            .ingest_consumer(&config.group_id(&name), &config.instance_id())
            .create_with_context(context)
            .map_err(Error::kafka("creating the consumer"))?;
        consumer
            .subscribe(&[&topic])
            .map_err(Error::kafka("subscribing to the topic"))?;
        info!(collection = %name, topic = %topic, "ingest worker started");
        Ok(Self {
            consumer,
            name,
            chains,
            topic,
            metrics,
            backpressure: Backpressure::new(config.max_unindexed_rows),
            pause: PauseGate::default(),
            unassigned: UnassignedWatch::new(Duration::from_secs(UNASSIGNED_WARN_SECS)),
            last_lag: Instant::now(),
            check_now: false,
        })
    }

    fn context(&self) -> &IngestContext {
        self.consumer.context()
    }

    /// One turn of the loop.
    fn turn(&mut self) -> Result<()> {
        self.apply_pause();
        self.poll_some();
        self.context().take_failure()?;
        self.seal_if_due()?;
        self.report()?;
        Ok(())
    }

    /// Pauses or resumes the whole consumer: while too many sealed rows
    /// wait for their graph (backpressure) or dead letters cannot be
    /// written. Stopped partitions stay paused either way.
    fn apply_pause(&mut self) {
        // Maintenance reports unindexed rows per manifest chain (per shard).
        let unindexed: i64 = self
            .chains
            .iter()
            .map(|c| self.metrics.unindexed_rows.with_label_values(&[c]).get())
            .sum();
        let backpressure = self.backpressure.wants(unindexed.max(0) as u64);
        let blocked = self.context().dlq.poll();
        self.metrics
            .backpressure
            .with_label_values(&[&self.name])
            .set(i64::from(backpressure));
        let was_blocked = self
            .metrics
            .dead_letters_blocked
            .with_label_values(&[&self.name])
            .get()
            > 0;
        if blocked != was_blocked {
            if blocked {
                error!(collection = %self.name, topic = %self.topic, "dead letters cannot be written: consumption paused until the dead-letter topic takes them");
            } else {
                info!(collection = %self.name, "dead letters written again: consumption resumes");
            }
        }
        self.metrics
            .dead_letters_blocked
            .with_label_values(&[&self.name])
            .set(i64::from(blocked));
        if let Some(pause) = self.pause.update(backpressure || blocked) {
            set_paused(&self.consumer, pause, &self.name, unindexed);
            if !pause {
                let stopped: Vec<u32> = self
                    .context()
                    .state
                    .lock()
                    .stopped()
                    .into_iter()
                    .map(|(p, _)| p)
                    .collect();
                offsets::pause_partitions(&self.consumer, &self.topic, &stopped, true);
            }
        }
    }

    /// Polls and applies up to [`MAX_POLLS_PER_TURN`] events: the first
    /// poll waits up to [`POLL_TIMEOUT`], the rest take only what is already
    /// fetched (callbacks such as rebalances run inside the poll).
    fn poll_some(&mut self) {
        let mut timeout = POLL_TIMEOUT;
        for _ in 0..MAX_POLLS_PER_TURN {
            match self.consumer.poll(timeout) {
                Some(Ok(msg)) => {
                    self.apply(&msg);
                    if self.context().state.lock().should_seal() {
                        return;
                    }
                }
                Some(Err(e)) if offsets::is_out_of_range(&e) => {
                    error!(collection = %self.name, error = %e, "a fetch offset is outside its partition's log: checking every partition");
                    self.check_now = true;
                    return;
                }
                Some(Err(e)) => {
                    warn!(collection = %self.name, error = %e, "kafka consumer error");
                    return;
                }
                None => return,
            }
            timeout = Duration::ZERO;
        }
    }

    /// Applies one consumed record; a rejected one is queued for the
    /// dead-letter topic, a gap stops (pauses) its partition.
    fn apply(&self, msg: &BorrowedMessage<'_>) {
        let ctx = self.context();
        let record = eddy_kafka::record_of(msg);
        let (partition, offset) = (record.place.partition, record.place.offset);
        let content_type = record.message.content_type;
        let applied = ctx.state.lock().apply(record);
        match applied {
            Applied::Done => {}
            Applied::Rejected(rejection) => ctx.dlq.send(
                msg.key(),
                msg.payload(),
                content_type,
                (&self.topic, partition, offset),
                &rejection,
            ),
            Applied::Stopped(p) => {
                offsets::pause_partitions(&self.consumer, &self.topic, &[p], true)
            }
        }
    }

    /// Publishes a seal whose segment is written, and starts one when the
    /// buffer reached a limit (its segment written and uploaded off this
    /// thread); commits the offsets each publish covered. A seal waiting
    /// for dead letters is retried next turn.
    fn seal_if_due(&self) -> Result<()> {
        let ctx = self.context();
        if let Some(outcome) = ctx.state.lock().poll_seal()? {
            ctx.commit(&self.consumer, &outcome, CommitMode::Async);
        }
        if !ctx.state.lock().should_seal() {
            return Ok(());
        }
        match ctx.start_seal() {
            Ok(Some(outcome)) => ctx.commit(&self.consumer, &outcome, CommitMode::Async),
            Ok(None) => {}
            Err(e @ Error::DeadLettersPending { .. }) => {
                warn!(collection = %self.name, error = %e, "seal postponed");
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Every [`LAG_EVERY`] (or at once after an out-of-range report):
    /// checks offsets against each log, reports lag and restarts partitions
    /// an operator resumed; reports the owned partitions, and warns when
    /// none have been assigned for long.
    fn report(&mut self) -> Result<()> {
        if self.check_now || self.last_lag.elapsed() >= LAG_EVERY {
            self.check_now = false;
            self.last_lag = Instant::now();
            self.check_offsets();
            self.restart_resumed()?;
        }
        let owned = self.context().state.lock().owned_offsets().len();
        self.metrics
            .assigned_partitions
            .with_label_values(&[&self.name])
            .set(owned as i64);
        if let Some(waited) = self.unassigned.observe(owned) {
            warn!(
                collection = %self.name,
                waited_s = waited.as_secs(),
                "subscribed, but the group gave this worker no partition: the coordinator has not \
                 completed a rebalance (other members may own all partitions, or the \
                 broker keeps a dead member in the group)"
            );
        }
        Ok(())
    }

    /// Seals and commits what the worker holds.
    fn stop(self) -> Result<()> {
        let ctx = self.context();
        if let Some(outcome) = ctx.seal()? {
            // Async: a shutdown must not hang on an unreachable broker, and the
            // manifest (not the group offset) is what a restart resumes from.
            ctx.commit(&self.consumer, &outcome, CommitMode::Async);
        }
        info!(collection = %self.name, "ingest worker stopped");
        Ok(())
    }
}
