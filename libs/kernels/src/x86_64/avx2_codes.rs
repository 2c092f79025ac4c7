//! AVX2 kernels over codes (x86_64): popcounts of binary codes, PQ lookup
//! tables and the u8 x 4-bit dot product. Split from `avx2.rs` to keep files small.
//!
//! Every function is `unsafe` because it requires AVX2, FMA and POPCNT at run
//! time and consistent input lengths; [`crate::Kernels`] guarantees both.

use core::arch::x86_64::*;

use super::avx2::{hsum_epi32, hsum_epi64, prefetch_ahead, SCAN_PREFETCH_DISTANCE};
use crate::scalar;

/// Per-byte popcount of `v` (Muła's nibble lookup), summed into four u64 lanes.
///
/// # Safety
/// The CPU must support the target features enabled on this function.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn popcnt_sad(v: __m256i) -> __m256i {
    let lookup = _mm256_setr_epi8(
        0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3,
        3, 4,
    );
    let low = _mm256_set1_epi8(0x0f);
    let lo = _mm256_and_si256(v, low);
    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
    let cnt = _mm256_add_epi8(
        _mm256_shuffle_epi8(lookup, lo),
        _mm256_shuffle_epi8(lookup, hi),
    );
    _mm256_sad_epu8(cnt, _mm256_setzero_si256())
}

/// Below this many words the POPCNT instruction beats the nibble lookup.
const MULA_MIN_WORDS: usize = 16;

/// popcount(op(a, b)) with the POPCNT instruction, four independent sums.
///
/// # Safety
/// The CPU must support the target features enabled on this function.
#[inline]
#[target_feature(enable = "avx2,fma,popcnt")]
unsafe fn popcnt_words(a: &[u64], b: &[u64], op: impl Fn(u64, u64) -> u64) -> u32 {
    let mut sums = [0u32; 4];
    let mut ca = a.chunks_exact(4);
    let mut cb = b.chunks_exact(4);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..4 {
            sums[l] += op(x[l], y[l]).count_ones();
        }
    }
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        sums[0] += op(*x, *y).count_ones();
    }
    sums.iter().sum()
}

/// popcount(a XOR b).
///
/// # Safety
/// AVX2 and POPCNT; `a.len() == b.len()`.
#[inline]
#[target_feature(enable = "avx2,fma,popcnt")]
pub unsafe fn hamming(a: &[u64], b: &[u64]) -> u32 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    if n < MULA_MIN_WORDS {
        return popcnt_words(a, b, |x, y| x ^ y);
    }
    let mut acc = _mm256_setzero_si256();
    let mut i = 0;
    while i + 8 <= n {
        let x0 = _mm256_xor_si256(
            _mm256_loadu_si256(pa.add(i).cast()),
            _mm256_loadu_si256(pb.add(i).cast()),
        );
        let x1 = _mm256_xor_si256(
            _mm256_loadu_si256(pa.add(i + 4).cast()),
            _mm256_loadu_si256(pb.add(i + 4).cast()),
        );
        acc = _mm256_add_epi64(acc, _mm256_add_epi64(popcnt_sad(x0), popcnt_sad(x1)));
        i += 8;
    }
    let mut total = hsum_epi64(acc) as u32;
    while i < n {
        total += (a[i] ^ b[i]).count_ones();
        i += 1;
    }
    total
}

/// popcount(a AND b).
///
/// # Safety
/// AVX2 and POPCNT; `a.len() == b.len()`.
#[inline]
#[target_feature(enable = "avx2,fma,popcnt")]
pub unsafe fn and_popcount(a: &[u64], b: &[u64]) -> u32 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    if n < MULA_MIN_WORDS {
        return popcnt_words(a, b, |x, y| x & y);
    }
    let mut acc = _mm256_setzero_si256();
    let mut i = 0;
    while i + 8 <= n {
        let x0 = _mm256_and_si256(
            _mm256_loadu_si256(pa.add(i).cast()),
            _mm256_loadu_si256(pb.add(i).cast()),
        );
        let x1 = _mm256_and_si256(
            _mm256_loadu_si256(pa.add(i + 4).cast()),
            _mm256_loadu_si256(pb.add(i + 4).cast()),
        );
        acc = _mm256_add_epi64(acc, _mm256_add_epi64(popcnt_sad(x0), popcnt_sad(x1)));
        i += 8;
    }
    let mut total = hsum_epi64(acc) as u32;
    while i < n {
        total += (a[i] & b[i]).count_ones();
        i += 1;
    }
    total
}

/// PQ ADC over a batch of codes: the scalar reference's four interleaved sums,
/// compiled for AVX2 (lookups are load-bound; a `vgatherdps` version measured
/// no faster on this machine).
///
/// # Safety
/// AVX2; `lut.len() == 256 * m` with `m > 0`, `codes.len() == out.len() * m`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn pq_adc(lut: &[f32], codes: &[u8], out: &mut [f32]) {
    scalar::pq_adc(lut, codes, out);
}

