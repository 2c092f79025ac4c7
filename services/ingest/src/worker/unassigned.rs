//! A watch on a worker that owns no partition: it warns, once per period,
//! when a rebalance never completes.

use std::time::{Duration, Instant};

/// Seconds without any assigned partition before the worker warns.
pub(super) const UNASSIGNED_WARN_SECS: u64 = 30;

/// Tracks how long the worker has owned no partition, to warn (repeatedly,
/// once per `every`) when a rebalance never completes.
pub(super) struct UnassignedWatch {
    every: Duration,
    since: Option<Instant>,
    last_warned: Option<Instant>,
}

impl UnassignedWatch {
    /// A watch that warns every `every` while nothing is owned.
    pub(super) fn new(every: Duration) -> Self {
        Self {
            every,
            since: Some(Instant::now()),
            last_warned: None,
        }
    }

    /// Records the owned-partition count; returns how long nothing has been
    /// owned when it is time to warn.
    pub(super) fn observe(&mut self, owned: usize) -> Option<Duration> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
