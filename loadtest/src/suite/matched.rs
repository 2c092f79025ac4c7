//! Curves of throughput against recall, and throughput at a matched recall:
//! the one way the report compares engines (never at matched `ef`).

use serde::Serialize;

/// One point of a curve: a search setting and what it measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CurvePoint {
    /// The beam width (`ef`) of the walk.
    pub ef: usize,
    /// Mean tie-aware recall@10.
    pub recall10: f64,
    /// Queries per second (mean over rounds).
    pub qps: f64,
    /// (max − min) / mean of `qps` over rounds; 0 with one round.
    pub spread: f64,
    /// Median request latency, ms, where measured.
    pub p50_ms: Option<f64>,
    /// 99th-percentile request latency, ms, where measured.
    pub p99_ms: Option<f64>,
}

/// A throughput/recall curve of one engine and access path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Curve {
    /// Display name (`eddy HTTP`, `milvus batch 100`, `hnswlib`...).
    pub name: String,
    /// Queries per request (1 = single queries).
    pub batch: usize,
    /// Index build time, seconds, where measured.
    pub build_s: Option<f64>,
    /// Points in `ef` order.
    pub points: Vec<CurvePoint>,
    /// Per round: queries per second at each point (the A/B/A/B spread).
    pub rounds: Vec<Vec<f64>>,
}

/// Throughput at a recall target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AtRecall {
    /// Interpolated between the two points that bracket the target.
    Interpolated(f64),
    /// Even the lowest `ef` is above the target: its throughput is a lower
    /// bound (throughput falls as `ef` grows), with the recall it had.
    AtLeast(f64, f64),
    /// No point reaches the target.
    NotReached,
}

impl AtRecall {
    /// The throughput figure, interpolated or bound.
    pub fn value(self) -> Option<f64> {
        match self {
            AtRecall::Interpolated(q) | AtRecall::AtLeast(q, _) => Some(q),
            AtRecall::NotReached => None,
        }
    }
}

/// Queries per second of `points` at recall@10 `target`: linear in
/// log(q/s) between the bracketing points of the sweep, never extrapolated.
pub fn qps_at(points: &[CurvePoint], target: f64) -> AtRecall {
    qps_at_by(points, target, |p| p.qps)
}

fn qps_at_by(points: &[CurvePoint], target: f64, qps: impl Fn(&CurvePoint) -> f64) -> AtRecall {
    let mut pts: Vec<&CurvePoint> = points.iter().filter(|p| qps(p) > 0.0).collect();
    pts.sort_by_key(|p| p.ef);
    let Some(first) = pts.first() else {
        return AtRecall::NotReached;
    };
    if first.recall10 >= target {
        return AtRecall::AtLeast(qps(first), first.recall10);
    }
    for pair in pts.windows(2) {
        let (lo, hi) = (pair[0], pair[1]);
        if lo.recall10 < target && target <= hi.recall10 {
            let f = (target - lo.recall10) / (hi.recall10 - lo.recall10);
            let (a, b) = (qps(lo).ln(), qps(hi).ln());
            return AtRecall::Interpolated((a + f * (b - a)).exp());
        }
    }
    AtRecall::NotReached
}

/// `x / y` throughput at recall `target`, with the per-round range when
/// both curves have the same number of rounds. `None` when either side has
/// no figure there or `y`'s is only a bound; when `x`'s is a bound (its
/// lowest `ef` is above the target), the ratio is a lower bound.
pub fn ratio_at(x: &Curve, y: &Curve, target: f64) -> Option<Ratio> {
    let (qx, qy) = (qps_at(&x.points, target), qps_at(&y.points, target));
    let (vx, vy) = (qx.value()?, qy.value()?);
    if matches!(qy, AtRecall::AtLeast(..)) {
        // The peer's figure is itself only a lower bound: no ratio holds.
        return None;
    }
    let per_round: Vec<f64> = if x.rounds.len() == y.rounds.len() {
        x.rounds
            .iter()
            .zip(&y.rounds)
            .filter_map(|(rx, ry)| {
                let at = |c: &Curve, r: &[f64]| {
                    let pts: Vec<CurvePoint> = c
                        .points
                        .iter()
                        .zip(r)
                        .map(|(p, q)| CurvePoint { qps: *q, ..*p })
                        .collect();
                    qps_at(&pts, target).value()
                };
                Some(at(x, rx)? / at(y, ry)?)
            })
            .collect()
    } else {
        Vec::new()
    };
    let min = per_round.iter().copied().fold(f64::INFINITY, f64::min);
    let max = per_round.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some(Ratio {
        value: vx / vy,
        lower_bound: matches!(qx, AtRecall::AtLeast(..)),
        range: (!per_round.is_empty()).then_some((min, max)),
    })
}

