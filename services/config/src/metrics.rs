//! Prometheus plumbing both services share: registering labelled metrics in
//! a registry that is passed in, and the text exposition for `/metrics`.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Registers a labelled counter.
pub fn counter(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> prometheus::Result<IntCounterVec> {
    let c = IntCounterVec::new(Opts::new(name, help), labels)?;
    registry.register(Box::new(c.clone()))?;
    Ok(c)
}

/// Registers a labelled gauge.
pub fn gauge(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> prometheus::Result<IntGaugeVec> {
    let g = IntGaugeVec::new(Opts::new(name, help), labels)?;
    registry.register(Box::new(g.clone()))?;
    Ok(g)
}

/// Registers a labelled histogram.
pub fn histogram(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: Vec<f64>,
) -> prometheus::Result<HistogramVec> {
    let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)?;
    registry.register(Box::new(h.clone()))?;
    Ok(h)
}

/// The text exposition of `registry` plus the process metrics of the
/// default registry, and its content type.
pub fn encode(registry: &Registry) -> (String, Vec<u8>) {
    let mut families = registry.gather();
    families.extend(prometheus::gather());
    let encoder = TextEncoder::new();
    let mut out = Vec::new();
    if let Err(e) = encoder.encode(&families, &mut out) {
        tracing::warn!(error = %e, "encoding metrics");
    }
    (encoder.format_type().to_owned(), out)
}
