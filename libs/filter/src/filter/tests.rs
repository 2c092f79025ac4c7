//! Unit tests of filter parsing: accepted shapes, integer bounds, located errors and limits.

use std::collections::BTreeMap;

use eddy_model::FieldType;
use serde_json::{json, Value};

use super::{
    Condition, FieldCondition, Filter, FloatRange, MatchValues, Predicate, MAX_CONDITIONS,
    MAX_DEPTH,
};
use crate::test_schema::schema;
use crate::FilterError;

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
    let e = Filter::parse_str("{\"must\": [\n  {\"key\": }]}", &schema()).expect_err("bad json");
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
