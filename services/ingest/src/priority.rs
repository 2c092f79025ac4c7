//! Graph building at a lower CPU priority than the rest of the host's
//! work (`--graph-nice`).
//!
//! A graph is built from rows that are already durable and searchable, so
//! building it later costs queries some speed, never data; a query or an
//! event waiting for a core costs latency now. Where eddy-ingest shares
//! cores with eddy-query, the broker or anything else, the threads that
//! build graphs (the growers' rounds, maintenance's index builds and
//! merges) therefore run niced: they take the cores the rest leaves idle
//! and yield them at once when the rest wants them.

use tracing::debug;

/// Lowers the calling thread's CPU priority by `nice` steps (0 leaves it;
/// the result is capped at 19, the lowest). Linux only: elsewhere, and
/// where the system refuses, the thread keeps its priority (logged at
/// debug: a priority is a preference, not a requirement).
pub(crate) fn lower_this_thread(nice: i32) {
    if nice <= 0 {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let thread = Some(rustix::thread::gettid());
        let lowered = rustix::process::getpriority_process(thread)
            .and_then(|now| rustix::process::setpriority_process(thread, (now + nice).min(19)));
        if let Err(e) = lowered {
            debug!(error = %e, "lowering a graph thread's priority failed: it keeps its priority");
        }
    }
    #[cfg(not(target_os = "linux"))]
    debug!("graph threads keep their priority on this system");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread lowered by 5 runs 5 steps lower than the thread that
    /// started it; 0 leaves it.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_lowered_thread_runs_niced() {
        let own = || rustix::process::getpriority_process(Some(rustix::thread::gettid()));
        let parent = own().expect("priority");
        let (kept, lowered) = std::thread::spawn(move || {
            lower_this_thread(0);
            let kept = own().expect("priority");
            lower_this_thread(5);
            (kept, own().expect("priority"))
        })
        .join()
        .expect("thread");
        assert_eq!(kept, parent);
        assert_eq!(lowered, (parent + 5).min(19));
        assert_eq!(own().expect("priority"), parent, "only that thread");
    }
}
