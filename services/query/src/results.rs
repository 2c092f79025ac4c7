//! What a search answers: hits with their scores as users see them, and the
//! payload as stored — passed through as the JSON bytes it was written as
//! when the whole payload is asked for, parsed only to pick fields.

use std::collections::BTreeMap;

use eddy_model::PointId;
use serde::ser::{Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::request::PayloadSelector;

/// A payload as returned.
#[derive(Debug, Clone)]
pub enum HitPayload {
    /// The whole stored payload, as the JSON object it was stored as.
    Raw(Box<RawValue>),
    /// The selected fields.
    Fields(Map<String, Value>),
}

impl HitPayload {
    /// The payload stored as `json` (empty: no payload), as `selector`
    /// asks for it; `None` when no payload is asked for.
    pub fn select(json: &[u8], selector: &PayloadSelector) -> Option<HitPayload> {
        match selector {
            PayloadSelector::None => None,
            PayloadSelector::All => {
                Some(raw(json).map_or_else(|| HitPayload::Fields(parse(json)), HitPayload::Raw))
            }
            PayloadSelector::Fields(fields) => {
                let mut all = parse(json);
                Some(HitPayload::Fields(
                    fields.iter().filter_map(|f| all.remove_entry(f)).collect(),
                ))
            }
        }
    }

    /// The whole payload as JSON text.
    pub fn json_text(&self) -> String {
        match self {
            HitPayload::Raw(r) => r.get().to_owned(),
            HitPayload::Fields(m) => Value::Object(m.clone()).to_string(),
        }
    }

    /// One field's value (parsing a raw payload).
    pub fn field(&self, name: &str) -> Option<Value> {
        match self {
            HitPayload::Raw(r) => serde_json::from_str::<Map<String, Value>>(r.get())
                .ok()
                .and_then(|mut m| m.remove(name)),
            HitPayload::Fields(m) => m.get(name).cloned(),
        }
    }
}

impl PartialEq for HitPayload {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (HitPayload::Raw(a), HitPayload::Raw(b)) => a.get() == b.get(),
            (HitPayload::Fields(a), HitPayload::Fields(b)) => a == b,
            _ => false,
        }
    }
}

impl Serialize for HitPayload {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            HitPayload::Raw(r) => r.serialize(s),
            HitPayload::Fields(m) => m.serialize(s),
        }
    }
}

/// The stored bytes as a raw JSON value without re-serialising them (`{}`
/// for an empty payload); `None` if they are not a JSON object, which
/// eddy never writes.
fn raw(json: &[u8]) -> Option<Box<RawValue>> {
    if json.is_empty() {
        return RawValue::from_string("{}".to_owned()).ok();
    }
    if json.first() != Some(&b'{') {
        return None;
    }
    let text = std::str::from_utf8(json).ok()?;
    RawValue::from_string(text.to_owned()).ok()
}

fn parse(json: &[u8]) -> Map<String, Value> {
    if json.is_empty() {
        Map::new()
    } else {
        serde_json::from_slice(json).unwrap_or_default()
    }
}

/// One result row.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Hit {
    /// The point id.
    pub id: PointId,
    /// The score as users see it ([`eddy_model::Metric::reported`]): the
    /// similarity for cosine and dot, the squared distance for L2.
    pub score: f32,
    /// The selected payload, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<HitPayload>,
}

/// Results of a batch, with the offsets they reflect.
#[derive(Debug, Clone, Default)]
pub struct BatchResult {
    /// Per query, the hits, closest first.
    pub hits: Vec<Vec<Hit>>,
    /// Per partition, the first offset the results do not reflect.
    pub offsets: BTreeMap<u32, i64>,
    /// Shards of a split collection the results leave out (no node serving
    /// them answered; only with `allow_partial`).
    pub missing_shards: Vec<u32>,
}

impl BatchResult {
    /// Appends the results of the next queries, keeping the lowest offsets
    /// (a lower bound for the whole batch).
    pub fn extend(&mut self, part: BatchResult) {
        if self.hits.is_empty() {
            self.offsets = part.offsets;
        } else {
            for (p, off) in part.offsets {
                let e = self.offsets.entry(p).or_insert(off);
                *e = (*e).min(off);
            }
        }
        self.hits.extend(part.hits);
        self.add_missing(part.missing_shards);
    }

    /// Records `shards` as left out.
    pub fn add_missing(&mut self, shards: impl IntoIterator<Item = u32>) {
        self.missing_shards.extend(shards);
        self.missing_shards.sort_unstable();
        self.missing_shards.dedup();
    }

    /// Reassembles `n` queries searched in groups: each part's hits go to
    /// its queries' positions, and the offsets are the lowest per
    /// partition (a lower bound for the whole batch).
    pub fn scatter(n: usize, parts: impl IntoIterator<Item = (Vec<usize>, BatchResult)>) -> Self {
        let mut all = BatchResult {
            missing_shards: Vec::new(),
            hits: vec![Vec::new(); n],
            ..BatchResult::default()
        };
        for (positions, part) in parts {
            all.add_missing(part.missing_shards);
            for (pos, hits) in positions.into_iter().zip(part.hits) {
                all.hits[pos] = hits;
            }
            for (p, off) in part.offsets {
                let e = all.offsets.entry(p).or_insert(off);
                *e = (*e).min(off);
            }
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_payloads_pass_through_and_fields_are_picked() {
        let stored = br#"{"b":1,"a":"x y"}"#;
        let all = HitPayload::select(stored, &PayloadSelector::All).expect("asked");
        assert_eq!(
            serde_json::to_string(&all).expect("json"),
            r#"{"b":1,"a":"x y"}"#
        );
        assert_eq!(all.field("a"), Some(Value::from("x y")));
        let some =
            HitPayload::select(stored, &PayloadSelector::Fields(vec!["a".into()])).expect("asked");
        assert_eq!(
            serde_json::to_string(&some).expect("json"),
            r#"{"a":"x y"}"#
        );
        assert_eq!(HitPayload::select(stored, &PayloadSelector::None), None);
        let empty = HitPayload::select(b"", &PayloadSelector::All).expect("asked");
        assert_eq!(empty.json_text(), "{}");
    }

    #[test]
    fn batch_offsets_keep_the_lowest() {
        let mut all = BatchResult::default();
        all.extend(BatchResult {
            missing_shards: Vec::new(),
            hits: vec![vec![]],
            offsets: [(0, 5), (1, 9)].into(),
        });
        all.extend(BatchResult {
            missing_shards: Vec::new(),
            hits: vec![vec![]],
            offsets: [(0, 7), (1, 3)].into(),
        });
        assert_eq!(all.hits.len(), 2);
        assert_eq!(all.offsets, [(0, 5), (1, 3)].into());
    }

    #[test]
    fn scattered_groups_land_in_place_with_the_lowest_offsets() {
        let hit = |id: u64| Hit {
            id: PointId::Num(id),
            score: 0.0,
            payload: None,
        };
        let part = |ids: &[u64], offset: i64| BatchResult {
            missing_shards: Vec::new(),
            hits: ids.iter().map(|&id| vec![hit(id)]).collect(),
            offsets: BTreeMap::from([(0, offset)]),
        };
        let all = BatchResult::scatter(
            3,
            [(vec![2, 0], part(&[20, 0], 9)), (vec![1], part(&[10], 7))],
        );
        let ids: Vec<&PointId> = all.hits.iter().map(|h| &h[0].id).collect();
        assert_eq!(
            ids,
            [&PointId::Num(0), &PointId::Num(10), &PointId::Num(20)]
        );
        assert_eq!(all.offsets, BTreeMap::from([(0, 7)]));
    }
}
