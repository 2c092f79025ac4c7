//! The per-segment payload index: [`PayloadIndexBuilder`] writes it at seal
//! time, [`PayloadIndexView`] reads it in place (from an mmap) and turns a
//! [`Filter`] into the bitmap of matching rows.
//!
//! Layout (all integers little-endian, every section 8-byte aligned relative
//! to the start of the bytes; see the crate README):
//!
//! ```text
//! header (64 bytes)
//!   0  magic "EDDYPIDX"        8  version u32      12 header_len u32 (64)
//!   16 rows u32                20 field_count u32  24 total_len u64
//!   32 entry_len u32 (160)     36 reserved         60 crc32 u32
//! field table: field_count entries of 20 u64 words, sorted by field name
//!   name_off, name_len, type, n, has_count, null_count,
//!   then 7 sections as (offset, length): HAS, NULL, MULTI, A, B, C, D
//! data: names and sections
//! ```
//!
//! The CRC32 covers header bytes `0..60` and everything from byte 64 to
//! `total_len`.

use std::collections::BTreeMap;

use eddy_model::FieldType;
use roaring::RoaringBitmap;
use serde_json::Value;

use crate::column::Column;
use crate::eval::{float_value, integer_value, keyword_values};
use crate::filter::{Condition, Filter, FloatRange, MatchValues, Predicate};
use crate::IndexError;

/// First 8 bytes of every payload index.
pub const MAGIC: [u8; 8] = *b"EDDYPIDX";
/// Format version written by this build (and the only one it reads).
pub const FORMAT_VERSION: u32 = 1;
/// Length of the fixed header in bytes.
pub const HEADER_LEN: usize = 64;

const ENTRY_WORDS: usize = 22;
const ENTRY_LEN: usize = ENTRY_WORDS * 8;
const CRC_AT: usize = 60;
const SECTIONS: usize = 8;
const S_HAS: usize = 0;
const S_NULL: usize = 1;
const S_MULTI: usize = 2;
const S_A: usize = 3;
const S_B: usize = 4;
const S_C: usize = 5;
const S_D: usize = 6;
const S_E: usize = 7;

fn type_code(t: FieldType) -> u64 {
    match t {
        FieldType::Keyword => 0,
        FieldType::Integer => 1,
        FieldType::Float => 2,
        FieldType::Bool => 3,
    }
}

fn type_from_code(code: u64) -> Option<FieldType> {
    Some(match code {
        0 => FieldType::Keyword,
        1 => FieldType::Integer,
        2 => FieldType::Float,
        3 => FieldType::Bool,
        _ => return None,
    })
}

// ---------------------------------------------------------------- builder

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
    /// absent, exactly as [`Filter::matches`] treats them). Rows are expected
    /// in increasing order, but any order works; add each row at most once.
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
            let mut entry = [0u64; ENTRY_WORDS];
            let (name_off, name_len) = put(&mut out, f.name.as_bytes());
            entry[0] = name_off;
            entry[1] = name_len;
            for b in [&mut f.has, &mut f.null, &mut f.multi] {
                b.remove_range(rows..);
            }
            entry[4] = f.has.len();
            entry[5] = f.null.len();
            let mut sections = [(0u64, 0u64); SECTIONS];
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
            entry[2] = code;
            entry[3] = n as u64;
            for (i, (off, len)) in sections.iter().enumerate() {
                entry[6 + 2 * i] = *off;
                entry[7 + 2 * i] = *len;
            }
            entries.push(entry);
        }
        pad8(&mut out);
        for (i, entry) in entries.iter().enumerate() {
            let at = HEADER_LEN + i * ENTRY_LEN;
            for (w, word) in entry.iter().enumerate() {
                out[at + w * 8..at + w * 8 + 8].copy_from_slice(&word.to_le_bytes());
            }
        }
        let total_len = out.len() as u64;
        out[0..8].copy_from_slice(&MAGIC);
        out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        out[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        out[16..20].copy_from_slice(&rows.to_le_bytes());
        out[20..24].copy_from_slice(&(entries.len() as u32).to_le_bytes());
        out[24..32].copy_from_slice(&total_len.to_le_bytes());
        out[32..36].copy_from_slice(&(ENTRY_LEN as u32).to_le_bytes());
        let crc = checksum(&out);
        out[CRC_AT..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
        out
    }
}

