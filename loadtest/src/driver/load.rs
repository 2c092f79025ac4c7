//! The two ways to load an API: a closed loop (N workers, each sends its
//! next request when the previous one is answered) and an open loop
//! (requests sent at a fixed offered rate whatever the answers do, latency
//! taken from each request's *scheduled* time, so a stalled server cannot
//! hide its queue — no coordinated omission).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use indicatif::ProgressBar;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::tally::Tally;
use super::target::{request_queries, Searcher};
use crate::dataset::QuerySet;
use crate::options::SearchOptions;
use crate::pacing::Schedule;

/// What a phase loads, and how long.
#[derive(Debug, Clone)]
pub struct Work {
    /// The API client.
    pub searcher: Searcher,
    /// The queries and their ground truth.
    pub set: Arc<QuerySet>,
    /// The search options of every request.
    pub options: Arc<SearchOptions>,
    /// At most this long (no new request starts after it).
    pub duration: Duration,
    /// At most this many requests (`None` = only the duration bounds it).
    pub requests: Option<u64>,
}

/// What a phase did.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Answers, errors, latency and recall.
    pub tally: Tally,
    /// Requests due (open loop; the closed loop's equals `sent`).
    pub scheduled: u64,
    /// Requests sent.
    pub sent: u64,
    /// Open loop: requests not sent because `max_in_flight` were
    /// outstanding at their scheduled time.
    pub dropped: u64,
    /// From the first send until the last answer.
    pub elapsed: Duration,
}

/// Runs `workers` closed-loop workers until the duration or request budget
/// is spent; `progress` counts requests.
pub async fn closed_loop(work: &Work, workers: usize, progress: &ProgressBar) -> Outcome {
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + work.duration;
    let mut set = JoinSet::new();
    for _ in 0..workers.max(1) {
        let (work, next, progress) = (work.clone(), next.clone(), progress.clone());
        set.spawn(async move {
            let mut tally = Tally::default();
            loop {
                let j = next.fetch_add(1, Ordering::Relaxed);
                if work.requests.is_some_and(|n| j >= n) || Instant::now() >= deadline {
                    return tally;
                }
                let queries = request_queries(j, work.searcher.batch(), work.set.len());
                let sent_at = Instant::now();
                let answer = work
                    .searcher
                    .search(&work.set, &queries, &work.options)
                    .await;
                let latency = sent_at.elapsed();
                match answer {
                    Ok(hits) => tally.answer(latency, &work.set, &queries, &hits, work.options.k),
                    Err(e) => tally.error(|| e.to_string()),
                }
                progress.inc(1);
            }
        });
    }
    let mut outcome = Outcome::default();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(tally) => outcome.tally.merge(&tally),
            Err(e) => outcome.tally.error(|| format!("worker panicked: {e}")),
        }
    }
    outcome.elapsed = start.elapsed();
    outcome.sent = outcome.tally.answered + outcome.tally.errors;
    outcome.scheduled = outcome.sent;
    outcome
}

/// One open-loop request's result, sent back to the dispatcher.
struct Answered {
    queries: Vec<usize>,
    due: Instant,
    sent_at: Instant,
    done_at: Instant,
    answer: Result<Vec<crate::flight::Hits>, String>,
}

/// Offers `rate` requests per second for the phase's duration (or request
/// budget). A request due while `max_in_flight` are outstanding is dropped
/// and counted, never delayed; latency runs from the scheduled time.
pub async fn open_loop(
    work: &Work,
    rate: f64,
    max_in_flight: usize,
    progress: &ProgressBar,
) -> Outcome {
    let by_duration = (rate * work.duration.as_secs_f64()).ceil() as u64;
    let scheduled = work.requests.map_or(by_duration, |n| n.min(by_duration));
    let slots = Arc::new(Semaphore::new(max_in_flight.max(1)));
    let start = Instant::now();
    let schedule = Schedule::new(start, rate);
    let mut outcome = Outcome {
        scheduled,
        ..Outcome::default()
    };
    let mut set = JoinSet::new();
    let mut ticks = schedule.ticks(scheduled);
    while let Some(j) = ticks.recv().await {
        let due = schedule.due(j);
        while let Some(joined) = set.try_join_next() {
            take(&mut outcome.tally, work, joined);
        }
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            outcome.dropped += 1;
            progress.inc(1);
            continue;
        };
        let queries = request_queries(j, work.searcher.batch(), work.set.len());
        let work_j = work.clone();
        let progress = progress.clone();
        outcome.sent += 1;
        set.spawn(async move {
            let sent_at = Instant::now();
            let answer = work_j
                .searcher
                .search(&work_j.set, &queries, &work_j.options)
                .await
                .map_err(|e| e.to_string());
            let done_at = Instant::now();
            drop(permit);
            progress.inc(1);
            Answered {
                queries,
                due,
                sent_at,
                done_at,
                answer,
            }
        });
    }
    while let Some(joined) = set.join_next().await {
        take(&mut outcome.tally, work, joined);
    }
    outcome.elapsed = start.elapsed();
    outcome
}

fn take(tally: &mut Tally, work: &Work, joined: Result<Answered, tokio::task::JoinError>) {
    let a = match joined {
        Ok(a) => a,
        Err(e) => return tally.error(|| format!("request task panicked: {e}")),
    };
    tally.lag.record(a.sent_at.saturating_duration_since(a.due));
    match a.answer {
        Ok(hits) => {
            tally.service.record(a.done_at - a.sent_at);
            let latency = a.done_at.saturating_duration_since(a.due);
            tally.answer(latency, &work.set, &a.queries, &hits, work.options.k);
        }
        Err(e) => tally.error(|| e),
    }
}
