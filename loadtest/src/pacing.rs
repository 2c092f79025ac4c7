//! Drift-free schedules: event `i` of a run at `rate` per second is due at
//! `start + i / rate`, computed from the start every time, so a late wake-up
//! never shifts the events after it (the producer catches up, the open-loop
//! driver measures from the due time).

use std::time::Duration;

use tokio::time::Instant;

/// When each event of a run is due.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    start: Instant,
    /// Events per second; `None` = as fast as possible.
    rate: Option<f64>,
}

impl Schedule {
    /// A schedule of `rate` events per second from `start`; a rate that is
    /// zero, negative or not finite means unpaced.
    pub fn new(start: Instant, rate: f64) -> Self {
        let rate = (rate.is_finite() && rate > 0.0).then_some(rate);
        Self { start, rate }
    }

    /// The run's start.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// The rate, when paced.
    pub fn rate(&self) -> Option<f64> {
        self.rate
    }

    /// When event `i` is due (the start, for every event of an unpaced run).
    pub fn due(&self, i: u64) -> Instant {
        match self.rate {
            Some(rate) => self.start + Duration::from_secs_f64(i as f64 / rate),
            None => self.start,
        }
    }

    /// Releases events `0..n` at their due times from a thread of its own,
    /// which sleeps with the OS timer's precision (tens of µs): tokio's
    /// timers tick in whole milliseconds, so an open loop paced by
    /// [`Schedule::wait`] sent its requests p50 0.85 ms (p99 3.3 ms) after
    /// they were due, and that lateness counted as latency. The thread ends
    /// after event `n - 1` or once the receiver is dropped.
    pub fn ticks(&self, n: u64) -> tokio::sync::mpsc::UnboundedReceiver<u64> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let schedule = *self;
        let spawned = std::thread::Builder::new()
            .name("eddy-pacer".into())
            .spawn(move || {
                for i in 0..n {
                    let due = schedule.due(i).into_std();
                    let now = std::time::Instant::now();
                    if due > now {
                        std::thread::sleep(due - now);
                    }
                    if tx.send(i).is_err() {
                        return;
                    }
                }
            });
        if let Err(e) = spawned {
            // Without the thread the receiver ends at once: the phase sends
            // nothing and says so, rather than pacing wrongly.
            tracing::error!(error = %e, "starting the pacing thread");
        }
        rx
    }

    /// Waits until event `i` is due; returns at once when it already is.
    pub async fn wait(&self, i: u64) {
        let due = self.due(i);
        if due > Instant::now() {
            tokio::time::sleep_until(due).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_times_come_from_the_start() {
        let start = Instant::now();
        let s = Schedule::new(start, 1000.0);
        assert_eq!(s.due(0), start);
        assert_eq!(s.due(1500), start + Duration::from_millis(1500));
        assert_eq!(s.rate(), Some(1000.0));
        let flat = Schedule::new(start, 0.0);
        assert_eq!(flat.due(10_000), start);
        assert_eq!(flat.rate(), None);
        assert_eq!(Schedule::new(start, f64::NAN).rate(), None);
    }

    #[tokio::test]
    async fn ticks_arrive_in_order_and_never_early() {
        let s = Schedule::new(Instant::now(), 2000.0);
        let mut ticks = s.ticks(20);
        let mut next = 0;
        while let Some(i) = ticks.recv().await {
            assert_eq!(i, next);
            assert!(Instant::now() >= s.due(i));
            next += 1;
        }
        assert_eq!(next, 20);
        // An unpaced schedule releases everything at once.
        let mut flat = Schedule::new(Instant::now(), 0.0).ticks(3);
        let mut seen = Vec::new();
        while let Some(i) = flat.recv().await {
            seen.push(i);
        }
        assert_eq!(seen, [0, 1, 2]);
    }

    #[tokio::test]
    async fn waiting_returns_no_earlier_than_due() {
        let s = Schedule::new(Instant::now(), 200.0);
        s.wait(2).await; // due 10 ms after the start
        assert!(Instant::now() >= s.due(2));
        s.wait(0).await; // long due: returns at once
    }
}
