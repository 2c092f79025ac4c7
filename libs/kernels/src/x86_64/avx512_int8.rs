//! AVX-512 byte kernels (x86_64): exact u8 / i8 dot products and u8 squared L2,
//! each in an F + BW form (bytes widened in-lane, `vpmaddwd`) and a VNNI form
//! (`vpdpbusd` / `vpdpwssd`), plus their block forms.
//!
//! Loop shape (see [`fold_bytes`]): four independent accumulators over 256
//! bytes per step with unmasked loads only, then up to three whole 64-byte
//! chunks, then the last partial chunk read once with a zero-filling masked
//! load; one horizontal reduction at the end.
//!
//! Every function is `unsafe`: it needs the named CPU features and equal input
//! lengths of at most [`crate::MAX_INT_LEN`], both guaranteed by [`crate::Kernels`].
//! With that bound no 32-bit lane can overflow: a lane gains at most 130 560
//! in magnitude per 64-byte chunk and sees at most 1024 chunks.

use core::arch::x86_64::*;

use super::avx512::prefetch_ahead;

/// Folds `step(acc, a_chunk, b_chunk)` over the 64-byte chunks of two `n`-byte
/// rows: chunk `k` of the unmasked main loop goes to accumulator `k % 4`, so
/// the four dependency chains stay independent; the one to three whole chunks
/// left go to the first accumulators and the partial last chunk, zero-filled
/// by one masked load (masked-off bytes are never read), to the fourth.
///
/// `#[inline(always)]` without `target_feature`: it is only ever inlined into
/// the kernels below, which carry the features (the memchr pattern).
///
/// # Safety
/// AVX-512 F/BW; `a` and `b` point to `n` readable bytes each.
#[inline(always)]
pub(super) unsafe fn fold_bytes<A: Copy>(
    a: *const u8,
    b: *const u8,
    n: usize,
    zero: A,
    step: impl Fn(A, __m512i, __m512i) -> A,
) -> [A; 4] {
    let (mut acc0, mut acc1, mut acc2, mut acc3) = (zero, zero, zero, zero);
    let mut i = 0;
    while i + 256 <= n {
        acc0 = step(
            acc0,
            _mm512_loadu_si512(a.add(i).cast()),
            _mm512_loadu_si512(b.add(i).cast()),
        );
        acc1 = step(
            acc1,
            _mm512_loadu_si512(a.add(i + 64).cast()),
            _mm512_loadu_si512(b.add(i + 64).cast()),
        );
        acc2 = step(
            acc2,
            _mm512_loadu_si512(a.add(i + 128).cast()),
            _mm512_loadu_si512(b.add(i + 128).cast()),
        );
        acc3 = step(
            acc3,
            _mm512_loadu_si512(a.add(i + 192).cast()),
            _mm512_loadu_si512(b.add(i + 192).cast()),
        );
        i += 256;
    }
    if i + 64 <= n {
        let (va, vb) = (a.add(i).cast(), b.add(i).cast());
        acc0 = step(acc0, _mm512_loadu_si512(va), _mm512_loadu_si512(vb));
        i += 64;
        if i + 64 <= n {
            let (va, vb) = (a.add(i).cast(), b.add(i).cast());
            acc1 = step(acc1, _mm512_loadu_si512(va), _mm512_loadu_si512(vb));
            i += 64;
            if i + 64 <= n {
                let (va, vb) = (a.add(i).cast(), b.add(i).cast());
                acc2 = step(acc2, _mm512_loadu_si512(va), _mm512_loadu_si512(vb));
                i += 64;
            }
        }
    }
    if i < n {
        let m: __mmask64 = (1u64 << (n - i)) - 1;
        acc3 = step(
            acc3,
            _mm512_maskz_loadu_epi8(m, a.add(i).cast()),
            _mm512_maskz_loadu_epi8(m, b.add(i).cast()),
        );
    }
    [acc0, acc1, acc2, acc3]
}