fn pad8(out: &mut Vec<u8>) {
    out.resize(out.len().next_multiple_of(8), 0);
}

/// Appends an 8-byte aligned section; returns (offset, length).
/// Writes a numeric field's sorted `(value, row)` pairs as a value column
/// (section A) and a row column (section B); C-E stay empty.
fn put_columns<V: Copy>(
    out: &mut Vec<u8>,
    sections: &mut [(u64, u64)],
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

fn put(out: &mut Vec<u8>, bytes: &[u8]) -> (u64, u64) {
    pad8(out);
    let off = out.len() as u64;
    out.extend_from_slice(bytes);
    (off, bytes.len() as u64)
}

fn serialize(bitmap: &RoaringBitmap, out: &mut Vec<u8>) {
    out.reserve(bitmap.serialized_size());
    // Writing into a Vec cannot fail.
    let _ = bitmap.serialize_into(out);
}

fn put_bitmap(out: &mut Vec<u8>, bitmap: &RoaringBitmap) -> (u64, u64) {
    pad8(out);
    let off = out.len();
    serialize(bitmap, out);
    (off as u64, (out.len() - off) as u64)
}

/// CRC32 of header bytes `0..60` and bytes `64..`.
fn checksum(bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(bytes.get(..CRC_AT).unwrap_or_default());
    h.update(bytes.get(HEADER_LEN..).unwrap_or_default());
    h.finalize()
}

// ---------------------------------------------------------------- view

/// A payload index read in place from borrowed bytes (normally an mmap).
///
/// Opening reads the header and field table only (plus the CRC pass, unless
/// [`PayloadIndexView::open_unverified`] is used); dictionaries and bitmaps are
/// read when a filter needs them. Every offset is bounds-checked: corrupt bytes
/// give [`IndexError`], never a panic.
#[derive(Debug, Clone)]
pub struct PayloadIndexView<'a> {
    rows: u32,
    fields: Vec<FieldView<'a>>,
}

#[derive(Debug, Clone)]
struct FieldView<'a> {
    name: &'a str,
    ty: FieldType,
    has_count: u64,
    null_count: u64,
    has: &'a [u8],
    null: &'a [u8],
    multi: &'a [u8],
    kind: Kind<'a>,
}

#[derive(Debug, Clone)]
enum Kind<'a> {
    Keyword(Dict<'a>),
    Integer {
        values: Column<'a, i64>,
        rows: Column<'a, u32>,
    },
    Float {
        values: Column<'a, f64>,
        rows: Column<'a, u32>,
    },
    Bool {
        bitmaps: [&'a [u8]; 2],
        counts: [u64; 2],
    },
}

/// A keyword field's sorted dictionary: value `i` is `keys[key_offs[i]..key_offs[i+1]]`
/// and its rows are the roaring bitmap `bitmaps[bm_offs[i]..bm_offs[i+1]]`.
#[derive(Debug, Clone)]
struct Dict<'a> {
    n: usize,
    key_offs: Column<'a, u64>,
    keys: &'a [u8],
    bm_offs: Column<'a, u64>,
    bitmaps: &'a [u8],
    counts: Column<'a, u32>,
}

/// A cardinality estimate: `min <= actual <= max`, `expected` in between
/// (independence assumption across conditions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    /// Lower bound on matching rows.
    pub min: u64,
    /// Best guess of matching rows.
    pub expected: u64,
    /// Upper bound on matching rows.
    pub max: u64,
}

impl Estimate {
    fn exact(n: u64) -> Self {
        Self {
            min: n,
            expected: n,
            max: n,
        }
    }
}

fn corrupt(msg: impl Into<String>) -> IndexError {
    IndexError::Corrupt(msg.into())
}

