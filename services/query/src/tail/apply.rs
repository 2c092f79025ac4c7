//! One batch of tail records applied under one write lock, through the
//! same offset checks and effect as ingest ([`eddy_kafka::apply_decoded`]).
//! The records are decoded before the lock is taken: searches wait only
//! for the effect.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use eddy_kafka::{Cursor, Gaps, Outcome, StopReason};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::Timestamp;

use crate::collection::Collection;
use crate::metrics::QueryMetrics;

/// A partition that showed a gap: (partition, reason, expected, got).
pub(super) type Gapped = (u32, StopReason, i64, i64);

/// Applies `batch` to the collection's tail; returns the partitions that
/// showed a gap (nothing of theirs from the gap on is applied).
pub(super) fn apply_batch(
    collection: &Collection,
    batch: &[BorrowedMessage<'_>],
    gaps: Gaps,
    metrics: &QueryMetrics,
) -> Vec<Gapped> {
    let name = collection.name();
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut outcomes: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut latencies = Vec::with_capacity(batch.len());
    let mut gapped: Vec<Gapped> = Vec::new();
    let mut conflicts = 0;
    let def = collection.def();
    // Decoded outside the lock (a record the lock then finds stale or
    // already applied was decoded for nothing: rare, and off the lock).
    let decoded: Vec<_> = batch
        .iter()
        .map(|msg| {
            let record = eddy_kafka::record_of(msg);
            let event = eddy_event::decode(&def, record.message);
            (record.place, msg.timestamp(), event)
        })
        .collect();
    let ((tail_rows, visible), lock) = collection.apply_tail_timed(|served| {
        for (place, timestamp, event) in decoded {
            let partition = place.partition;
            if served.stale.contains_key(&partition) {
                *outcomes.entry("stale").or_default() += 1;
                continue;
            }
            let cutoff = served
                .snapshot
                .cutoffs
                .get(&partition)
                .copied()
                .unwrap_or(0);
            let applied = served.applied.get(&partition).copied().unwrap_or(cutoff);
            let mut cursor = Cursor {
                next: cutoff.max(applied),
                gaps,
            };
            let timestamp_ms = timestamp.to_millis();
            let outcome = eddy_kafka::apply_decoded(&mut served.tail, &mut cursor, place, event);
            served.applied.insert(partition, cursor.next);
            let label = match outcome {
                Outcome::Applied {
                    upserts,
                    deletes,
                    conflicts: c,
                } => {
                    conflicts += c;
                    if deletes > 0 && upserts == 0 {
                        "delete"
                    } else {
                        "upsert"
                    }
                }
                Outcome::Duplicate => "skipped",
                // Ingest rejects the same events with the same decoder and
                // counts them; the tail only skips them.
                Outcome::Rejected(_) => "rejected",
                Outcome::Gap { expected, got } => {
                    served.stale.insert(partition, StopReason::OffsetGap);
                    gapped.push((partition, StopReason::OffsetGap, expected, got));
                    "stale"
                }
            };
            *outcomes.entry(label).or_default() += 1;
            if let (Some(ts), true) = (timestamp_ms, label == "upsert" || label == "delete") {
                latencies.push((clock(timestamp), (now_ms - ts).max(0) as f64 / 1000.0));
            }
        }
        (served.tail.live_rows(), served.visible_offsets())
    });
    // Metrics are set after the lock is released: searches wait on it.
    for (phase, time) in [("wait", lock.waited), ("hold", lock.held)] {
        metrics
            .tail_lock
            .with_label_values(&[name, phase])
            .observe(time.as_secs_f64());
    }
    metrics
        .tail_rows
        .with_label_values(&[name])
        .set(tail_rows as i64);
    for (p, off) in visible {
        metrics
            .visible_offset
            .with_label_values(&[name, &p.to_string()])
            .set(off);
    }
    for (outcome, n) in outcomes {
        metrics
            .tail_events
            .with_label_values(&[name, outcome])
            .inc_by(n);
    }
    if conflicts > 0 {
        metrics
            .id_partition_conflicts
            .with_label_values(&[name])
            .inc_by(conflicts as u64);
    }
    for (clock, seconds) in latencies {
        metrics
            .ingest_to_visible
            .with_label_values(&[name, clock])
            .observe(seconds);
    }
    gapped
}

/// Which clock an event's timestamp is on: the broker's append time where
/// the topic has `message.timestamp.type=LogAppendTime` (freshness without
/// the producer's clock or its send queue), else the producer's create time.
fn clock(timestamp: Timestamp) -> &'static str {
    match timestamp {
        Timestamp::LogAppendTime(_) => "log_append",
        _ => "create",
    }
}
