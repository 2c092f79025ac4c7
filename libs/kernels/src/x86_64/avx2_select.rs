//! AVX2 selection kernel (x86_64): [`super::avx512_select::positions_at_most`]
//! with 8 lanes. AVX2 has no unsigned compare (`min == value` stands for
//! it) and no compress: the positions are packed by a permutation looked
//! up by the 8-bit mask, then all 8 lanes stored, within `out`.
//!
//! `unsafe`: it needs AVX2, and `out.len() >= values.len()`,
//! `values.len() <= u32::MAX`, which [`crate::Kernels`] checks.

use core::arch::x86_64::*;

use crate::scalar;

/// The lanes of each 8-bit mask's set bits, packed to the front: row `m`
/// moves the lanes `m` keeps to the first `popcount(m)` places.
static PACK8: [[u32; 8]; 256] = pack8_table();

const fn pack8_table() -> [[u32; 8]; 256] {
    let mut table = [[0u32; 8]; 256];
    let mut mask = 0;
    while mask < 256 {
        let (mut lane, mut kept) = (0, 0);
        while lane < 8 {
            if mask & (1 << lane) != 0 {
                table[mask][kept] = lane as u32;
                kept += 1;
            }
            lane += 1;
        }
        mask += 1;
    }
    table
}

/// [`super::avx512_select::positions_at_most`] on AVX2.
///
/// # Safety
/// The CPU must support AVX2; `out.len() >= values.len()` and
/// `values.len() <= u32::MAX as usize`.
#[target_feature(enable = "avx2")]
pub unsafe fn positions_at_most(values: &[u32], limit: u32, out: &mut [u32]) -> usize {
    const LANES: usize = 8;
    let lim = _mm256_set1_epi32(limit as i32);
    let step = _mm256_set1_epi32(LANES as i32);
    let mut at = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let (mut n, mut i) = (0usize, 0usize);
    while i + LANES <= values.len() {
        // SAFETY: `i + 8 <= values.len()`: 8 values are in bounds.
        let v = unsafe { _mm256_loadu_si256(values.as_ptr().add(i).cast()) };
        let within = _mm256_cmpeq_epi32(_mm256_min_epu32(v, lim), v);
        let keep = _mm256_movemask_ps(_mm256_castsi256_ps(within)) as usize;
        // SAFETY: `keep < 256` (8 mask bits): a row of the table, 8 u32s.
        let order = unsafe { _mm256_loadu_si256(PACK8[keep].as_ptr().cast()) };
        let packed = _mm256_permutevar8x32_epi32(at, order);
        // SAFETY: `n <= i`, so `n + 8 <= i + 8 <= values.len() <= out.len()`.
        unsafe { _mm256_storeu_si256(out.as_mut_ptr().add(n).cast(), packed) };
        n += keep.count_ones() as usize;
        at = _mm256_add_epi32(at, step);
        i += LANES;
    }
    n + scalar::positions_at_most_from(values, i, limit, &mut out[n..])
}
