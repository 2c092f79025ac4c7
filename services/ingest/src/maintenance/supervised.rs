//! Supervision of the maintenance thread: a panic in a job (a bug, a
//! damaged file a reader did not expect) must not end indexing, merging and
//! garbage collection for good. The loop is restarted after a back-off that
//! doubles up to a ceiling, and every restart is counted.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tracing::error;

/// How long a restarted loop waits: doubling from `min` to `max`, back to
/// `min` once a run lasted longer than `max` (it was healthy).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    /// First wait.
    pub(crate) min: Duration,
    /// Longest wait.
    pub(crate) max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            min: Duration::from_millis(100),
            max: Duration::from_secs(30),
        }
    }
}

/// Runs `body` until it returns (it checks `stop` itself), restarting it
/// after each panic once the back-off has passed; `on_restart` is called
/// for each restart (to count it).
pub(crate) fn run_supervised(
    name: &str,
    stop: &AtomicBool,
    backoff: Backoff,
    mut on_restart: impl FnMut(),
    mut body: impl FnMut(),
) {
    let mut wait = backoff.min;
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let Err(panic) = catch_unwind(AssertUnwindSafe(&mut body)) else {
            return;
        };
        if started.elapsed() > backoff.max {
            wait = backoff.min;
        }
        error!(
            thread = name,
            panic = panic_message(&*panic),
            wait_ms = wait.as_millis() as u64,
            "thread panicked; restarting it"
        );
        on_restart();
        sleep_unless_stopped(wait, stop);
        wait = (wait * 2).min(backoff.max);
    }
}

/// The message of a panic payload, when it is a string.
fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)")
}

/// Sleeps `total` in short slices, returning early once `stop` is set.
fn sleep_unless_stopped(total: Duration, stop: &AtomicBool) {
    let deadline = Instant::now() + total;
    while !stop.load(Ordering::Relaxed) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_body_is_restarted_with_a_growing_backoff_until_it_returns() {
        let stop = AtomicBool::new(false);
        let backoff = Backoff {
            min: Duration::from_millis(1),
            max: Duration::from_millis(4),
        };
        let (mut runs, mut restarts) = (0, 0);
        run_supervised(
            "test",
            &stop,
            backoff,
            || restarts += 1,
            || {
                runs += 1;
                if runs <= 3 {
                    panic!("injected panic {runs}");
                }
            },
        );
        assert_eq!((runs, restarts), (4, 3));
    }

    #[test]
    fn a_stop_ends_the_restarts() {
        let stop = AtomicBool::new(false);
        let mut runs = 0;
        run_supervised(
            "test",
            &stop,
            Backoff::default(),
            || {},
            || {
                runs += 1;
                stop.store(true, Ordering::Relaxed);
                panic!("panics after asking to stop");
            },
        );
        assert_eq!(runs, 1);
    }
}
