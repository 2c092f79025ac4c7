//! [`Filter::parse`]: filter JSON to a schema-checked [`Filter`], errors named by path.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use eddy_model::FieldType;
use serde_json::{Map, Value};

use super::{Condition, FieldCondition, Filter, MAX_CONDITIONS, MAX_DEPTH};
use crate::FilterError;

impl Filter {
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
}

/// Short, bounded rendering of a JSON value for error messages.
pub(super) fn show(value: &Value) -> String {
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

pub(super) fn type_name(t: FieldType) -> &'static str {
    match t {
        FieldType::Keyword => "keyword",
        FieldType::Integer => "integer",
        FieldType::Float => "float",
        FieldType::Bool => "bool",
    }
}

pub(super) struct Parser<'s> {
    fields: &'s BTreeMap<String, FieldType>,
    path: String,
    conditions: usize,
    pub(super) values: usize,
}

impl Parser<'_> {
    pub(super) fn err(&self, message: impl Into<String>) -> FilterError {
        FilterError::Invalid {
            path: self.path.clone(),
            message: message.into(),
        }
    }

    /// Runs `f` with `.name` appended to the path.
    pub(super) fn at<T>(&mut self, name: &str, f: impl FnOnce(&mut Self) -> T) -> T {
        let len = self.path.len();
        self.path.push('.');
        self.path.push_str(name);
        let out = f(self);
        self.path.truncate(len);
        out
    }

    /// Runs `f` with `[i]` appended to the path.
    pub(super) fn index<T>(&mut self, i: usize, f: impl FnOnce(&mut Self) -> T) -> T {
        let len = self.path.len();
        let _ = write!(self.path, "[{i}]");
        let out = f(self);
        self.path.truncate(len);
        out
    }

    pub(super) fn object<'v>(
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
        self.key_name(obj)
    }

    /// The field name string under `"key"` in `obj`.
    fn key_name<'v>(&mut self, obj: &'v Map<String, Value>) -> Result<&'v str, FilterError> {
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
        let key = self.key_name(obj)?;
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
}
