//! The filtered-search planner: exact scan over the matching rows versus a
//! graph walk that uses the matching bitmap as its accept predicate.
//!
//! With selectivity `s = matching / rows`, an exact scan costs `s · rows`
//! distance computations. A filtered HNSW walk has to visit roughly `1 / s`
//! times the nodes of an unfiltered search (about `ef · M · log(rows)`) to
//! collect `k` accepted results, and at low `s` the accepted sub-graph also
//! fragments so recall collapses. The costs cross near
//! `s² ≈ ef · M · log(rows) / rows`, which for a million rows at `ef = 100`,
//! `M = 16` is about 4-5 %; [`DEFAULT_EXACT_FRACTION`] is therefore 5 %.
//! Below [`DEFAULT_EXACT_ROWS`] matching rows an exact scan is about the cost
//! of one unfiltered graph search anyway, so it is always exact.

/// Default selectivity at or below which the search is an exact scan.
pub const DEFAULT_EXACT_FRACTION: f64 = 0.05;
/// Matching-row count at or below which the search is always an exact scan.
pub const DEFAULT_EXACT_ROWS: u64 = 1024;
/// Cost crossover `c` of the `matching² ≤ c · rows` rule: measured on
/// debian-minilm (61,681 × 384, M = 16) where a scan costs 1.27e-7 s per row
/// and a filtered walk 1.95e-4 s / s (`eddy-bench --filter`), c ≈ 1,536 —
/// so at 61k rows filters up to ~16 % are scanned, at 1M rows up to ~4 %.
pub const DEFAULT_COST_ROWS: f64 = 1536.0;

/// How to answer a filtered search on one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// No row matches: skip the segment.
    Empty,
    /// Score every matching row (brute force over the bitmap).
    Exact,
    /// Walk the graph, accepting only rows in the bitmap.
    Graph,
}

/// Planner thresholds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Planner {
    /// Selectivity (`matching / rows`) at or below which to scan exactly.
    pub exact_fraction: f64,
    /// Matching-row count at or below which to scan exactly.
    pub exact_rows: u64,
    /// Scan exactly when `matching² ≤ cost_rows · rows` (the measured cost
    /// crossover of a scan, linear in `matching`, and a filtered walk,
    /// linear in `rows / matching`).
    pub cost_rows: f64,
}

impl Default for Planner {
    fn default() -> Self {
        Self {
            exact_fraction: DEFAULT_EXACT_FRACTION,
            exact_rows: DEFAULT_EXACT_ROWS,
            cost_rows: DEFAULT_COST_ROWS,
        }
    }
}

impl Planner {
    /// The plan for `matching` rows out of `rows`.
    pub fn plan(&self, matching: u64, rows: u64) -> Plan {
        if matching == 0 || rows == 0 {
            return Plan::Empty;
        }
        if matching <= self.exact_rows {
            return Plan::Exact;
        }
        // NaN or negative thresholds mean "never exact by fraction".
        let fraction = matching.min(rows) as f64 / rows as f64;
        let m = matching.min(rows) as f64;
        if fraction <= self.exact_fraction || m * m <= self.cost_rows * rows as f64 {
            Plan::Exact
        } else {
            Plan::Graph
        }
    }
}

/// The plan for `matching` rows out of `rows` with selectivity threshold
/// `threshold` (and the default [`DEFAULT_EXACT_ROWS`] floor).
pub fn plan(matching: u64, rows: u64, threshold: f64) -> Plan {
    Planner {
        exact_fraction: threshold,
        cost_rows: 0.0,
        ..Planner::default()
    }
    .plan(matching, rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_by_selectivity() {
        assert_eq!(plan(0, 1_000_000, 0.05), Plan::Empty);
        assert_eq!(plan(5, 0, 0.05), Plan::Empty);
        assert_eq!(plan(500, 1_000_000, 0.05), Plan::Exact);
        assert_eq!(plan(50_000, 1_000_000, 0.05), Plan::Exact);
        assert_eq!(plan(50_001, 1_000_000, 0.05), Plan::Graph);
        assert_eq!(plan(1_000_000, 1_000_000, 0.05), Plan::Graph);
        // Small segments: always exact under the row floor.
        assert_eq!(plan(1000, 1000, 0.05), Plan::Exact);
        assert_eq!(plan(2000, 1_000_000, f64::NAN), Plan::Graph);
        let p = Planner {
            exact_fraction: 0.5,
            exact_rows: 0,
            cost_rows: 0.0,
        };
        assert_eq!(p.plan(10, 20), Plan::Exact);
        assert_eq!(p.plan(11, 20), Plan::Graph);
    }

    #[test]
    fn the_cost_rule_scans_more_of_small_segments() {
        let p = Planner::default();
        // debian-minilm's F10 (10.8 % of 61,681): cheaper to scan.
        assert_eq!(p.plan(6_643, 61_681), Plan::Exact);
        assert_eq!(p.plan(30_000, 61_681), Plan::Graph);
        // A million rows: the 5 % rule and the cost rule agree (~4-5 %).
        assert_eq!(p.plan(39_000, 1_000_000), Plan::Exact);
        assert_eq!(p.plan(60_000, 1_000_000), Plan::Graph);
    }
}
