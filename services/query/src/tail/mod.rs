//! The tail: reads every partition of a collection's topic from the served
//! manifest's offsets into the in-memory buffer, so an event is searchable as
//! soon as it is read, long before ingest seals it.
//!
//! It applies records with the same [`eddy_kafka::apply`] as ingest (the
//! same offset checks, decode and effect); a partition whose offset leaves
//! its log, or that shows a gap the topic's compaction does not explain,
//! is reported stale ([`watch`]) instead of being skipped over.

mod apply;
mod watch;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use eddy_kafka::{Gaps, KafkaSettings, LogRanges};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::BorrowedMessage;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{error, info, warn};

use crate::collection::Collection;
use crate::metrics::QueryMetrics;

/// Messages applied under one write lock at most.
const MAX_BATCH: usize = 2_000;
/// How long one log-range read waits (on connections of its own, so no
/// fetch holds it up: [`LogRanges`]).
const WATERMARK_TIMEOUT: Duration = Duration::from_millis(500);
/// How often lag is reported and offsets are checked against each log.
const CHECK_EVERY: Duration = Duration::from_secs(2);

/// How much a tail may hold before it stops reading: it resumes once
/// ingest seals and the next snapshot prunes what it sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailLimits {
    /// Rows (replaced ones included).
    pub rows: usize,
    /// Approximate bytes.
    pub bytes: usize,
}

/// One collection's tail consumer and what it keeps between batches.
struct Tail<'c> {
    collection: &'c Collection,
    limits: TailLimits,
    consumer: &'c BaseConsumer,
    /// Reads partitions' log ranges off the consumer's connections.
    log_ranges: LogRanges,
    metrics: QueryMetrics,
    topic: String,
    /// The partitions it follows: those of the shards this node serves.
    partitions: Vec<u32>,
    gaps: GapPolicy,
    /// Per stale partition, the snapshot cut-off when it went stale: a
    /// different cut-off (an operator resumed it, or ingest sealed past
    /// the problem) restarts it from there.
    stale_at: BTreeMap<u32, i64>,
}

/// Runs the tail of `collection` until its stop flag is set (blocking; run
/// it on a dedicated thread).
pub fn run_tail(
    collection: Arc<Collection>,
    kafka: &KafkaSettings,
    metrics: QueryMetrics,
    limits: TailLimits,
) {
    let name = collection.name().to_owned();
    let topic = collection.def().topic.clone();
    let client = kafka.tail_consumer(&format!("eddy-query-tail.{name}"));
    let consumer: BaseConsumer = match client.create() {
        Ok(c) => c,
        Err(e) => {
            error!(collection = %name, error = %e, "creating the tail consumer");
            return;
        }
    };
    let log_ranges = match LogRanges::new(kafka) {
        Ok(r) => r,
        Err(e) => {
            error!(collection = %name, error = %e, "creating the tail's log-range reader");
            return;
        }
    };
    let gaps = GapPolicy::read(kafka.clone(), topic.clone(), name.clone());
    let partitions = wait_for_topic(&collection, &consumer, &topic);
    if partitions == 0 {
        return;
    }
    let partitions: Vec<u32> = (0..partitions)
        .filter(|p| collection.serves_partition(*p))
        .collect();
    if partitions.is_empty() {
        // This node serves none of the collection's shards.
        collection.set_tail_ready();
        return;
    }
    // The topic's metadata and policy are read while the first snapshot
    // loads (the policy until the first batch needs it); the log ranges
    // are read after it, next to the assignment.
    if !wait_for_snapshot(&collection) {
        return;
    }
    let mut tail = Tail {
        collection: &collection,
        limits,
        consumer: &consumer,
        log_ranges,
        metrics,
        topic,
        partitions,
        gaps,
        stale_at: BTreeMap::new(),
    };
    if !tail.assign() {
        return;
    }
    collection.set_tail_ready();
    info!(collection = %name, topic = %tail.topic, partitions = ?tail.partitions, "tail started");
    tail.run();
    info!(collection = %name, "tail stopped");
}