/// Wrapping sum of every 32-bit lane of the four accumulators.
///
/// # Safety
/// AVX-512 F.
#[inline(always)]
unsafe fn reduce_epi32([a0, a1, a2, a3]: [__m512i; 4]) -> i32 {
    _mm512_reduce_add_epi32(_mm512_add_epi32(
        _mm512_add_epi32(a0, a1),
        _mm512_add_epi32(a2, a3),
    ))
}

/// Wrapping sum of every 64-bit lane of the four accumulators.
///
/// # Safety
/// AVX-512 F.
#[inline(always)]
unsafe fn reduce_epi64([a0, a1, a2, a3]: [__m512i; 4]) -> i64 {
    _mm512_reduce_add_epi64(_mm512_add_epi64(
        _mm512_add_epi64(a0, a1),
        _mm512_add_epi64(a2, a3),
    ))
}

/// Exact u8 inner product without VNNI (bytes widened in-lane, `vpmaddwd`).
///
/// # Safety
/// AVX-512 F/BW; `a.len() == b.len() <= 65536`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn dot_u8(a: &[u8], b: &[u8]) -> u32 {
    let zero = _mm512_setzero_si512();
    let acc = fold_bytes(a.as_ptr(), b.as_ptr(), a.len(), zero, |acc, va, vb| {
        // The same in-lane shuffle on both sides keeps the pairs aligned.
        let lo = _mm512_madd_epi16(
            _mm512_unpacklo_epi8(va, zero),
            _mm512_unpacklo_epi8(vb, zero),
        );
        let hi = _mm512_madd_epi16(
            _mm512_unpackhi_epi8(va, zero),
            _mm512_unpackhi_epi8(vb, zero),
        );
        _mm512_add_epi32(acc, _mm512_add_epi32(lo, hi))
    });
    reduce_epi32(acc) as u32
}

/// Exact u8 inner product with VNNI: `a·b = Σ a·(b−128) + 128·Σa`, where
/// `b−128` is `b XOR 0x80` read as i8 and `Σa` comes from `vpsadbw`.
///
/// # Safety
/// AVX-512 F/BW/VNNI; `a.len() == b.len() <= 65536`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn dot_u8_vnni(a: &[u8], b: &[u8]) -> u32 {
    let zero = _mm512_setzero_si512();
    let flip = _mm512_set1_epi8(i8::MIN);
    // Zero-filled tail bytes of `a` cancel both terms.
    let acc = fold_bytes(
        a.as_ptr(),
        b.as_ptr(),
        a.len(),
        (zero, zero),
        |(dp, sum_a), va, vb| {
            (
                _mm512_dpbusd_epi32(dp, va, _mm512_xor_si512(vb, flip)),
                _mm512_add_epi64(sum_a, _mm512_sad_epu8(va, zero)),
            )
        },
    );
    let dp = reduce_epi32(acc.map(|(dp, _)| dp)) as u32;
    let sum_a = reduce_epi64(acc.map(|(_, s)| s)) as u32;
    dp.wrapping_add(sum_a.wrapping_mul(128))
}

/// `Σ q·(row−128)` with VNNI: the row-dependent term of [`dot_u8_vnni`] with
/// the query as the unsigned operand, so `Σq` is computed once per block.
///
/// # Safety
/// AVX-512 F/BW/VNNI; `query.len() == row.len() <= 65536`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn dot_u8_vnni_rebased(query: &[u8], row: &[u8]) -> u32 {
    let flip = _mm512_set1_epi8(i8::MIN);
    let acc = fold_bytes(
        query.as_ptr(),
        row.as_ptr(),
        query.len(),
        _mm512_setzero_si512(),
        |dp, vq, vr| _mm512_dpbusd_epi32(dp, vq, _mm512_xor_si512(vr, flip)),
    );
    reduce_epi32(acc) as u32
}

