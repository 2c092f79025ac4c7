//! Similarity metrics and the one conversion of a score for users.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The similarity a collection ranks by.
///
/// The one similarity type of eddy: collections, graphs and quantizers all
/// use it. Inside, every score is "higher is closer" (the similarity for
/// cosine and dot, `-l2sq` for L2); [`Metric::reported`] turns it into what
/// users expect: cosine similarity and inner product (higher is closer),
/// squared Euclidean distance (lower is closer, as faiss reports it). Cosine
/// collections store unit-normalised vectors, so cosine is scored exactly
/// like dot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// Cosine similarity; vectors are normalised on ingest and queries on search.
    #[default]
    Cosine,
    /// Inner product, unnormalised.
    Dot,
    /// Squared Euclidean distance.
    L2,
}

impl Metric {
    /// Whether vectors (stored and query) are normalised to unit length.
    pub fn normalizes(self) -> bool {
        matches!(self, Metric::Cosine)
    }

    /// The score users see for an internal score.
    ///
    /// Inside eddy every score is "higher is closer": the similarity for
    /// cosine and dot, minus the squared distance for L2. Users get the
    /// squared distance for L2 (positive, lower is closer); this is the one
    /// place that sign flips, at the API edge.
    #[inline]
    pub fn reported(self, score: f32) -> f32 {
        match self {
            Metric::Cosine | Metric::Dot => score,
            Metric::L2 => -score,
        }
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Metric::Cosine => "cosine",
            Metric::Dot => "dot",
            Metric::L2 => "l2",
        })
    }
}

impl FromStr for Metric {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "cosine" | "cos" => Ok(Metric::Cosine),
            "dot" | "ip" | "inner_product" => Ok(Metric::Dot),
            "l2" | "euclid" | "euclidean" => Ok(Metric::L2),
            other => Err(format!(
                "unknown metric {other:?} (expected cosine, dot or l2)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reported_scores_flip_only_for_l2() {
        assert_eq!(Metric::Cosine.reported(0.9), 0.9);
        assert_eq!(Metric::Dot.reported(-2.5), -2.5);
        // Internal L2 scores are -l2sq; users see the squared distance.
        assert_eq!(Metric::L2.reported(-4.0), 4.0);
        assert_eq!(Metric::L2.reported(-0.0), 0.0);
    }

    #[test]
    fn parses_names_and_aliases() {
        assert_eq!("L2".parse::<Metric>(), Ok(Metric::L2));
        assert_eq!("ip".parse::<Metric>(), Ok(Metric::Dot));
        assert!("manhattan".parse::<Metric>().is_err());
    }
}