/// Whether the topic's log may have gaps (`cleanup.policy`), read on a
/// thread of its own: the admin request takes ~100 ms on Tansu, longer than
/// the rest of the tail's start together, so the tail is assigned (and the
/// node ready) meanwhile and only its first batch waits for the answer.
enum GapPolicy {
    /// Being read.
    Reading(std::thread::JoinHandle<Gaps>),
    /// Read (or taken as not compacted after a failure).
    Known(Gaps),
}

impl GapPolicy {
    /// Starts reading `topic`'s policy (collection `name`, for the log).
    fn read(kafka: KafkaSettings, topic: String, name: String) -> Self {
        let read = move || match eddy_kafka::topic_gaps(&kafka, &topic, Duration::from_secs(5)) {
            Ok(gaps) => gaps,
            Err(e) => {
                warn!(collection = %name, error = %e, "tail: reading the topic's cleanup.policy failed: treating it as not compacted");
                Gaps::Refused
            }
        };
        match std::thread::Builder::new()
            .name("eddy-tail-policy".into())
            .spawn(read)
        {
            Ok(handle) => Self::Reading(handle),
            Err(e) => {
                warn!(error = %e, "tail: no thread to read the topic's cleanup.policy: treating it as not compacted");
                Self::Known(Gaps::Refused)
            }
        }
    }

    /// The policy, waiting for it the first time.
    fn get(&mut self) -> Gaps {
        let gaps = match std::mem::replace(self, Self::Known(Gaps::Refused)) {
            Self::Known(gaps) => gaps,
            Self::Reading(handle) => handle.join().unwrap_or_else(|_| {
                error!("tail: reading the topic's cleanup.policy panicked: treating it as not compacted");
                Gaps::Refused
            }),
        };
        *self = Self::Known(gaps);
        gaps
    }
}

