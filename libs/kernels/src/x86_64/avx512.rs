//! AVX-512 kernels (x86_64): F + BW for f32 and bytes, VNNI for int8 dot
//! products, VPOPCNTDQ for popcounts. Tails use masked loads, which never
//! touch memory in masked-off lanes.
//!
//! Every function is `unsafe`: it needs the named CPU features and equal input
//! lengths, both guaranteed by [`crate::Kernels`].

use core::arch::x86_64::*;

/// Rows fetched ahead in the id-list kernels.
const PREFETCH_AHEAD: usize = 4;

/// Inner product.
///
/// # Safety
/// AVX-512 F/BW, AVX2, FMA; `a.len() == b.len()`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
pub unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc0 = _mm512_setzero_ps();
    let mut acc1 = _mm512_setzero_ps();
    let mut acc2 = _mm512_setzero_ps();
    let mut acc3 = _mm512_setzero_ps();
    let mut i = 0;
    while i + 64 <= n {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), acc0);
        acc1 = _mm512_fmadd_ps(
            _mm512_loadu_ps(pa.add(i + 16)),
            _mm512_loadu_ps(pb.add(i + 16)),
            acc1,
        );
        acc2 = _mm512_fmadd_ps(
            _mm512_loadu_ps(pa.add(i + 32)),
            _mm512_loadu_ps(pb.add(i + 32)),
            acc2,
        );
        acc3 = _mm512_fmadd_ps(
            _mm512_loadu_ps(pa.add(i + 48)),
            _mm512_loadu_ps(pb.add(i + 48)),
            acc3,
        );
        i += 64;
    }
    while i + 16 <= n {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), acc0);
        i += 16;
    }
    if i < n {
        let m: __mmask16 = (1u16 << (n - i)) - 1;
        acc1 = _mm512_fmadd_ps(
            _mm512_maskz_loadu_ps(m, pa.add(i)),
            _mm512_maskz_loadu_ps(m, pb.add(i)),
            acc1,
        );
    }
    _mm512_reduce_add_ps(_mm512_add_ps(
        _mm512_add_ps(acc0, acc1),
        _mm512_add_ps(acc2, acc3),
    ))
}

/// Squared Euclidean distance.
///
/// # Safety
/// AVX-512 F/BW, AVX2, FMA; `a.len() == b.len()`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
pub unsafe fn l2sq(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc0 = _mm512_setzero_ps();
    let mut acc1 = _mm512_setzero_ps();
    let mut acc2 = _mm512_setzero_ps();
    let mut acc3 = _mm512_setzero_ps();
    let mut i = 0;
    while i + 64 <= n {
        let d0 = _mm512_sub_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)));
        let d1 = _mm512_sub_ps(
            _mm512_loadu_ps(pa.add(i + 16)),
            _mm512_loadu_ps(pb.add(i + 16)),
        );
        let d2 = _mm512_sub_ps(
            _mm512_loadu_ps(pa.add(i + 32)),
            _mm512_loadu_ps(pb.add(i + 32)),
        );
        let d3 = _mm512_sub_ps(
            _mm512_loadu_ps(pa.add(i + 48)),
            _mm512_loadu_ps(pb.add(i + 48)),
        );
        acc0 = _mm512_fmadd_ps(d0, d0, acc0);
        acc1 = _mm512_fmadd_ps(d1, d1, acc1);
        acc2 = _mm512_fmadd_ps(d2, d2, acc2);
        acc3 = _mm512_fmadd_ps(d3, d3, acc3);
        i += 64;
    }
    while i + 16 <= n {
        let d = _mm512_sub_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)));
        acc0 = _mm512_fmadd_ps(d, d, acc0);
        i += 16;
    }
    if i < n {
        let m: __mmask16 = (1u16 << (n - i)) - 1;
        let d = _mm512_sub_ps(
            _mm512_maskz_loadu_ps(m, pa.add(i)),
            _mm512_maskz_loadu_ps(m, pb.add(i)),
        );
        acc1 = _mm512_fmadd_ps(d, d, acc1);
    }
    _mm512_reduce_add_ps(_mm512_add_ps(
        _mm512_add_ps(acc0, acc1),
        _mm512_add_ps(acc2, acc3),
    ))
}

