//! What a load phase counts: answered requests with their latency, errors,
//! and tie-aware recall@1/10/100 of every answered query.

use std::time::Duration;

use serde::Serialize;

use crate::dataset::QuerySet;
use crate::flight::Hits;
use crate::histogram::LatencyHistogram;

/// The recall depths reported (each only when `k` reaches it).
pub const RECALL_AT: [usize; 3] = [1, 10, 100];

/// Sums of per-query recall at each of [`RECALL_AT`].
#[derive(Debug, Clone, Default)]
pub struct RecallSums {
    queries: u64,
    sums: [f64; RECALL_AT.len()],
}

impl RecallSums {
    /// Scores the answers of `queries` (indices into `set`) at every depth up
    /// to `k`.
    pub fn add(&mut self, set: &QuerySet, queries: &[usize], answers: &[Hits], k: usize) {
        for (&q, hits) in queries.iter().zip(answers) {
            self.queries += 1;
            for (sum, &at) in self.sums.iter_mut().zip(&RECALL_AT) {
                if at <= k {
                    *sum += set.recall(q, hits, at);
                }
            }
        }
    }

    /// Adds another tally's sums.
    pub fn merge(&mut self, other: &RecallSums) {
        self.queries += other.queries;
        for (a, b) in self.sums.iter_mut().zip(&other.sums) {
            *a += b;
        }
    }

    /// Queries scored.
    pub fn queries(&self) -> u64 {
        self.queries
    }

    /// Mean recall at each depth up to `k`; `None` when nothing was scored.
    pub fn means(&self, k: usize) -> Option<Recall> {
        if self.queries == 0 {
            return None;
        }
        let at = |i: usize| (RECALL_AT[i] <= k).then(|| self.sums[i] / self.queries as f64);
        Some(Recall {
            at1: at(0),
            at10: at(1),
            at100: at(2),
        })
    }
}

/// Mean tie-aware recall of a phase (a depth beyond `k` is `None`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Recall {
    /// recall@1.
    pub at1: Option<f64>,
    /// recall@10.
    pub at10: Option<f64>,
    /// recall@100.
    pub at100: Option<f64>,
}

/// What one worker (or a whole phase, once merged) counted.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Requests answered.
    pub answered: u64,
    /// Requests that failed (HTTP error, RPC error, timeout).
    pub errors: u64,
    /// The first failure's message.
    pub first_error: Option<String>,
    /// Latency of every answered request: from its send (closed loop) or
    /// from its scheduled time (open loop).
    pub latency: LatencyHistogram,
    /// Open loop: send → answer of every answered request.
    pub service: LatencyHistogram,
    /// Open loop: scheduled time → send of every request sent.
    pub lag: LatencyHistogram,
    /// Recall of the answered queries.
    pub recall: RecallSums,
}

impl Tally {
    /// Counts one answered request.
    pub fn answer(
        &mut self,
        latency: Duration,
        set: &QuerySet,
        queries: &[usize],
        answers: &[Hits],
        k: usize,
    ) {
        self.answered += 1;
        self.latency.record(latency);
        self.recall.add(set, queries, answers, k);
    }

    /// Counts one failed request.
    pub fn error(&mut self, message: impl FnOnce() -> String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(message());
        }
    }

    /// Adds another tally.
    pub fn merge(&mut self, other: &Tally) {
        self.answered += other.answered;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
        self.latency.merge(&other.latency);
        self.service.merge(&other.service);
        self.lag.merge(&other.lag);
        self.recall.merge(&other.recall);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::{Truth, SAMPLE_DIR};
    use std::path::Path;

    #[test]
    fn recall_is_scored_up_to_k() {
        let set = QuerySet::load(Path::new(SAMPLE_DIR), Truth::All, Some(2)).expect("queries");
        let exact = |q: usize| -> Hits {
            set.gt_ids
                .row(q)
                .iter()
                .zip(set.gt_scores.row(q))
                .map(|(&id, &s)| (id as u64, s))
                .collect()
        };
        let mut a = Tally::default();
        a.answer(Duration::from_millis(1), &set, &[0], &[exact(0)], 10);
        let mut b = Tally::default();
        b.answer(Duration::from_millis(2), &set, &[1], &[Vec::new()], 10);
        b.error(|| "boom".into());
        b.error(|| "second".into());
        a.merge(&b);
        assert_eq!((a.answered, a.errors), (2, 2));
        assert_eq!(a.first_error.as_deref(), Some("boom"));
        assert_eq!(a.latency.len(), 2);
        let r = a.recall.means(10).expect("scored");
        assert_eq!(r.at1, Some(0.5));
        assert_eq!(r.at10, Some(0.5));
        assert_eq!(r.at100, None, "k = 10 does not reach 100");
        assert!(RecallSums::default().means(10).is_none());
    }
}
