//! AVX-512 popcount kernels (x86_64, F + BW + VPOPCNTDQ): Hamming distance and
//! AND-popcount of bit vectors, and the block form of Hamming.
//!
//! Rows of more than 8 words are read as bytes through [`fold_bytes`] (four
//! independent `vpopcntq` sums, one masked load for the tail); rows of 4 to 8
//! words are one masked load each (the block form keeps the query in a
//! register); rows shorter than [`POPCNT_MAX_WORDS`] words use the scalar
//! POPCNT instruction, whose latency is shorter than a masked load plus a
//! 512-bit reduction.
//!
//! Every function is `unsafe`: it needs the named CPU features and equal input
//! lengths, both guaranteed by [`crate::Kernels`].

use core::arch::x86_64::*;

use super::avx512_int8::fold_bytes;

/// Rows of fewer words than this use scalar POPCNT.
pub const POPCNT_MAX_WORDS: usize = 4;

/// `Σ popcount(op(a[i], b[i]))` with scalar POPCNT, two independent sums.
#[inline(always)]
fn popcnt_words(a: &[u64], b: &[u64], op: impl Fn(u64, u64) -> u64) -> u32 {
    let mut sums = [0u32; 2];
    for (k, (x, y)) in a.iter().zip(b).enumerate() {
        sums[k & 1] += op(*x, *y).count_ones();
    }
    sums[0] + sums[1]
}

/// Mask of the first `n` (1..=8) 64-bit lanes.
#[inline(always)]
fn word_mask(n: usize) -> __mmask8 {
    (0xffu32 >> (8 - n)) as __mmask8
}

/// `Σ popcount(op(x, b))` for a row of at most 8 words: one masked load of `b`
/// (lanes outside `m` are zero and never read), one reduction.
///
/// # Safety
/// AVX-512 F/VPOPCNTDQ; `b` points to the `m.count_ones()` readable words
/// that `m` selects, and `x` is zero outside `m`.
#[inline(always)]
unsafe fn popcnt_short(
    x: __m512i,
    b: *const u64,
    m: __mmask8,
    op: impl Fn(__m512i, __m512i) -> __m512i,
) -> u32 {
    let y = _mm512_maskz_loadu_epi64(m, b.cast());
    _mm512_reduce_add_epi64(_mm512_popcnt_epi64(op(x, y))) as u32
}

/// `Σ popcount(op(a, b))` over whole rows with `vpopcntq`.
///
/// # Safety
/// AVX-512 F/BW/VPOPCNTDQ; `a.len() == b.len()`.
#[inline(always)]
unsafe fn popcnt_rows(a: &[u64], b: &[u64], op: impl Fn(__m512i, __m512i) -> __m512i) -> u32 {
    let acc = fold_bytes(
        a.as_ptr().cast(),
        b.as_ptr().cast(),
        a.len() * 8,
        _mm512_setzero_si512(),
        |acc, x, y| _mm512_add_epi64(acc, _mm512_popcnt_epi64(op(x, y))),
    );
    let [a0, a1, a2, a3] = acc;
    let sum = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
    _mm512_reduce_add_epi64(sum) as u32
}

/// popcount(a XOR b) with `vpopcntq`.
///
/// # Safety
/// AVX-512 F/BW/VPOPCNTDQ, POPCNT; `a.len() == b.len()`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vpopcntdq,popcnt")]
pub unsafe fn hamming(a: &[u64], b: &[u64]) -> u32 {
    let n = a.len();
    if n < POPCNT_MAX_WORDS {
        popcnt_words(a, b, |x, y| x ^ y)
    } else if n <= 8 {
        let m = word_mask(n);
        let x = _mm512_maskz_loadu_epi64(m, a.as_ptr().cast());
        popcnt_short(x, b.as_ptr(), m, |x, y| _mm512_xor_si512(x, y))
    } else {
        popcnt_rows(a, b, |x, y| _mm512_xor_si512(x, y))
    }
}

/// popcount(a AND b) with `vpopcntq`.
///
/// # Safety
/// AVX-512 F/BW/VPOPCNTDQ, POPCNT; `a.len() == b.len()`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vpopcntdq,popcnt")]
pub unsafe fn and_popcount(a: &[u64], b: &[u64]) -> u32 {
    let n = a.len();
    if n < POPCNT_MAX_WORDS {
        popcnt_words(a, b, |x, y| x & y)
    } else if n <= 8 {
        let m = word_mask(n);
        let x = _mm512_maskz_loadu_epi64(m, a.as_ptr().cast());
        popcnt_short(x, b.as_ptr(), m, |x, y| _mm512_and_si512(x, y))
    } else {
        popcnt_rows(a, b, |x, y| _mm512_and_si512(x, y))
    }
}

/// Block form of [`hamming`].
///
/// # Safety
/// As [`hamming`]; `query` non-empty and `block.len() == out.len() * query.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vpopcntdq,popcnt")]
pub unsafe fn hamming_block(query: &[u64], block: &[u64], out: &mut [u32]) {
    let n = query.len();
    if (POPCNT_MAX_WORDS..=8).contains(&n) {
        // One row per 512-bit load: the query stays in a register.
        let m = word_mask(n);
        let q = _mm512_maskz_loadu_epi64(m, query.as_ptr().cast());
        for (row, o) in block.chunks_exact(n).zip(out) {
            *o = popcnt_short(q, row.as_ptr(), m, |x, y| _mm512_xor_si512(x, y));
        }
    } else {
        for (row, o) in block.chunks_exact(n).zip(out) {
            *o = hamming(query, row);
        }
    }
}
