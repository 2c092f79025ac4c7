//! Admission control for searches: at most `--max-queued-queries` query
//! vectors are admitted at once (queued on or running in the search pool);
//! a request that would exceed it is refused with [`ApiError::Overloaded`]
//! (HTTP 429 with `Retry-After`, gRPC RESOURCE_EXHAUSTED) instead of growing
//! the queue, and so the latency of everything behind it, without bound.
//! [`RequestSlots`] bounds whole requests the same way (HTTP requests,
//! Flight calls, open DoExchange streams), whatever their size.

use std::sync::Arc;

use prometheus::IntGauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

/// The admission gate.
#[derive(Debug)]
pub struct Admission {
    permits: Arc<Semaphore>,
    limit: usize,
    in_flight: IntGauge,
}

/// Query vectors admitted by [`Admission::admit`]; released on drop.
#[derive(Debug)]
pub struct Admitted {
    _permit: OwnedSemaphorePermit,
    count: usize,
    in_flight: IntGauge,
}

impl Admission {
    /// A gate for at most `limit` query vectors at once (at least one),
    /// reporting the admitted count in `in_flight`.
    pub fn new(limit: usize, in_flight: IntGauge) -> Self {
        let limit = limit.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            permits: Arc::new(Semaphore::new(limit)),
            limit,
            in_flight,
        }
    }

    /// Admits `queries` query vectors, or refuses at once when they do not
    /// fit. A batch larger than the whole limit is admitted alone (it takes
    /// every permit), so no valid request is refused for good.
    pub fn admit(&self, queries: usize) -> Result<Admitted, ApiError> {
        let count = queries.clamp(1, self.limit);
        let permit = u32::try_from(count)
            .ok()
            .and_then(|n| self.permits.clone().try_acquire_many_owned(n).ok())
            .ok_or_else(|| {
                ApiError::Overloaded(format!(
                    "{} query vectors are in flight and {queries} more would pass the limit of {} (--max-queued-queries); retry later",
                    self.limit - self.permits.available_permits(),
                    self.limit
                ))
            })?;
        self.in_flight.add(count as i64);
        Ok(Admitted {
            _permit: permit,
            count,
            in_flight: self.in_flight.clone(),
        })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.in_flight.sub(self.count as i64);
    }
}

/// At most `--max-concurrent-requests` requests at once: HTTP requests
/// (health and metrics excepted), Flight calls, and DoExchange streams for
/// as long as they are open. One more is refused at once with
/// [`ApiError::Overloaded`].
#[derive(Debug, Clone)]
pub struct RequestSlots {
    permits: Arc<Semaphore>,
    limit: usize,
}

impl RequestSlots {
    /// Slots for `limit` requests (at least one).
    pub fn new(limit: usize) -> Self {
        let limit = limit.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            permits: Arc::new(Semaphore::new(limit)),
            limit,
        }
    }

    /// Takes a slot, held until the returned permit drops.
    pub fn take(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        self.permits.clone().try_acquire_owned().map_err(|_| {
            ApiError::Overloaded(format!(
                "{} requests are in progress, the limit (--max-concurrent-requests); retry later",
                self.limit
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_up_to_the_limit_and_releases_on_drop() {
        let gauge = IntGauge::new("in_flight", "test").expect("gauge");
        let gate = Admission::new(10, gauge.clone());
        let a = gate.admit(6).expect("6 of 10");
        let b = gate.admit(4).expect("10 of 10");
        assert_eq!(gauge.get(), 10);
        let err = gate.admit(1).expect_err("full");
        assert!(matches!(err, ApiError::Overloaded(_)), "{err}");
        assert_eq!(err.status(), axum::http::StatusCode::TOO_MANY_REQUESTS);
        assert!(err.to_string().contains("limit of 10"), "{err}");
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        let response = axum::response::IntoResponse::into_response(err);
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers()["retry-after"], "1");
        drop(a);
        assert_eq!(gauge.get(), 4);
        let c = gate.admit(6).expect("room again");
        drop((b, c));
        assert_eq!(gauge.get(), 0);
        // Larger than the limit: admitted alone, never refused for good.
        let big = gate.admit(25).expect("oversize batch on an idle gate");
        assert_eq!(gauge.get(), 10);
        assert!(gate.admit(1).is_err());
        drop(big);
        assert!(gate.admit(1).is_ok());
    }

    #[test]
    fn a_request_past_the_limit_is_refused_until_one_ends() {
        let slots = RequestSlots::new(2);
        let a = slots.take().expect("first");
        let _b = slots.take().expect("second");
        let refused = slots.take().expect_err("third");
        assert_eq!(refused.status().as_u16(), 429);
        drop(a);
        assert!(slots.take().is_ok());
    }
}
