//! Rendering a parsed [`Filter`] back to Qdrant-shaped JSON.

use serde_json::{Map, Number, Value};

use super::{Condition, Filter, MatchValues, Predicate};

impl Filter {
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