/// A throughput ratio at matched recall.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ratio {
    /// The ratio of the mean curves.
    pub value: f64,
    /// The numerator's recall was above the target at its lowest `ef`.
    pub lower_bound: bool,
    /// The lowest and highest per-round ratio.
    pub range: Option<(f64, f64)>,
}

impl std::fmt::Display for Ratio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.lower_bound {
            write!(f, "≥ ")?;
        }
        write!(f, "{:.2}×", self.value)?;
        if let Some((lo, hi)) = self.range {
            write!(f, " ({lo:.2}–{hi:.2})")?;
        }
        Ok(())
    }
}

/// The mean and (max − min) / mean of `values` (0 and 0 when empty).
pub fn mean_spread(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let spread = if mean > 0.0 { (max - min) / mean } else { 0.0 };
    (mean, spread)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(ef: usize, recall10: f64, qps: f64) -> CurvePoint {
        CurvePoint {
            ef,
            recall10,
            qps,
            spread: 0.0,
            p50_ms: None,
            p99_ms: None,
        }
    }

    fn curve(points: Vec<CurvePoint>, rounds: Vec<Vec<f64>>) -> Curve {
        Curve {
            name: "c".into(),
            batch: 1,
            build_s: None,
            points,
            rounds,
        }
    }

    #[test]
    fn throughput_is_interpolated_in_log_space_between_bracketing_points() {
        let pts = [
            pt(16, 0.90, 4000.0),
            pt(32, 0.96, 1000.0),
            pt(64, 0.99, 500.0),
        ];
        // Halfway from 0.90 to 0.96: the geometric mean of 4000 and 1000.
        match qps_at(&pts, 0.93) {
            AtRecall::Interpolated(q) => assert!((q - 2000.0).abs() < 1e-6, "{q}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(qps_at(&pts, 0.995), AtRecall::NotReached);
        assert_eq!(qps_at(&pts, 0.85), AtRecall::AtLeast(4000.0, 0.90));
        // Exactly on a point: that point's figure.
        let on = qps_at(&pts, 0.96).value().expect("reached");
        assert!((on - 1000.0).abs() < 1e-9, "{on}");
    }

    #[test]
    fn ratios_carry_their_per_round_range_and_refuse_a_bound_below() {
        let x = curve(
            vec![pt(16, 0.90, 3000.0), pt(32, 0.96, 2000.0)],
            vec![vec![2800.0, 1800.0], vec![3200.0, 2200.0]],
        );
        let y = curve(
            vec![pt(16, 0.90, 1500.0), pt(32, 0.96, 1000.0)],
            vec![vec![1500.0, 1000.0], vec![1500.0, 1000.0]],
        );
        let r = ratio_at(&x, &y, 0.96).expect("both reach 0.96");
        assert!((r.value - 2.0).abs() < 1e-9);
        let (lo, hi) = r.range.expect("per-round range");
        assert!(
            (lo - 1.8).abs() < 1e-9 && (hi - 2.2).abs() < 1e-9,
            "{lo} {hi}"
        );
        assert_eq!(r.to_string(), "2.00× (1.80–2.20)");
        // Both only bound at 0.5: no ratio.
        assert_eq!(ratio_at(&x, &y, 0.5), None);
        assert_eq!(ratio_at(&x, &y, 0.99), None);
        assert_eq!(mean_spread(&[2.0, 4.0]), (3.0, 2.0 / 3.0));
    }
}
