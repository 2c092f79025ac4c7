//! Latency summaries (nearest-rank percentiles) and recall averages for reports.

use std::time::Duration;

/// Percentiles of a set of latencies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencySummary {
    /// Number of samples.
    pub count: usize,
    /// Median.
    pub p50: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Largest sample.
    pub max: Duration,
    /// Arithmetic mean.
    pub mean: Duration,
}

impl LatencySummary {
    /// Summarizes `samples`; `None` when there are none.
    pub fn from_samples(samples: &[Duration]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let total: Duration = sorted.iter().sum();
        let count = u32::try_from(sorted.len()).unwrap_or(u32::MAX);
        Some(Self {
            count: sorted.len(),
            p50: percentile(&sorted, 50.0),
            p90: percentile(&sorted, 90.0),
            p99: percentile(&sorted, 99.0),
            max: sorted[sorted.len() - 1],
            mean: total / count,
        })
    }
}

/// Nearest-rank percentile `p` (0..=100) of an ascending, non-empty slice:
/// the smallest sample with at least `p`% of the samples at or below it.
///
/// # Panics
/// On an empty slice.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> T {
    assert!(!sorted.is_empty(), "percentile of no samples");
    let n = sorted.len();
    let rank = (p.clamp(0.0, 100.0) / 100.0 * n as f64).ceil() as usize;
    sorted[rank.clamp(1, n) - 1]
}

/// Formats a duration in milliseconds with a precision that suits its size.
pub fn fmt_ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 1000.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// Mean of per-query recalls; `None` when there are none.
pub fn mean(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        None
    } else {
        Some(values.iter().sum::<f64>() / values.len() as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 90.0), 90);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&v, 100.0), 100);
        assert_eq!(percentile(&v, 0.0), 1);
        assert_eq!(percentile(&[7], 99.0), 7);
        // 10 samples: p99 is the largest, p50 the 5th.
        let v: Vec<u32> = (1..=10).collect();
        assert_eq!(percentile(&v, 99.0), 10);
        assert_eq!(percentile(&v, 50.0), 5);
    }

    #[test]
    fn summary_sorts_and_averages() {
        let s = LatencySummary::from_samples(&[ms(30), ms(10), ms(20), ms(40)]).expect("summary");
        assert_eq!(s.count, 4);
        assert_eq!(s.p50, ms(20));
        assert_eq!(s.p99, ms(40));
        assert_eq!(s.max, ms(40));
        assert_eq!(s.mean, ms(25));
        assert!(LatencySummary::from_samples(&[]).is_none());
    }

    #[test]
    fn formats_and_means() {
        assert_eq!(fmt_ms(Duration::from_micros(1500)), "1.50 ms");
        assert_eq!(fmt_ms(ms(250)), "250.0 ms");
        assert_eq!(fmt_ms(ms(2500)), "2500 ms");
        assert_eq!(mean(&[1.0, 0.5]), Some(0.75));
        assert_eq!(mean(&[]), None);
    }
}
