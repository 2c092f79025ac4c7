//! Property tests: the index answers exactly what row-by-row matching answers.

use std::collections::{BTreeMap, BTreeSet};

use eddy_filter::{
    Condition, FieldCondition, FieldType, Filter, FloatRange, MatchValues, PayloadIndexBuilder,
    PayloadIndexView, Predicate, RoaringBitmap,
};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

const FIELDS: [(&str, FieldType); 5] = [
    ("kw", FieldType::Keyword),
    ("tags", FieldType::Keyword),
    ("n", FieldType::Integer),
    ("x", FieldType::Float),
    ("b", FieldType::Bool),
];

fn schema() -> BTreeMap<String, FieldType> {
    FIELDS.iter().map(|(k, t)| ((*k).to_owned(), *t)).collect()
}

const WORDS: [&str; 5] = ["a", "b", "c", "d", "zz"];
const FLOATS: [f64; 7] = [-1.5, -0.0, 0.0, 0.5, 1.0, 2.0, 3.25];

fn field_value() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        3 => Just(None),
        1 => Just(Some(Value::Null)),
        3 => prop::sample::select(&WORDS[..4]).prop_map(|w| Some(json!(w))),
        2 => prop::collection::vec(prop::sample::select(&WORDS[..4]), 0..4)
            .prop_map(|v| Some(json!(v))),
        1 => Just(Some(json!(["a", 1, null]))),
        3 => (-3i64..4).prop_map(|i| Some(json!(i))),
        2 => prop::sample::select(&FLOATS[..]).prop_map(|f| Some(json!(f))),
        2 => any::<bool>().prop_map(|b| Some(json!(b))),
        1 => Just(Some(json!(u64::MAX))),
        1 => Just(Some(json!([1, 2]))),
        1 => Just(Some(json!({"nested": 1}))),
    ]
}

fn payload() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => Just(Value::Null),
        12 => prop::collection::vec(field_value(), FIELDS.len()).prop_map(|values| {
            let mut obj = Map::new();
            for ((name, _), v) in FIELDS.iter().zip(values) {
                if let Some(v) = v {
                    obj.insert((*name).to_owned(), v);
                }
            }
            obj.insert("unindexed".into(), json!("x"));
            Value::Object(obj)
        }),
    ]
}

fn field(key: &str, predicate: Predicate) -> Condition {
    Condition::Field(FieldCondition {
        key: key.to_owned(),
        predicate,
    })
}

fn leaf() -> impl Strategy<Value = Condition> {
    let words = prop::collection::btree_set(prop::sample::select(&WORDS[..]), 0..4);
    let float_bound = prop::option::weighted(0.4, prop::sample::select(&FLOATS[..]));
    prop_oneof![
        (
            prop::sample::select(&["kw", "tags"][..]),
            words,
            any::<bool>()
        )
            .prop_map(|(key, set, except)| {
                let mut set: BTreeSet<&str> = set;
                if set.is_empty() && !except {
                    set.insert("a");
                }
                field(
                    key,
                    Predicate::Match {
                        values: MatchValues::Keyword(set.into_iter().map(String::from).collect()),
                        except,
                    },
                )
            }),
        (prop::collection::btree_set(-3i64..4, 1..3), any::<bool>()).prop_map(|(set, except)| {
            field(
                "n",
                Predicate::Match {
                    values: MatchValues::Integer(set.into_iter().collect()),
                    except,
                },
            )
        }),
        (
            prop::collection::btree_set(any::<bool>(), 1..3),
            any::<bool>()
        )
            .prop_map(|(set, except)| field(
                "b",
                Predicate::Match {
                    values: MatchValues::Bool(set.into_iter().collect()),
                    except,
                }
            )),
        (-4i64..5, -4i64..5).prop_map(|(lo, hi)| {
            // The parser writes empty ranges as 1..=0.
            let (lo, hi) = if lo > hi { (1, 0) } else { (lo, hi) };
            field("n", Predicate::IntRange { lo, hi })
        }),
        (
            float_bound.clone(),
            float_bound.clone(),
            float_bound.clone(),
            float_bound
        )
            .prop_map(|(gt, gte, lt, lte)| {
                // The parser requires at least one bound.
                let gte = if gt.or(gte).or(lt).or(lte).is_none() {
                    Some(0.0)
                } else {
                    gte
                };
                field("x", Predicate::FloatRange(FloatRange { gt, gte, lt, lte }))
            }),
        prop::sample::select(&FIELDS[..]).prop_map(|(k, _)| Condition::IsNull { key: k.into() }),
        prop::sample::select(&FIELDS[..]).prop_map(|(k, t)| Condition::IsEmpty {
            key: k.into(),
            field_type: t
        }),
    ]
}

fn filter_from(conds: Vec<Condition>, split: (usize, usize)) -> Filter {
    let mut f = Filter::default();
    for (i, c) in conds.into_iter().enumerate() {
        if i % 3 == split.0 % 3 {
            f.must.push(c);
        } else if i % 3 == split.1 % 3 {
            f.should.push(c);
        } else {
            f.must_not.push(c);
        }
    }
    f
}

fn filter() -> impl Strategy<Value = Filter> {
    let cond = leaf().prop_recursive(3, 24, 4, |inner| {
        (prop::collection::vec(inner, 0..4), (0usize..3, 0usize..3))
            .prop_map(|(conds, split)| Condition::Filter(Box::new(filter_from(conds, split))))
    });
    (prop::collection::vec(cond, 0..5), (0usize..3, 0usize..3))
        .prop_map(|(conds, split)| filter_from(conds, split))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn index_equals_row_by_row(
        payloads in prop::collection::vec(payload(), 0..60),
        skip in prop::collection::vec(any::<bool>(), 60),
        extra in 0u32..3,
        filters in prop::collection::vec(filter(), 1..6),
    ) {
        let mut builder = PayloadIndexBuilder::new(&schema());
        for (row, p) in payloads.iter().enumerate() {
            // Rows never added behave as payload-less rows.
            if !skip[row] {
                builder.add(row as u32, p);
            }
        }
        let rows = payloads.len() as u32 + extra;
        let bytes = builder.finish(rows);
        let view = PayloadIndexView::open(&bytes).expect("open");
        for f in &filters {
            let want: RoaringBitmap = (0..rows)
                .filter(|&r| {
                    let p = payloads.get(r as usize).filter(|_| !skip[r as usize]);
                    f.matches(p.unwrap_or(&Value::Null))
                })
                .collect();
            let got = view.evaluate(f).expect("evaluate");
            prop_assert_eq!(&got, &want, "filter {}", f.to_json());
            let e = view.estimate(f).expect("estimate");
            prop_assert!(e.min <= want.len() && want.len() <= e.max, "{:?} vs {} for {}", e, want.len(), f.to_json());
            prop_assert!(e.min <= e.expected && e.expected <= e.max);
            // JSON round trip of the filter.
            let back = Filter::parse(&f.to_json(), &schema()).expect("reparse");
            prop_assert_eq!(&back, f);
        }
    }
}
