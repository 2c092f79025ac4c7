//! AVX2 + FMA kernels (x86_64).
//!
//! Every function is `unsafe` because it requires AVX2, FMA and POPCNT at run
//! time and equal input lengths; [`crate::Kernels`] guarantees both.

use core::arch::x86_64::*;

use crate::scalar;

/// Rows fetched ahead in the id-list kernels.
const PREFETCH_AHEAD: usize = 4;

/// `MASK[8 - r..16 - r]` selects the first `r` of 8 lanes.
static TAIL_MASK: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];

/// Horizontal sum of eight f32 lanes.
///
/// # Safety
/// The CPU must support the target features enabled on this function.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Wrapping horizontal sum of eight u32 lanes.
///
/// # Safety
/// The CPU must support the target features enabled on this function.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn hsum_epi32(v: __m256i) -> u32 {
    let mut lanes = [0u32; 8];
    _mm256_storeu_si256(lanes.as_mut_ptr().cast(), v);
    lanes.iter().fold(0u32, |a, &x| a.wrapping_add(x))
}

/// Wrapping horizontal sum of four u64 lanes.
///
/// # Safety
/// The CPU must support the target features enabled on this function.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn hsum_epi64(v: __m256i) -> u64 {
    let mut lanes = [0u64; 4];
    _mm256_storeu_si256(lanes.as_mut_ptr().cast(), v);
    lanes.iter().fold(0u64, |a, &x| a.wrapping_add(x))
}

/// Mask for the first `rem` (1..=7) lanes.
///
/// # Safety
/// The CPU must support the target features enabled on this function.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn tail_mask(rem: usize) -> __m256i {
    _mm256_loadu_si256(TAIL_MASK.as_ptr().add(8 - rem).cast())
}

/// Inner product.
///
/// # Safety
/// The CPU must support AVX2 and FMA, and `a.len() == b.len()`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc0 = _mm256_setzero_ps();
    let mut acc1 = _mm256_setzero_ps();
    let mut acc2 = _mm256_setzero_ps();
    let mut acc3 = _mm256_setzero_ps();
    let mut i = 0;
    while i + 32 <= n {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc0);
        acc1 = _mm256_fmadd_ps(
            _mm256_loadu_ps(pa.add(i + 8)),
            _mm256_loadu_ps(pb.add(i + 8)),
            acc1,
        );
        acc2 = _mm256_fmadd_ps(
            _mm256_loadu_ps(pa.add(i + 16)),
            _mm256_loadu_ps(pb.add(i + 16)),
            acc2,
        );
        acc3 = _mm256_fmadd_ps(
            _mm256_loadu_ps(pa.add(i + 24)),
            _mm256_loadu_ps(pb.add(i + 24)),
            acc3,
        );
        i += 32;
    }
    while i + 8 <= n {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc0);
        i += 8;
    }
    if i < n {
        // Masked loads never touch the lanes past the end.
        let m = tail_mask(n - i);
        acc1 = _mm256_fmadd_ps(
            _mm256_maskload_ps(pa.add(i), m),
            _mm256_maskload_ps(pb.add(i), m),
            acc1,
        );
    }
    hsum_ps(_mm256_add_ps(
        _mm256_add_ps(acc0, acc1),
        _mm256_add_ps(acc2, acc3),
    ))
}

/// Squared Euclidean distance.
///
/// # Safety
/// The CPU must support AVX2 and FMA, and `a.len() == b.len()`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn l2sq(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc0 = _mm256_setzero_ps();
    let mut acc1 = _mm256_setzero_ps();
    let mut acc2 = _mm256_setzero_ps();
    let mut acc3 = _mm256_setzero_ps();
    let mut i = 0;
    while i + 32 <= n {
        let d0 = _mm256_sub_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)));
        let d1 = _mm256_sub_ps(
            _mm256_loadu_ps(pa.add(i + 8)),
            _mm256_loadu_ps(pb.add(i + 8)),
        );
        let d2 = _mm256_sub_ps(
            _mm256_loadu_ps(pa.add(i + 16)),
            _mm256_loadu_ps(pb.add(i + 16)),
        );
        let d3 = _mm256_sub_ps(
            _mm256_loadu_ps(pa.add(i + 24)),
            _mm256_loadu_ps(pb.add(i + 24)),
        );
        acc0 = _mm256_fmadd_ps(d0, d0, acc0);
        acc1 = _mm256_fmadd_ps(d1, d1, acc1);
        acc2 = _mm256_fmadd_ps(d2, d2, acc2);
        acc3 = _mm256_fmadd_ps(d3, d3, acc3);
        i += 32;
    }
    while i + 8 <= n {
        let d = _mm256_sub_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)));
        acc0 = _mm256_fmadd_ps(d, d, acc0);
        i += 8;
    }
    if i < n {
        let m = tail_mask(n - i);
        let d = _mm256_sub_ps(
            _mm256_maskload_ps(pa.add(i), m),
            _mm256_maskload_ps(pb.add(i), m),
        );
        acc1 = _mm256_fmadd_ps(d, d, acc1);
    }
    hsum_ps(_mm256_add_ps(
        _mm256_add_ps(acc0, acc1),
        _mm256_add_ps(acc2, acc3),
    ))
}

