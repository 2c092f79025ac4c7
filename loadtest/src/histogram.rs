//! Latency histograms for load runs: HDR histograms in microseconds (every
//! sample kept at 3 significant digits, so percentiles stay exact to 0.1 %
//! however many samples a run records), and the serializable summary the
//! reports print.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// The largest latency recorded as itself (one hour); longer ones are clamped.
const MAX_MICROS: u64 = 3_600_000_000;
/// Significant decimal digits the histogram keeps.
const SIGNIFICANT_DIGITS: u8 = 3;

/// A latency histogram with microsecond resolution.
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    inner: Histogram<u64>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram covering 1 µs to one hour.
    pub fn new() -> Self {
        let inner = Histogram::new_with_bounds(1, MAX_MICROS, SIGNIFICANT_DIGITS)
            .expect("constant histogram bounds are valid");
        Self { inner }
    }

    /// Records one latency (clamped to 1 µs ..= one hour).
    pub fn record(&mut self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(MAX_MICROS);
        self.inner.saturating_record(micros.clamp(1, MAX_MICROS));
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        // Both sides have the same bounds, so no sample can be out of range.
        if let Err(e) = self.inner.add(&other.inner) {
            tracing::warn!(error = %e, "merging latency histograms");
        }
    }

    /// Number of samples.
    pub fn len(&self) -> u64 {
        self.inner.len()
    }

    /// Whether no sample was recorded.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// The latency at quantile `q` (0..=1); zero when empty.
    pub fn quantile(&self, q: f64) -> Duration {
        Duration::from_micros(self.inner.value_at_quantile(q))
    }

    /// Percentiles for reports; `None` when empty.
    pub fn summary(&self) -> Option<LatencyStats> {
        if self.is_empty() {
            return None;
        }
        let ms = |micros: u64| micros as f64 / 1e3;
        Some(LatencyStats {
            count: self.len(),
            mean_ms: self.inner.mean() / 1e3,
            p50_ms: ms(self.inner.value_at_quantile(0.50)),
            p90_ms: ms(self.inner.value_at_quantile(0.90)),
            p99_ms: ms(self.inner.value_at_quantile(0.99)),
            p999_ms: ms(self.inner.value_at_quantile(0.999)),
            max_ms: ms(self.inner.max()),
        })
    }
}

/// A latency histogram's percentiles, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatencyStats {
    /// Number of samples.
    pub count: u64,
    /// Arithmetic mean.
    pub mean_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest sample.
    pub max_ms: f64,
}

/// Formats milliseconds with a precision that suits their size.
pub fn fmt_millis(ms: f64) -> String {
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 1000.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_merges_and_summarizes() {
        let mut a = LatencyHistogram::new();
        assert!(a.summary().is_none());
        for ms in 1..=100u64 {
            a.record(Duration::from_millis(ms));
        }
        let mut b = LatencyHistogram::new();
        b.record(Duration::from_secs(7200)); // clamped to one hour
        b.record(Duration::ZERO); // clamped to 1 µs
        a.merge(&b);
        assert_eq!(a.len(), 102);
        let s = a.summary().expect("summary");
        assert_eq!(s.count, 102);
        // 3 significant digits: 50 ms is recorded within 0.1 %.
        assert!((s.p50_ms - 50.0).abs() <= 0.05, "{s:?}");
        assert!((s.max_ms - 3_600_000.0).abs() / 3_600_000.0 < 1e-3, "{s:?}");
        assert!(a.quantile(0.0) <= Duration::from_micros(1));
    }

    #[test]
    fn formats_by_size() {
        assert_eq!(fmt_millis(1.5), "1.50 ms");
        assert_eq!(fmt_millis(250.0), "250.0 ms");
        assert_eq!(fmt_millis(2500.0), "2500 ms");
    }
}