/// Exact inner product of u8 codes with a query in `-64..=64` (`vpmaddubsw` + `vpmaddwd`).
///
/// # Safety
/// AVX-512 F/BW; `codes.len() == query.len() <= 65536`, query values in `-64..=64`
/// (so a pair `255·64 + 255·64` fits the i16 that `vpmaddubsw` saturates).
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn dot_u8_i7(codes: &[u8], query: &[i8]) -> i32 {
    let ones = _mm512_set1_epi16(1);
    let acc = fold_bytes(
        codes.as_ptr(),
        query.as_ptr().cast(),
        codes.len(),
        _mm512_setzero_si512(),
        |acc, vc, vq| _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(vc, vq), ones)),
    );
    reduce_epi32(acc)
}

/// [`dot_u8_i7`] with VNNI (`vpdpbusd`: u8 × i8 summed into i32, no saturation).
///
/// # Safety
/// AVX-512 F/BW/VNNI; `codes.len() == query.len() <= 65536`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn dot_u8_i7_vnni(codes: &[u8], query: &[i8]) -> i32 {
    let acc = fold_bytes(
        codes.as_ptr(),
        query.as_ptr().cast(),
        codes.len(),
        _mm512_setzero_si512(),
        |acc, vc, vq| _mm512_dpbusd_epi32(acc, vc, vq),
    );
    reduce_epi32(acc)
}

/// `|a − b|` of unsigned bytes (two saturating subtractions, one of them zero).
///
/// # Safety
/// AVX-512 BW.
#[inline(always)]
unsafe fn abs_diff_u8(a: __m512i, b: __m512i) -> __m512i {
    _mm512_or_si512(_mm512_subs_epu8(a, b), _mm512_subs_epu8(b, a))
}

/// Exact u8 squared L2 without VNNI (`|a−b|`, widened in-lane, `vpmaddwd`).
///
/// # Safety
/// AVX-512 F/BW; `a.len() == b.len() <= 65536`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn l2sq_u8(a: &[u8], b: &[u8]) -> u32 {
    let zero = _mm512_setzero_si512();
    let acc = fold_bytes(a.as_ptr(), b.as_ptr(), a.len(), zero, |acc, va, vb| {
        let d = abs_diff_u8(va, vb);
        let dlo = _mm512_unpacklo_epi8(d, zero);
        let dhi = _mm512_unpackhi_epi8(d, zero);
        _mm512_add_epi32(
            acc,
            _mm512_add_epi32(_mm512_madd_epi16(dlo, dlo), _mm512_madd_epi16(dhi, dhi)),
        )
    });
    reduce_epi32(acc) as u32
}

/// Exact u8 squared L2 with VNNI: `|a−b|` split into its even and odd bytes as
/// 16-bit words (`vpandd`, `vpsrlw`: no shuffle port), each squared and summed
/// by `vpdpwssd` into its own accumulator.
///
/// # Safety
/// AVX-512 F/BW/VNNI; `a.len() == b.len() <= 65536`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn l2sq_u8_vnni(a: &[u8], b: &[u8]) -> u32 {
    let zero = _mm512_setzero_si512();
    let low_byte = _mm512_set1_epi16(0xff);
    let acc = fold_bytes(
        a.as_ptr(),
        b.as_ptr(),
        a.len(),
        (zero, zero),
        |(even, odd), va, vb| {
            let d = abs_diff_u8(va, vb);
            let de = _mm512_and_si512(d, low_byte);
            let dd = _mm512_srli_epi16::<8>(d);
            (
                _mm512_dpwssd_epi32(even, de, de),
                _mm512_dpwssd_epi32(odd, dd, dd),
            )
        },
    );
    let even = reduce_epi32(acc.map(|(e, _)| e)) as u32;
    let odd = reduce_epi32(acc.map(|(_, o)| o)) as u32;
    even.wrapping_add(odd)
}

