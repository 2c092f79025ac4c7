//! AVX-512 selection kernel (x86_64, F): the positions of the values at
//! most a limit, written packed, without a branch per value (a branch
//! mispredicts on the few % of values a shortlist keeps). 16 values are
//! compared to a mask and their positions packed with `vpcompressd` in a
//! register (its memory form is slow on some AMD cores), then all 16 lanes
//! stored, within `out`.
//!
//! `unsafe`: it needs AVX-512 F, and `out.len() >= values.len()`,
//! `values.len() <= u32::MAX`, which [`crate::Kernels`] checks.

use core::arch::x86_64::*;

use crate::scalar;

/// Positions of the values of `values` at most `limit`, in order, into the
/// front of `out`; returns how many. `out` past them is overwritten with
/// unspecified values.
///
/// # Safety
/// The CPU must support AVX-512 F; `out.len() >= values.len()` and
/// `values.len() <= u32::MAX as usize`.
#[target_feature(enable = "avx512f")]
pub unsafe fn positions_at_most(values: &[u32], limit: u32, out: &mut [u32]) -> usize {
    const LANES: usize = 16;
    let lim = _mm512_set1_epi32(limit as i32);
    let step = _mm512_set1_epi32(LANES as i32);
    let mut at = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let (mut n, mut i) = (0usize, 0usize);
    while i + LANES <= values.len() {
        // SAFETY: `i + 16 <= values.len()`: 16 values are in bounds.
        let v = unsafe { _mm512_loadu_si512(values.as_ptr().add(i).cast()) };
        let keep = _mm512_cmple_epu32_mask(v, lim);
        let packed = _mm512_maskz_compress_epi32(keep, at);
        // SAFETY: `n <= i` (at most one position per value read), so
        // `n + 16 <= i + 16 <= values.len() <= out.len()`.
        unsafe { _mm512_storeu_si512(out.as_mut_ptr().add(n).cast(), packed) };
        n += keep.count_ones() as usize;
        at = _mm512_add_epi32(at, step);
        i += LANES;
    }
    n + scalar::positions_at_most_from(values, i, limit, &mut out[n..])
}