/// Bytes ahead of the current row that the block scans prefetch.
const SCAN_PREFETCH_DISTANCE: usize = 4096;

/// Prefetch `len` bytes starting `SCAN_PREFETCH_DISTANCE` past `p`. Prefetches
/// never fault, so addresses past the end of the block are harmless; the
/// pointer is formed with `wrapping_add` and never dereferenced.
///
/// # Safety
/// The CPU must support the target features enabled on this function.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
unsafe fn prefetch_ahead(p: *const i8, len: usize) {
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
/// As [`dot`]; `query` non-empty and `block.len() == out.len() * query.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
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
/// As [`dot_block`].
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
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
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
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
/// As [`dot`]; `query` non-empty, `data.len() % query.len() == 0`, `ids.len() == out.len()`.
/// Out-of-range ids panic (bounds-checked slicing).
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
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
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
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

/// Mask selecting the first `rem` (0..64) bytes.
#[inline]
fn byte_mask(rem: usize) -> __mmask64 {
    (1u64 << rem) - 1
}

/// Loads the 64 bytes at `p + i`, or the `n - i` remaining ones zero-filled.
///
/// # Safety
/// The CPU must support the target features enabled on this function.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn load_bytes(p: *const u8, i: usize, n: usize) -> __m512i {
    if i + 64 <= n {
        _mm512_loadu_si512(p.add(i).cast())
    } else {
        _mm512_maskz_loadu_epi8(byte_mask(n - i), p.add(i).cast())
    }
}

/// Exact u8 inner product without VNNI (bytes widened in-lane, `vpmaddwd`).
///
/// # Safety
/// AVX-512 F/BW; `a.len() == b.len() <= 65536`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn dot_u8(a: &[u8], b: &[u8]) -> u32 {
    let n = a.len();
    let zero = _mm512_setzero_si512();
    let mut acc = zero;
    let mut i = 0;
    while i < n {
        let va = load_bytes(a.as_ptr(), i, n);
        let vb = load_bytes(b.as_ptr(), i, n);
        let lo = _mm512_madd_epi16(
            _mm512_unpacklo_epi8(va, zero),
            _mm512_unpacklo_epi8(vb, zero),
        );
        let hi = _mm512_madd_epi16(
            _mm512_unpackhi_epi8(va, zero),
            _mm512_unpackhi_epi8(vb, zero),
        );
        acc = _mm512_add_epi32(acc, _mm512_add_epi32(lo, hi));
        i += 64;
    }
    _mm512_reduce_add_epi32(acc) as u32
}

/// Exact u8 inner product with VNNI: `a·b = Σ a·(b−128) + 128·Σa`, where
/// `b−128` is `b XOR 0x80` read as i8 and `Σa` comes from `vpsadbw`.
///
/// # Safety
/// AVX-512 F/BW/VNNI; `a.len() == b.len() <= 65536`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn dot_u8_vnni(a: &[u8], b: &[u8]) -> u32 {
    let n = a.len();
    let zero = _mm512_setzero_si512();
    let flip = _mm512_set1_epi8(i8::MIN);
    let mut dp = zero;
    let mut sum_a = zero;
    let mut i = 0;
    while i < n {
        // Zero-filled tail lanes of `a` cancel both terms.
        let va = load_bytes(a.as_ptr(), i, n);
        let vb = load_bytes(b.as_ptr(), i, n);
        dp = _mm512_dpbusd_epi32(dp, va, _mm512_xor_si512(vb, flip));
        sum_a = _mm512_add_epi64(sum_a, _mm512_sad_epu8(va, zero));
        i += 64;
    }
    let dp = _mm512_reduce_add_epi32(dp) as u32;
    let sum_a = _mm512_reduce_add_epi64(sum_a) as u32;
    dp.wrapping_add(sum_a.wrapping_mul(128))
}

