//! The filter model and its parser for Qdrant-shaped filter JSON.
//!
//! Parsing resolves every condition against the collection's indexed payload
//! fields, so a parsed [`Filter`] is already typed: keyword lists are sorted,
//! integer ranges are inclusive `i64` bounds, and evaluation never has to look
//! at the schema again.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use eddy_model::FieldType;
use serde_json::{Map, Number, Value};

use crate::FilterError;

/// Deepest nesting of filters accepted (the top-level filter is depth 1).
pub const MAX_DEPTH: usize = 16;
/// Most conditions accepted in one filter, counting nested ones.
pub const MAX_CONDITIONS: usize = 1024;
/// Most values accepted across all `any` / `except` lists of one filter.
pub const MAX_MATCH_VALUES: usize = 10_000;

/// A parsed, schema-checked filter: `must` all, `should` at least one (when
/// non-empty), `must_not` none.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Filter {
    /// Every condition must hold.
    pub must: Vec<Condition>,
    /// At least one condition must hold; ignored when empty.
    pub should: Vec<Condition>,
    /// No condition may hold.
    pub must_not: Vec<Condition>,
}

/// One condition of a filter.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// A `match` or `range` condition on one field.
    Field(FieldCondition),
    /// `is_null`: the payload has the key with an explicit JSON `null`.
    IsNull {
        /// The field name.
        key: String,
    },
    /// `is_empty`: the field has no indexable value (missing, `null`, `[]`,
    /// or only values of the wrong type).
    IsEmpty {
        /// The field name.
        key: String,
        /// The field's declared type (decides which values count).
        field_type: FieldType,
    },
    /// A nested filter used as a condition.
    Filter(Box<Filter>),
}

/// A `match` or `range` condition on one field.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldCondition {
    /// The field name.
    pub key: String,
    /// What the field's value must satisfy.
    pub predicate: Predicate,
}

/// A typed predicate on one field's value(s).
#[derive(Debug, Clone, PartialEq)]
pub enum Predicate {
    /// `match`: with `except == false` the field has a value in `values`
    /// (`value` is a one-element list); with `except == true` the field has a
    /// value that is *not* in `values`. A missing field never matches.
    Match {
        /// The listed values, sorted and deduplicated.
        values: MatchValues,
        /// `except` instead of `value` / `any`.
        except: bool,
    },
    /// `range` on an integer field, as inclusive bounds (empty when `lo > hi`).
    IntRange {
        /// Smallest accepted value.
        lo: i64,
        /// Largest accepted value.
        hi: i64,
    },
    /// `range` on a float field.
    FloatRange(FloatRange),
}

/// The values listed in a `match`, typed by the field.
#[derive(Debug, Clone, PartialEq)]
pub enum MatchValues {
    /// Keyword values, sorted and deduplicated.
    Keyword(Vec<String>),
    /// Integer values, sorted and deduplicated.
    Integer(Vec<i64>),
    /// Bool values, sorted (`false` first) and deduplicated.
    Bool(Vec<bool>),
}

impl MatchValues {
    /// Number of listed values.
    pub fn len(&self) -> usize {
        match self {
            MatchValues::Keyword(v) => v.len(),
            MatchValues::Integer(v) => v.len(),
            MatchValues::Bool(v) => v.len(),
        }
    }

    /// Whether the list is empty (only possible for `except`).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The field type these values belong to.
    pub fn field_type(&self) -> FieldType {
        match self {
            MatchValues::Keyword(_) => FieldType::Keyword,
            MatchValues::Integer(_) => FieldType::Integer,
            MatchValues::Bool(_) => FieldType::Bool,
        }
    }
}

/// Bounds of a float range; at least one is set by the parser.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FloatRange {
    /// Exclusive lower bound.
    pub gt: Option<f64>,
    /// Inclusive lower bound.
    pub gte: Option<f64>,
    /// Exclusive upper bound.
    pub lt: Option<f64>,
    /// Inclusive upper bound.
    pub lte: Option<f64>,
}

impl FloatRange {
    /// Whether `v` fails the lower bounds (true on a prefix of sorted values).
    pub(crate) fn below(&self, v: f64) -> bool {
        self.gt.is_some_and(|g| v <= g) || self.gte.is_some_and(|g| v < g)
    }

