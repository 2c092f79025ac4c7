//! The one way CPU work leaves the async runtime: a named rayon pool,
//! entered through [`SearchPool::run`], which skips work whose caller has
//! gone (the request was cancelled or its client hung up before the work
//! started) and turns a panic into an error for that request alone.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};

use tokio::sync::oneshot;

use crate::error::ApiError;

/// The search threads.
#[derive(Debug)]
pub struct SearchPool {
    pool: rayon::ThreadPool,
}

impl SearchPool {
    /// A pool of `threads` (at least one) named `eddy-search-<i>`.
    pub fn new(threads: usize) -> Result<Self, rayon::ThreadPoolBuildError> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .thread_name(|i| format!("eddy-search-{i}"))
            .build()?;
        Ok(Self { pool })
    }

    /// Number of threads.
    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// Queues `work` on the pool now; the returned future waits for it
    /// without blocking the runtime. If the future is dropped before a
    /// thread picks the work up, the work is skipped.
    pub fn run<T, F>(&self, work: F) -> impl Future<Output = Result<T, ApiError>> + use<T, F>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        self.pool.spawn(move || {
            if tx.is_closed() {
                return;
            }
            let _ = tx.send(guarded(work));
        });
        async move {
            rx.await
                .map_err(|_| ApiError::Internal("a search task was dropped".into()))?
        }
    }
}

/// Runs `work` here, turning a panic into [`ApiError::Internal`] so one bad
/// request never takes the process (or a pool thread) down.
pub fn guarded<T>(work: impl FnOnce() -> T) -> Result<T, ApiError> {
    catch_unwind(AssertUnwindSafe(work)).map_err(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_owned());
        tracing::error!(panic = %what, "a search panicked");
        ApiError::Internal(format!("the search failed: {what}"))
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn runs_work_and_reports_panics() {
        let pool = SearchPool::new(1).expect("pool");
        assert_eq!(pool.run(|| 2 + 2).await.expect("ran"), 4);
        let err = pool
            .run(|| -> u32 { panic!("boom") })
            .await
            .expect_err("panicked");
        assert!(err.to_string().contains("boom"), "{err}");
        // The pool survives the panic.
        assert_eq!(pool.run(|| 5).await.expect("ran"), 5);
    }

    #[tokio::test]
    async fn work_whose_caller_left_is_skipped() {
        let pool = SearchPool::new(1).expect("pool");
        // Occupy the only thread until the dropped request is queued.
        let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
        let busy = pool.run(move || hold_rx.recv().is_ok());
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        let dropped = pool.run(move || flag.store(true, Ordering::SeqCst));
        let busy = tokio::spawn(busy);
        drop(dropped);
        hold_tx.send(()).expect("release");
        assert!(busy.await.expect("joined").expect("ran"));
        // A marker queued after the skipped work runs once it is done.
        pool.run(|| ()).await.expect("ran");
        assert!(!ran.load(Ordering::SeqCst));
    }
}