/// Exact inner product of u8 codes with a query in `-64..=64` (`vpmaddubsw` + `vpmaddwd`).
///
/// # Safety
/// AVX-512 F/BW; `codes.len() == query.len() <= 65536`, query values in `-64..=64`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn dot_u8_i7(codes: &[u8], query: &[i8]) -> i32 {
    let n = codes.len();
    let ones = _mm512_set1_epi16(1);
    let mut acc = _mm512_setzero_si512();
    let mut i = 0;
    while i < n {
        // Zero-filled tail lanes contribute nothing.
        let va = load_bytes(codes.as_ptr(), i, n);
        let vb = load_bytes(query.as_ptr().cast(), i, n);
        acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(va, vb), ones));
        i += 64;
    }
    _mm512_reduce_add_epi32(acc)
}

/// [`dot_u8_i7`] with VNNI (`vpdpbusd`: u8 × i8 summed into i32, no saturation).
///
/// # Safety
/// AVX-512 F/BW/VNNI; `codes.len() == query.len() <= 65536`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn dot_u8_i7_vnni(codes: &[u8], query: &[i8]) -> i32 {
    let n = codes.len();
    let mut acc = _mm512_setzero_si512();
    let mut i = 0;
    while i < n {
        let va = load_bytes(codes.as_ptr(), i, n);
        let vb = load_bytes(query.as_ptr().cast(), i, n);
        acc = _mm512_dpbusd_epi32(acc, va, vb);
        i += 64;
    }
    _mm512_reduce_add_epi32(acc)
}

/// Exact u8 squared L2 (`|a−b|` by saturating subtraction, `vpmaddwd`).
///
/// # Safety
/// AVX-512 F/BW; `a.len() == b.len() <= 65536`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn l2sq_u8(a: &[u8], b: &[u8]) -> u32 {
    let n = a.len();
    let zero = _mm512_setzero_si512();
    let mut acc = zero;
    let mut i = 0;
    while i < n {
        let va = load_bytes(a.as_ptr(), i, n);
        let vb = load_bytes(b.as_ptr(), i, n);
        let d = _mm512_or_si512(_mm512_subs_epu8(va, vb), _mm512_subs_epu8(vb, va));
        let dlo = _mm512_unpacklo_epi8(d, zero);
        let dhi = _mm512_unpackhi_epi8(d, zero);
        acc = _mm512_add_epi32(
            acc,
            _mm512_add_epi32(_mm512_madd_epi16(dlo, dlo), _mm512_madd_epi16(dhi, dhi)),
        );
        i += 64;
    }
    _mm512_reduce_add_epi32(acc) as u32
}

/// Exact i8 inner product without VNNI (sign-extended in-lane, `vpmaddwd`).
///
/// # Safety
/// AVX-512 F/BW; `a.len() == b.len() <= 65536`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let n = a.len();
    let mut acc = _mm512_setzero_si512();
    let mut i = 0;
    while i < n {
        let va = load_bytes(a.as_ptr().cast(), i, n);
        let vb = load_bytes(b.as_ptr().cast(), i, n);
        let alo = _mm512_srai_epi16::<8>(_mm512_unpacklo_epi8(va, va));
        let blo = _mm512_srai_epi16::<8>(_mm512_unpacklo_epi8(vb, vb));
        let ahi = _mm512_srai_epi16::<8>(_mm512_unpackhi_epi8(va, va));
        let bhi = _mm512_srai_epi16::<8>(_mm512_unpackhi_epi8(vb, vb));
        acc = _mm512_add_epi32(
            acc,
            _mm512_add_epi32(_mm512_madd_epi16(alo, blo), _mm512_madd_epi16(ahi, bhi)),
        );
        i += 64;
    }
    _mm512_reduce_add_epi32(acc)
}

