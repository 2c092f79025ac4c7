//! Publishing encoded records to a topic at a fixed event rate (paced from
//! the start, without drift) or flat out, once or in repeated passes (later
//! passes are upserts of the same ids), keeping every acknowledgement's
//! latency and the last delivered offset of each partition.
//!
//! Acknowledgements are collected by a task of their own, so their latency
//! is taken when the broker's answer arrives, not when the sender next
//! looks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::StreamExt as _;
use indicatif::ProgressBar;
use rdkafka::message::Timestamp;
use rdkafka::producer::{DeliveryFuture, FutureProducer};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::encode::Record;
use crate::histogram::{LatencyHistogram, LatencyStats};
use crate::kafka::{self, Error, Result};
use crate::offsets::DeliveredOffsets;
use crate::pacing::Schedule;

/// How to publish.
#[derive(Debug, Clone)]
pub struct PublishOptions {
    /// The topic.
    pub topic: String,
    /// The `content-type` header of every record (`None`: no header; the
    /// collection must declare the format).
    pub content_type: Option<&'static str>,
    /// Target events (points, not records) per second; 0 = flat out.
    pub rate: f64,
    /// Passes over the records; 0 = until `stop` is set.
    pub passes: u64,
    /// From the second pass on, send a tombstone instead of every this-many-th
    /// single-point record (shifted by one each pass, so deleted ids come
    /// back in the next one); 0 = never.
    pub delete_every: u64,
}

impl PublishOptions {
    /// Whether record `index` of pass `pass` goes as a tombstone.
    fn tombstone(&self, pass: u64, index: usize, record: &Record) -> bool {
        self.delete_every > 0
            && pass > 0
            && record.points == 1
            && (index as u64 + pass).is_multiple_of(self.delete_every)
    }
}

/// Which timestamp the broker's acknowledgements carried.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TimestampKind {
    /// None seen (no acknowledgement yet, or the broker sent none).
    #[default]
    None,
    /// The producer's create time (a `CreateTime` topic).
    CreateTime,
    /// The broker's log append time (a `LogAppendTime` topic).
    LogAppendTime,
}

impl TimestampKind {
    /// The kind of `ts` and its milliseconds since the epoch.
    pub fn of(ts: Timestamp) -> (Self, Option<i64>) {
        match ts {
            Timestamp::NotAvailable => (Self::None, None),
            Timestamp::CreateTime(ms) => (Self::CreateTime, Some(ms)),
            Timestamp::LogAppendTime(ms) => (Self::LogAppendTime, Some(ms)),
        }
    }
}

/// What publishing measured.
#[derive(Debug, Clone)]
pub struct PublishStats {
    /// Records acknowledged.
    pub records: u64,
    /// Events (points) in them, tombstones included.
    pub events: u64,
    /// Tombstones among them.
    pub tombstones: u64,
    /// Value bytes in them.
    pub bytes: u64,
    /// From the first send to the last send.
    pub send_elapsed: Duration,
    /// From the first send to the last acknowledgement.
    pub elapsed: Duration,
    /// Send → acknowledgement latency of every record.
    pub ack: LatencyHistogram,
    /// The last acknowledged offset of each partition.
    pub offsets: DeliveredOffsets,
    /// The timestamp kind the acknowledgements carried.
    pub timestamps: TimestampKind,
}

impl PublishStats {
    fn new(topic: &str) -> Self {
        Self {
            records: 0,
            events: 0,
            tombstones: 0,
            bytes: 0,
            send_elapsed: Duration::ZERO,
            elapsed: Duration::ZERO,
            ack: LatencyHistogram::new(),
            offsets: DeliveredOffsets::new(topic),
            timestamps: TimestampKind::None,
        }
    }

