//! [`PayloadIndexView`]: opens the index bytes in place and looks up its fields.

use eddy_model::FieldType;
use roaring::RoaringBitmap;

use eddy_format::{check_crc, FormatError, U32};
use zerocopy::FromBytes;

use super::dict::Dict;
use super::format::{
    checksum, type_from_code, FieldEntry, IndexHeader, ENTRY_LEN, HEADER_LEN, INDEX_FORMAT, S_A,
    S_B, S_C, S_D, S_E, S_HAS, S_MULTI, S_NULL,
};
use crate::column::Column;
use crate::IndexError;

/// A payload index read in place from borrowed bytes (normally an mmap).
///
/// Opening reads the header and field table only (plus the CRC pass, unless
/// [`PayloadIndexView::open_unverified`] is used); dictionaries and bitmaps are
/// read when a filter needs them. Every offset is bounds-checked: corrupt bytes
/// give [`IndexError`], never a panic.
#[derive(Debug, Clone)]
pub struct PayloadIndexView<'a> {
    pub(super) rows: u32,
    pub(super) fields: Vec<FieldView<'a>>,
}

#[derive(Debug, Clone)]
pub(super) struct FieldView<'a> {
    pub(super) name: &'a str,
    pub(super) ty: FieldType,
    pub(super) has_count: u64,
    pub(super) null_count: u64,
    pub(super) has: &'a [u8],
    pub(super) null: &'a [u8],
    pub(super) multi: &'a [u8],
    pub(super) kind: Kind<'a>,
}

#[derive(Debug, Clone)]
pub(super) enum Kind<'a> {
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

pub(super) fn corrupt(msg: impl Into<String>) -> IndexError {
    IndexError::Corrupt(msg.into())
}

/// The error for a field whose stored layout does not fit its type code.
pub(super) fn layout_mismatch(name: &str) -> IndexError {
    corrupt(format!(
        "field '{name}' has a layout that does not match its type"
    ))
}

fn to_usize(v: u64, what: &str) -> Result<usize, IndexError> {
    usize::try_from(v).map_err(|_| corrupt(format!("{what} {v} does not fit in memory")))
}

pub(super) fn read_bitmap(bytes: &[u8], what: &str) -> Result<RoaringBitmap, IndexError> {
    if bytes.is_empty() {
        return Ok(RoaringBitmap::new());
    }
    RoaringBitmap::deserialize_from(bytes).map_err(|e| corrupt(format!("{what}: bad bitmap: {e}")))
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
        let (rows, table, bytes) = checked_table(bytes, verify)?;
        let mut fields: Vec<FieldView<'a>> = Vec::with_capacity(table.len());
        for (i, entry) in table.iter().enumerate() {
            let field = read_field(i, entry, bytes)?;
            if fields.last().is_some_and(|prev| prev.name >= field.name) {
                return Err(corrupt("field table is not sorted by name"));
            }
            fields.push(field);
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

    pub(super) fn field(
        &self,
        name: &str,
        wanted: Option<FieldType>,
    ) -> Result<&FieldView<'a>, IndexError> {
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

    pub(super) fn universe(&self) -> RoaringBitmap {
        let mut u = RoaringBitmap::new();
        u.insert_range(0..self.rows);
        u
    }
}

/// Checks the header, the field table's bounds and (when `verify`) the CRC;
/// returns the row count, the field table and the bytes up to `total_len`.
fn checked_table(bytes: &[u8], verify: bool) -> Result<(u32, &[FieldEntry], &[u8]), IndexError> {
    let len = bytes.len() as u64;
    let header: &IndexHeader = INDEX_FORMAT.read_header(bytes)?;
    let entry_len = header.entry_len.get();
    if entry_len as usize != ENTRY_LEN {
        return Err(corrupt(format!(
            "entry length {entry_len}, expected {ENTRY_LEN}"
        )));
    }
    let rows = header.rows.get();
    let field_count = header.field_count.get() as usize;
    let total_len = header.total_len.get();
    if total_len > len {
        return Err(FormatError::Truncated {
            what: INDEX_FORMAT.what,
            need: total_len,
            have: len,
        }
        .into());
    }
    // Fits: total_len <= bytes.len().
    let bytes = &bytes[..total_len as usize];
    let table = bytes
        .get(HEADER_LEN..)
        .and_then(|rest| <[FieldEntry]>::ref_from_prefix_with_elems(rest, field_count).ok())
        .map(|(table, _)| table)
        .ok_or_else(|| {
            corrupt(format!(
                "total length {total_len} is shorter than the field table ({} bytes)",
                HEADER_LEN as u64 + field_count as u64 * ENTRY_LEN as u64
            ))
        })?;
    if verify {
        check_crc(INDEX_FORMAT.what, header.crc32.get(), checksum(bytes))?;
    }
    Ok((rows, table, bytes))
}

/// Reads field-table entry `i` and checks that its sections lie inside
/// `bytes` with the lengths its type implies.
fn read_field<'a>(
    i: usize,
    entry: &FieldEntry,
    bytes: &'a [u8],
) -> Result<FieldView<'a>, IndexError> {
    let total_len = bytes.len();
    let section = |s: usize| -> Result<&'a [u8], IndexError> {
        let extent = &entry.sections[s];
        extent.range(bytes.len()).map(|r| &bytes[r]).ok_or_else(|| {
            corrupt(format!(
                "field #{i} section {s} ({}+{}) is out of bounds ({total_len} bytes)",
                extent.offset, extent.len
            ))
        })
    };
    let name = entry
        .name
        .range(bytes.len())
        .map(|r| &bytes[r])
        .ok_or_else(|| corrupt(format!("field #{i} name is out of bounds")))?;
    let name =
        std::str::from_utf8(name).map_err(|_| corrupt(format!("field #{i} name is not UTF-8")))?;
    let code = entry.type_code.get();
    let ty = type_from_code(code)
        .ok_or_else(|| corrupt(format!("field '{name}' has unknown type code {code}")))?;
    let n = to_usize(entry.n.get(), "entry count")?;
    let bad_len = |s: usize| corrupt(format!("field '{name}' section {s} has the wrong length"));
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
                counts: Column::new(exact(S_D, n.checked_mul(4))?).ok_or_else(|| bad_len(S_D))?,
            };
            Kind::Keyword(dict)
        }
        FieldType::Integer | FieldType::Float => {
            let values = exact(S_A, n.checked_mul(8))?;
            let row_ids = Column::new(exact(S_B, n.checked_mul(4))?).ok_or_else(|| bad_len(S_B))?;
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
            let [falses, trues] =
                <[U32; 2]>::read_from_bytes(exact(S_D, Some(8))?).map_err(|_| bad_len(S_D))?;
            Kind::Bool {
                bitmaps: [section(S_A)?, section(S_B)?],
                counts: [u64::from(falses.get()), u64::from(trues.get())],
            }
        }
    };
    Ok(FieldView {
        name,
        ty,
        has_count: entry.has_count.get(),
        null_count: entry.null_count.get(),
        has: section(S_HAS)?,
        null: section(S_NULL)?,
        multi: section(S_MULTI)?,
        kind,
    })
}
