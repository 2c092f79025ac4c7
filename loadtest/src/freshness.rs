//! Freshness probes: publish an event, then poll eddy-query's
//! `GET /points/{id}` until it answers with that event, and time it from the
//! send (produce → visible) and from the timestamp the broker's
//! acknowledgement carries (broker append → visible; the broker's log append
//! time on a `LogAppendTime` topic, else the producer's create time, and the
//! report says which).
//!
//! A probe re-publishes a base row as an upsert with the same vector and
//! payload plus a `probe` field holding a fresh nonce, so probing changes
//! no search result, and "visible" means this very event is served.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use indicatif::ProgressBar;
use rdkafka::producer::FutureProducer;
use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::dataset::Base;
use crate::encode::{self, EncodeOptions, Format};
use crate::histogram::{LatencyHistogram, LatencyStats};
use crate::http::QueryClient;
use crate::kafka;
use crate::pacing::Schedule;
use crate::publish::TimestampKind;

/// The payload field a probe's nonce goes in.
pub const PROBE_FIELD: &str = "probe";
/// Probes use the rows `r` with `r % PROBE_STRIDE == PROBE_STRIDE - 1`,
/// which a background writer leaves alone (its upserts would otherwise
/// overwrite a probe's nonce before it is seen).
pub const PROBE_STRIDE: usize = 50;

/// Whether `row` is one probes may use.
pub fn is_probe_row(row: usize) -> bool {
    row % PROBE_STRIDE == PROBE_STRIDE - 1
}

/// The base row of probe `i` over a base of `len` rows: the probe rows in
/// turn (row 0 when the base is too small to have one).
pub fn probe_row(i: u64, len: usize) -> usize {
    let rows = len / PROBE_STRIDE;
    if rows == 0 {
        return 0;
    }
    (i as usize % rows) * PROBE_STRIDE + PROBE_STRIDE - 1
}
/// How often a probe first asks for its point.
const POLL_MIN: Duration = Duration::from_millis(1);
/// The poll interval grows with the time already waited (1/20 of it, so the
/// measurement stays within ~5 %), up to this.
const POLL_MAX: Duration = Duration::from_millis(50);

/// Errors of a probe run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The event could not be encoded.
    #[error(transparent)]
    Encode(#[from] encode::Error),
    /// The event could not be produced.
    #[error(transparent)]
    Kafka(#[from] kafka::Error),
    /// Polling the point failed (other than 404).
    #[error("polling point {id}: {source}")]
    Poll {
        /// The point.
        id: u64,
        /// The underlying error.
        source: crate::http::Error,
    },
    /// The base has no rows to probe with.
    #[error("no base rows to probe with")]
    EmptyBase,
}

/// How to probe.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// The collection's topic.
    pub topic: String,
    /// The event format (JSON or protobuf).
    pub format: Format,
    /// Whether each probe carries `format`'s `content-type` header (else the
    /// collection declares the format).
    pub header: bool,
    /// Number of probes.
    pub probes: u64,
    /// Probes started per second.
    pub rate: f64,
    /// How long a probe waits for its event before it counts as timed out.
    pub timeout: Duration,
}

/// What the probes measured.
#[derive(Debug, Clone, Default)]
pub struct FreshnessStats {
    /// Probes whose event became visible.
    pub visible: u64,
    /// Probes whose event was not visible within the timeout.
    pub timed_out: u64,
    /// Send → broker acknowledgement.
    pub acked: LatencyHistogram,
    /// Send → first answer holding the event.
    pub produce_to_visible: LatencyHistogram,
    /// Broker timestamp → first answer holding the event (millisecond
    /// timestamps: each sample is within 1 ms).
    pub append_to_visible: LatencyHistogram,
    /// Which timestamp the acknowledgements carried.
    pub timestamps: TimestampKind,
    /// Every visible probe: (seconds from the run's start to its send,
    /// send → visible in ms), in send order — freshness over time.
    pub timeline: Vec<(f64, f64)>,
}

/// The serializable summary of a probe run.
#[derive(Debug, Clone, Serialize)]
pub struct FreshnessSummary {
    /// Probes whose event became visible.
    pub visible: u64,
    /// Probes that timed out.
    pub timed_out: u64,
    /// Send → acknowledgement.
    pub acked: Option<LatencyStats>,
    /// Send → visible.
    pub produce_to_visible: Option<LatencyStats>,
    /// Broker timestamp → visible.
    pub append_to_visible: Option<LatencyStats>,
    /// `log_append_time` or `create_time`: what "append" means above.
    pub timestamps: TimestampKind,
    /// (seconds since the run's start at the send, send → visible ms) of
    /// every visible probe, in send order.
    pub timeline: Vec<(f64, f64)>,
}

impl FreshnessStats {
    /// The serializable summary.
    pub fn summary(&self) -> FreshnessSummary {
        FreshnessSummary {
            visible: self.visible,
            timed_out: self.timed_out,
            acked: self.acked.summary(),
            produce_to_visible: self.produce_to_visible.summary(),
            append_to_visible: self.append_to_visible.summary(),
            timestamps: self.timestamps,
            timeline: self.timeline.clone(),
        }
    }
}