fn word(bytes: &[u8], at: usize) -> u64 {
    bytes
        .get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn half(bytes: &[u8], at: usize) -> u32 {
    bytes
        .get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

fn to_usize(v: u64, what: &str) -> Result<usize, IndexError> {
    usize::try_from(v).map_err(|_| corrupt(format!("{what} {v} does not fit in memory")))
}

fn read_bitmap(bytes: &[u8], what: &str) -> Result<RoaringBitmap, IndexError> {
    if bytes.is_empty() {
        return Ok(RoaringBitmap::new());
    }
    RoaringBitmap::deserialize_from(bytes).map_err(|e| corrupt(format!("{what}: bad bitmap: {e}")))
}

fn sorted_rows(mut rows: Vec<u32>) -> Result<RoaringBitmap, IndexError> {
    rows.sort_unstable();
    rows.dedup();
    RoaringBitmap::from_sorted_iter(rows).map_err(|_| corrupt("row list is not sortable"))
}

impl<'a> PayloadIndexView<'a> {
    /// Opens an index, verifying magic, version, structure and the CRC32.
    pub fn open(bytes: &'a [u8]) -> Result<Self, IndexError> {
        Self::open_inner(bytes, true)
    }

    /// Opens an index without the CRC pass (for bytes the caller has already
    /// verified); structure is still checked and reads stay bounds-checked.
    pub fn open_unverified(bytes: &'a [u8]) -> Result<Self, IndexError> {
        Self::open_inner(bytes, false)
    }

    fn open_inner(bytes: &'a [u8], verify: bool) -> Result<Self, IndexError> {
        let len = bytes.len() as u64;
        if bytes.len() < HEADER_LEN {
            return Err(IndexError::Truncated {
                needed: HEADER_LEN as u64,
                len,
            });
        }
        if bytes[..8] != MAGIC {
            return Err(IndexError::BadMagic);
        }
        let version = half(bytes, 8);
        if version != FORMAT_VERSION {
            return Err(IndexError::UnsupportedVersion { found: version });
        }
        let header_len = half(bytes, 12);
        let entry_len = half(bytes, 32);
        if header_len as usize != HEADER_LEN || entry_len as usize != ENTRY_LEN {
            return Err(corrupt(format!(
                "header length {header_len} / entry length {entry_len}, expected {HEADER_LEN} / {ENTRY_LEN}"
            )));
        }
        let rows = half(bytes, 16);
        let field_count = half(bytes, 20) as u64;
        let total_len = word(bytes, 24);
        if total_len > len {
            return Err(IndexError::Truncated {
                needed: total_len,
                len,
            });
        }
        let table_end = HEADER_LEN as u64 + field_count * ENTRY_LEN as u64;
        if total_len < table_end {
            return Err(corrupt(format!(
                "total length {total_len} is shorter than the field table ({table_end} bytes)"
            )));
        }
        // Both fit: total_len <= bytes.len().
        let bytes = &bytes[..total_len as usize];
        if verify {
            let stored = half(bytes, CRC_AT);
            let computed = checksum(bytes);
            if stored != computed {
                return Err(IndexError::Checksum { stored, computed });
            }
        }
        let mut fields = Vec::with_capacity(field_count as usize);
        for i in 0..field_count as usize {
            let at = HEADER_LEN + i * ENTRY_LEN;
            let w = |k: usize| word(bytes, at + k * 8);
            let section = |s: usize| -> Result<&'a [u8], IndexError> {
                let (off, len) = (w(6 + 2 * s), w(7 + 2 * s));
                match off.checked_add(len) {
                    Some(end) if end <= total_len => Ok(&bytes[off as usize..end as usize]),
                    _ => Err(corrupt(format!(
                        "field #{i} section {s} ({off}+{len}) is out of bounds ({total_len} bytes)"
                    ))),
                }
            };
            let name_end = w(0).checked_add(w(1)).filter(|&e| e <= total_len);
            let name = name_end
                .and_then(|end| bytes.get(w(0) as usize..end as usize))
                .ok_or_else(|| corrupt(format!("field #{i} name is out of bounds")))?;
            let name = std::str::from_utf8(name)
                .map_err(|_| corrupt(format!("field #{i} name is not UTF-8")))?;
            let ty = type_from_code(w(2))
                .ok_or_else(|| corrupt(format!("field '{name}' has unknown type code {}", w(2))))?;
            let n = to_usize(w(3), "entry count")?;
            let bad_len =
                |s: usize| corrupt(format!("field '{name}' section {s} has the wrong length"));
            let exact = |s: usize, want: Option<usize>| -> Result<&'a [u8], IndexError> {
                let b = section(s)?;
                if Some(b.len()) == want {
                    Ok(b)
                } else {
                    Err(bad_len(s))
                }
            };
            let kind = match ty {
                FieldType::Keyword => {
                    let offs_len = n.checked_add(1).and_then(|m| m.checked_mul(8));
                    let dict = Dict {
                        n,
                        key_offs: Column::new(exact(S_A, offs_len)?).ok_or_else(|| bad_len(S_A))?,
                        keys: section(S_B)?,
                        bm_offs: Column::new(exact(S_C, offs_len)?).ok_or_else(|| bad_len(S_C))?,
                        bitmaps: section(S_E)?,
                        counts: Column::new(exact(S_D, n.checked_mul(4))?)
                            .ok_or_else(|| bad_len(S_D))?,
                    };
                    Kind::Keyword(dict)
                }
                FieldType::Integer | FieldType::Float => {
                    let values = exact(S_A, n.checked_mul(8))?;
                    let row_ids =
                        Column::new(exact(S_B, n.checked_mul(4))?).ok_or_else(|| bad_len(S_B))?;
                    if ty == FieldType::Integer {
                        Kind::Integer {
                            values: Column::new(values).ok_or_else(|| bad_len(S_A))?,
                            rows: row_ids,
                        }
                    } else {
                        Kind::Float {
                            values: Column::new(values).ok_or_else(|| bad_len(S_A))?,
                            rows: row_ids,
                        }
                    }
                }
                FieldType::Bool => {
                    let counts = exact(S_D, Some(8))?;
                    Kind::Bool {
                        bitmaps: [section(S_A)?, section(S_B)?],
                        counts: [u64::from(half(counts, 0)), u64::from(half(counts, 4))],
                    }
                }
            };
            if let Some(prev) = fields.last().map(|f: &FieldView<'_>| f.name) {
                if prev >= name {
                    return Err(corrupt("field table is not sorted by name"));
                }
            }
            fields.push(FieldView {
                name,
                ty,
                has_count: w(4),
                null_count: w(5),
                has: section(S_HAS)?,
                null: section(S_NULL)?,
                multi: section(S_MULTI)?,
                kind,
            });
        }
        Ok(Self { rows, fields })
    }

    /// Number of rows in the segment (row numbers are `0..rows`).
    pub fn rows(&self) -> u32 {
        self.rows
    }

    /// The indexed fields and their types, sorted by name.
    pub fn fields(&self) -> impl Iterator<Item = (&'a str, FieldType)> + '_ {
        self.fields.iter().map(|f| (f.name, f.ty))
    }

    /// The type a field was indexed with, if it is indexed here.
    pub fn field_type(&self, name: &str) -> Option<FieldType> {
        self.find(name).map(|f| f.ty)
    }

    /// Number of rows holding at least one indexed value of `field`.
    pub fn value_count(&self, field: &str) -> Result<u64, IndexError> {
        self.field(field, None).map(|f| f.has_count)
    }

    /// Number of distinct values of a keyword field (2 for bool; number of
    /// rows with a value for integer and float fields).
    pub fn distinct_count(&self, field: &str) -> Result<usize, IndexError> {
        let f = self.field(field, None)?;
        Ok(match &f.kind {
            Kind::Keyword(d) => d.n,
            Kind::Integer { values, .. } => values.len(),
            Kind::Float { values, .. } => values.len(),
            Kind::Bool { .. } => 2,
        })
    }

    fn find(&self, name: &str) -> Option<&FieldView<'a>> {
        self.fields
            .binary_search_by(|f| f.name.cmp(name))
            .ok()
            .and_then(|i| self.fields.get(i))
    }

    fn field(&self, name: &str, wanted: Option<FieldType>) -> Result<&FieldView<'a>, IndexError> {
        let f = self
            .find(name)
            .ok_or_else(|| IndexError::FieldNotIndexed(name.to_owned()))?;
        match wanted {
            Some(w) if w != f.ty => Err(IndexError::FieldTypeMismatch {
                field: name.to_owned(),
                indexed: f.ty,
                wanted: w,
            }),
            _ => Ok(f),
        }
    }

    fn universe(&self) -> RoaringBitmap {
        let mut u = RoaringBitmap::new();
        u.insert_range(0..self.rows);
        u
    }

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
                            let start = values.partition_point(|x| x < v);
                            let end = values.partition_point(|x| x <= v);
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
                        let start = values.partition_point(|x| x < *lo);
                        let end = values.partition_point(|x| x <= *hi);
                        sorted_rows((start..end.max(start)).map(|i| rows.at(i)).collect())
                    }
                    (Predicate::FloatRange(r), Kind::Float { values, rows }) => {
                        let (start, end) = float_bounds(values, r);
                        sorted_rows((start..end.max(start)).map(|i| rows.at(i)).collect())
                    }
                    _ => Err(corrupt(format!(
                        "field '{}' has a layout that does not match its type",
                        f.name
                    ))),
                }
            }
        }
    }

    /// A cheap cardinality estimate for `filter`, from stored counts and binary
    /// searches only (no bitmap is read).
    pub fn estimate(&self, filter: &Filter) -> Result<Estimate, IndexError> {
        self.estimate_filter(filter)
    }

    fn estimate_filter(&self, filter: &Filter) -> Result<Estimate, IndexError> {
        let rows = u64::from(self.rows);
        let mut parts = Vec::with_capacity(filter.must.len() + filter.must_not.len() + 1);
        for c in &filter.must {
            parts.push(self.estimate_cond(c)?);
        }
        if !filter.should.is_empty() {
            let mut min = 0;
            let mut max = 0u64;
            let mut none = 1.0;
            for c in &filter.should {
                let e = self.estimate_cond(c)?;
                min = min.max(e.min);
                max = max.saturating_add(e.max);
                none *= 1.0 - fraction(e.expected, rows);
            }
            let max = max.min(rows);
            parts.push(clamp(min, (1.0 - none) * rows as f64, max));
        }
        for c in &filter.must_not {
            let e = self.estimate_cond(c)?;
            parts.push(Estimate {
                min: rows.saturating_sub(e.max),
                expected: rows.saturating_sub(e.expected),
                max: rows.saturating_sub(e.min),
            });
        }
        // Conjunction: Bonferroni lower bound, min of upper bounds, product of fractions.
        let mut min_sum = 0u64;
        let mut max = rows;
        let mut frac = 1.0;
        for e in &parts {
            min_sum = min_sum.saturating_add(e.min);
            max = max.min(e.max);
            frac *= fraction(e.expected, rows);
        }
        let slack = rows.saturating_mul(parts.len().saturating_sub(1) as u64);
        let min = min_sum.saturating_sub(slack).min(max);
        Ok(clamp(min, frac * rows as f64, max))
    }

    fn estimate_cond(&self, cond: &Condition) -> Result<Estimate, IndexError> {
        let rows = u64::from(self.rows);
        Ok(match cond {
            Condition::Filter(f) => self.estimate_filter(f)?,
            Condition::IsNull { key } => Estimate::exact(self.field(key, None)?.null_count),
            Condition::IsEmpty { key, field_type } => {
                let f = self.field(key, Some(*field_type))?;
                Estimate::exact(rows.saturating_sub(f.has_count))
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
                        let mut sum = 0u64;
                        let mut biggest = 0u64;
                        for s in list {
                            if let Some(i) = d.lookup(s.as_bytes())? {
                                let c = u64::from(d.counts.at(i));
                                sum += c;
                                biggest = biggest.max(c);
                            }
                        }
                        if *except {
                            let min = f.has_count.saturating_sub(sum);
                            Estimate {
                                min,
                                expected: min,
                                max: f.has_count,
                            }
                        } else {
                            let max = sum.min(f.has_count);
                            Estimate {
                                min: biggest.min(max),
                                expected: max,
                                max,
                            }
                        }
                    }
                    (
                        Predicate::Match {
                            values: MatchValues::Integer(list),
                            except,
                        },
                        Kind::Integer { values, .. },
                    ) => {
                        let mut sum = 0u64;
                        for &v in list {
                            let start = values.partition_point(|x| x < v);
                            let end = values.partition_point(|x| x <= v);
                            sum += end.saturating_sub(start) as u64;
                        }
                        Estimate::exact(if *except {
                            f.has_count.saturating_sub(sum)
                        } else {
                            sum
                        })
                    }
                    (
                        Predicate::Match {
                            values: MatchValues::Bool(list),
                            except,
                        },
                        Kind::Bool { counts, .. },
                    ) => {
                        let mut sum = 0;
                        for (b, c) in [false, true].into_iter().zip(counts) {
                            if list.contains(&b) != *except {
                                sum += c;
                            }
                        }
                        Estimate::exact(sum)
                    }
                    (Predicate::IntRange { lo, hi }, Kind::Integer { values, .. }) => {
                        if lo > hi {
                            Estimate::exact(0)
                        } else {
                            let start = values.partition_point(|x| x < *lo);
                            let end = values.partition_point(|x| x <= *hi);
                            Estimate::exact(end.saturating_sub(start) as u64)
                        }
                    }
                    (Predicate::FloatRange(r), Kind::Float { values, .. }) => {
                        let (start, end) = float_bounds(values, r);
                        Estimate::exact(end.saturating_sub(start) as u64)
                    }
                    _ => {
                        return Err(corrupt(format!(
                            "field '{}' has a layout that does not match its type",
                            f.name
                        )))
                    }
                }
            }
        })
    }
}

