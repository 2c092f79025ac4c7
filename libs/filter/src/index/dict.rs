//! [`Dict`]: a keyword field's sorted value dictionary, read in place.

use roaring::RoaringBitmap;

use super::view::{corrupt, read_bitmap};
use crate::column::Column;
use crate::IndexError;

/// A keyword field's sorted dictionary: value `i` is `keys[key_offs[i]..key_offs[i+1]]`
/// and its rows are the roaring bitmap `bitmaps[bm_offs[i]..bm_offs[i+1]]`.
#[derive(Debug, Clone)]
pub(super) struct Dict<'a> {
    pub(super) n: usize,
    pub(super) key_offs: Column<'a, u64>,
    pub(super) keys: &'a [u8],
    pub(super) bm_offs: Column<'a, u64>,
    pub(super) bitmaps: &'a [u8],
    pub(super) counts: Column<'a, u32>,
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

    pub(super) fn key(&self, i: usize) -> Result<&'a [u8], IndexError> {
        self.range(&self.key_offs, i, self.keys, "value")
    }

    pub(super) fn bitmap(&self, i: usize) -> Result<RoaringBitmap, IndexError> {
        read_bitmap(
            self.range(&self.bm_offs, i, self.bitmaps, "bitmap")?,
            "keyword value",
        )
    }

    /// Index of `key` in the sorted dictionary.
    pub(super) fn lookup(&self, key: &[u8]) -> Result<Option<usize>, IndexError> {
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
