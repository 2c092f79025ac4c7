//! Fixed-width little-endian columns read in place from borrowed bytes.
//!
//! When the bytes are suitably aligned (the index layout aligns every section
//! to 8 bytes relative to the slice start, and the caller's mmap slice starts
//! 64-byte aligned) the column is a zero-copy `bytemuck` cast; otherwise (or on
//! big-endian targets) elements are decoded with `from_le_bytes`. Either way
//! there is no alignment requirement and no panic.

use bytemuck::Pod;

/// A scalar stored little-endian in a column.
pub(crate) trait LeScalar: Pod + Default {
    /// Width in bytes.
    const WIDTH: usize;
    /// Decodes from exactly `WIDTH` little-endian bytes (zero on a short slice).
    fn from_le(bytes: &[u8]) -> Self;
}

macro_rules! le_scalar {
    ($($t:ty),*) => {$(
        impl LeScalar for $t {
            const WIDTH: usize = std::mem::size_of::<$t>();
            fn from_le(bytes: &[u8]) -> Self {
                bytes.try_into().map(<$t>::from_le_bytes).unwrap_or_default()
            }
        }
    )*};
}
le_scalar!(u32, u64, i64, f64);

/// A column of `T` over borrowed bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Column<'a, T: LeScalar> {
    /// Aligned little-endian data, cast in place.
    Cast(&'a [T]),
    /// Unaligned (or big-endian host) data, decoded per element.
    Bytes(&'a [u8]),
}

impl<'a, T: LeScalar> Column<'a, T> {
    /// A column over `bytes`; `None` if the length is not a multiple of the width.
    pub(crate) fn new(bytes: &'a [u8]) -> Option<Self> {
        if !bytes.len().is_multiple_of(T::WIDTH) {
            return None;
        }
        if cfg!(target_endian = "little") {
            if let Ok(cast) = bytemuck::try_cast_slice::<u8, T>(bytes) {
                return Some(Column::Cast(cast));
            }
        }
        Some(Column::Bytes(bytes))
    }

    /// Number of elements.
    pub(crate) fn len(&self) -> usize {
        match self {
            Column::Cast(s) => s.len(),
            Column::Bytes(b) => b.len() / T::WIDTH,
        }
    }

    /// Element `i`; zero when out of range (callers stay below `len()`).
    pub(crate) fn at(&self, i: usize) -> T {
        match self {
            Column::Cast(s) => s.get(i).copied().unwrap_or_default(),
            Column::Bytes(b) => b
                .get(i * T::WIDTH..(i + 1) * T::WIDTH)
                .map(T::from_le)
                .unwrap_or_default(),
        }
    }

    /// First index in `0..len()` where `pred` is false, given `pred` is true on
    /// a prefix (like `slice::partition_point`).
    pub(crate) fn partition_point(&self, mut pred: impl FnMut(T) -> bool) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if pred(self.at(mid)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}
