//! The id column of a segment, viewed in place.

use eddy_model::PointId;

/// A segment's ids: a u64 array, or offsets into UTF-8 bytes.
#[derive(Debug, Clone, Copy)]
pub enum Ids<'a> {
    /// Numeric ids.
    U64(&'a [u64]),
    /// String ids: row `i` is `bytes[offsets[i]..offsets[i + 1]]`.
    Str {
        /// `rows + 1` offsets.
        offsets: &'a [u64],
        /// The UTF-8 bytes.
        bytes: &'a [u8],
    },
}

impl Ids<'_> {
    /// Number of ids.
    pub fn len(&self) -> usize {
        match self {
            Ids::U64(v) => v.len(),
            Ids::Str { offsets, .. } => offsets.len().saturating_sub(1),
        }
    }

    /// Whether there are no ids.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The id of `row`, or `None` past the end (or on a damaged string id,
    /// which the reader rules out at open).
    pub fn get(&self, row: usize) -> Option<PointId> {
        match self {
            Ids::U64(v) => v.get(row).copied().map(PointId::Num),
            Ids::Str { offsets, bytes } => {
                let start = usize::try_from(*offsets.get(row)?).ok()?;
                let end = usize::try_from(*offsets.get(row + 1)?).ok()?;
                let s = std::str::from_utf8(bytes.get(start..end)?).ok()?;
                Some(PointId::Str(s.to_owned()))
            }
        }
    }
}
