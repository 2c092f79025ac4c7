//! Hedged legs: a fan-out leg that has not answered by the time most legs
//! of its kind have (their measured 95th percentile) is asked again of a
//! second peer serving the same shards, and the first answer wins, so one
//! slow or stalled replica does not set the latency of every search that
//! asks it ("The Tail at Scale", Dean and Barroso).
//!
//! Hedges are held to a budget (one per ten legs) so that a cluster slow
//! everywhere is not asked everything twice. The losing call is left to
//! finish rather than cancelled: a cancelled call resets its HTTP/2
//! stream, and a server refuses a connection that resets too many.

use std::collections::VecDeque;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use super::{COUNT_SHARDS, GET_POINT_SHARDS, SCROLL_SHARDS, SEARCH_SHARDS};

/// When a leg is hedged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HedgePolicy {
    /// Never: a leg waits for its peer (or the request timeout).
    Off,
    /// After a fixed delay.
    After(Duration),
    /// After the 95th percentile of the action's recent legs (the default).
    #[default]
    P95,
}

impl FromStr for HedgePolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "none" => Ok(Self::Off),
            "p95" => Ok(Self::P95),
            ms => ms
                .parse::<u64>()
                .ok()
                .filter(|ms| *ms > 0)
                .map(|ms| Self::After(Duration::from_millis(ms)))
                .ok_or_else(|| {
                    format!("--peer-hedge {s:?}: expected off, p95 or a delay in ms (> 0)")
                }),
        }
    }
}

/// The delay before a hedge while an action has too few legs measured.
const UNMEASURED_DELAY: Duration = Duration::from_millis(20);
/// The shortest hedge delay: below it a second call only doubles the work.
const MIN_DELAY: Duration = Duration::from_micros(500);
/// Legs kept per action for the percentile.
const WINDOW: usize = 256;
/// Legs an action needs measured before its percentile is trusted.
const MIN_SAMPLES: usize = 32;
/// The percentile is recomputed every this many legs.
const RECOMPUTE_EVERY: u64 = 16;
/// At most one hedge per this many legs.
const LEGS_PER_HEDGE: u64 = 10;

/// Recent latencies of one action's legs.
#[derive(Debug, Default)]
struct LegTimes {
    recent: Mutex<VecDeque<Duration>>,
    recorded: AtomicU64,
    /// The last computed 95th percentile in µs (0: not yet known).
    p95_micros: AtomicU64,
}

impl LegTimes {
    fn record(&self, took: Duration) {
        let mut recent = self.recent.lock();
        if recent.len() == WINDOW {
            recent.pop_front();
        }
        recent.push_back(took);
        let n = self.recorded.fetch_add(1, Ordering::Relaxed) + 1;
        if recent.len() >= MIN_SAMPLES && n.is_multiple_of(RECOMPUTE_EVERY) {
            let mut sorted: Vec<Duration> = recent.iter().copied().collect();
            let at = (sorted.len() * 95).div_ceil(100).saturating_sub(1);
            let (_, p95, _) = sorted.select_nth_unstable(at);
            let micros = u64::try_from(p95.as_micros()).unwrap_or(u64::MAX).max(1);
            self.p95_micros.store(micros, Ordering::Relaxed);
        }
    }

    fn p95(&self) -> Option<Duration> {
        match self.p95_micros.load(Ordering::Relaxed) {
            0 => None,
            micros => Some(Duration::from_micros(micros)),
        }
    }
}

/// Decides when legs are hedged: the policy, each action's recent leg
/// latencies and the hedge budget.
#[derive(Debug, Default)]
pub struct Hedger {
    policy: HedgePolicy,
    /// Per fan-out action (in [`ACTIONS`] order).
    times: [LegTimes; 4],
    legs: AtomicU64,
    hedges: AtomicU64,
}

/// The actions legs are timed for.
const ACTIONS: [&str; 4] = [SEARCH_SHARDS, COUNT_SHARDS, GET_POINT_SHARDS, SCROLL_SHARDS];

impl Hedger {
    /// A hedger following `policy`.
    pub fn new(policy: HedgePolicy) -> Self {
        Self {
            policy,
            ..Self::default()
        }
    }

    fn times(&self, action: &str) -> Option<&LegTimes> {
        ACTIONS
            .iter()
            .position(|a| *a == action)
            .map(|i| &self.times[i])
    }

    /// Records that a call of `action` answered after `took`.
    pub fn record(&self, action: &str, took: Duration) {
        if let Some(times) = self.times(action) {
            times.record(took);
        }
    }

    /// Counts one leg sent.
    pub fn leg_sent(&self) {
        self.legs.fetch_add(1, Ordering::Relaxed);
    }

    /// How long a leg of `action` waits before it is hedged (`None`: never).
    pub fn delay(&self, action: &str) -> Option<Duration> {
        match self.policy {
            HedgePolicy::Off => None,
            HedgePolicy::After(delay) => Some(delay),
            HedgePolicy::P95 => {
                let measured = self.times(action).and_then(LegTimes::p95);
                Some(measured.unwrap_or(UNMEASURED_DELAY).max(MIN_DELAY))
            }
        }
    }

    /// Takes one hedge from the budget, if it has one left.
    pub fn take_budget(&self) -> bool {
        let legs = self.legs.load(Ordering::Relaxed);
        let taken = self.hedges.fetch_add(1, Ordering::Relaxed);
        if taken * LEGS_PER_HEDGE < legs {
            true
        } else {
            self.hedges.fetch_sub(1, Ordering::Relaxed);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse() {
        assert_eq!("off".parse(), Ok(HedgePolicy::Off));
        assert_eq!("P95".parse(), Ok(HedgePolicy::P95));
        assert_eq!(
            "15".parse(),
            Ok(HedgePolicy::After(Duration::from_millis(15)))
        );
        assert!("0".parse::<HedgePolicy>().is_err());
        assert!("soon".parse::<HedgePolicy>().is_err());
    }

    /// The delay follows the action's measured 95th percentile once enough
    /// legs are known, never below the floor; other actions keep theirs.
    #[test]
    fn the_delay_is_the_measured_p95() {
        let h = Hedger::new(HedgePolicy::P95);
        assert_eq!(h.delay(SEARCH_SHARDS), Some(UNMEASURED_DELAY));
        // 5 % of 160 legs slow: the 95th percentile is still a fast one.
        for i in 0..160 {
            let took = if i < 152 { 10 } else { 1_000 };
            h.record(SEARCH_SHARDS, Duration::from_millis(took));
        }
        assert_eq!(h.delay(SEARCH_SHARDS), Some(Duration::from_millis(10)));
        for _ in 0..16 {
            h.record(SEARCH_SHARDS, Duration::from_millis(1_000));
        }
        assert_eq!(h.delay(SEARCH_SHARDS), Some(Duration::from_secs(1)));
        assert_eq!(h.delay(COUNT_SHARDS), Some(UNMEASURED_DELAY));
        for _ in 0..WINDOW {
            h.record(COUNT_SHARDS, Duration::from_micros(10));
        }
        assert_eq!(h.delay(COUNT_SHARDS), Some(MIN_DELAY));
        assert_eq!(Hedger::new(HedgePolicy::Off).delay(SEARCH_SHARDS), None);
    }

    /// At most one hedge per ten legs.
    #[test]
    fn hedges_keep_to_their_budget() {
        let h = Hedger::new(HedgePolicy::P95);
        let mut granted = 0;
        for _ in 0..100 {
            h.leg_sent();
            granted += u32::from(h.take_budget());
        }
        assert_eq!(granted, 10);
    }
}
