//! [`PayloadIndexView::evaluate`]: a [`Filter`] to the exact bitmap of matching rows.

use roaring::RoaringBitmap;

use super::dict::Dict;
use super::view::{corrupt, layout_mismatch, read_bitmap, FieldView, Kind, PayloadIndexView};
use crate::column::Column;
use crate::filter::{Condition, Filter, FloatRange, MatchValues, Predicate};
use crate::IndexError;

impl PayloadIndexView<'_> {
    /// The rows in `0..rows` that match `filter`.
    ///
    /// Fails when the filter names a field this segment did not index (or
    /// indexed with another type), or on corrupt bytes.
    pub fn evaluate(&self, filter: &Filter) -> Result<RoaringBitmap, IndexError> {
        let mut out = self.eval_filter(filter)?;
        out.remove_range(self.rows..);
        Ok(out)
    }

    /// Number of rows matching `filter` (an exact [`PayloadIndexView::evaluate`]).
    pub fn count(&self, filter: &Filter) -> Result<u64, IndexError> {
        self.evaluate(filter).map(|b| b.len())
    }

    fn eval_filter(&self, filter: &Filter) -> Result<RoaringBitmap, IndexError> {
        let mut acc: Option<RoaringBitmap> = None;
        for c in &filter.must {
            let b = self.eval_cond(c)?;
            let next = match acc {
                None => b,
                Some(a) => a & b,
            };
            if next.is_empty() {
                return Ok(next);
            }
            acc = Some(next);
        }
        if !filter.should.is_empty() {
            let mut any = RoaringBitmap::new();
            for c in &filter.should {
                any |= self.eval_cond(c)?;
            }
            acc = Some(match acc {
                None => any,
                Some(a) => a & any,
            });
        }
        let mut acc = acc.unwrap_or_else(|| self.universe());
        for c in &filter.must_not {
            if acc.is_empty() {
                break;
            }
            acc -= self.eval_cond(c)?;
        }
        Ok(acc)
    }

    fn eval_cond(&self, cond: &Condition) -> Result<RoaringBitmap, IndexError> {
        match cond {
            Condition::Filter(f) => self.eval_filter(f),
            Condition::IsNull { key } => {
                let f = self.field(key, None)?;
                read_bitmap(f.null, f.name)
            }
            Condition::IsEmpty { key, field_type } => {
                let f = self.field(key, Some(*field_type))?;
                Ok(self.universe() - read_bitmap(f.has, f.name)?)
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
                        if *except {
                            keyword_except(f, d, list)
                        } else {
                            let mut out = RoaringBitmap::new();
                            for s in list {
                                if let Some(i) = d.lookup(s.as_bytes())? {
                                    out |= d.bitmap(i)?;
                                }
                            }
                            Ok(out)
                        }
                    }
                    (
                        Predicate::Match {
                            values: MatchValues::Integer(list),
                            except,
                        },
                        Kind::Integer { values, rows },
                    ) => {
                        let mut hits = Vec::new();
                        for &v in list {
                            let (start, end) = int_bounds(values, v, v);
                            hits.extend((start..end.max(start)).map(|i| rows.at(i)));
                        }
                        let hits = sorted_rows(hits)?;
                        if *except {
                            Ok(read_bitmap(f.has, f.name)? - hits)
                        } else {
                            Ok(hits)
                        }
                    }
                    (
                        Predicate::Match {
                            values: MatchValues::Bool(list),
                            except,
                        },
                        Kind::Bool { bitmaps, .. },
                    ) => {
                        let mut out = RoaringBitmap::new();
                        for (b, bytes) in [false, true].into_iter().zip(bitmaps) {
                            if list.contains(&b) != *except {
                                out |= read_bitmap(bytes, f.name)?;
                            }
                        }
                        Ok(out)
                    }
                    (Predicate::IntRange { lo, hi }, Kind::Integer { values, rows }) => {
                        if lo > hi {
                            return Ok(RoaringBitmap::new());
                        }
                        let (start, end) = int_bounds(values, *lo, *hi);
                        sorted_rows((start..end.max(start)).map(|i| rows.at(i)).collect())
                    }
                    (Predicate::FloatRange(r), Kind::Float { values, rows }) => {
                        let (start, end) = float_bounds(values, r);
                        sorted_rows((start..end.max(start)).map(|i| rows.at(i)).collect())
                    }
                    _ => Err(layout_mismatch(f.name)),
                }
            }
        }
    }
}

fn sorted_rows(mut rows: Vec<u32>) -> Result<RoaringBitmap, IndexError> {
    rows.sort_unstable();
    rows.dedup();
    RoaringBitmap::from_sorted_iter(rows).map_err(|_| corrupt("row list is not sortable"))
}

/// Index range `start..end` of the sorted integer column holding values in `lo..=hi`.
pub(super) fn int_bounds(values: &Column<'_, i64>, lo: i64, hi: i64) -> (usize, usize) {
    let start = values.partition_point(|x| x < lo);
    let end = values.partition_point(|x| x <= hi);
    (start, end)
}

/// Index range `start..end` of the sorted float column holding values in `r`.
pub(super) fn float_bounds(values: &Column<'_, f64>, r: &FloatRange) -> (usize, usize) {
    let start = values.partition_point(|x| r.below(x));
    let end = values.partition_point(|x| r.within_upper(x));
    (start, end)
}

/// Rows of `except`: rows with a value not in `list`.
///
/// A single-valued row matches iff its value is not listed, so the answer is
/// `has − rows(list)` plus those multi-valued rows in `rows(list)` that also
/// hold some unlisted value (found by scanning the dictionary, only when such
/// candidates exist).
fn keyword_except(
    f: &FieldView<'_>,
    d: &Dict<'_>,
    list: &[String],
) -> Result<RoaringBitmap, IndexError> {
    let mut listed = RoaringBitmap::new();
    for s in list {
        if let Some(i) = d.lookup(s.as_bytes())? {
            listed |= d.bitmap(i)?;
        }
    }
    let mut out = read_bitmap(f.has, f.name)? - &listed;
    let mut candidates = read_bitmap(f.multi, f.name)? & listed;
    for i in 0..d.n {
        if candidates.is_empty() {
            break;
        }
        let key = d.key(i)?;
        if list.binary_search_by(|x| x.as_bytes().cmp(key)).is_ok() {
            continue;
        }
        let hit = d.bitmap(i)? & &candidates;
        if !hit.is_empty() {
            candidates -= &hit;
            out |= hit;
        }
    }
    Ok(out)
}
