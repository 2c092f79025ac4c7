//! The similarity space a graph records, and its code in the graph file.
//!
//! A graph is scored either by inner product (cosine graphs too: their rows
//! are normalised) or by L2, so it records one of [`Metric::Dot`] and
//! [`Metric::L2`]; the file header stores that as 0 or 1, the values format
//! version 1 has always used.

use eddy_model::Metric;

/// The space a graph built for `metric` records: cosine is scored as dot.
pub(crate) fn space_of(metric: Metric) -> Metric {
    match metric {
        Metric::Cosine | Metric::Dot => Metric::Dot,
        Metric::L2 => Metric::L2,
    }
}

/// The header code of `metric`'s space: 0 = dot (and cosine), 1 = L2.
pub(crate) fn space_code(metric: Metric) -> u32 {
    match space_of(metric) {
        Metric::L2 => 1,
        Metric::Cosine | Metric::Dot => 0,
    }
}

/// The space a header code stands for, `None` for an unknown code.
pub(crate) fn space_from_code(code: u32) -> Option<Metric> {
    match code {
        0 => Some(Metric::Dot),
        1 => Some(Metric::L2),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_keep_the_version_1_values() {
        assert_eq!(space_code(Metric::Dot), 0);
        assert_eq!(space_code(Metric::Cosine), 0);
        assert_eq!(space_code(Metric::L2), 1);
        for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
            assert_eq!(space_from_code(space_code(metric)), Some(space_of(metric)));
        }
        assert_eq!(space_from_code(2), None);
    }
}
