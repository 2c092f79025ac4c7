//! A signal of the manifests this process publishes, shared by every clone
//! of a [`crate::Store`], so a loop waiting for work (maintenance after a
//! seal) wakes on a publish instead of polling.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How many manifests this process has published, and a condition to wait
/// for the next one on.
#[derive(Debug, Default)]
pub(crate) struct Publishes {
    count: Mutex<u64>,
    published: Condvar,
}

impl Publishes {
    /// Counts one publish and wakes every waiter.
    pub(crate) fn note(&self) {
        let mut count = self.count.lock().unwrap_or_else(PoisonError::into_inner);
        *count += 1;
        self.published.notify_all();
    }

    /// The number of publishes so far.
    pub(crate) fn count(&self) -> u64 {
        *self.count.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until the count passes `seen` or `timeout` elapses; returns the
    /// count then.
    pub(crate) fn wait_past(&self, seen: u64, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        let mut count = self.count.lock().unwrap_or_else(PoisonError::into_inner);
        while *count <= seen {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            count = self
                .published
                .wait_timeout(count, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *count
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_waiter_wakes_on_a_publish_not_its_timeout() {
        let publishes = Arc::new(Publishes::default());
        let seen = publishes.count();
        let waiting = Arc::clone(&publishes);
        let waiter = std::thread::spawn(move || waiting.wait_past(seen, Duration::from_secs(3600)));
        publishes.note();
        assert_eq!(waiter.join().expect("waiter"), seen + 1);
    }

    #[test]
    fn a_count_already_past_returns_at_once() {
        let publishes = Publishes::default();
        publishes.note();
        assert_eq!(publishes.wait_past(0, Duration::from_secs(3600)), 1);
    }
}
