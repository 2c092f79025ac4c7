//! Row-by-row evaluation of a [`Filter`] against one JSON payload (growing
//! rows, which have no index), and the value extraction rules the payload
//! index shares so both paths agree exactly.

use eddy_model::FieldType;
use serde_json::Value;

use crate::filter::{Condition, Filter, MatchValues, Predicate};

/// Keyword values of a field value: a string, or the string elements of a list
/// (other elements are ignored).
pub(crate) fn keyword_values(value: &Value) -> impl Iterator<Item = &str> {
    let (one, many) = match value {
        Value::String(s) => (Some(s.as_str()), None),
        Value::Array(items) => (None, Some(items.iter().filter_map(Value::as_str))),
        _ => (None, None),
    };
    one.into_iter().chain(many.into_iter().flatten())
}

/// Integer value of a field value: a JSON number that fits `i64` exactly.
pub(crate) fn integer_value(value: &Value) -> Option<i64> {
    value.as_i64()
}

/// Float value of a field value: any JSON number.
pub(crate) fn float_value(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        _ => None,
    }
}

/// Whether a field value holds at least one value the index would store.
pub(crate) fn has_value(value: &Value, field_type: FieldType) -> bool {
    match field_type {
        FieldType::Keyword => keyword_values(value).next().is_some(),
        FieldType::Integer => integer_value(value).is_some(),
        FieldType::Float => float_value(value).is_some(),
        FieldType::Bool => value.is_boolean(),
    }
}

fn field<'a>(payload: &'a Value, key: &str) -> Option<&'a Value> {
    payload.as_object()?.get(key)
}

fn contains_str(list: &[String], s: &str) -> bool {
    list.binary_search_by(|x| x.as_str().cmp(s)).is_ok()
}

impl Filter {
    /// Whether a payload (normally a JSON object) satisfies the filter.
    ///
    /// Non-object payloads have no fields. Cost is proportional to the number
    /// of conditions; `any` / `except` lists are binary-searched.
    pub fn matches(&self, payload: &Value) -> bool {
        self.must.iter().all(|c| c.matches(payload))
            && (self.should.is_empty() || self.should.iter().any(|c| c.matches(payload)))
            && !self.must_not.iter().any(|c| c.matches(payload))
    }

    /// Whether a stored payload (JSON bytes; empty = no fields) satisfies
    /// the filter. Bytes that are not JSON have no fields either.
    pub fn matches_json(&self, json: &[u8]) -> bool {
        if json.is_empty() {
            return self.matches(&Value::Object(Default::default()));
        }
        let payload = serde_json::from_slice(json).unwrap_or(Value::Null);
        self.matches(&payload)
    }
}

impl Condition {
    /// Whether a payload satisfies this condition.
    pub fn matches(&self, payload: &Value) -> bool {
        match self {
            Condition::Field(fc) => {
                field(payload, &fc.key).is_some_and(|v| fc.predicate.matches_value(v))
            }
            Condition::IsNull { key } => matches!(field(payload, key), Some(Value::Null)),
            Condition::IsEmpty { key, field_type } => {
                !field(payload, key).is_some_and(|v| has_value(v, *field_type))
            }
            Condition::Filter(f) => f.matches(payload),
        }
    }
}

impl Predicate {
    /// Whether one field value (the value stored under the key) satisfies the predicate.
    pub fn matches_value(&self, value: &Value) -> bool {
        match self {
            Predicate::Match { values, except } => match values {
                MatchValues::Keyword(list) => {
                    keyword_values(value).any(|s| contains_str(list, s) != *except)
                }
                MatchValues::Integer(list) => {
                    integer_value(value).is_some_and(|i| list.binary_search(&i).is_ok() != *except)
                }
                MatchValues::Bool(list) => value
                    .as_bool()
                    .is_some_and(|b| list.contains(&b) != *except),
            },
            Predicate::IntRange { lo, hi } => {
                integer_value(value).is_some_and(|i| *lo <= i && i <= *hi)
            }
            Predicate::FloatRange(r) => float_value(value).is_some_and(|f| r.contains(f)),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn filter(v: Value) -> Filter {
        match Filter::parse(&v, &crate::test_schema::schema()) {
            Ok(f) => f,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn keyword_lists_and_except() {
        let games = filter(json!({"must": [{"key": "section", "match": {"value": "games"}}]}));
        assert!(games.matches(&json!({"section": "games"})));
        assert!(games.matches(&json!({"section": ["news", "games"]})));
        assert!(games.matches(&json!({"section": ["news", 3, "games"]})));
        assert!(!games.matches(&json!({"section": "news"})));
        assert!(!games.matches(&json!({})));
        assert!(!games.matches(&json!(null)));
        assert!(!games.matches(&json!({"section": null})));

        let except = filter(json!({"must": [{"key": "section", "match": {"except": ["games"]}}]}));
        assert!(except.matches(&json!({"section": "news"})));
        assert!(except.matches(&json!({"section": ["games", "news"]})));
        assert!(!except.matches(&json!({"section": "games"})));
        assert!(!except.matches(&json!({"section": ["games"]})));
        assert!(!except.matches(&json!({"section": []})));
        assert!(
            !except.matches(&json!({})),
            "missing field never matches except"
        );

        let not = filter(json!({"must_not": [{"key": "section", "match": {"value": "games"}}]}));
        assert!(
            not.matches(&json!({})),
            "must_not of a missing field matches"
        );
    }

    #[test]
    fn numbers_bools_and_emptiness() {
        let size = filter(json!({"must": [{"key": "size", "range": {"gte": 2, "lt": 5}}]}));
        assert!(size.matches(&json!({"size": 2})));
        assert!(!size.matches(&json!({"size": 5})));
        assert!(
            !size.matches(&json!({"size": 3.0})),
            "3.0 is not an integer"
        );
        assert!(!size.matches(&json!({"size": "3"})));
        let price = filter(json!({"must": [{"key": "price", "range": {"gt": 1}}]}));
        assert!(price.matches(&json!({"price": 2})));
        assert!(price.matches(&json!({"price": 1.01})));
        assert!(!price.matches(&json!({"price": 1.0})));
        let ok = filter(json!({"should": [{"key": "ok", "match": {"value": false}}]}));
        assert!(ok.matches(&json!({"ok": false})));
        assert!(!ok.matches(&json!({"ok": "false"})));
        let null = filter(json!({"must": [{"is_null": {"key": "ok"}}]}));
        assert!(null.matches(&json!({"ok": null})));
        assert!(!null.matches(&json!({})));
        let empty = filter(json!({"must": [{"is_empty": {"key": "section"}}]}));
        for p in [
            json!({}),
            json!({"section": null}),
            json!({"section": []}),
            json!({"section": 4}),
        ] {
            assert!(empty.matches(&p), "{p}");
        }
        assert!(!empty.matches(&json!({"section": ["a"]})));
        assert!(filter(json!({})).matches(&json!(42)));
    }
}
