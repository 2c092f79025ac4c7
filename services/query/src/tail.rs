//! The tail: reads every partition of a collection's topic from the served
//! manifest's offsets into the in-memory buffer, so an event is searchable as
//! soon as it is read, long before ingest seals it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use eddy_event::Event;
use eddy_kafka::KafkaSettings;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};
use tracing::{info, warn};

use crate::collection::Collection;
use crate::metrics::QueryMetrics;

/// Messages applied under one write lock at most.
const MAX_BATCH: usize = 2_000;
/// How long a lag report waits for a partition's watermarks.
const WATERMARK_TIMEOUT: Duration = Duration::from_millis(500);

/// Runs the tail of `collection` until its stop flag is set (blocking; run
/// it on a dedicated thread).
pub fn run_tail(collection: Arc<Collection>, kafka: &KafkaSettings, metrics: QueryMetrics) {
    let name = collection.name().to_owned();
    let topic = collection.def().topic.clone();
    let client = kafka.tail_consumer(&format!("eddy-query-tail.{name}"));
    let consumer: BaseConsumer = match client.create() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(collection = %name, error = %e, "creating the tail consumer");
            return;
        }
    };
    // Wait for the first snapshot (its cut-offs are where the tail starts)
    // and for the topic to exist.
    let mut partitions = 0;
    while !collection.is_stopped() {
        if collection.snapshot_ready() {
            match consumer.fetch_metadata(Some(&topic), Duration::from_secs(2)) {
                Ok(md) => {
                    partitions = md
                        .topics()
                        .iter()
                        .find(|t| t.name() == topic && t.error().is_none())
                        .map_or(0, |t| t.partitions().len());
                }
                Err(e) => warn!(collection = %name, error = %e, "tail: fetching topic metadata"),
            }
            if partitions > 0 {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    if partitions == 0 {
        return;
    }
    let cutoffs = collection.snapshot().cutoffs.clone();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions as i32 {
        let offset = match cutoffs.get(&(p as u32)) {
            Some(&o) if o > 0 => Offset::Offset(o),
            _ => Offset::Beginning,
        };
        if let Err(e) = tpl.add_partition_offset(&topic, p, offset) {
            warn!(error = %e, "building the tail assignment");
        }
    }
    if let Err(e) = consumer.assign(&tpl) {
        tracing::error!(collection = %name, error = %e, "assigning the tail");
        return;
    }
    collection.set_tail_ready();
    info!(collection = %name, topic = %topic, partitions, "tail started");

    let mut last_lag = Instant::now();
    let mut batch: Vec<BorrowedMessage<'_>> = Vec::with_capacity(MAX_BATCH);
    while !collection.is_stopped() {
        batch.clear();
        match consumer.poll(Duration::from_millis(50)) {
            Some(Ok(m)) => batch.push(m),
            Some(Err(e)) => warn!(collection = %name, error = %e, "tail consumer error"),
            None => {}
        }
        while !batch.is_empty() && batch.len() < MAX_BATCH {
            match consumer.poll(Duration::ZERO) {
                Some(Ok(m)) => batch.push(m),
                Some(Err(e)) => {
                    warn!(collection = %name, error = %e, "tail consumer error");
                    break;
                }
                None => break,
            }
        }
        if !batch.is_empty() {
            apply_batch(&collection, &batch, &metrics);
        }
        if last_lag.elapsed() >= Duration::from_secs(2) {
            last_lag = Instant::now();
            update_lag(&consumer, &collection, partitions, &metrics);
        }
    }
    info!(collection = %name, "tail stopped");
}

fn apply_batch(collection: &Collection, batch: &[BorrowedMessage<'_>], metrics: &QueryMetrics) {
    let name = collection.name();
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut outcomes: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut latencies = Vec::with_capacity(batch.len());
    collection.apply_tail(|live| {
        for msg in batch {
            let partition = msg.partition() as u32;
            let offset = msg.offset();
            let cutoff = live.snapshot.cutoffs.get(&partition).copied().unwrap_or(0);
            let applied = live.applied.get(&partition).copied().unwrap_or(0);
            if offset < cutoff || offset < applied {
                *outcomes.entry("skipped").or_default() += 1;
                continue;
            }
            live.applied.insert(partition, offset + 1);
            let event = eddy_kafka::event_message(msg);
            let outcome = match eddy_event::decode(collection.def(), event) {
                Ok(Event::Upsert(point)) => {
                    let payload = if point.payload.is_empty() {
                        Vec::new()
                    } else {
                        serde_json::to_vec(&point.payload).unwrap_or_default()
                    };
                    live.tail
                        .upsert(point.id, &point.vector, &payload, partition, offset);
                    "upsert"
                }
                Ok(Event::Delete(id)) => {
                    live.tail.delete(id, partition, offset);
                    "delete"
                }
                // Ingest rejects the same events with the same decoder and
                // counts them; the tail only skips them.
                Err(_) => "rejected",
            };
            *outcomes.entry(outcome).or_default() += 1;
            if let Some(ts) = msg.timestamp().to_millis() {
                latencies.push((now_ms - ts).max(0) as f64 / 1000.0);
            }
        }
        metrics
            .tail_rows
            .with_label_values(&[name])
            .set(live.tail.live_rows() as i64);
        for (p, off) in live.visible_offsets() {
            metrics
                .visible_offset
                .with_label_values(&[name, &p.to_string()])
                .set(off);
        }
    });
    for (outcome, n) in outcomes {
        metrics
            .tail_events
            .with_label_values(&[name, outcome])
            .inc_by(n);
    }
    let hist = metrics.ingest_to_visible.with_label_values(&[name]);
    for l in latencies {
        hist.observe(l);
    }
}

/// Sets the lag gauge of every partition: its high watermark minus the
/// first offset queries do not reflect yet.
fn update_lag(
    consumer: &BaseConsumer,
    collection: &Collection,
    partitions: usize,
    metrics: &QueryMetrics,
) {
    let visible = collection.visible_offsets();
    let positions = (0..partitions as u32).map(|p| (p, visible.get(&p).copied().unwrap_or(0)));
    let lags = eddy_kafka::partition_lags(
        consumer,
        &collection.def().topic,
        positions,
        WATERMARK_TIMEOUT,
    );
    for (partition, lag) in lags {
        if let Ok(lag) = lag {
            metrics
                .lag
                .with_label_values(&[collection.name(), &partition.to_string()])
                .set(lag);
        }
    }
}