fn fraction(n: u64, rows: u64) -> f64 {
    if rows == 0 {
        0.0
    } else {
        (n as f64 / rows as f64).clamp(0.0, 1.0)
    }
}

fn clamp(min: u64, expected: f64, max: u64) -> Estimate {
    let expected = (expected.round() as u64).clamp(min, max.max(min));
    Estimate {
        min,
        expected,
        max: max.max(min),
    }
}

fn float_bounds(values: &Column<'_, f64>, r: &FloatRange) -> (usize, usize) {
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

impl<'a> Dict<'a> {
    fn range(
        &self,
        offs: &Column<'a, u64>,
        i: usize,
        blob: &'a [u8],
        what: &str,
    ) -> Result<&'a [u8], IndexError> {
        let (a, b) = (offs.at(i), offs.at(i + 1));
        let bad = || corrupt(format!("keyword {what} #{i} is out of bounds"));
        let (a, b) = (
            usize::try_from(a).map_err(|_| bad())?,
            usize::try_from(b).map_err(|_| bad())?,
        );
        blob.get(a..b).ok_or_else(bad)
    }

    fn key(&self, i: usize) -> Result<&'a [u8], IndexError> {
        self.range(&self.key_offs, i, self.keys, "value")
    }

    fn bitmap(&self, i: usize) -> Result<RoaringBitmap, IndexError> {
        read_bitmap(
            self.range(&self.bm_offs, i, self.bitmaps, "bitmap")?,
            "keyword value",
        )
    }

    /// Index of `key` in the sorted dictionary.
    fn lookup(&self, key: &[u8]) -> Result<Option<usize>, IndexError> {
        let (mut lo, mut hi) = (0, self.n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.key(mid)?.cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(Some(mid)),
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    use crate::test_schema::schema;

    fn payloads() -> Vec<Value> {
        (0..300)
            .map(|i| match i % 7 {
                0 => json!({}),
                1 => json!({"section": null, "size": null}),
                2 => json!({"section": ["a", "b", "a"], "size": i, "ok": true}),
                3 => json!({"section": "b", "price": i as f64 / 10.0, "ok": false}),
                4 => json!({"section": ["c"], "size": -i, "price": -0.0}),
                5 => json!({"section": 5, "size": "x", "price": [1], "ok": 1}),
                _ => json!({"section": format!("v{i}"), "size": i % 3}),
            })
            .collect()
    }

    fn build() -> Vec<u8> {
        let mut b = PayloadIndexBuilder::new(&schema());
        for (i, p) in payloads().iter().enumerate() {
            b.add(i as u32, p);
        }
        b.finish(300)
    }

    fn filters() -> Vec<Filter> {
        [
            json!({}),
            json!({"must": [{"key": "section", "match": {"value": "a"}}]}),
            json!({"must": [{"key": "section", "match": {"except": ["a"]}}]}),
            json!({"must": [{"key": "section", "match": {"any": ["c", "v6", "zz"]}}]}),
            json!({"must_not": [{"key": "size", "range": {"gte": 0, "lt": 100}}]}),
            json!({"should": [{"key": "price", "range": {"gte": 0}}, {"is_null": {"key": "size"}}]}),
            json!({"must": [{"is_empty": {"key": "ok"}}, {"key": "size", "match": {"except": [0, 1]}}]}),
            json!({"must": [{"key": "ok", "match": {"any": [false, true]}}], "must_not": [{"must": [{"key": "ok", "match": {"value": true}}]}]}),
        ]
        .into_iter()
        .map(|v| Filter::parse(&v, &schema()).expect("valid filter"))
        .collect()
    }

    fn check_all(view: &PayloadIndexView<'_>) {
        let payloads = payloads();
        for f in filters() {
            let want: RoaringBitmap = (0..300u32)
                .filter(|&r| f.matches(&payloads[r as usize]))
                .collect();
            let got = view.evaluate(&f).expect("evaluate");
            assert_eq!(got, want, "{}", f.to_json());
            let e = view.estimate(&f).expect("estimate");
            assert!(
                e.min <= want.len() && want.len() <= e.max,
                "{e:?} vs {} for {}",
                want.len(),
                f.to_json()
            );
            assert!(e.min <= e.expected && e.expected <= e.max, "{e:?}");
        }
    }

    #[test]
    fn round_trip_matches_row_by_row() {
        let bytes = build();
        assert_eq!(bytes.len() % 8, 0);
        let view = PayloadIndexView::open(&bytes).expect("open");
        assert_eq!(view.rows(), 300);
        assert_eq!(
            view.fields().collect::<Vec<_>>(),
            vec![
                ("ok", FieldType::Bool),
                ("price", FieldType::Float),
                ("section", FieldType::Keyword),
                ("size", FieldType::Integer),
                ("tags", FieldType::Keyword),
            ]
        );
        assert_eq!(view.field_type("size"), Some(FieldType::Integer));
        assert_eq!(view.value_count("ok").expect("count"), 86);
        assert!(view.distinct_count("section").expect("distinct") > 40);
        check_all(&view);
    }

    #[test]
    fn unaligned_bytes_work() {
        let bytes = build();
        let mut shifted = vec![0u8; bytes.len() + 3];
        shifted[3..].copy_from_slice(&bytes);
        let view = PayloadIndexView::open(&shifted[3..]).expect("open unaligned");
        check_all(&view);
        // Trailing bytes after total_len are ignored.
        let mut longer = bytes.clone();
        longer.extend_from_slice(&[0xAB; 13]);
        check_all(&PayloadIndexView::open(&longer).expect("open with trailing bytes"));
    }

    #[test]
    fn empty_schema_and_rows() {
        let bytes = PayloadIndexBuilder::new(&BTreeMap::new()).finish(0);
        assert_eq!(bytes.len(), HEADER_LEN);
        let view = PayloadIndexView::open(&bytes).expect("open");
        assert_eq!(view.evaluate(&Filter::all()).expect("eval").len(), 0);
        let bytes = PayloadIndexBuilder::new(&schema()).finish(10);
        let view = PayloadIndexView::open(&bytes).expect("open");
        assert_eq!(view.count(&Filter::all()).expect("eval"), 10);
        let f = Filter::parse(
            &json!({"must": [{"is_empty": {"key": "section"}}]}),
            &schema(),
        )
        .expect("f");
        assert_eq!(view.count(&f).expect("eval"), 10);
    }

    #[test]
    fn rows_beyond_finish_are_dropped() {
        let mut b = PayloadIndexBuilder::new(&schema());
        b.add(
            1,
            &json!({"section": "a", "size": 1, "price": 1.0, "ok": true}),
        );
        b.add(
            5,
            &json!({"section": "a", "size": 1, "price": 1.0, "ok": true}),
        );
        let bytes = b.finish(3);
        let view = PayloadIndexView::open(&bytes).expect("open");
        for v in [
            json!({"must": [{"key": "section", "match": {"value": "a"}}]}),
            json!({"must": [{"key": "size", "match": {"value": 1}}]}),
            json!({"must": [{"key": "price", "range": {"lte": 1}}]}),
            json!({"must": [{"key": "ok", "match": {"value": true}}]}),
        ] {
            let f = Filter::parse(&v, &schema()).expect("f");
            assert_eq!(
                view.evaluate(&f).expect("eval").iter().collect::<Vec<_>>(),
                vec![1]
            );
        }
    }

    #[test]
    fn unknown_fields_and_types_are_errors() {
        let bytes = PayloadIndexBuilder::new(&schema()).finish(4);
        let view = PayloadIndexView::open(&bytes).expect("open");
        let mut other = schema();
        other.insert("new".into(), FieldType::Keyword);
        other.insert("size".into(), FieldType::Float);
        let f = Filter::parse(
            &json!({"must": [{"key": "new", "match": {"value": "x"}}]}),
            &other,
        )
        .expect("f");
        assert_eq!(
            view.evaluate(&f),
            Err(IndexError::FieldNotIndexed("new".into()))
        );
        let f = Filter::parse(
            &json!({"must": [{"key": "size", "range": {"gt": 1}}]}),
            &other,
        )
        .expect("f");
        let e = view.evaluate(&f).expect_err("type mismatch");
        assert_eq!(
            e.to_string(),
            "field 'size' is indexed as Integer in this segment, filter expects Float"
        );
        assert!(view.estimate(&f).is_err());
    }

    #[test]
    fn truncation_is_an_error() {
        let bytes = build();
        for len in 0..bytes.len() {
            let e = PayloadIndexView::open(&bytes[..len]).expect_err("truncated");
            assert!(
                matches!(e, IndexError::Truncated { .. } | IndexError::BadMagic),
                "len {len}: {e}"
            );
        }
    }

    #[test]
    fn header_errors_are_specific() {
        let bytes = build();
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert_eq!(
            PayloadIndexView::open(&bad).expect_err("magic"),
            IndexError::BadMagic
        );
        let mut bad = bytes.clone();
        bad[8] = 2;
        assert_eq!(
            PayloadIndexView::open(&bad)
                .expect_err("version")
                .to_string(),
            "payload index format version 2 is not supported (this build reads 1)"
        );
        let mut bad = bytes.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(matches!(
            PayloadIndexView::open(&bad).expect_err("crc"),
            IndexError::Checksum { .. }
        ));
    }

    /// Every single-byte corruption is caught by the CRC; without the CRC the
    /// view may answer wrongly but must never panic.
    #[test]
    fn corruption_never_panics() {
        let bytes = build();
        let filters = filters();
        let step = (bytes.len() / 700).max(1);
        for at in (0..bytes.len()).step_by(step) {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = bytes.clone();
                bad[at] ^= flip;
                assert!(
                    PayloadIndexView::open(&bad).is_err(),
                    "flip at {at} undetected"
                );
                if let Ok(view) = PayloadIndexView::open_unverified(&bad) {
                    for f in &filters {
                        let _ = view.evaluate(f);
                        let _ = view.estimate(f);
                    }
                }
            }
        }
        // Garbage offsets in the field table.
        for at in (HEADER_LEN..HEADER_LEN + 4 * ENTRY_LEN).step_by(8) {
            let mut bad = bytes.clone();
            bad[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
            if let Ok(view) = PayloadIndexView::open_unverified(&bad) {
                for f in &filters {
                    let _ = view.evaluate(f);
                }
            }
        }
    }
}