    /// Whether `v` meets the upper bounds (true on a prefix of sorted values).
    pub(crate) fn within_upper(&self, v: f64) -> bool {
        self.lt.is_none_or(|l| v < l) && self.lte.is_none_or(|l| v <= l)
    }

    /// Whether `v` is in the range.
    pub fn contains(&self, v: f64) -> bool {
        !self.below(v) && self.within_upper(v)
    }
}

impl Predicate {
    /// The field type this predicate applies to.
    pub fn field_type(&self) -> FieldType {
        match self {
            Predicate::Match { values, .. } => values.field_type(),
            Predicate::IntRange { .. } => FieldType::Integer,
            Predicate::FloatRange(_) => FieldType::Float,
        }
    }
}

impl Filter {
    /// A filter that matches every row.
    pub fn all() -> Self {
        Self::default()
    }

    /// Whether the filter has no conditions (matches every row).
    pub fn is_empty(&self) -> bool {
        self.must.is_empty() && self.should.is_empty() && self.must_not.is_empty()
    }

    /// Parses filter JSON text and checks it against the indexed payload fields.
    pub fn parse_str(
        text: &str,
        fields: &BTreeMap<String, FieldType>,
    ) -> Result<Self, FilterError> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| FilterError::Json(e.to_string()))?;
        Self::parse(&value, fields)
    }

    /// Parses a filter JSON value and checks it against the indexed payload fields.
    ///
    /// Errors name the offending place as a path such as `filter.must[1].range`.
    pub fn parse(value: &Value, fields: &BTreeMap<String, FieldType>) -> Result<Self, FilterError> {
        let mut parser = Parser {
            fields,
            path: String::from("filter"),
            conditions: 0,
            values: 0,
        };
        parser.filter(value, 1)
    }

    /// The filter as Qdrant-shaped JSON; [`Filter::parse`] reads it back to an
    /// equal filter.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        for (name, list) in [
            ("must", &self.must),
            ("should", &self.should),
            ("must_not", &self.must_not),
        ] {
            if !list.is_empty() {
                out.insert(
                    name.to_owned(),
                    Value::Array(list.iter().map(Condition::to_json).collect()),
                );
            }
        }
        Value::Object(out)
    }
}

impl Condition {
    /// The condition as Qdrant-shaped JSON.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        match self {
            Condition::Field(fc) => {
                out.insert("key".into(), Value::String(fc.key.clone()));
                match &fc.predicate {
                    Predicate::Match { values, except } => {
                        let list: Vec<Value> = match values {
                            MatchValues::Keyword(v) => {
                                v.iter().map(|s| Value::String(s.clone())).collect()
                            }
                            MatchValues::Integer(v) => v.iter().map(|&i| Value::from(i)).collect(),
                            MatchValues::Bool(v) => v.iter().map(|&b| Value::Bool(b)).collect(),
                        };
                        let mut m = Map::new();
                        if *except {
                            m.insert("except".into(), Value::Array(list));
                        } else if list.len() == 1 {
                            m.insert("value".into(), list.into_iter().next().unwrap_or_default());
                        } else {
                            m.insert("any".into(), Value::Array(list));
                        }
                        out.insert("match".into(), Value::Object(m));
                    }
                    Predicate::IntRange { lo, hi } => {
                        let mut r = Map::new();
                        r.insert("gte".into(), Value::from(*lo));
                        r.insert("lte".into(), Value::from(*hi));
                        out.insert("range".into(), Value::Object(r));
                    }
                    Predicate::FloatRange(fr) => {
                        let mut r = Map::new();
                        for (name, bound) in [
                            ("gt", fr.gt),
                            ("gte", fr.gte),
                            ("lt", fr.lt),
                            ("lte", fr.lte),
                        ] {
                            if let Some(n) = bound.and_then(Number::from_f64) {
                                r.insert(name.into(), Value::Number(n));
                            }
                        }
                        out.insert("range".into(), Value::Object(r));
                    }
                }
            }
            Condition::IsNull { key } => {
                out.insert("is_null".into(), key_object(key));
            }
            Condition::IsEmpty { key, .. } => {
                out.insert("is_empty".into(), key_object(key));
            }
            Condition::Filter(f) => return f.to_json(),
        }
        Value::Object(out)
    }
}

fn key_object(key: &str) -> Value {
    let mut m = Map::new();
    m.insert("key".into(), Value::String(key.to_owned()));
    Value::Object(m)
}