/// Exact i8 inner product without VNNI (sign-extended in-lane, `vpmaddwd`).
///
/// # Safety
/// AVX-512 F/BW; `a.len() == b.len() <= 65536`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let acc = fold_bytes(
        a.as_ptr().cast(),
        b.as_ptr().cast(),
        a.len(),
        _mm512_setzero_si512(),
        |acc, va, vb| {
            // unpack(x, x) puts x in both bytes of a word; an arithmetic shift sign-extends it.
            let alo = _mm512_srai_epi16::<8>(_mm512_unpacklo_epi8(va, va));
            let blo = _mm512_srai_epi16::<8>(_mm512_unpacklo_epi8(vb, vb));
            let ahi = _mm512_srai_epi16::<8>(_mm512_unpackhi_epi8(va, va));
            let bhi = _mm512_srai_epi16::<8>(_mm512_unpackhi_epi8(vb, vb));
            _mm512_add_epi32(
                acc,
                _mm512_add_epi32(_mm512_madd_epi16(alo, blo), _mm512_madd_epi16(ahi, bhi)),
            )
        },
    );
    reduce_epi32(acc)
}

/// Exact i8 inner product with VNNI: `a·b = Σ (a+128)·b − 128·Σb`, where
/// `a+128` is `a XOR 0x80` read as u8 and `Σb` is a second `vpdpbusd` with ones.
///
/// # Safety
/// AVX-512 F/BW/VNNI; `a.len() == b.len() <= 65536`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn dot_i8_vnni(a: &[i8], b: &[i8]) -> i32 {
    let zero = _mm512_setzero_si512();
    let flip = _mm512_set1_epi8(i8::MIN);
    let ones = _mm512_set1_epi8(1);
    // Zero-filled tail bytes of `b` cancel both terms.
    let acc = fold_bytes(
        a.as_ptr().cast(),
        b.as_ptr().cast(),
        a.len(),
        (zero, zero),
        |(dp, sum_b), va, vb| {
            (
                _mm512_dpbusd_epi32(dp, _mm512_xor_si512(va, flip), vb),
                _mm512_dpbusd_epi32(sum_b, ones, vb),
            )
        },
    );
    let dp = reduce_epi32(acc.map(|(dp, _)| dp));
    let sum_b = reduce_epi32(acc.map(|(_, s)| s));
    dp.wrapping_sub(sum_b.wrapping_mul(128))
}

/// Block form of [`dot_u8`], prefetching ahead.
///
/// # Safety
/// As [`dot_u8`]; `query` non-empty and `block.len() == out.len() * query.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
pub unsafe fn dot_u8_block(query: &[u8], block: &[u8], out: &mut [u32]) {
    for (row, o) in block.chunks_exact(query.len()).zip(out) {
        prefetch_ahead(row.as_ptr().cast(), row.len());
        *o = dot_u8(query, row);
    }
}

/// Block form of [`dot_u8_vnni`], prefetching ahead; `128·Σquery` is computed once.
///
/// # Safety
/// As [`dot_u8_vnni`]; `query` non-empty and `block.len() == out.len() * query.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
pub unsafe fn dot_u8_vnni_block(query: &[u8], block: &[u8], out: &mut [u32]) {
    let rebase = query
        .iter()
        .fold(0u32, |s, &q| s.wrapping_add(u32::from(q)))
        .wrapping_mul(128);
    for (row, o) in block.chunks_exact(query.len()).zip(out) {
        prefetch_ahead(row.as_ptr().cast(), row.len());
        *o = dot_u8_vnni_rebased(query, row).wrapping_add(rebase);
    }
}

/// Block form of [`l2sq_u8`], prefetching ahead.
///
/// # Safety
/// As [`l2sq_u8`]; `query` non-empty and `block.len() == out.len() * query.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
pub unsafe fn l2sq_u8_block(query: &[u8], block: &[u8], out: &mut [u32]) {
    for (row, o) in block.chunks_exact(query.len()).zip(out) {
        prefetch_ahead(row.as_ptr().cast(), row.len());
        *o = l2sq_u8(query, row);
    }
}

/// Block form of [`l2sq_u8_vnni`], prefetching ahead.
///
/// # Safety
/// As [`l2sq_u8_vnni`]; `query` non-empty and `block.len() == out.len() * query.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
pub unsafe fn l2sq_u8_vnni_block(query: &[u8], block: &[u8], out: &mut [u32]) {
    for (row, o) in block.chunks_exact(query.len()).zip(out) {
        prefetch_ahead(row.as_ptr().cast(), row.len());
        *o = l2sq_u8_vnni(query, row);
    }
}
