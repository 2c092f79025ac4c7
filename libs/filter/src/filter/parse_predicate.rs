//! Parsing of `match` and `range` bodies into typed [`Predicate`]s.

use eddy_model::FieldType;
use serde_json::{Number, Value};

use super::parse::{show, type_name, Parser};
use super::{FloatRange, MatchValues, Predicate, MAX_MATCH_VALUES};
use crate::FilterError;

impl Parser<'_> {
    pub(super) fn match_predicate(
        &mut self,
        key: &str,
        field_type: FieldType,
        body: &Value,
    ) -> Result<Predicate, FilterError> {
        let obj = self.object(body, "a match object like {\"value\": ...}")?;
        if field_type == FieldType::Float {
            return Err(self.err(format!(
                "'match' is not supported on float field '{key}'; use 'range'"
            )));
        }
        let mut entries = obj.iter();
        let (name, item) = match (entries.next(), entries.next()) {
            (Some(entry), None) => entry,
            (None, _) => {
                return Err(self.err("empty match; expected one of 'value', 'any' or 'except'"))
            }
            (Some(_), Some(_)) => {
                return Err(self.err("match takes exactly one of 'value', 'any' or 'except'"))
            }
        };
        let (items, except): (Vec<&Value>, bool) = match name.as_str() {
            "value" => (vec![item], false),
            "any" | "except" => {
                let list = self.at(name, |p| match item {
                    Value::Array(list) => Ok(list.iter().collect::<Vec<_>>()),
                    other => Err(p.err(format!("expected a list of values, got {}", show(other)))),
                })?;
                if name == "any" && list.is_empty() {
                    return Err(self.at(name, |p| p.err("'any' needs at least one value")));
                }
                self.values += list.len();
                if self.values > MAX_MATCH_VALUES {
                    return Err(self.at(name, |p| {
                        p.err(format!(
                            "filter lists more than {MAX_MATCH_VALUES} match values in total"
                        ))
                    }));
                }
                (list, name == "except")
            }
            other @ ("text" | "phrase" | "text_any") => {
                return Err(self.err(format!("'match.{other}' (full-text) is not supported")))
            }
            other => {
                return Err(self.err(format!(
                    "unknown key '{other}' in match; expected 'value', 'any' or 'except'"
                )))
            }
        };
        let is_list = name != "value";
        let values = self.at(name, |p| p.typed_values(key, field_type, &items, is_list))?;
        Ok(Predicate::Match { values, except })
    }

    fn typed_values(
        &mut self,
        key: &str,
        field_type: FieldType,
        items: &[&Value],
        is_list: bool,
    ) -> Result<MatchValues, FilterError> {
        let mismatch = |p: &mut Self, i: usize, v: &Value| {
            let want = match field_type {
                FieldType::Keyword => "a string",
                FieldType::Integer => "an integer",
                FieldType::Bool => "true or false",
                FieldType::Float => "a number",
            };
            let msg = format!(
                "expected {want} for {} field '{key}', got {}",
                type_name(field_type),
                show(v)
            );
            if is_list {
                p.index(i, |p| p.err(msg))
            } else {
                p.err(msg)
            }
        };
        Ok(match field_type {
            FieldType::Keyword => {
                let mut out = Vec::with_capacity(items.len());
                for (i, v) in items.iter().enumerate() {
                    match v {
                        Value::String(s) => out.push(s.clone()),
                        _ => return Err(mismatch(self, i, v)),
                    }
                }
                out.sort_unstable();
                out.dedup();
                MatchValues::Keyword(out)
            }
            FieldType::Integer => {
                let mut out = Vec::with_capacity(items.len());
                for (i, v) in items.iter().enumerate() {
                    match v.as_i64() {
                        Some(n) => out.push(n),
                        None => return Err(mismatch(self, i, v)),
                    }
                }
                out.sort_unstable();
                out.dedup();
                MatchValues::Integer(out)
            }
            FieldType::Bool => {
                let mut out = Vec::with_capacity(items.len());
                for (i, v) in items.iter().enumerate() {
                    match v {
                        Value::Bool(b) => out.push(*b),
                        _ => return Err(mismatch(self, i, v)),
                    }
                }
                out.sort_unstable();
                out.dedup();
                MatchValues::Bool(out)
            }
            FieldType::Float => return Err(self.err("'match' is not supported on float fields")),
        })
    }

    pub(super) fn range_predicate(
        &mut self,
        key: &str,
        field_type: FieldType,
        body: &Value,
    ) -> Result<Predicate, FilterError> {
        if !matches!(field_type, FieldType::Integer | FieldType::Float) {
            return Err(self.err(format!(
                "'range' needs an integer or float field; '{key}' is {}",
                type_name(field_type)
            )));
        }
        let obj = self.object(body, "a range object like {\"gte\": 1, \"lt\": 10}")?;
        let mut bounds: [Option<&Number>; 4] = [None; 4];
        for (name, item) in obj {
            let slot = match name.as_str() {
                "gt" => 0,
                "gte" => 1,
                "lt" => 2,
                "lte" => 3,
                other => {
                    return Err(self.err(format!(
                        "unknown key '{other}' in range; expected gt, gte, lt or lte"
                    )))
                }
            };
            match item {
                Value::Null => {}
                Value::Number(n) => bounds[slot] = Some(n),
                other => {
                    return Err(self.at(name, |p| {
                        p.err(format!("expected a number, got {}", show(other)))
                    }))
                }
            }
        }
        if bounds.iter().all(Option::is_none) {
            return Err(self.err("range needs at least one of gt, gte, lt, lte"));
        }
        let [gt, gte, lt, lte] = bounds;
        if field_type == FieldType::Float {
            let f = |n: Option<&Number>| n.and_then(Number::as_f64);
            return Ok(Predicate::FloatRange(FloatRange {
                gt: f(gt),
                gte: f(gte),
                lt: f(lt),
                lte: f(lte),
            }));
        }
        // Integer field: turn every bound into an inclusive i128 bound, then clamp.
        let mut lo = i128::from(i64::MIN);
        let mut hi = i128::from(i64::MAX);
        if let Some(n) = gt {
            lo = lo.max(floor(n) + 1);
        }
        if let Some(n) = gte {
            lo = lo.max(ceil(n));
        }
        if let Some(n) = lt {
            hi = hi.min(ceil(n) - 1);
        }
        if let Some(n) = lte {
            hi = hi.min(floor(n));
        }
        let (lo, hi) = match (i64::try_from(lo), i64::try_from(hi)) {
            (Ok(lo), Ok(hi)) if lo <= hi => (lo, hi),
            // Empty range: canonical empty bounds.
            _ => (1, 0),
        };
        Ok(Predicate::IntRange { lo, hi })
    }
}

fn floor(n: &Number) -> i128 {
    if let Some(i) = n.as_i64() {
        i128::from(i)
    } else if let Some(u) = n.as_u64() {
        i128::from(u)
    } else {
        // `as` saturates; JSON numbers are finite.
        n.as_f64().map_or(0, |f| f.floor() as i128)
    }
}

fn ceil(n: &Number) -> i128 {
    if let Some(i) = n.as_i64() {
        i128::from(i)
    } else if let Some(u) = n.as_u64() {
        i128::from(u)
    } else {
        n.as_f64().map_or(0, |f| f.ceil() as i128)
    }
}
