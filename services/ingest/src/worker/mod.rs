//! One collection's worker: a consumer-group member polled on its own
//! thread (librdkafka is blocking). Each turn of its loop applies
//! backpressure, polls one event into the collection state (a rejected one
//! goes to the dead-letter topic), seals when a limit is reached and reports
//! lag and assignment. Rebalances are handled by its [`context`].

mod backpressure;
mod context;
mod unassigned;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eddy_manifest::Store;
use eddy_model::CollectionDef;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{BorrowedMessage, Message};
use tracing::{info, warn};

use crate::config::IngestConfig;
use crate::dlq::DeadLetters;
use crate::error::{Error, Result};
use crate::metrics::IngestMetrics;
use crate::state::CollectionState;
use backpressure::{set_paused, Backpressure};
use context::IngestContext;
use unassigned::{UnassignedWatch, UNASSIGNED_WARN_SECS};

/// Longest one poll waits for an event.
const POLL_TIMEOUT: Duration = Duration::from_millis(50);
/// How often consumer lag is reported.
const LAG_EVERY: Duration = Duration::from_secs(5);
/// How long a lag report waits for a partition's watermarks.
const WATERMARK_TIMEOUT: Duration = Duration::from_millis(500);

/// Runs one collection's worker until `stop` is set or it fails; seals and
/// commits what it holds before returning.
pub(crate) fn run_worker(
    def: CollectionDef,
    store: Store,
    config: &IngestConfig,
    metrics: IngestMetrics,
    stop: Arc<AtomicBool>,
) -> Result<()> {
    let mut worker = Worker::start(def, store, config, metrics)?;
    while !stop.load(Ordering::Relaxed) {
        worker.turn()?;
    }
    worker.stop()
}

/// A running worker: its consumer (whose context holds the state) and what
/// its loop keeps between turns.
struct Worker {
    consumer: BaseConsumer<IngestContext>,
    name: String,
    topic: String,
    metrics: IngestMetrics,
    backpressure: Backpressure,
    unassigned: UnassignedWatch,
    last_lag: Instant,
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
        let state = CollectionState::new(def, store, config.seal_policy(), metrics.clone())?;
        let kafka = config.kafka()?;
        let dlq = DeadLetters::new(&kafka, &topic, &name, metrics.clone())?;
        let context = IngestContext::new(topic.clone(), state, dlq);
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
            topic,
            metrics,
            backpressure: Backpressure::new(config.max_unindexed_rows),
            unassigned: UnassignedWatch::new(Duration::from_secs(UNASSIGNED_WARN_SECS)),
            last_lag: Instant::now(),
        })
    }

    fn context(&self) -> &IngestContext {
        self.consumer.context()
    }

    /// One turn of the loop.
    fn turn(&mut self) -> Result<()> {
        self.apply_backpressure();
        self.poll_one();
        self.context().take_failure()?;
        self.seal_if_due()?;
        self.report();
        Ok(())
    }

    /// Pauses or resumes consumption as the unindexed-row count says.
    fn apply_backpressure(&mut self) {
        let unindexed = self
            .metrics
            .unindexed_rows
            .with_label_values(&[&self.name])
            .get();
        if let Some(pause) = self.backpressure.update(unindexed.max(0) as u64) {
            set_paused(&self.consumer, pause, &self.name, unindexed);
            self.metrics
                .backpressure
                .with_label_values(&[&self.name])
                .set(i64::from(pause));
        }
    }

    /// Polls at most one event and applies it (callbacks such as rebalances
    /// run inside the poll).
    fn poll_one(&self) {
        match self.consumer.poll(POLL_TIMEOUT) {
            Some(Ok(msg)) => self.apply(&msg),
            Some(Err(e)) => warn!(collection = %self.name, error = %e, "kafka consumer error"),
            None => {}
        }
    }

    /// Applies one consumed event; a rejected one is queued for the
    /// dead-letter topic.
    fn apply(&self, msg: &BorrowedMessage<'_>) {
        let ctx = self.context();
        let event = eddy_kafka::event_message(msg);
        let (partition, offset) = (msg.partition() as u32, msg.offset());
        let content_type = event.content_type;
        let rejected = ctx.state.lock().apply(partition, offset, event);
        if let Some(rejection) = rejected {
            ctx.dlq.send(
                msg.key(),
                msg.payload(),
                content_type,
                (&self.topic, partition, offset),
                &rejection,
            );
        }
    }

    /// Seals when the buffer reached a limit and commits the covered
    /// offsets; a seal waiting for dead letters is retried next turn.
    fn seal_if_due(&self) -> Result<()> {
        let ctx = self.context();
        if !ctx.state.lock().should_seal() {
            return Ok(());
        }
        match ctx.seal() {
            Ok(Some(outcome)) => ctx.commit(&self.consumer, &outcome, CommitMode::Async),
            Ok(None) => {}
            Err(e @ Error::DeadLettersPending { .. }) => {
                warn!(collection = %self.name, error = %e, "seal postponed");
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Reports lag (every [`LAG_EVERY`]) and the owned partitions, and warns
    /// when none have been assigned for long.
    fn report(&mut self) {
        if self.last_lag.elapsed() >= LAG_EVERY {
            self.last_lag = Instant::now();
            self.update_lag();
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
                "subscribed but no partitions assigned: the group coordinator has not \
                 completed a rebalance (other members may own all partitions, or the \
                 broker keeps a dead member in the group)"
            );
        }
    }

    /// Sets the lag gauge of every owned partition (high watermark minus the
    /// next offset to read).
    fn update_lag(&self) {
        let owned = self.context().state.lock().owned_offsets();
        let lags =
            eddy_kafka::partition_lags(&self.consumer, &self.topic, owned, WATERMARK_TIMEOUT);
        for (partition, lag) in lags {
            if let Ok(lag) = lag {
                self.metrics
                    .lag
                    .with_label_values(&[&self.name, &partition.to_string()])
                    .set(lag);
            }
        }
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
