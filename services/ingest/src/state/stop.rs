//! Stopped partitions: where reading on would skip or misread events (the
//! manifest's offset is outside the log, or a gap the topic's compaction
//! does not explain), the partition stops loudly — a log line naming the
//! partition and offsets, a metric, an alert — while the others go on,
//! until an operator resumes it from a chosen offset
//! ([`crate::resume_partition`]).

use std::time::{SystemTime, UNIX_EPOCH};

use tracing::error;

pub use eddy_kafka::StopReason;

use super::CollectionState;

/// A stopped partition: why and since when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stopped {
    /// Why it stopped.
    pub(crate) reason: StopReason,
    /// When, in ms since the Unix epoch (a resume recorded later restarts it).
    pub(crate) at_ms: u64,
}

impl CollectionState {
    /// Checks an owned partition's next offset against its log `[low,
    /// high)`; stops it (and returns true) when reading on would skip
    /// events or read another log's.
    pub fn check_log_range(&mut self, partition: u32, low: i64, high: i64) -> bool {
        let Some(owned) = self.owned.get(&partition) else {
            return false;
        };
        if owned.stopped.is_some() {
            return false;
        }
        match StopReason::check(owned.next, low, high) {
            Some(reason) => {
                let next = owned.next;
                self.stop(partition, reason, next, if next < low { low } else { high });
                true
            }
            None => false,
        }
    }

    /// Stops `partition`: nothing more is applied from it until an
    /// operator resumes it. `expected` is the offset eddy needs next and
    /// `found` what the log offered instead (log start, high watermark, or
    /// the offset that arrived).
    pub(crate) fn stop(&mut self, partition: u32, reason: StopReason, expected: i64, found: i64) {
        let Some(owned) = self.owned.get_mut(&partition) else {
            return;
        };
        let at_ms = now_ms();
        owned.stopped = Some(Stopped { reason, at_ms });
        error!(
            collection = %self.def.name,
            topic = %self.def.topic,
            partition,
            expected_offset = expected,
            found_offset = found,
            reason = reason.as_str(),
            "partition stopped: reading on would skip or misread events; the other partitions \
             go on. Resume it from a chosen offset with `eddy partition resume`"
        );
        self.metrics
            .partition_stopped
            .with_label_values(&[&self.def.name, &partition.to_string(), reason.as_str()])
            .set(1);
        self.publish_stopped_count();
    }

    /// Stopped partitions, each with when it stopped.
    pub(crate) fn stopped(&self) -> Vec<(u32, Stopped)> {
        self.owned
            .iter()
            .filter_map(|(p, o)| o.stopped.map(|s| (*p, s)))
            .collect()
    }

    pub(super) fn clear_stop_gauge(&self, partition: u32, reason: StopReason) {
        self.metrics
            .partition_stopped
            .with_label_values(&[&self.def.name, &partition.to_string(), reason.as_str()])
            .set(0);
    }

    pub(super) fn publish_stopped_count(&self) {
        let stopped = self.owned.values().filter(|o| o.stopped.is_some()).count() as i64;
        self.metrics
            .stalled_partitions
            .with_label_values(&[&self.def.name])
            .set(stopped);
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use eddy_kafka::Gaps;

    use crate::metrics::IngestMetrics;
    use crate::state::{test_policy, test_record, test_state, Applied, CollectionState};

    fn state(dir: &std::path::Path) -> (CollectionState, IngestMetrics) {
        test_state(dir, test_policy())
    }

    #[test]
    fn a_gap_stops_only_its_partition_and_a_compacted_topic_accepts_it() {
        let dir = tempfile::tempdir().expect("tmp");
        let (mut state, metrics) = state(dir.path());
        state
            .assign(&[0, 1], &BTreeMap::from([(0, 5), (1, 0)]))
            .expect("assign");
        assert_eq!(
            state.owned_offsets()[&0],
            5,
            "a new partition starts at its log start"
        );
        let v = br#"{"id": 1, "vector": [1, 0]}"#;
        assert_eq!(state.apply(test_record(v, 0, 5)), Applied::Done);
        assert_eq!(state.apply(test_record(v, 0, 8)), Applied::Stopped(0));
        assert_eq!(
            state.apply(test_record(v, 0, 6)),
            Applied::Done,
            "ignored once stopped"
        );
        assert_eq!(
            state.owned_offsets()[&0],
            6,
            "nothing past the gap is taken"
        );
        assert_eq!(state.apply(test_record(v, 1, 0)), Applied::Done);
        assert_eq!(state.owned_offsets()[&1], 1, "the other partition goes on");
        let stopped = metrics
            .partition_stopped
            .with_label_values(&["c", "0", "offset_gap"])
            .get();
        assert_eq!(stopped, 1);
        assert_eq!(
            metrics.stalled_partitions.with_label_values(&["c"]).get(),
            1
        );

        state.set_gaps(Gaps::Compacted);
        assert_eq!(state.apply(test_record(v, 1, 9)), Applied::Done);
        assert_eq!(state.owned_offsets()[&1], 10);
    }

    #[test]
    fn an_offset_outside_the_log_stops_the_partition_even_at_zero() {
        let dir = tempfile::tempdir().expect("tmp");
        let (mut state, metrics) = state(dir.path());
        state
            .assign(&[0], &BTreeMap::from([(0, 0)]))
            .expect("assign");
        assert!(!state.check_log_range(0, 0, 10));
        assert!(state.check_log_range(0, 3, 10), "retention passed offset 0");
        let stopped = metrics
            .partition_stopped
            .with_label_values(&["c", "0", "below_log_start"])
            .get();
        assert_eq!(stopped, 1);
        state.revoke(&[0]);
        assert_eq!(
            metrics.stalled_partitions.with_label_values(&["c"]).get(),
            0
        );
    }
}