/// Bytes ahead of the current row that the block scans prefetch.
pub(super) const SCAN_PREFETCH_DISTANCE: usize = 4096;

/// Prefetch `len` bytes starting `SCAN_PREFETCH_DISTANCE` past `p`. Prefetches
/// never fault, so addresses past the end of the block are harmless; the
/// pointer is formed with `wrapping_add` and never dereferenced.
///
/// # Safety
/// The CPU must support the target features enabled on this function.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn prefetch_ahead(p: *const i8, len: usize) {
    let start = p.wrapping_add(SCAN_PREFETCH_DISTANCE);
    let mut off = 0;
    while off < len {
        _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(off));
        off += 64;
    }
}

/// Inner product of `query` with each row of `block`.
///
/// # Safety
/// AVX2 + FMA; `query` non-empty and `block.len() == out.len() * query.len()`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_block(query: &[f32], block: &[f32], out: &mut [f32]) {
    let row_bytes = query.len() * 4;
    for (row, o) in block.chunks_exact(query.len()).zip(out) {
        prefetch_ahead(row.as_ptr().cast(), row_bytes);
        *o = dot(query, row);
    }
}

/// Squared L2 of `query` to each row of `block`.
///
/// # Safety
/// AVX2 + FMA; `query` non-empty and `block.len() == out.len() * query.len()`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn l2sq_block(query: &[f32], block: &[f32], out: &mut [f32]) {
    let row_bytes = query.len() * 4;
    for (row, o) in block.chunks_exact(query.len()).zip(out) {
        prefetch_ahead(row.as_ptr().cast(), row_bytes);
        *o = l2sq(query, row);
    }
}

/// Helper of the kernels below.
///
/// # Safety
/// The CPU must support the target features enabled on this function.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn prefetch_row(data: &[f32], id: u32, dim: usize) {
    let start = id as usize * dim;
    if start + dim <= data.len() {
        let p = data.as_ptr().add(start).cast::<i8>();
        let mut off = 0;
        while off < dim * 4 {
            _mm_prefetch::<_MM_HINT_T0>(p.add(off));
            off += 64;
        }
    }
}

/// Inner product of `query` with rows `ids` of `data`, prefetching ahead.
///
/// # Safety
/// AVX2 + FMA; `query` non-empty, `data.len() % query.len() == 0`, `ids.len() == out.len()`.
/// Out-of-range ids panic (bounds-checked slicing).
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_ids(query: &[f32], data: &[f32], ids: &[u32], out: &mut [f32]) {
    let dim = query.len();
    for &id in ids.iter().take(PREFETCH_AHEAD) {
        prefetch_row(data, id, dim);
    }
    for (k, (&id, o)) in ids.iter().zip(out).enumerate() {
        if let Some(&next) = ids.get(k + PREFETCH_AHEAD) {
            prefetch_row(data, next, dim);
        }
        let start = id as usize * dim;
        *o = dot(query, &data[start..start + dim]);
    }
}

/// Squared L2 of `query` to rows `ids` of `data`, prefetching ahead.
///
/// # Safety
/// As [`dot_ids`].
#[target_feature(enable = "avx2,fma")]
pub unsafe fn l2sq_ids(query: &[f32], data: &[f32], ids: &[u32], out: &mut [f32]) {
    let dim = query.len();
    for &id in ids.iter().take(PREFETCH_AHEAD) {
        prefetch_row(data, id, dim);
    }
    for (k, (&id, o)) in ids.iter().zip(out).enumerate() {
        if let Some(&next) = ids.get(k + PREFETCH_AHEAD) {
            prefetch_row(data, next, dim);
        }
        let start = id as usize * dim;
        *o = l2sq(query, &data[start..start + dim]);
    }
}

/// Exact u8 inner product (bytes widened to i16, `vpmaddwd`).
///
/// # Safety
/// AVX2; `a.len() == b.len() <= 65536`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_u8(a: &[u8], b: &[u8]) -> u32 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let zero = _mm256_setzero_si256();
    let mut acc0 = zero;
    let mut acc1 = zero;
    let mut i = 0;
    while i + 32 <= n {
        let va = _mm256_loadu_si256(pa.add(i).cast());
        let vb = _mm256_loadu_si256(pb.add(i).cast());
        // Same in-lane shuffle on both sides keeps the pairs aligned.
        let lo = _mm256_madd_epi16(
            _mm256_unpacklo_epi8(va, zero),
            _mm256_unpacklo_epi8(vb, zero),
        );
        let hi = _mm256_madd_epi16(
            _mm256_unpackhi_epi8(va, zero),
            _mm256_unpackhi_epi8(vb, zero),
        );
        acc0 = _mm256_add_epi32(acc0, lo);
        acc1 = _mm256_add_epi32(acc1, hi);
        i += 32;
    }
    hsum_epi32(_mm256_add_epi32(acc0, acc1)).wrapping_add(scalar::dot_u8(&a[i..], &b[i..]))
}