    /// Acknowledged events per second (first send to last acknowledgement).
    pub fn events_per_sec(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Events handed to the producer per second (the pacing kept).
    pub fn send_events_per_sec(&self) -> f64 {
        self.events as f64 / self.send_elapsed.as_secs_f64().max(1e-9)
    }

    /// Acknowledged value bytes per second.
    pub fn bytes_per_sec(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The serializable summary.
    pub fn summary(&self) -> PublishSummary {
        PublishSummary {
            records: self.records,
            events: self.events,
            tombstones: self.tombstones,
            bytes: self.bytes,
            elapsed_s: self.elapsed.as_secs_f64(),
            events_per_s: self.events_per_sec(),
            send_events_per_s: self.send_events_per_sec(),
            bytes_per_s: self.bytes_per_sec(),
            ack: self.ack.summary(),
            timestamps: self.timestamps,
            offsets: self.offsets.clone(),
        }
    }
}

/// What a publish run reports (JSON output).
#[derive(Debug, Clone, Serialize)]
pub struct PublishSummary {
    /// Records acknowledged.
    pub records: u64,
    /// Events in them, tombstones included.
    pub events: u64,
    /// Tombstones among them.
    pub tombstones: u64,
    /// Value bytes in them.
    pub bytes: u64,
    /// First send to last acknowledgement, seconds.
    pub elapsed_s: f64,
    /// Acknowledged events per second.
    pub events_per_s: f64,
    /// Events sent per second (first to last send).
    pub send_events_per_s: f64,
    /// Acknowledged value bytes per second.
    pub bytes_per_s: f64,
    /// Send → acknowledgement latency per record.
    pub ack: Option<LatencyStats>,
    /// Which timestamp the acknowledgements carried.
    pub timestamps: TimestampKind,
    /// Last acknowledged offset per partition.
    pub offsets: DeliveredOffsets,
}

/// One record in flight: when it was sent, what it held, its delivery.
struct InFlight {
    sent_at: Instant,
    points: u32,
    bytes: usize,
    tombstone: bool,
    delivery: DeliveryFuture,
}

/// Publishes `records` as `opts` says; `progress` counts acknowledged events.
/// Stops early (after the records in flight are acknowledged) once `stop`
/// is set. Fails on the first record the broker rejects.
pub async fn publish(
    producer: &FutureProducer,
    records: &[Record],
    opts: &PublishOptions,
    stop: &AtomicBool,
    progress: &ProgressBar,
) -> Result<PublishStats> {
    let (tx, rx) = mpsc::unbounded_channel();
    let collector = tokio::spawn(collect(rx, opts.topic.clone(), progress.clone()));
    let start = Instant::now();
    let schedule = Schedule::new(start, opts.rate);
    let sent = send_all(producer, records, opts, stop, &schedule, &tx).await;
    let send_elapsed = start.elapsed();
    drop(tx);
    let mut stats = collector.await.map_err(|_| Error::Canceled)??;
    sent?;
    stats.send_elapsed = send_elapsed;
    stats.elapsed = start.elapsed();
    Ok(stats)
}

async fn send_all(
    producer: &FutureProducer,
    records: &[Record],
    opts: &PublishOptions,
    stop: &AtomicBool,
    schedule: &Schedule,
    tx: &mpsc::UnboundedSender<InFlight>,
) -> Result<()> {
    if records.is_empty() {
        return Ok(());
    }
    let mut events = 0u64;
    let mut pass = 0u64;
    while opts.passes == 0 || pass < opts.passes {
        for (index, record) in records.iter().enumerate() {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            schedule.wait(events).await;
            let tombstone = opts.tombstone(pass, index, record);
            let value = (!tombstone).then_some(record.value.as_slice());
            let sent_at = Instant::now();
            let delivery =
                kafka::send(producer, &opts.topic, &record.key, value, opts.content_type).await?;
            let in_flight = InFlight {
                sent_at,
                points: record.points,
                bytes: value.map_or(0, <[u8]>::len),
                tombstone,
                delivery,
            };
            if tx.send(in_flight).is_err() {
                // The collector stopped on a rejected record; it reports why.
                return Ok(());
            }
            events += u64::from(record.points);
        }
        pass += 1;
    }
    Ok(())
}

/// Awaits deliveries as they are handed over, until the sender is done and
/// every delivery has arrived.
async fn collect(
    mut rx: mpsc::UnboundedReceiver<InFlight>,
    topic: String,
    progress: ProgressBar,
) -> Result<PublishStats> {
    let mut stats = PublishStats::new(&topic);
    let mut pending = FuturesUnordered::new();
    let mut open = true;
    while open || !pending.is_empty() {
        tokio::select! {
            next = rx.recv(), if open => match next {
                Some(f) => pending.push(async move {
                    let done = f.delivery.await;
                    (f.sent_at.elapsed(), f.points, f.bytes, f.tombstone, done)
                }),
                None => open = false,
            },
            Some((latency, points, bytes, tombstone, done)) = pending.next() => {
                let delivery = done
                    .map_err(|_| Error::Canceled)?
                    .map_err(|(e, _)| Error::Delivery(Box::new(e)))?;
                stats.records += 1;
                stats.events += u64::from(points);
                stats.bytes += bytes as u64;
                stats.tombstones += u64::from(tombstone);
                stats.ack.record(latency);
                stats.offsets.observe(delivery.partition, delivery.offset);
                let (kind, _) = TimestampKind::of(delivery.timestamp);
                if kind != TimestampKind::None {
                    stats.timestamps = kind;
                }
                progress.inc(u64::from(points));
            }
        }
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tombstones_rotate_from_the_second_pass() {
        let opts = PublishOptions {
            topic: "t".into(),
            content_type: Some("application/json"),
            rate: 0.0,
            passes: 3,
            delete_every: 3,
        };
        let one = Record {
            key: "0".into(),
            value: vec![1],
            points: 1,
        };
        let deleted = |pass| {
            (0..6)
                .filter(|&i| opts.tombstone(pass, i, &one))
                .collect::<Vec<_>>()
        };
        assert!(deleted(0).is_empty(), "the first pass creates every id");
        assert_eq!(deleted(1), vec![2, 5]);
        assert_eq!(deleted(2), vec![1, 4], "deleted ids come back next pass");
        let batch = Record { points: 10, ..one };
        assert!(
            !opts.tombstone(1, 2, &batch),
            "a batch record is never a tombstone"
        );
    }
}
