//! [`PayloadIndexBuilder`]: collects a sealing segment's payloads and writes the index bytes.

use std::collections::BTreeMap;

use eddy_model::FieldType;
use roaring::RoaringBitmap;
use serde_json::Value;

use eddy_format::{Extent, U32, U64};
use zerocopy::{FromZeros, IntoBytes};

use super::format::{
    checksum, type_code, FieldEntry, IndexHeader, ENTRY_LEN, HEADER_LEN, INDEX_FORMAT, SECTIONS,
    S_A, S_B, S_C, S_D, S_E, S_HAS, S_MULTI, S_NULL,
};
use crate::eval::{float_value, integer_value, keyword_values};

/// Collects payloads of a sealing segment and writes the payload index bytes.
#[derive(Debug)]
pub struct PayloadIndexBuilder {
    fields: Vec<FieldBuilder>,
}

#[derive(Debug)]
struct FieldBuilder {
    name: String,
    has: RoaringBitmap,
    null: RoaringBitmap,
    multi: RoaringBitmap,
    data: FieldData,
}

#[derive(Debug)]
enum FieldData {
    Keyword(BTreeMap<String, RoaringBitmap>),
    Integer(Vec<(i64, u32)>),
    Float(Vec<(f64, u32)>),
    Bool([RoaringBitmap; 2]),
}

impl PayloadIndexBuilder {
    /// A builder indexing the given payload fields.
    pub fn new(fields: &BTreeMap<String, FieldType>) -> Self {
        let fields = fields
            .iter()
            .map(|(name, ty)| FieldBuilder {
                name: name.clone(),
                has: RoaringBitmap::new(),
                null: RoaringBitmap::new(),
                multi: RoaringBitmap::new(),
                data: match ty {
                    FieldType::Keyword => FieldData::Keyword(BTreeMap::new()),
                    FieldType::Integer => FieldData::Integer(Vec::new()),
                    FieldType::Float => FieldData::Float(Vec::new()),
                    FieldType::Bool => {
                        FieldData::Bool([RoaringBitmap::new(), RoaringBitmap::new()])
                    }
                },
            })
            .collect();
        Self { fields }
    }

    /// Indexes the payload of `row`. Any JSON is accepted: non-objects have no
    /// fields and values of the wrong type are not indexed (they count as
    /// absent, exactly as [`Filter::matches`](crate::Filter::matches) treats
    /// them). Rows are expected in increasing order, but any order works; add
    /// each row at most once.
    pub fn add(&mut self, row: u32, payload: &Value) {
        let Some(obj) = payload.as_object() else {
            return;
        };
        for f in &mut self.fields {
            let Some(value) = obj.get(&f.name) else {
                continue;
            };
            if value.is_null() {
                f.null.insert(row);
                continue;
            }
            let indexed = match &mut f.data {
                FieldData::Keyword(map) => {
                    let mut distinct: Vec<&str> = keyword_values(value).collect();
                    distinct.sort_unstable();
                    distinct.dedup();
                    if distinct.len() > 1 {
                        f.multi.insert(row);
                    }
                    for s in &distinct {
                        match map.get_mut(*s) {
                            Some(bitmap) => {
                                bitmap.insert(row);
                            }
                            None => {
                                map.insert((*s).to_owned(), std::iter::once(row).collect());
                            }
                        }
                    }
                    !distinct.is_empty()
                }
                FieldData::Integer(pairs) => {
                    integer_value(value).map(|v| pairs.push((v, row))).is_some()
                }
                FieldData::Float(pairs) => {
                    float_value(value).map(|v| pairs.push((v, row))).is_some()
                }
                FieldData::Bool(bitmaps) => match value.as_bool() {
                    Some(b) => bitmaps[usize::from(b)].insert(row),
                    None => false,
                },
            };
            if indexed {
                f.has.insert(row);
            }
        }
    }