/// One probe's measurements.
struct ProbeResult {
    acked: Duration,
    timestamp: TimestampKind,
    timestamp_ms: Option<i64>,
    /// The wall clock at the send.
    sent_wall: SystemTime,
    /// Since the run's start, at the send.
    sent_after: Duration,
    /// Send → first answer holding the event.
    visible: Option<Duration>,
}

/// Runs `opts.probes` probes at `opts.rate` per second over rows of `base`.
pub async fn probe_freshness(
    producer: &FutureProducer,
    client: &QueryClient,
    base: Arc<Base>,
    opts: &ProbeOptions,
    progress: &ProgressBar,
) -> Result<FreshnessStats, Error> {
    if base.is_empty() {
        return Err(Error::EmptyBase);
    }
    let run_id = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let encode_opts = EncodeOptions {
        format: opts.format,
        arrow_rows: 1,
        proto_vector_bytes: false,
    };
    let started = Instant::now();
    let schedule = Schedule::new(started, opts.rate);
    let mut probes = JoinSet::new();
    for i in 0..opts.probes {
        schedule.wait(i).await;
        let row = probe_row(i, base.len());
        let nonce = format!("{run_id}-{i}");
        let mut payload = base.payloads[row].clone();
        payload.insert(PROBE_FIELD.into(), nonce.clone().into());
        let value =
            encode::encode_point(&encode_opts, row as u64, base.vectors.row(row), &payload)?;
        let key = row.to_string();
        let (sent_at, sent_wall) = (Instant::now(), SystemTime::now());
        let delivery = kafka::send(
            producer,
            &opts.topic,
            &key,
            Some(&value),
            opts.header.then(|| opts.format.content_type()),
        )
        .await?;
        let (client, timeout, progress) = (client.clone(), opts.timeout, progress.clone());
        probes.spawn(async move {
            let acked = async {
                let d = delivery
                    .await
                    .map_err(|_| kafka::Error::Canceled)?
                    .map_err(|(e, _)| kafka::Error::Delivery(Box::new(e)))?;
                Ok::<_, Error>((sent_at.elapsed(), TimestampKind::of(d.timestamp)))
            };
            let seen = wait_visible(&client, row as u64, Some(&nonce), sent_at, timeout);
            let (acked, seen) = tokio::join!(acked, seen);
            let (acked, (timestamp, timestamp_ms)) = acked?;
            progress.inc(1);
            Ok::<_, Error>(ProbeResult {
                acked,
                timestamp,
                timestamp_ms,
                sent_wall,
                sent_after: sent_at.duration_since(started),
                visible: seen?,
            })
        });
    }
    let mut stats = FreshnessStats::default();
    while let Some(joined) = probes.join_next().await {
        let Ok(result) = joined else {
            stats.timed_out += 1;
            continue;
        };
        let r = result?;
        stats.acked.record(r.acked);
        if r.timestamp != TimestampKind::None {
            stats.timestamps = r.timestamp;
        }
        let Some(after_send) = r.visible else {
            stats.timed_out += 1;
            continue;
        };
        stats.visible += 1;
        stats.produce_to_visible.record(after_send);
        stats
            .timeline
            .push((r.sent_after.as_secs_f64(), after_send.as_secs_f64() * 1e3));
        if let Some(ms) = r.timestamp_ms.and_then(|ms| u64::try_from(ms).ok()) {
            let appended = UNIX_EPOCH + Duration::from_millis(ms);
            let visible_wall = r.sent_wall + after_send;
            stats.append_to_visible.record(
                visible_wall
                    .duration_since(appended)
                    .unwrap_or(Duration::ZERO),
            );
        }
    }
    stats.timeline.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(stats)
}

/// Polls `GET /points/{id}` (every 1 ms at first, backing off to 5 % of the
/// time waited) until it answers — with `payload.probe == nonce` when a
/// nonce is given. The time since `sent_at` when it did, or `None` after
/// `timeout`.
pub async fn wait_visible(
    client: &QueryClient,
    id: u64,
    nonce: Option<&str>,
    sent_at: Instant,
    timeout: Duration,
) -> Result<Option<Duration>, Error> {
    loop {
        let point = client
            .get_point(id)
            .await
            .map_err(|source| Error::Poll { id, source })?;
        let seen = point
            .is_some_and(|p| nonce.is_none_or(|n| p["payload"][PROBE_FIELD].as_str() == Some(n)));
        if seen {
            return Ok(Some(sent_at.elapsed()));
        }
        if sent_at.elapsed() > timeout {
            return Ok(None);
        }
        tokio::time::sleep((sent_at.elapsed() / 20).clamp(POLL_MIN, POLL_MAX)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_rows_are_the_ones_a_writer_skips() {
        let rows: Vec<usize> = (0..5).map(|i| probe_row(i, 200)).collect();
        assert_eq!(rows, vec![49, 99, 149, 199, 49]);
        assert!(rows.iter().all(|&r| is_probe_row(r)));
        assert!(!is_probe_row(0) && !is_probe_row(50));
        assert_eq!(probe_row(3, 10), 0, "a tiny base still probes");
    }
}
