//! The tail's offset watch: lag per partition, and stale partitions — a
//! partition whose next offset left its log (retention, a re-created
//! topic) or that showed a gap is paused and reported
//! (`eddy_query_partition_stale`, a log line naming the offsets) instead of
//! being skipped over; it restarts from the snapshot's cut-off once that
//! changes (an operator resumed it, or ingest sealed past the problem).

use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{error, info, warn};

use eddy_kafka::StopReason;

use super::{Tail, WATERMARK_TIMEOUT};

impl Tail<'_> {
    /// Reads every partition's log range: sets the lag gauge, marks
    /// partitions whose next offset left the log stale, and restarts stale
    /// ones whose cut-off moved.
    pub(super) fn check_offsets(&mut self) {
        let name = self.collection.name().to_owned();
        self.restart_moved();
        let visible = self.collection.visible_offsets();
        for p in self.partitions.clone() {
            let range = self.log_ranges.read(&self.topic, p, WATERMARK_TIMEOUT);
            let (low, high) = match range {
                Ok(range) => range,
                Err(e) => {
                    error!(collection = %name, partition = p, error = %e, "tail: reading the partition's log range failed; offsets unchecked until it succeeds");
                    continue;
                }
            };
            let position = visible.get(&p).copied().unwrap_or(low);
            self.metrics
                .lag
                .with_label_values(&[&name, &p.to_string()])
                .set(eddy_kafka::lag(high, position));
            if !self.stale_at.contains_key(&p) {
                let next = visible.get(&p).copied().unwrap_or(low);
                self.check_range(p, next, low, high);
            }
        }
    }

    /// Marks `partition` stale when `next` is outside its log `[low, high)`.
    pub(super) fn check_range(&mut self, partition: u32, next: i64, low: i64, high: i64) {
        if let Some(reason) = StopReason::check(next, low, high) {
            let found = if next < low { low } else { high };
            self.mark_stale(partition, reason, next, found);
        }
    }

    /// Pauses `partition` and reports it stale: queries there see only the
    /// sealed segments until it restarts.
    pub(super) fn mark_stale(
        &mut self,
        partition: u32,
        reason: StopReason,
        expected: i64,
        found: i64,
    ) {
        let name = self.collection.name();
        let cutoff = self.collection.apply_tail(|served| {
            served.stale.insert(partition, reason);
            served
                .snapshot
                .cutoffs
                .get(&partition)
                .copied()
                .unwrap_or(0)
        });
        if self.stale_at.insert(partition, cutoff).is_some() {
            return;
        }
        error!(
            collection = %name,
            topic = %self.topic,
            partition,
            expected_offset = expected,
            found_offset = found,
            reason = reason.as_str(),
            "tail: partition stale: reading on would skip or misread events; queries \
             reflect its sealed segments only"
        );
        self.metrics
            .partition_stale
            .with_label_values(&[name, &partition.to_string(), reason.as_str()])
            .set(1);
        self.pause(partition, true);
    }

    /// Restarts stale partitions whose snapshot cut-off moved since they
    /// went stale, from that cut-off.
    fn restart_moved(&mut self) {
        let cutoffs = self.collection.snapshot().cutoffs.clone();
        let moved: Vec<(u32, i64)> = self
            .stale_at
            .iter()
            .filter_map(|(p, at)| {
                let now = cutoffs.get(p).copied().unwrap_or(0);
                (now != *at).then_some((*p, now))
            })
            .collect();
        for (p, cutoff) in moved {
            let name = self.collection.name();
            if let Err(e) = self.consumer.seek(
                &self.topic,
                p as i32,
                Offset::Offset(cutoff),
                WATERMARK_TIMEOUT,
            ) {
                warn!(collection = %name, partition = p, error = %e, "tail: seeking a restarted partition; retrying");
                continue;
            }
            self.stale_at.remove(&p);
            let reason = self.collection.apply_tail(|served| {
                served.applied.insert(p, cutoff);
                served.stale.remove(&p)
            });
            if let Some(reason) = reason {
                self.metrics
                    .partition_stale
                    .with_label_values(&[name, &p.to_string(), reason.as_str()])
                    .set(0);
            }
            self.pause(p, false);
            info!(collection = %name, partition = p, offset = cutoff, "tail: stale partition restarted from the snapshot's cut-off");
        }
    }

    fn pause(&self, partition: u32, pause: bool) {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.topic, partition as i32);
        let result = if pause {
            self.consumer.pause(&tpl)
        } else {
            self.consumer.resume(&tpl)
        };
        if let Err(e) = result {
            warn!(collection = %self.collection.name(), partition, error = %e, pause, "tail: pausing or resuming a partition");
        }
    }
}