    /// Writes the index for a segment of `rows` rows (rows added at or beyond
    /// `rows` are dropped).
    pub fn finish(self, rows: u32) -> Vec<u8> {
        let mut out = vec![0u8; HEADER_LEN + self.fields.len() * ENTRY_LEN];
        let mut entries = Vec::with_capacity(self.fields.len());
        for mut f in self.fields {
            let mut entry = FieldEntry::new_zeroed();
            entry.name = put(&mut out, f.name.as_bytes());
            for b in [&mut f.has, &mut f.null, &mut f.multi] {
                b.remove_range(rows..);
            }
            entry.has_count = U64::new(f.has.len());
            entry.null_count = U64::new(f.null.len());
            let mut sections = [Extent::new(0, 0); SECTIONS];
            sections[S_HAS] = put_bitmap(&mut out, &f.has);
            sections[S_NULL] = put_bitmap(&mut out, &f.null);
            sections[S_MULTI] = put_bitmap(&mut out, &f.multi);
            let (code, n) = match f.data {
                FieldData::Keyword(mut map) => {
                    for b in map.values_mut() {
                        b.remove_range(rows..);
                    }
                    map.retain(|_, b| !b.is_empty());
                    let mut key_offs = Vec::with_capacity((map.len() + 1) * 8);
                    let mut keys = Vec::new();
                    let mut bm_offs = Vec::with_capacity((map.len() + 1) * 8);
                    let mut bitmaps = Vec::new();
                    let mut cards = Vec::with_capacity(map.len() * 4);
                    for (key, bitmap) in &map {
                        key_offs.extend_from_slice(&(keys.len() as u64).to_le_bytes());
                        keys.extend_from_slice(key.as_bytes());
                        bm_offs.extend_from_slice(&(bitmaps.len() as u64).to_le_bytes());
                        serialize(bitmap, &mut bitmaps);
                        let card = u32::try_from(bitmap.len()).unwrap_or(u32::MAX);
                        cards.extend_from_slice(&card.to_le_bytes());
                    }
                    key_offs.extend_from_slice(&(keys.len() as u64).to_le_bytes());
                    bm_offs.extend_from_slice(&(bitmaps.len() as u64).to_le_bytes());
                    sections[S_A] = put(&mut out, &key_offs);
                    sections[S_B] = put(&mut out, &keys);
                    sections[S_C] = put(&mut out, &bm_offs);
                    sections[S_D] = put(&mut out, &cards);
                    sections[S_E] = put(&mut out, &bitmaps);
                    (type_code(FieldType::Keyword), map.len())
                }
                FieldData::Integer(mut pairs) => {
                    pairs.retain(|&(_, r)| r < rows);
                    pairs.sort_unstable();
                    put_columns(&mut out, &mut sections, &pairs, i64::to_le_bytes);
                    (type_code(FieldType::Integer), pairs.len())
                }
                FieldData::Float(mut pairs) => {
                    pairs.retain(|&(_, r)| r < rows);
                    pairs.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                    put_columns(&mut out, &mut sections, &pairs, f64::to_le_bytes);
                    (type_code(FieldType::Float), pairs.len())
                }
                FieldData::Bool(mut bitmaps) => {
                    let mut cards = Vec::with_capacity(8);
                    for b in &mut bitmaps {
                        b.remove_range(rows..);
                        let card = u32::try_from(b.len()).unwrap_or(u32::MAX);
                        cards.extend_from_slice(&card.to_le_bytes());
                    }
                    sections[S_A] = put_bitmap(&mut out, &bitmaps[0]);
                    sections[S_B] = put_bitmap(&mut out, &bitmaps[1]);
                    sections[S_C] = put(&mut out, &[]);
                    sections[S_D] = put(&mut out, &cards);
                    sections[S_E] = put(&mut out, &[]);
                    (type_code(FieldType::Bool), 2)
                }
            };
            entry.type_code = U64::new(code);
            entry.n = U64::new(n as u64);
            entry.sections = sections;
            entries.push(entry);
        }
        pad8(&mut out);
        let table = HEADER_LEN..HEADER_LEN + entries.len() * ENTRY_LEN;
        out[table].copy_from_slice(entries.as_bytes());
        let mut header = IndexHeader::new_zeroed();
        header.preamble = INDEX_FORMAT.preamble::<IndexHeader>();
        header.rows = U32::new(rows);
        header.field_count = U32::new(entries.len() as u32);
        header.total_len = U64::new(out.len() as u64);
        header.entry_len = U32::new(ENTRY_LEN as u32);
        out[..HEADER_LEN].copy_from_slice(header.as_bytes());
        header.crc32 = U32::new(checksum(&out));
        out[..HEADER_LEN].copy_from_slice(header.as_bytes());
        out
    }
}

fn pad8(out: &mut Vec<u8>) {
    out.resize(out.len().next_multiple_of(8), 0);
}

/// Writes a numeric field's sorted `(value, row)` pairs as a value column
/// (section A) and a row column (section B); C-E stay empty.
fn put_columns<V: Copy>(
    out: &mut Vec<u8>,
    sections: &mut [Extent],
    pairs: &[(V, u32)],
    le_bytes: fn(V) -> [u8; 8],
) {
    let values: Vec<u8> = pairs.iter().flat_map(|&(v, _)| le_bytes(v)).collect();
    let row_ids: Vec<u8> = pairs.iter().flat_map(|(_, r)| r.to_le_bytes()).collect();
    sections[S_A] = put(out, &values);
    sections[S_B] = put(out, &row_ids);
    for s in [S_C, S_D, S_E] {
        sections[s] = put(out, &[]);
    }
}

/// Appends an 8-byte aligned section; returns where it lies.
fn put(out: &mut Vec<u8>, bytes: &[u8]) -> Extent {
    pad8(out);
    let off = out.len() as u64;
    out.extend_from_slice(bytes);
    Extent::new(off, bytes.len() as u64)
}

fn serialize(bitmap: &RoaringBitmap, out: &mut Vec<u8>) {
    out.reserve(bitmap.serialized_size());
    // Writing into a Vec cannot fail.
    let _ = bitmap.serialize_into(out);
}

fn put_bitmap(out: &mut Vec<u8>, bitmap: &RoaringBitmap) -> Extent {
    pad8(out);
    let off = out.len();
    serialize(bitmap, out);
    Extent::new(off as u64, (out.len() - off) as u64)
}