/// Short, bounded rendering of a JSON value for error messages.
fn show(value: &Value) -> String {
    let kind = match value {
        Value::Null => return "null".into(),
        Value::Bool(b) => return b.to_string(),
        Value::Number(n) => return n.to_string(),
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let text = value.to_string();
    if text.len() <= 40 {
        text
    } else {
        let mut cut = 37;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{kind} {}...", &text[..cut])
    }
}

fn type_name(t: FieldType) -> &'static str {
    match t {
        FieldType::Keyword => "keyword",
        FieldType::Integer => "integer",
        FieldType::Float => "float",
        FieldType::Bool => "bool",
    }
}

struct Parser<'s> {
    fields: &'s BTreeMap<String, FieldType>,
    path: String,
    conditions: usize,
    values: usize,
}

impl Parser<'_> {
    fn err(&self, message: impl Into<String>) -> FilterError {
        FilterError::Invalid {
            path: self.path.clone(),
            message: message.into(),
        }
    }

    /// Runs `f` with `.name` appended to the path.
    fn at<T>(&mut self, name: &str, f: impl FnOnce(&mut Self) -> T) -> T {
        let len = self.path.len();
        self.path.push('.');
        self.path.push_str(name);
        let out = f(self);
        self.path.truncate(len);
        out
    }

    /// Runs `f` with `[i]` appended to the path.
    fn index<T>(&mut self, i: usize, f: impl FnOnce(&mut Self) -> T) -> T {
        let len = self.path.len();
        let _ = write!(self.path, "[{i}]");
        let out = f(self);
        self.path.truncate(len);
        out
    }

    fn object<'v>(
        &self,
        value: &'v Value,
        what: &str,
    ) -> Result<&'v Map<String, Value>, FilterError> {
        value.as_object().ok_or_else(|| {
            self.err(format!(
                "expected {what} (a JSON object), got {}",
                show(value)
            ))
        })
    }

    fn filter(&mut self, value: &Value, depth: usize) -> Result<Filter, FilterError> {
        if depth > MAX_DEPTH {
            return Err(self.err(format!("filters are nested deeper than {MAX_DEPTH} levels")));
        }
        let obj = self.object(value, "a filter")?;
        let mut filter = Filter::default();
        for (name, item) in obj {
            let list = match name.as_str() {
                "must" => &mut filter.must,
                "should" => &mut filter.should,
                "must_not" => &mut filter.must_not,
                "min_should" => {
                    return Err(self.at(name, |p| p.err("min_should is not supported")));
                }
                other => {
                    return Err(self.err(format!(
                        "unknown key '{other}' in filter; expected must, should or must_not"
                    )));
                }
            };
            *list = self.at(name, |p| p.conditions(item, depth))?;
        }
        Ok(filter)
    }

    /// A list of conditions; a single condition object and `null` are accepted too.
    fn conditions(&mut self, value: &Value, depth: usize) -> Result<Vec<Condition>, FilterError> {
        match value {
            Value::Null => Ok(Vec::new()),
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, item)| self.index(i, |p| p.condition(item, depth)))
                .collect(),
            Value::Object(_) => Ok(vec![self.condition(value, depth)?]),
            other => Err(self.err(format!(
                "expected a list of conditions, got {}",
                show(other)
            ))),
        }
    }

    fn condition(&mut self, value: &Value, depth: usize) -> Result<Condition, FilterError> {
        self.conditions += 1;
        if self.conditions > MAX_CONDITIONS {
            return Err(self.err(format!("filter has more than {MAX_CONDITIONS} conditions")));
        }
        let obj = self.object(value, "a condition")?;
        if obj.contains_key("key") {
            return self.field_condition(obj);
        }
        if obj
            .keys()
            .any(|k| matches!(k.as_str(), "must" | "should" | "must_not" | "min_should"))
        {
            return Ok(Condition::Filter(Box::new(self.filter(value, depth + 1)?)));
        }
        let mut keys = obj.keys();
        match (keys.next().map(String::as_str), keys.next()) {
            (Some(kind @ ("is_null" | "is_empty")), None) => {
                let inner = obj.get(kind).unwrap_or(&Value::Null);
                self.at(kind, |p| {
                    let key = p.key_of(inner)?;
                    let field_type = p.field(key)?;
                    Ok(if kind == "is_null" {
                        Condition::IsNull { key: key.to_owned() }
                    } else {
                        Condition::IsEmpty {
                            key: key.to_owned(),
                            field_type,
                        }
                    })
                })
            }
            (Some(kind @ ("has_id" | "nested" | "has_vector" | "geo_radius" | "values_count")), None) => {
                Err(self.err(format!("'{kind}' conditions are not supported")))
            }
            // `{}` is an empty nested filter (matches everything), as in Qdrant.
            (None, _) => Ok(Condition::Filter(Box::default())),
            _ => Err(self.err(format!(
                "unknown condition with keys {}; expected {{\"key\": ..., \"match\" | \"range\": ...}}, is_null, is_empty or a nested filter",
                obj.keys().map(|k| format!("'{k}'")).collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    /// `{"key": "name"}` inside is_null / is_empty.
    fn key_of<'v>(&mut self, value: &'v Value) -> Result<&'v str, FilterError> {
        let obj = self.object(value, "{\"key\": \"<field>\"}")?;
        if let Some(other) = obj.keys().find(|k| k.as_str() != "key") {
            return Err(self.err(format!("unknown key '{other}'; expected only 'key'")));
        }
        match obj.get("key") {
            Some(Value::String(s)) => Ok(s),
            Some(other) => Err(self.at("key", |p| {
                p.err(format!("expected a field name string, got {}", show(other)))
            })),
            None => Err(self.err("missing 'key'")),
        }
    }

    fn field(&mut self, key: &str) -> Result<FieldType, FilterError> {
        match self.fields.get(key) {
            Some(t) => Ok(*t),
            None => {
                let indexed = if self.fields.is_empty() {
                    "none (the collection declares no payload_fields)".to_owned()
                } else {
                    self.fields
                        .keys()
                        .map(String::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                Err(self.at("key", |p| {
                    p.err(format!(
                        "field '{key}' is not an indexed payload field; indexed: {indexed}"
                    ))
                }))
            }
        }
    }

    fn field_condition(&mut self, obj: &Map<String, Value>) -> Result<Condition, FilterError> {
        let key = match obj.get("key") {
            Some(Value::String(s)) => s.as_str(),
            Some(other) => {
                return Err(self.at("key", |p| {
                    p.err(format!("expected a field name string, got {}", show(other)))
                }))
            }
            None => return Err(self.err("missing 'key'")),
        };
        let mut kind = None;
        for name in obj.keys() {
            match name.as_str() {
                "key" => {}
                "match" | "range" => {
                    if kind.is_some() {
                        return Err(self.err("a condition takes exactly one of 'match' or 'range'"));
                    }
                    kind = Some(name.as_str());
                }
                other @ ("geo_bounding_box" | "geo_radius" | "geo_polygon" | "values_count"
                | "datetime_range") => {
                    return Err(self.err(format!("'{other}' conditions are not supported")));
                }
                other => {
                    return Err(self.err(format!(
                        "unknown key '{other}' in field condition; expected 'key' with 'match' or 'range'"
                    )));
                }
            }
        }
        let field_type = self.field(key)?;
        let predicate = match kind {
            Some("match") => {
                let body = obj.get("match").unwrap_or(&Value::Null);
                self.at("match", |p| p.match_predicate(key, field_type, body))?
            }
            Some(_) => {
                let body = obj.get("range").unwrap_or(&Value::Null);
                self.at("range", |p| p.range_predicate(key, field_type, body))?
            }
            None => return Err(self.err(format!("condition on '{key}' needs 'match' or 'range'"))),
        };
        Ok(Condition::Field(FieldCondition {
            key: key.to_owned(),
            predicate,
        }))
    }

    fn match_predicate(
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

    fn range_predicate(
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::test_schema::schema;

    fn parse(v: Value) -> Result<Filter, FilterError> {
        Filter::parse(&v, &schema())
    }

    fn err(v: Value) -> String {
        match parse(v) {
            Ok(f) => panic!("expected an error, parsed {f:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn field(key: &str, predicate: Predicate) -> Condition {
        Condition::Field(FieldCondition {
            key: key.into(),
            predicate,
        })
    }

    #[test]
    fn accepts_qdrant_shapes() {
        let f = parse(json!({
            "must": [
                {"key": "section", "match": {"value": "games"}},
                {"key": "size", "range": {"gt": 1, "lte": 10.5}},
                {"key": "ok", "match": {"value": true}},
            ],
            "should": [
                {"key": "tags", "match": {"any": ["net", "admin", "net"]}},
                {"key": "size", "match": {"value": 7}},
            ],
            "must_not": [
                {"key": "section", "match": {"except": ["a"]}},
                {"is_null": {"key": "price"}},
                {"is_empty": {"key": "tags"}},
                {"must": [{"key": "price", "range": {"gte": 0.5, "lt": 2}}]},
            ],
        }))
        .expect("valid");
        assert_eq!(
            f.must,
            vec![
                field(
                    "section",
                    Predicate::Match {
                        values: MatchValues::Keyword(vec!["games".into()]),
                        except: false
                    }
                ),
                field("size", Predicate::IntRange { lo: 2, hi: 10 }),
                field(
                    "ok",
                    Predicate::Match {
                        values: MatchValues::Bool(vec![true]),
                        except: false
                    }
                ),
            ]
        );
        assert_eq!(
            f.should[0],
            field(
                "tags",
                Predicate::Match {
                    values: MatchValues::Keyword(vec!["admin".into(), "net".into()]),
                    except: false
                }
            )
        );
        assert_eq!(
            f.must_not[2],
            Condition::IsEmpty {
                key: "tags".into(),
                field_type: FieldType::Keyword
            }
        );
        let Condition::Filter(nested) = &f.must_not[3] else {
            panic!("nested filter expected");
        };
        assert_eq!(
            nested.must[0],
            field(
                "price",
                Predicate::FloatRange(FloatRange {
                    gte: Some(0.5),
                    lt: Some(2.0),
                    ..FloatRange::default()
                })
            )
        );
        // JSON round trip.
        assert_eq!(parse(f.to_json()).expect("round trip"), f);
        // Empty filter, null lists and a single condition instead of a list.
        assert!(parse(json!({})).expect("empty").is_empty());
        let single = parse(json!({"must": {"key": "size", "match": {"value": 3}}, "should": null}))
            .expect("single");
        assert_eq!(single.must.len(), 1);
        assert!(single.should.is_empty());
    }

    #[test]
    fn integer_ranges_become_inclusive_bounds() {
        let range = |r: Value| match parse(json!({"must": [{"key": "size", "range": r}]})) {
            Ok(f) => f.must[0].clone(),
            Err(e) => panic!("{e}"),
        };
        assert_eq!(
            range(json!({"gt": 1.5, "lt": 4})),
            field("size", Predicate::IntRange { lo: 2, hi: 3 })
        );
        assert_eq!(
            range(json!({"gte": -1.5, "lte": -0.5})),
            field("size", Predicate::IntRange { lo: -1, hi: -1 })
        );
        assert_eq!(
            range(json!({"gt": i64::MAX})),
            field("size", Predicate::IntRange { lo: 1, hi: 0 })
        );
        assert_eq!(
            range(json!({"lte": u64::MAX})),
            field(
                "size",
                Predicate::IntRange {
                    lo: i64::MIN,
                    hi: i64::MAX
                }
            )
        );
        assert_eq!(
            range(json!({"gte": 1e300})),
            field("size", Predicate::IntRange { lo: 1, hi: 0 })
        );
    }

    #[test]
    fn rejects_with_located_messages() {
        let cases: Vec<(Value, &str)> = vec![
            (json!([]), "invalid filter at filter: expected a filter (a JSON object), got []"),
            (
                json!({"must": [{"key": "nope", "match": {"value": "x"}}]}),
                "invalid filter at filter.must[0].key: field 'nope' is not an indexed payload field; indexed: ok, price, section, size, tags",
            ),
            (
                json!({"must": [{"key": "section", "range": {"gt": 1}}]}),
                "filter.must[0].range: 'range' needs an integer or float field; 'section' is keyword",
            ),
            (
                json!({"must": [{"key": "size", "match": {"value": "big"}}]}),
                "filter.must[0].match.value: expected an integer for integer field 'size', got \"big\"",
            ),
            (
                json!({"should": [{"key": "size", "match": {"any": [1, 2.5]}}]}),
                "filter.should[0].match.any[1]: expected an integer for integer field 'size', got 2.5",
            ),
            (
                json!({"must": [{"key": "section", "match": {"any": []}}]}),
                "filter.must[0].match.any: 'any' needs at least one value",
            ),
            (
                json!({"must": [{"key": "size", "range": {}}]}),
                "filter.must[0].range: range needs at least one of gt, gte, lt, lte",
            ),
            (
                json!({"must": [{"key": "size", "range": {"gt": "3"}}]}),
                "filter.must[0].range.gt: expected a number, got \"3\"",
            ),
            (
                json!({"must": [{"key": "size", "range": {"between": 3}}]}),
                "unknown key 'between' in range",
            ),
            (
                json!({"must": [{"key": "price", "match": {"value": 1.5}}]}),
                "'match' is not supported on float field 'price'; use 'range'",
            ),
            (
                json!({"must": [{"key": "ok", "match": {"value": 1}}]}),
                "expected true or false for bool field 'ok', got 1",
            ),
            (json!({"must": [{"key": "size"}]}), "condition on 'size' needs 'match' or 'range'"),
            (
                json!({"must": [{"key": "size", "match": {"value": 1}, "range": {"gt": 1}}]}),
                "exactly one of 'match' or 'range'",
            ),
            (json!({"must": [{"key": 5, "match": {"value": 1}}]}), "filter.must[0].key: expected a field name string, got 5"),
            (json!({"must": [{"is_null": {"key": "zzz"}}]}), "filter.must[0].is_null.key: field 'zzz' is not"),
            (json!({"must": [{"is_empty": "tags"}]}), "filter.must[0].is_empty: expected"),
            (json!({"must": [{"has_id": [1]}]}), "'has_id' conditions are not supported"),
            (json!({"must": [3]}), "filter.must[0]: expected a condition (a JSON object), got 3"),
            (json!({"must": "x"}), "filter.must: expected a list of conditions"),
            (json!({"filter": []}), "invalid filter at filter: unknown key 'filter' in filter"),
            (json!({"min_should": {}}), "filter.min_should: min_should is not supported"),
            (
                json!({"must": [{"key": "section", "match": {"text": "x"}}]}),
                "'match.text' (full-text) is not supported",
            ),
            (
                json!({"must": [{"key": "section", "match": {"value": "x", "any": ["y"]}}]}),
                "match takes exactly one of",
            ),
            (
                json!({"must": [{"should": [{"key": "section", "match": {"value": 3}}]}]}),
                "filter.must[0].should[0].match.value: expected a string for keyword field 'section', got 3",
            ),
        ];
        for (input, want) in cases {
            let got = err(input.clone());
            assert!(
                got.contains(want),
                "for {input}:\n got: {got}\nwant: {want}"
            );
        }
        let none = Filter::parse(
            &json!({"must": [{"key": "a", "match": {"value": "x"}}]}),
            &BTreeMap::new(),
        )
        .expect_err("no fields");
        assert!(none.to_string().contains("indexed: none"), "{none}");
    }

    #[test]
    fn json_errors_say_where() {
        let e =
            Filter::parse_str("{\"must\": [\n  {\"key\": }]}", &schema()).expect_err("bad json");
        let msg = e.to_string();
        assert!(msg.starts_with("filter is not valid JSON"), "{msg}");
        assert!(msg.contains("line 2"), "{msg}");
    }

    #[test]
    fn limits_depth_conditions_and_values() {
        let mut deep = json!({"key": "size", "match": {"value": 1}});
        for _ in 0..MAX_DEPTH {
            deep = json!({"must": [deep]});
        }
        // MAX_DEPTH filters deep is fine.
        assert!(parse(deep.clone()).is_ok());
        let msg = err(json!({"must": [deep]}));
        assert!(msg.contains("nested deeper than 16 levels"), "{msg}");

        let many: Vec<Value> = (0..=MAX_CONDITIONS)
            .map(|i| json!({"key": "size", "match": {"value": i}}))
            .collect();
        let msg = err(json!({"should": many}));
        assert!(
            msg.contains("filter.should[1024]: filter has more than 1024 conditions"),
            "{msg}"
        );

        let values: Vec<i64> = (0..6000).collect();
        let msg = err(json!({"should": [
            {"key": "size", "match": {"any": values}},
            {"key": "size", "match": {"except": values}},
        ]}));
        assert!(
            msg.contains("filter.should[1].match.except: filter lists more than 10000"),
            "{msg}"
        );
    }

    #[test]
    fn long_values_are_cut_in_messages() {
        let long = "é".repeat(100);
        let msg = err(json!({"must": [{"key": "size", "match": {"value": long}}]}));
        assert!(msg.len() < 200, "{msg}");
        assert!(msg.contains("got string \""), "{msg}");
    }
}