/// Exact u8 squared L2 (`|a-b|` by saturating subtraction, then `vpmaddwd`).
///
/// # Safety
/// AVX2; `a.len() == b.len() <= 65536`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn l2sq_u8(a: &[u8], b: &[u8]) -> u32 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let zero = _mm256_setzero_si256();
    let mut acc0 = zero;
    let mut acc1 = zero;
    let mut i = 0;
    while i + 32 <= n {
        let va = _mm256_loadu_si256(pa.add(i).cast());
        let vb = _mm256_loadu_si256(pb.add(i).cast());
        let d = _mm256_or_si256(_mm256_subs_epu8(va, vb), _mm256_subs_epu8(vb, va));
        let dlo = _mm256_unpacklo_epi8(d, zero);
        let dhi = _mm256_unpackhi_epi8(d, zero);
        acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(dlo, dlo));
        acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(dhi, dhi));
        i += 32;
    }
    hsum_epi32(_mm256_add_epi32(acc0, acc1)).wrapping_add(scalar::l2sq_u8(&a[i..], &b[i..]))
}

/// Exact i8 inner product (sign-extended to i16 in-lane, `vpmaddwd`).
///
/// # Safety
/// AVX2; `a.len() == b.len() <= 65536`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc0 = _mm256_setzero_si256();
    let mut acc1 = _mm256_setzero_si256();
    let mut i = 0;
    while i + 32 <= n {
        let va = _mm256_loadu_si256(pa.add(i).cast());
        let vb = _mm256_loadu_si256(pb.add(i).cast());
        // unpack(x, x) puts x in both bytes of a word; an arithmetic shift sign-extends it.
        let alo = _mm256_srai_epi16::<8>(_mm256_unpacklo_epi8(va, va));
        let blo = _mm256_srai_epi16::<8>(_mm256_unpacklo_epi8(vb, vb));
        let ahi = _mm256_srai_epi16::<8>(_mm256_unpackhi_epi8(va, va));
        let bhi = _mm256_srai_epi16::<8>(_mm256_unpackhi_epi8(vb, vb));
        acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(alo, blo));
        acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(ahi, bhi));
        i += 32;
    }
    let simd = hsum_epi32(_mm256_add_epi32(acc0, acc1)) as i32;
    simd.wrapping_add(scalar::dot_i8(&a[i..], &b[i..]))
}

/// Exact inner product of u8 codes with a query in `-64..=64` (`vpmaddubsw`, then
/// `vpmaddwd`): half the instructions of [`dot_u8`], because no operand is widened.
///
/// # Safety
/// AVX2; `codes.len() == query.len() <= 65536` and every query value in `-64..=64`
/// (so a pair `255·64 + 255·64` fits the i16 that `vpmaddubsw` saturates).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_u8_i7(codes: &[u8], query: &[i8]) -> i32 {
    let n = codes.len();
    let (pa, pb) = (codes.as_ptr(), query.as_ptr());
    let ones = _mm256_set1_epi16(1);
    let mut acc0 = _mm256_setzero_si256();
    let mut acc1 = _mm256_setzero_si256();
    let mut i = 0;
    while i + 64 <= n {
        let a0 = _mm256_loadu_si256(pa.add(i).cast());
        let b0 = _mm256_loadu_si256(pb.add(i).cast());
        let a1 = _mm256_loadu_si256(pa.add(i + 32).cast());
        let b1 = _mm256_loadu_si256(pb.add(i + 32).cast());
        acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(_mm256_maddubs_epi16(a0, b0), ones));
        acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(_mm256_maddubs_epi16(a1, b1), ones));
        i += 64;
    }
    if i + 32 <= n {
        let a0 = _mm256_loadu_si256(pa.add(i).cast());
        let b0 = _mm256_loadu_si256(pb.add(i).cast());
        acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(_mm256_maddubs_epi16(a0, b0), ones));
        i += 32;
    }
    let simd = hsum_epi32(_mm256_add_epi32(acc0, acc1)) as i32;
    simd.wrapping_add(scalar::dot_u8_i7(&codes[i..], &query[i..]))
}

/// Exact u8 dot of `query` with each row of `block`.
///
/// # Safety
/// The features of this module; `query` non-empty, `block.len() == out.len() * query.len()`,
/// and for byte rows `query.len() <= 65536`.
#[target_feature(enable = "avx2,fma,popcnt")]
pub unsafe fn dot_u8_block(query: &[u8], block: &[u8], out: &mut [u32]) {
    for (row, o) in block.chunks_exact(query.len()).zip(out) {
        prefetch_ahead(row.as_ptr().cast(), row.len());
        *o = dot_u8(query, row);
    }
}

/// Exact u8 squared L2 of `query` to each row of `block`.
///
/// # Safety
/// The features of this module; `query` non-empty, `block.len() == out.len() * query.len()`,
/// and for byte rows `query.len() <= 65536`.
#[target_feature(enable = "avx2,fma,popcnt")]
pub unsafe fn l2sq_u8_block(query: &[u8], block: &[u8], out: &mut [u32]) {
    for (row, o) in block.chunks_exact(query.len()).zip(out) {
        prefetch_ahead(row.as_ptr().cast(), row.len());
        *o = l2sq_u8(query, row);
    }
}
