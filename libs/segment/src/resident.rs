//! Bytes held in anonymous memory backed by transparent huge pages: how
//! [`crate::Residency::HugePages`] holds a file, and how benchmarks hold the
//! arrays a graph walk reads at random.

use std::io::{self, Read};

use memmap2::{Mmap, MmapMut};

/// Transparent huge page size on the platforms that have them.
const HUGE_PAGE: usize = 2 << 20;

/// Read-only bytes in a 2 MiB-aligned anonymous mapping advised
/// `MADV_HUGEPAGE` (ordinary pages where the kernel has no THP).
#[derive(Debug)]
pub struct HugePageBytes {
    map: Mmap,
    start: usize,
    len: usize,
}

impl HugePageBytes {
    /// Reads exactly `len` bytes from `reader`.
    ///
    /// # Errors
    /// When the mapping cannot be made or the reader fails or ends early.
    pub fn read(reader: &mut impl Read, len: usize) -> io::Result<Self> {
        let mut map = MmapMut::map_anon(len + HUGE_PAGE)?;
        let start = (HUGE_PAGE - map.as_ptr() as usize % HUGE_PAGE) % HUGE_PAGE;
        #[cfg(target_os = "linux")]
        if len > 0 {
            if let Err(e) = map.advise_range(memmap2::Advice::HugePage, start, len) {
                tracing::debug!(error = %e, "no transparent huge pages");
            }
        }
        reader.read_exact(&mut map[start..start + len])?;
        Ok(Self {
            map: map.make_read_only()?,
            start,
            len,
        })
    }

    /// A copy of `bytes`.
    ///
    /// # Errors
    /// When the mapping cannot be made.
    pub fn copy_of(bytes: &[u8]) -> io::Result<Self> {
        Self::read(&mut &bytes[..], bytes.len())
    }

    /// The bytes (2 MiB-aligned).
    pub fn as_bytes(&self) -> &[u8] {
        &self.map[self.start..self.start + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_exact_and_aligned() {
        let data: Vec<u8> = (0..5_000_000u32).map(|i| (i % 251) as u8).collect();
        let h = HugePageBytes::copy_of(&data).expect("copy");
        assert_eq!(h.as_bytes(), &data[..]);
        assert_eq!(h.as_bytes().as_ptr() as usize % HUGE_PAGE, 0);
        let empty = HugePageBytes::copy_of(&[]).expect("empty");
        assert!(empty.as_bytes().is_empty());
        let short = HugePageBytes::read(&mut &data[..10], 11).expect_err("short read");
        assert_eq!(short.kind(), io::ErrorKind::UnexpectedEof);
    }
}
