//! [`PayloadIndexView::estimate`]: cheap cardinality bounds from stored counts.

use super::evaluate::{float_bounds, int_bounds};
use super::view::{layout_mismatch, Kind, PayloadIndexView};
use crate::filter::{Condition, Filter, MatchValues, Predicate};
use crate::IndexError;

/// A cardinality estimate: `min <= actual <= max`, `expected` in between
/// (independence assumption across conditions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    /// Lower bound on matching rows.
    pub min: u64,
    /// Best guess of matching rows.
    pub expected: u64,
    /// Upper bound on matching rows.
    pub max: u64,
}

impl Estimate {
    fn exact(n: u64) -> Self {
        Self {
            min: n,
            expected: n,
            max: n,
        }
    }
}

impl PayloadIndexView<'_> {
    /// A cheap cardinality estimate for `filter`, from stored counts and binary
    /// searches only (no bitmap is read).
    pub fn estimate(&self, filter: &Filter) -> Result<Estimate, IndexError> {
        self.estimate_filter(filter)
    }

    fn estimate_filter(&self, filter: &Filter) -> Result<Estimate, IndexError> {
        let rows = u64::from(self.rows);
        let mut parts = Vec::with_capacity(filter.must.len() + filter.must_not.len() + 1);
        for c in &filter.must {
            parts.push(self.estimate_cond(c)?);
        }
        if !filter.should.is_empty() {
            let mut min = 0;
            let mut max = 0u64;
            let mut none = 1.0;
            for c in &filter.should {
                let e = self.estimate_cond(c)?;
                min = min.max(e.min);
                max = max.saturating_add(e.max);
                none *= 1.0 - fraction(e.expected, rows);
            }
            let max = max.min(rows);
            parts.push(clamp(min, (1.0 - none) * rows as f64, max));
        }
        for c in &filter.must_not {
            let e = self.estimate_cond(c)?;
            parts.push(Estimate {
                min: rows.saturating_sub(e.max),
                expected: rows.saturating_sub(e.expected),
                max: rows.saturating_sub(e.min),
            });
        }
        // Conjunction: Bonferroni lower bound, min of upper bounds, product of fractions.
        let mut min_sum = 0u64;
        let mut max = rows;
        let mut frac = 1.0;
        for e in &parts {
            min_sum = min_sum.saturating_add(e.min);
            max = max.min(e.max);
            frac *= fraction(e.expected, rows);
        }
        let slack = rows.saturating_mul(parts.len().saturating_sub(1) as u64);
        let min = min_sum.saturating_sub(slack).min(max);
        Ok(clamp(min, frac * rows as f64, max))
    }

    fn estimate_cond(&self, cond: &Condition) -> Result<Estimate, IndexError> {
        let rows = u64::from(self.rows);
        Ok(match cond {
            Condition::Filter(f) => self.estimate_filter(f)?,
            Condition::IsNull { key } => Estimate::exact(self.field(key, None)?.null_count),
            Condition::IsEmpty { key, field_type } => {
                let f = self.field(key, Some(*field_type))?;
                Estimate::exact(rows.saturating_sub(f.has_count))
            }
            Condition::Field(fc) => {
                let f = self.field(&fc.key, Some(fc.predicate.field_type()))?;
                match (&fc.predicate, &f.kind) {
                    (
                        Predicate::Match {
                            values: MatchValues::Keyword(list),
                            except,
                        },
                        Kind::Keyword(d),
                    ) => {
                        let mut sum = 0u64;
                        let mut biggest = 0u64;
                        for s in list {
                            if let Some(i) = d.lookup(s.as_bytes())? {
                                let c = u64::from(d.counts.at(i));
                                sum += c;
                                biggest = biggest.max(c);
                            }
                        }
                        if *except {
                            let min = f.has_count.saturating_sub(sum);
                            Estimate {
                                min,
                                expected: min,
                                max: f.has_count,
                            }
                        } else {
                            let max = sum.min(f.has_count);
                            Estimate {
                                min: biggest.min(max),
                                expected: max,
                                max,
                            }
                        }
                    }
                    (
                        Predicate::Match {
                            values: MatchValues::Integer(list),
                            except,
                        },
                        Kind::Integer { values, .. },
                    ) => {
                        let mut sum = 0u64;
                        for &v in list {
                            let (start, end) = int_bounds(values, v, v);
                            sum += end.saturating_sub(start) as u64;
                        }
                        Estimate::exact(if *except {
                            f.has_count.saturating_sub(sum)
                        } else {
                            sum
                        })
                    }
                    (
                        Predicate::Match {
                            values: MatchValues::Bool(list),
                            except,
                        },
                        Kind::Bool { counts, .. },
                    ) => {
                        let mut sum = 0;
                        for (b, c) in [false, true].into_iter().zip(counts) {
                            if list.contains(&b) != *except {
                                sum += c;
                            }
                        }
                        Estimate::exact(sum)
                    }
                    (Predicate::IntRange { lo, hi }, Kind::Integer { values, .. }) => {
                        if lo > hi {
                            Estimate::exact(0)
                        } else {
                            let (start, end) = int_bounds(values, *lo, *hi);
                            Estimate::exact(end.saturating_sub(start) as u64)
                        }
                    }
                    (Predicate::FloatRange(r), Kind::Float { values, .. }) => {
                        let (start, end) = float_bounds(values, r);
                        Estimate::exact(end.saturating_sub(start) as u64)
                    }
                    _ => return Err(layout_mismatch(f.name)),
                }
            }
        })
    }
}

fn fraction(n: u64, rows: u64) -> f64 {
    if rows == 0 {
        0.0
    } else {
        (n as f64 / rows as f64).clamp(0.0, 1.0)
    }
}

fn clamp(min: u64, expected: f64, max: u64) -> Estimate {
    let expected = (expected.round() as u64).clamp(min, max.max(min));
    Estimate {
        min,
        expected,
        max: max.max(min),
    }
}
