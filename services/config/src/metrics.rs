//! Prometheus plumbing both services share: registering labelled metrics in
//! a registry that is passed in, and the text exposition for `/metrics`.

use std::collections::BTreeSet;

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

/// The names of the families `registry` gathers once every labelled family
/// passed in has one child (a family without children is not gathered).
/// A service's test compares them with its metric-name constants, so no
/// registered metric goes unnamed and no name is left unregistered.
pub fn gathered_names(
    registry: &Registry,
    counters: &[&IntCounterVec],
    gauges: &[&IntGaugeVec],
    histograms: &[&HistogramVec],
) -> BTreeSet<String> {
    let labels = |c: &dyn prometheus::core::Collector| {
        vec!["x"; c.desc().first().map_or(0, |d| d.variable_labels.len())]
    };
    for c in counters {
        c.with_label_values(&labels(*c)).inc();
    }
    for g in gauges {
        g.with_label_values(&labels(*g)).set(1);
    }
    for h in histograms {
        h.with_label_values(&labels(*h)).observe(1.0);
    }
    registry
        .gather()
        .iter()
        .map(|family| family.name().to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathered_names_include_every_labelled_family() {
        let registry = Registry::new();
        let c = counter(&registry, "a_total", "a", &["x", "y"]).expect("counter");
        let g = gauge(&registry, "b", "b", &["x"]).expect("gauge");
        let h = histogram(&registry, "c_seconds", "c", &["x"], vec![1.0]).expect("histogram");
        assert!(registry.gather().is_empty(), "no children yet");
        let names = gathered_names(&registry, &[&c], &[&g], &[&h]);
        let want: BTreeSet<String> = ["a_total", "b", "c_seconds"].map(String::from).into();
        assert_eq!(names, want);
    }
}