/// Exact i8 inner product with VNNI: `a·b = Σ (a+128)·b − 128·Σb`, where
/// `a+128` is `a XOR 0x80` read as u8 and `Σb` is a second `vpdpbusd` with ones.
///
/// # Safety
/// AVX-512 F/BW/VNNI; `a.len() == b.len() <= 65536`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn dot_i8_vnni(a: &[i8], b: &[i8]) -> i32 {
    let n = a.len();
    let zero = _mm512_setzero_si512();
    let flip = _mm512_set1_epi8(i8::MIN);
    let ones = _mm512_set1_epi8(1);
    let mut dp = zero;
    let mut sum_b = zero;
    let mut i = 0;
    while i < n {
        // Zero-filled tail lanes of `b` cancel both terms.
        let va = load_bytes(a.as_ptr().cast(), i, n);
        let vb = load_bytes(b.as_ptr().cast(), i, n);
        dp = _mm512_dpbusd_epi32(dp, _mm512_xor_si512(va, flip), vb);
        sum_b = _mm512_dpbusd_epi32(sum_b, ones, vb);
        i += 64;
    }
    let dp = _mm512_reduce_add_epi32(dp);
    let sum_b = _mm512_reduce_add_epi32(sum_b);
    dp.wrapping_sub(sum_b.wrapping_mul(128))
}

/// Loads 8 words at `p + i`, or the `n - i` remaining ones zero-filled.
///
/// # Safety
/// The CPU must support the target features enabled on this function.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn load_words(p: *const u64, i: usize, n: usize) -> __m512i {
    if i + 8 <= n {
        _mm512_loadu_si512(p.add(i).cast())
    } else {
        let m: __mmask8 = (1u8 << (n - i)) - 1;
        _mm512_maskz_loadu_epi64(m, p.add(i).cast())
    }
}

/// popcount(a XOR b) with `vpopcntq`.
///
/// # Safety
/// AVX-512 F/VPOPCNTDQ; `a.len() == b.len()`.
#[inline]
#[target_feature(enable = "avx512f,avx512vpopcntdq")]
pub unsafe fn hamming(a: &[u64], b: &[u64]) -> u32 {
    let n = a.len();
    let mut acc = _mm512_setzero_si512();
    let mut i = 0;
    while i < n {
        let x = _mm512_xor_si512(load_words(a.as_ptr(), i, n), load_words(b.as_ptr(), i, n));
        acc = _mm512_add_epi64(acc, _mm512_popcnt_epi64(x));
        i += 8;
    }
    _mm512_reduce_add_epi64(acc) as u32
}

/// popcount(a AND b) with `vpopcntq`.
///
/// # Safety
/// AVX-512 F/VPOPCNTDQ; `a.len() == b.len()`.
#[inline]
#[target_feature(enable = "avx512f,avx512vpopcntdq")]
pub unsafe fn and_popcount(a: &[u64], b: &[u64]) -> u32 {
    let n = a.len();
    let mut acc = _mm512_setzero_si512();
    let mut i = 0;
    while i < n {
        let x = _mm512_and_si512(load_words(a.as_ptr(), i, n), load_words(b.as_ptr(), i, n));
        acc = _mm512_add_epi64(acc, _mm512_popcnt_epi64(x));
        i += 8;
    }
    _mm512_reduce_add_epi64(acc) as u32
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

/// Block form of [`dot_u8_vnni`], prefetching ahead.
///
/// # Safety
/// As [`dot_u8_vnni`]; `query` non-empty and `block.len() == out.len() * query.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
pub unsafe fn dot_u8_vnni_block(query: &[u8], block: &[u8], out: &mut [u32]) {
    for (row, o) in block.chunks_exact(query.len()).zip(out) {
        prefetch_ahead(row.as_ptr().cast(), row.len());
        *o = dot_u8_vnni(query, row);
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

/// Block form of [`hamming`].
///
/// # Safety
/// As [`hamming`]; `query` non-empty and `block.len() == out.len() * query.len()`.
#[target_feature(enable = "avx512f,avx512vpopcntdq")]
pub unsafe fn hamming_block(query: &[u64], block: &[u64], out: &mut [u32]) {
    for (row, o) in block.chunks_exact(query.len()).zip(out) {
        *o = hamming(query, row);
    }
}
