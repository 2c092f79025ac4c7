//! Backpressure: consumption pauses while too many sealed rows wait for
//! their graph, and resumes below half of the limit.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use tracing::{info, warn};

/// Bounds the rows sealed but not yet indexed: consumption pauses above the
/// limit and resumes below half of it (0 = no bound). The query tail keeps
/// serving fresh events from Kafka meanwhile, so freshness is unaffected.
pub(super) struct Backpressure {
    limit: u64,
    paused: bool,
}

impl Backpressure {
    /// A bound of `limit` unindexed rows (0 = none).
    pub(super) fn new(limit: u64) -> Self {
        Self {
            limit,
            paused: false,
        }
    }

    /// Whether consumption should be paused with `unindexed` rows waiting
    /// (with hysteresis: once paused, until below half the limit).
    pub(super) fn wants(&mut self, unindexed: u64) -> bool {
        if self.limit == 0 {
            return false;
        }
        self.paused = if self.paused {
            unindexed > self.limit / 2
        } else {
            unindexed > self.limit
        };
        self.paused
    }
}

/// The consumer's paused state: says when it must be (re)applied.
#[derive(Debug, Default)]
pub(super) struct PauseGate {
    paused: bool,
    last_applied: Option<Instant>,
}

impl PauseGate {
    /// Returns `Some(pause)` when the consumer's paused state must be
    /// (re)applied: on a change, and once a second while paused (partitions
    /// assigned since the pause started are not paused).
    pub(super) fn update(&mut self, want: bool) -> Option<bool> {
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

/// Pauses (or resumes) fetching of every assigned partition. Polling goes
/// on, so the group membership and rebalances are unaffected.
pub(super) fn set_paused<C: ConsumerContext + 'static>(
    consumer: &BaseConsumer<C>,
    pause: bool,
    name: &str,
    unindexed: i64,
) {
    let assignment = match consumer.assignment() {
        Ok(a) => a,
        Err(e) => {
            warn!(collection = %name, error = %e, "reading the assignment to pause it");
            return;
        }
    };
    let result = if pause {
        warn!(collection = %name, unindexed, "pausing consumption (graph building behind, or dead letters blocked)");
        consumer.pause(&assignment)
    } else {
        info!(collection = %name, unindexed, "resuming consumption");
        consumer.resume(&assignment)
    };
    if let Err(e) = result {
        warn!(collection = %name, error = %e, pause, "pausing or resuming partitions");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backpressure_pauses_above_the_limit_and_resumes_below_half() {
        let mut b = Backpressure::new(100);
        assert!(!b.wants(50));
        assert!(b.wants(101));
        assert!(b.wants(80), "still above half: stays paused");
        assert!(!b.wants(50));
        assert!(!b.wants(60));
        let mut off = Backpressure::new(0);
        assert!(!off.wants(u64::MAX), "0 = unbounded");
    }

    #[test]
    fn the_gate_applies_changes_and_refreshes_a_pause() {
        let mut gate = PauseGate::default();
        assert_eq!(gate.update(false), None);
        assert_eq!(gate.update(true), Some(true));
        assert_eq!(gate.update(true), None, "refreshed at most once a second");
        assert_eq!(gate.update(false), Some(false));
    }
}
