//! Distance metrics and how their scores order.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The similarity a collection ranks by.
///
/// Scores are reported as users expect them: cosine similarity and inner
/// product (higher is closer), squared Euclidean distance (lower is closer,
/// as faiss reports it). Cosine collections store unit-normalised vectors so
/// cosine is computed as a dot product.
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

    /// Whether a larger score means closer.
    pub fn higher_is_better(self) -> bool {
        !matches!(self, Metric::L2)
    }

    /// Maps a score to a rank key where smaller is always closer, so one
    /// top-k structure serves every metric.
    #[inline]
    pub fn rank_key(self, score: f32) -> f32 {
        if self.higher_is_better() {
            -score
        } else {
            score
        }
    }

    /// Inverse of [`Metric::rank_key`].
    #[inline]
    pub fn score_from_key(self, key: f32) -> f32 {
        self.rank_key(key)
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
    fn rank_keys_order_closest_first() {
        assert!(Metric::Cosine.rank_key(0.9) < Metric::Cosine.rank_key(0.1));
        assert!(Metric::L2.rank_key(0.1) < Metric::L2.rank_key(0.9));
        assert_eq!(Metric::Dot.score_from_key(Metric::Dot.rank_key(0.5)), 0.5);
        assert_eq!("L2".parse::<Metric>(), Ok(Metric::L2));
        assert!("manhattan".parse::<Metric>().is_err());
    }
}