/// Waits for the topic to exist; returns its partition count (0 =
/// stopped). Runs while the first snapshot loads.
fn wait_for_topic(collection: &Collection, consumer: &BaseConsumer, topic: &str) -> u32 {
    let name = collection.name();
    while !collection.is_stopped() {
        match consumer.fetch_metadata(Some(topic), Duration::from_secs(2)) {
            Ok(md) => {
                let partitions = md
                    .topics()
                    .iter()
                    .find(|t| t.name() == topic && t.error().is_none())
                    .map_or(0, |t| t.partitions().len());
                if partitions > 0 {
                    return partitions as u32;
                }
            }
            Err(e) => warn!(collection = %name, error = %e, "tail: fetching topic metadata"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    0
}

/// Waits for the first snapshot, whose cut-offs are where the tail starts;
/// false once stopped.
fn wait_for_snapshot(collection: &Collection) -> bool {
    while !collection.is_stopped() {
        if collection.wait_snapshot_ready(Duration::from_millis(200)) {
            return true;
        }
    }
    false
}

impl Tail<'_> {
    /// Assigns every partition at its start: the snapshot's cut-off, or
    /// the log start for a partition no manifest has seen. A partition
    /// whose start is outside its log is assigned stale (paused). Returns
    /// false when stopped before the log ranges could be read.
    fn assign(&mut self) -> bool {
        let Some(logs) = self.read_log_ranges() else {
            return false;
        };
        let cutoffs = self.collection.snapshot().cutoffs.clone();
        let mut tpl = TopicPartitionList::new();
        let mut starts = BTreeMap::new();
        for (p, (low, _)) in &logs {
            let start = cutoffs.get(p).copied().unwrap_or(*low);
            starts.insert(*p, start);
            if let Err(e) = tpl.add_partition_offset(&self.topic, *p as i32, Offset::Offset(start))
            {
                warn!(error = %e, "building the tail assignment");
            }
        }
        if let Err(e) = self.consumer.assign(&tpl) {
            error!(collection = %self.collection.name(), error = %e, "assigning the tail");
            return false;
        }
        self.collection.apply_tail(|served| {
            for (p, start) in &starts {
                let applied = served.applied.entry(*p).or_insert(*start);
                *applied = (*applied).max(*start);
            }
        });
        for (p, (low, high)) in logs {
            self.check_range(p, starts[&p], low, high);
        }
        true
    }

    /// Every partition's log range, read again until it succeeds (each
    /// failure is logged); `None` once the tail is stopped.
    fn read_log_ranges(&self) -> Option<BTreeMap<u32, (i64, i64)>> {
        let mut logs = BTreeMap::new();
        for &p in &self.partitions {
            loop {
                if self.collection.is_stopped() {
                    return None;
                }
                match self.log_ranges.read(&self.topic, p, WATERMARK_TIMEOUT) {
                    Ok(range) => {
                        logs.insert(p, range);
                        break;
                    }
                    Err(e) => {
                        error!(collection = %self.collection.name(), partition = p, error = %e, "tail: reading the partition's log range");
                        std::thread::sleep(Duration::from_millis(500));
                    }
                }
            }
        }
        Some(logs)
    }

    /// Messages the tail may still take: 0 at its bound.
    fn room(&self) -> usize {
        let (rows, bytes) = self.collection.tail_size();
        if rows >= self.limits.rows || bytes >= self.limits.bytes {
            0
        } else {
            self.limits.rows - rows
        }
    }

    /// Records whether the tail is at its bound (log and gauge on a change).
    fn set_full(&self, full: bool) {
        if !self.collection.set_tail_full(full) {
            return;
        }
        let name = self.collection.name();
        self.metrics
            .tail_paused
            .with_label_values(&[name])
            .set(i64::from(full));
        let (rows, bytes) = self.collection.tail_size();
        if full {
            warn!(collection = %name, rows, bytes, limit_rows = self.limits.rows, limit_bytes = self.limits.bytes, "tail at its bound: reading paused until eddy-ingest seals (answers report it stale)");
        } else {
            info!(collection = %name, rows, bytes, "tail below its bound again: reading");
        }
    }

    /// Polls batches and applies them until stopped, never past the tail's
    /// bound; checks offsets every [`CHECK_EVERY`] and at once after an
    /// out-of-range report.
    fn run(&mut self) {
        let name = self.collection.name().to_owned();
        let mut last_check = Instant::now();
        let consumer = self.consumer;
        let mut batch: Vec<BorrowedMessage<'_>> = Vec::with_capacity(MAX_BATCH);
        while !self.collection.is_stopped() {
            batch.clear();
            let room = self.room().min(MAX_BATCH);
            self.set_full(room == 0);
            if room == 0 {
                // Not polling leaves the rest in the log (and librdkafka's
                // bounded prefetch queue) until sealing makes room.
                std::thread::sleep(Duration::from_millis(50));
                if last_check.elapsed() >= CHECK_EVERY {
                    last_check = Instant::now();
                    self.check_offsets();
                }
                continue;
            }
            let mut check_now = false;
            let mut timeout = Duration::from_millis(50);
            while batch.len() < room {
                match consumer.poll(timeout) {
                    Some(Ok(m)) => batch.push(m),
                    Some(Err(e)) if is_out_of_range(&e) => {
                        error!(collection = %name, error = %e, "tail: a fetch offset is outside its partition's log");
                        check_now = true;
                        break;
                    }
                    Some(Err(e)) => {
                        warn!(collection = %name, error = %e, "tail consumer error");
                        break;
                    }
                    None => break,
                }
                timeout = Duration::ZERO;
            }
            if !batch.is_empty() {
                let gaps = self.gaps.get();
                let gapped = apply::apply_batch(self.collection, &batch, gaps, &self.metrics);
                batch.clear();
                for (partition, reason, expected, got) in gapped {
                    self.mark_stale(partition, reason, expected, got);
                }
            }
            if check_now || last_check.elapsed() >= CHECK_EVERY {
                last_check = Instant::now();
                self.check_offsets();
            }
        }
    }
}

/// Whether a consumer error says a fetch offset is outside the log.
fn is_out_of_range(e: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};
    matches!(
        e,
        KafkaError::MessageConsumption(
            RDKafkaErrorCode::OffsetOutOfRange | RDKafkaErrorCode::AutoOffsetReset
        )
    )
}
