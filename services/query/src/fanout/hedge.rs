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

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;
use tracing::debug;

use super::peer::{call_peer, Peer};
use super::{Peers, COUNT_SHARDS, GET_POINT_SHARDS, SCROLL_SHARDS, SEARCH_SHARDS};
use crate::error::ApiError;

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

/// Hedged calls of a fan-out leg.
impl Peers {
    /// A call of `action` on `peer` that may outlive its caller (a
    /// hedge's loser finishes on its own); its time is recorded when it
    /// answers.
    fn spawn_call(
        &self,
        peer: &Peer,
        action: &str,
        body: Vec<u8>,
    ) -> tokio::task::JoinHandle<Result<Bytes, ApiError>> {
        let call = call_peer(
            peer.channel.clone(),
            self.key.clone(),
            peer.url.clone(),
            action.to_owned(),
            body,
        );
        let (hedger, action) = (self.hedger.clone(), action.to_owned());
        tokio::spawn(async move {
            let started = Instant::now();
            let answer = call.await;
            if answer.is_ok() {
                hedger.record(&action, started.elapsed());
            }
            answer
        })
    }

    /// Calls `action` on peer `first`; when it has not answered after the
    /// hedge delay and `backup` serves the same shards, on `backup` too
    /// (budget allowing). The first answer that is not an error wins; the
    /// peer whose answer (or, both failing, whose error) is returned.
    pub(super) async fn call_hedged(
        &self,
        peers: &[Arc<Peer>],
        action: &str,
        first: usize,
        backup: Option<usize>,
        body: Vec<u8>,
    ) -> (Result<Bytes, ApiError>, usize) {
        self.hedger.leg_sent();
        let delay = backup.and_then(|_| self.hedger.delay(action));
        let (Some(backup), Some(delay)) = (backup, delay) else {
            let started = Instant::now();
            let answer = self.call(&peers[first], action, body).await;
            if answer.is_ok() {
                self.hedger.record(action, started.elapsed());
            }
            return (answer, first);
        };
        let joined = |r: Result<Result<Bytes, ApiError>, tokio::task::JoinError>| {
            r.unwrap_or_else(|e| Err(ApiError::Internal(format!("a fan-out call: {e}"))))
        };
        let mut primary = self.spawn_call(&peers[first], action, body.clone());
        tokio::select! {
            answer = &mut primary => return (joined(answer), first),
            () = tokio::time::sleep(delay) => {}
        }
        if !self.hedger.take_budget() {
            return (joined(primary.await), first);
        }
        debug!(peer = %peers[backup].url, action, ?delay, "hedging a slow leg");
        let mut second = self.spawn_call(&peers[backup], action, body);
        let hedges = &self.metrics.fanout_hedges;
        tokio::select! {
            answer = &mut primary => {
                let answer = joined(answer);
                if answer.is_ok() {
                    hedges.with_label_values(&[action, "first"]).inc();
                    return (answer, first);
                }
                hedges.with_label_values(&[action, "hedge"]).inc();
                (joined(second.await), backup)
            }
            answer = &mut second => {
                let answer = joined(answer);
                if answer.is_ok() {
                    hedges.with_label_values(&[action, "hedge"]).inc();
                    return (answer, backup);
                }
                hedges.with_label_values(&[action, "first"]).inc();
                (joined(primary.await), first)
            }
        }
    }

    /// A reachable peer other than `first`, not yet tried, that last said
    /// it serves every one of `shards` (a leg's hedge).
    pub(super) fn backup(
        peers: &[Arc<Peer>],
        collection: &str,
        shards: &[u32],
        first: usize,
        tried: &BTreeSet<usize>,
    ) -> Option<usize> {
        (0..peers.len()).find(|i| {
            *i != first && !tried.contains(i) && {
                let view = peers[*i].view.read();
                view.reachable
                    && view
                        .served
                        .get(collection)
                        .is_some_and(|served| shards.iter().all(|s| served.contains(s)))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fanout::PeerOptions;
    use crate::metrics::QueryMetrics;

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

    /// A leg whose peer stalls is asked of a replica serving the same
    /// shard once the hedge delay has passed, and the replica's answer is
    /// the one used (the stalled call is left to finish); a leg whose peer
    /// answers in time is not hedged.
    #[tokio::test]
    async fn a_stalled_leg_is_hedged_to_a_replica() {
        use crate::fanout::fake_peer::FakePeer;
        use serde_json::json;
        let served = json!({"c": [1]});
        let stalled = FakePeer::start(
            served.clone(),
            json!({"count": 1, "offsets": {}}),
            Duration::from_secs(600),
        )
        .await;
        let replica =
            FakePeer::start(served, json!({"count": 2, "offsets": {}}), Duration::ZERO).await;
        let metrics = QueryMetrics::new(&prometheus::Registry::new()).expect("metrics");
        let opts = PeerOptions {
            urls: vec![stalled.url.clone(), replica.url.clone()],
            refresh: Duration::from_secs(3600),
            timeout: Duration::from_secs(3600),
            hedge: HedgePolicy::After(Duration::from_secs(1)),
            ..PeerOptions::default()
        };
        let peers = Peers::new(&opts, metrics.clone()).expect("peers");
        peers.refresh_all().await;
        let mut def = eddy_model::CollectionDef::new("c", 2);
        def.shards = 2;
        let c = crate::collection::Collection::serving(def, [0]);
        let hedges = |won: &str| {
            metrics
                .fanout_hedges
                .with_label_values(&[COUNT_SHARDS, won])
                .get()
        };

        // The rotation asks the stalled peer first.
        let counted = peers.count(&c, &[1], None).await.expect("count");
        assert_eq!(counted.count, 2, "the replica answered");
        assert!(counted.missing.is_empty());
        assert_eq!((stalled.calls(), replica.calls()), (1, 1));
        assert_eq!((hedges("hedge"), hedges("first")), (1, 0));

        // Then the replica first: it answers before any hedge.
        let counted = peers.count(&c, &[1], None).await.expect("count");
        assert_eq!(counted.count, 2);
        assert_eq!((stalled.calls(), replica.calls()), (1, 2));
        assert_eq!(hedges("hedge"), 1, "no second hedge");
        let ok = metrics
            .fanout_legs
            .with_label_values(&[COUNT_SHARDS, "ok"])
            .get();
        assert_eq!(ok, 2);
    }
}