/// Dot product of a u8 query with packed 4-bit codes (layout of [`scalar::dot_u8_u4`]).
///
/// # Safety
/// AVX2; `query.len() == 2 * codes.len() <= 65536`, `codes.len() % 32 == 0`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_u8_u4(query: &[u8], codes: &[u8]) -> u32 {
    let zero = _mm256_setzero_si256();
    let low = _mm256_set1_epi8(0x0f);
    let mut acc = zero;
    for (k, c) in codes.chunks_exact(32).enumerate() {
        let vc = _mm256_loadu_si256(c.as_ptr().cast());
        let q0 = _mm256_loadu_si256(query.as_ptr().add(64 * k).cast());
        let q1 = _mm256_loadu_si256(query.as_ptr().add(64 * k + 32).cast());
        let c0 = _mm256_and_si256(vc, low);
        let c1 = _mm256_and_si256(_mm256_srli_epi16::<4>(vc), low);
        for (cv, qv) in [(c0, q0), (c1, q1)] {
            let lo = _mm256_madd_epi16(
                _mm256_unpacklo_epi8(cv, zero),
                _mm256_unpacklo_epi8(qv, zero),
            );
            let hi = _mm256_madd_epi16(
                _mm256_unpackhi_epi8(cv, zero),
                _mm256_unpackhi_epi8(qv, zero),
            );
            acc = _mm256_add_epi32(acc, _mm256_add_epi32(lo, hi));
        }
    }
    hsum_epi32(acc)
}

/// Hamming distance of `query` to each row of `block`.
///
/// # Safety
/// The features of this module; `query` non-empty, `block.len() == out.len() * query.len()`,
/// and for byte rows `query.len() <= 65536`.
#[target_feature(enable = "avx2,fma,popcnt")]
pub unsafe fn hamming_block(query: &[u64], block: &[u64], out: &mut [u32]) {
    match query.len() {
        1 => short_rows_hamming::<1>(query, block, out),
        2 => short_rows_hamming::<2>(query, block, out),
        3 => short_rows_hamming::<3>(query, block, out),
        4 => short_rows_hamming::<4>(query, block, out),
        5 => short_rows_hamming::<5>(query, block, out),
        6 => short_rows_hamming::<6>(query, block, out),
        7 => short_rows_hamming::<7>(query, block, out),
        8 => short_rows_hamming::<8>(query, block, out),
        12 => short_rows_hamming::<12>(query, block, out),
        _ => {
            for (row, o) in block.chunks_exact(query.len()).zip(out) {
                prefetch_ahead(row.as_ptr().cast(), row.len() * 8);
                *o = hamming(query, row);
            }
        }
    }
}

/// [`hamming_block`] for rows of `N` words (up to 512 bits: the sign bits
/// of up to 512 dimensions): the query held in registers, each row's words
/// unrolled into POPCNTs, and one prefetch per cache line instead of one per
/// row (a generic row loop spends more on its bookkeeping than on the
/// few POPCNTs of a short row).
///
/// # Safety
/// The CPU must support the target features enabled on this function;
/// `query.len() == N` and `block.len() == out.len() * N`.
#[inline]
#[target_feature(enable = "avx2,fma,popcnt")]
unsafe fn short_rows_hamming<const N: usize>(query: &[u64], block: &[u64], out: &mut [u32]) {
    let Ok(q) = <&[u64; N]>::try_from(query) else {
        return;
    };
    let (rows, _) = block.as_chunks::<N>();
    let base = block.as_ptr().cast::<i8>();
    let mut next_line = 0;
    for (r, (row, o)) in rows.iter().zip(out).enumerate() {
        let end = (r + 1) * N * 8;
        while next_line < end {
            _mm_prefetch::<_MM_HINT_T0>(base.wrapping_add(next_line + SCAN_PREFETCH_DISTANCE));
            next_line += 64;
        }
        let mut sum = 0;
        for j in 0..N {
            sum += (row[j] ^ q[j]).count_ones();
        }
        *o = sum;
    }
}

/// Weighted popcount of bit planes (see [`scalar::and_popcount_weighted`]),
/// compiled with POPCNT (and AVX2, which LLVM may use for the inner loop).
///
/// # Safety
/// POPCNT (part of this module's features); `planes.len() == bits * code.len()` with `bits <= 32`.
#[target_feature(enable = "avx2,fma,popcnt")]
pub unsafe fn and_popcount_weighted(planes: &[u64], code: &[u64]) -> u32 {
    let n = code.len();
    if n == 0 {
        return 0;
    }
    let mut acc = 0u32;
    for (b, plane) in planes.chunks_exact(n).enumerate() {
        let count: u32 = plane
            .iter()
            .zip(code)
            .map(|(p, x)| (p & x).count_ones())
            .sum();
        acc = acc.wrapping_add(count << b);
    }
    acc
}
