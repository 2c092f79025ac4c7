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
    async fn waiting_returns_no_earlier_than_due() {
        let s = Schedule::new(Instant::now(), 200.0);
        s.wait(2).await; // due 10 ms after the start
        assert!(Instant::now() >= s.due(2));
        s.wait(0).await; // long due: returns at once
    }
}
