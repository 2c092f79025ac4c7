//! AVX-512 popcount kernels (x86_64, F + BW + VPOPCNTDQ): Hamming distance and
//! AND-popcount of bit vectors, and the block form of Hamming.
//!
//! Rows of more than [`SHORT_ROW_MAX_WORDS`] words are read as bytes through
//! [`fold_bytes`] (four independent `vpopcntq` sums, one masked load for the
//! tail); rows of 4 to 16 words are two masked loads each (the block form
//! keeps the query in two registers); rows shorter than [`POPCNT_MAX_WORDS`]
//! words use the scalar POPCNT instruction, whose latency is shorter than a
//! masked load plus a 512-bit reduction.
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

/// Longest row (in words) read as two 512-bit registers instead of through [`fold_bytes`].
pub const SHORT_ROW_MAX_WORDS: usize = 16;

/// Mask of the first `n` (0..=8) 64-bit lanes.
#[inline(always)]
fn word_mask(n: usize) -> __mmask8 {
    ((1u16 << n) - 1) as __mmask8
}

/// A row of [`POPCNT_MAX_WORDS`]..=[`SHORT_ROW_MAX_WORDS`] words in two
/// registers, zero past its end (masked-off words are never read).
#[derive(Clone, Copy)]
struct ShortRow {
    lo: __m512i,
    hi: __m512i,
    mask_lo: __mmask8,
    mask_hi: __mmask8,
}

impl ShortRow {
    /// Loads the row at `p` of `n` words.
    ///
    /// # Safety
    /// AVX-512 F; `p` points to `n <= 16` readable words.
    #[inline(always)]
    unsafe fn load(p: *const u64, n: usize) -> Self {
        let (mask_lo, mask_hi) = (word_mask(n.min(8)), word_mask(n.saturating_sub(8)));
        Self {
            lo: _mm512_maskz_loadu_epi64(mask_lo, p.cast()),
            hi: _mm512_maskz_loadu_epi64(mask_hi, p.add(8).cast()),
            mask_lo,
            mask_hi,
        }
    }

    /// `Σ popcount(op(self, b))` for a row `b` of the same length.
    ///
    /// # Safety
    /// AVX-512 F/VPOPCNTDQ; `b` points to as many readable words as `self` holds.
    #[inline(always)]
    unsafe fn popcnt(self, b: *const u64, op: impl Fn(__m512i, __m512i) -> __m512i) -> u32 {
        let lo = _mm512_maskz_loadu_epi64(self.mask_lo, b.cast());
        let mut sum = _mm512_popcnt_epi64(op(self.lo, lo));
        if self.mask_hi != 0 {
            let hi = _mm512_maskz_loadu_epi64(self.mask_hi, b.add(8).cast());
            sum = _mm512_add_epi64(sum, _mm512_popcnt_epi64(op(self.hi, hi)));
        }
        _mm512_reduce_add_epi64(sum) as u32
    }
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
    } else if n <= SHORT_ROW_MAX_WORDS {
        ShortRow::load(a.as_ptr(), n).popcnt(b.as_ptr(), |x, y| _mm512_xor_si512(x, y))
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
    } else if n <= SHORT_ROW_MAX_WORDS {
        ShortRow::load(a.as_ptr(), n).popcnt(b.as_ptr(), |x, y| _mm512_and_si512(x, y))
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
    if (POPCNT_MAX_WORDS..=SHORT_ROW_MAX_WORDS).contains(&n) {
        // The query stays in two registers.
        let q = ShortRow::load(query.as_ptr(), n);
        for (row, o) in block.chunks_exact(n).zip(out) {
            *o = q.popcnt(row.as_ptr(), |x, y| _mm512_xor_si512(x, y));
        }
    } else {
        for (row, o) in block.chunks_exact(n).zip(out) {
            *o = hamming(query, row);
        }
    }
}
