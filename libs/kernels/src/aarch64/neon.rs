//! NEON kernels (aarch64). Kept simple: 4-wide f32 with four accumulators,
//! widening multiplies for bytes, `cnt` for popcounts, scalar tails.
//!
//! Every function is `unsafe`: it needs NEON and equal input lengths, both
//! guaranteed by [`crate::Kernels`].

use core::arch::aarch64::*;

use crate::scalar;

/// Inner product.
///
/// # Safety
/// NEON; `a.len() == b.len()`.
#[inline]
#[target_feature(enable = "neon")]
pub unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc0 = vdupq_n_f32(0.0);
    let mut acc1 = vdupq_n_f32(0.0);
    let mut acc2 = vdupq_n_f32(0.0);
    let mut acc3 = vdupq_n_f32(0.0);
    let mut i = 0;
    while i + 16 <= n {
        acc0 = vfmaq_f32(acc0, vld1q_f32(pa.add(i)), vld1q_f32(pb.add(i)));
        acc1 = vfmaq_f32(acc1, vld1q_f32(pa.add(i + 4)), vld1q_f32(pb.add(i + 4)));
        acc2 = vfmaq_f32(acc2, vld1q_f32(pa.add(i + 8)), vld1q_f32(pb.add(i + 8)));
        acc3 = vfmaq_f32(acc3, vld1q_f32(pa.add(i + 12)), vld1q_f32(pb.add(i + 12)));
        i += 16;
    }
    while i + 4 <= n {
        acc0 = vfmaq_f32(acc0, vld1q_f32(pa.add(i)), vld1q_f32(pb.add(i)));
        i += 4;
    }
    let sum = vaddvq_f32(vaddq_f32(vaddq_f32(acc0, acc1), vaddq_f32(acc2, acc3)));
    sum + scalar::dot(&a[i..], &b[i..])
}

/// Squared Euclidean distance.
///
/// # Safety
/// NEON; `a.len() == b.len()`.
#[inline]
#[target_feature(enable = "neon")]
pub unsafe fn l2sq(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc0 = vdupq_n_f32(0.0);
    let mut acc1 = vdupq_n_f32(0.0);
    let mut i = 0;
    while i + 8 <= n {
        let d0 = vsubq_f32(vld1q_f32(pa.add(i)), vld1q_f32(pb.add(i)));
        let d1 = vsubq_f32(vld1q_f32(pa.add(i + 4)), vld1q_f32(pb.add(i + 4)));
        acc0 = vfmaq_f32(acc0, d0, d0);
        acc1 = vfmaq_f32(acc1, d1, d1);
        i += 8;
    }
    while i + 4 <= n {
        let d = vsubq_f32(vld1q_f32(pa.add(i)), vld1q_f32(pb.add(i)));
        acc0 = vfmaq_f32(acc0, d, d);
        i += 4;
    }
    vaddvq_f32(vaddq_f32(acc0, acc1)) + scalar::l2sq(&a[i..], &b[i..])
}

/// Inner product of `query` with each row of `block`.
///
/// # Safety
/// NEON; `query` non-empty and `block.len() == out.len() * query.len()`.
#[target_feature(enable = "neon")]
pub unsafe fn dot_block(query: &[f32], block: &[f32], out: &mut [f32]) {
    for (row, o) in block.chunks_exact(query.len()).zip(out) {
        *o = dot(query, row);
    }
}

/// Squared L2 of `query` to each row of `block`.
///
/// # Safety
/// As [`dot_block`].
#[target_feature(enable = "neon")]
pub unsafe fn l2sq_block(query: &[f32], block: &[f32], out: &mut [f32]) {
    for (row, o) in block.chunks_exact(query.len()).zip(out) {
        *o = l2sq(query, row);
    }
}

/// Inner product of `query` with rows `ids` of `data` (no explicit prefetch).
///
/// # Safety
/// NEON; `query` non-empty, `ids.len() == out.len()`; out-of-range ids panic.
#[target_feature(enable = "neon")]
pub unsafe fn dot_ids(query: &[f32], data: &[f32], ids: &[u32], out: &mut [f32]) {
    let dim = query.len();
    for (&id, o) in ids.iter().zip(out) {
        let start = id as usize * dim;
        *o = dot(query, &data[start..start + dim]);
    }
}

/// Squared L2 of `query` to rows `ids` of `data`.
///
/// # Safety
/// As [`dot_ids`].
#[target_feature(enable = "neon")]
pub unsafe fn l2sq_ids(query: &[f32], data: &[f32], ids: &[u32], out: &mut [f32]) {
    let dim = query.len();
    for (&id, o) in ids.iter().zip(out) {
        let start = id as usize * dim;
        *o = l2sq(query, &data[start..start + dim]);
    }
}

/// Exact u8 inner product (`umull` + pairwise accumulate).
///
/// # Safety
/// NEON; `a.len() == b.len() <= 65536`.
#[inline]
#[target_feature(enable = "neon")]
pub unsafe fn dot_u8(a: &[u8], b: &[u8]) -> u32 {
    let n = a.len();
    let mut acc = vdupq_n_u32(0);
    let mut i = 0;
    while i + 16 <= n {
        let va = vld1q_u8(a.as_ptr().add(i));
        let vb = vld1q_u8(b.as_ptr().add(i));
        acc = vpadalq_u16(acc, vmull_u8(vget_low_u8(va), vget_low_u8(vb)));
        acc = vpadalq_u16(acc, vmull_high_u8(va, vb));
        i += 16;
    }
    vaddvq_u32(acc).wrapping_add(scalar::dot_u8(&a[i..], &b[i..]))
}

/// Exact u8 squared L2 (`uabd`, then `umull`).
///
/// # Safety
/// NEON; `a.len() == b.len() <= 65536`.
#[inline]
#[target_feature(enable = "neon")]
pub unsafe fn l2sq_u8(a: &[u8], b: &[u8]) -> u32 {
    let n = a.len();
    let mut acc = vdupq_n_u32(0);
    let mut i = 0;
    while i + 16 <= n {
        let d = vabdq_u8(vld1q_u8(a.as_ptr().add(i)), vld1q_u8(b.as_ptr().add(i)));
        acc = vpadalq_u16(acc, vmull_u8(vget_low_u8(d), vget_low_u8(d)));
        acc = vpadalq_u16(acc, vmull_high_u8(d, d));
        i += 16;
    }
    vaddvq_u32(acc).wrapping_add(scalar::l2sq_u8(&a[i..], &b[i..]))
}

/// Exact i8 inner product (`smull` + pairwise accumulate).
///
/// # Safety
/// NEON; `a.len() == b.len() <= 65536`.
#[inline]
#[target_feature(enable = "neon")]
pub unsafe fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let n = a.len();
    let mut acc = vdupq_n_s32(0);
    let mut i = 0;
    while i + 16 <= n {
        let va = vld1q_s8(a.as_ptr().add(i));
        let vb = vld1q_s8(b.as_ptr().add(i));
        acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(va), vget_low_s8(vb)));
        acc = vpadalq_s16(acc, vmull_high_s8(va, vb));
        i += 16;
    }
    vaddvq_s32(acc).wrapping_add(scalar::dot_i8(&a[i..], &b[i..]))
}

/// Exact inner product of u8 codes with an i8 query (both widened to i16, `smlal`).
///
/// # Safety
/// NEON; `codes.len() == query.len() <= 65536`, query values in `-64..=64`.
#[inline]
#[target_feature(enable = "neon")]
pub unsafe fn dot_u8_i7(codes: &[u8], query: &[i8]) -> i32 {
    let n = codes.len();
    let mut acc0 = vdupq_n_s32(0);
    let mut acc1 = vdupq_n_s32(0);
    let mut i = 0;
    while i + 16 <= n {
        let c = vld1q_u8(codes.as_ptr().add(i));
        let q = vld1q_s8(query.as_ptr().add(i));
        // Codes fit i16 (≤ 255), so the widened bytes can be read as signed.
        let clo = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(c)));
        let chi = vreinterpretq_s16_u16(vmovl_high_u8(c));
        let qlo = vmovl_s8(vget_low_s8(q));
        let qhi = vmovl_high_s8(q);
        acc0 = vmlal_s16(acc0, vget_low_s16(clo), vget_low_s16(qlo));
        acc1 = vmlal_high_s16(acc1, clo, qlo);
        acc0 = vmlal_s16(acc0, vget_low_s16(chi), vget_low_s16(qhi));
        acc1 = vmlal_high_s16(acc1, chi, qhi);
        i += 16;
    }
    vaddvq_s32(vaddq_s32(acc0, acc1)).wrapping_add(scalar::dot_u8_i7(&codes[i..], &query[i..]))
}

/// popcount(a XOR b) with `cnt`.
///
/// # Safety
/// NEON; `a.len() == b.len()`.
#[inline]
#[target_feature(enable = "neon")]
pub unsafe fn hamming(a: &[u64], b: &[u64]) -> u32 {
    let n = a.len();
    let mut total = 0u32;
    let mut i = 0;
    while i + 2 <= n {
        let x = veorq_u64(vld1q_u64(a.as_ptr().add(i)), vld1q_u64(b.as_ptr().add(i)));
        total += u32::from(vaddlvq_u8(vcntq_u8(vreinterpretq_u8_u64(x))));
        i += 2;
    }
    total + scalar::hamming(&a[i..], &b[i..])
}

/// popcount(a AND b) with `cnt`.
///
/// # Safety
/// NEON; `a.len() == b.len()`.
#[inline]
#[target_feature(enable = "neon")]
pub unsafe fn and_popcount(a: &[u64], b: &[u64]) -> u32 {
    let n = a.len();
    let mut total = 0u32;
    let mut i = 0;
    while i + 2 <= n {
        let x = vandq_u64(vld1q_u64(a.as_ptr().add(i)), vld1q_u64(b.as_ptr().add(i)));
        total += u32::from(vaddlvq_u8(vcntq_u8(vreinterpretq_u8_u64(x))));
        i += 2;
    }
    total + scalar::and_popcount(&a[i..], &b[i..])
}

/// Exact u8 dot of `query` with each row of `block`.
///
/// # Safety
/// The features of this module; `query` non-empty, `block.len() == out.len() * query.len()`,
/// and for byte rows `query.len() <= 65536`.
#[target_feature(enable = "neon")]
pub unsafe fn dot_u8_block(query: &[u8], block: &[u8], out: &mut [u32]) {
    for (row, o) in block.chunks_exact(query.len()).zip(out) {
        *o = dot_u8(query, row);
    }
}

/// Exact u8 squared L2 of `query` to each row of `block`.
///
/// # Safety
/// The features of this module; `query` non-empty, `block.len() == out.len() * query.len()`,
/// and for byte rows `query.len() <= 65536`.
#[target_feature(enable = "neon")]
pub unsafe fn l2sq_u8_block(query: &[u8], block: &[u8], out: &mut [u32]) {
    for (row, o) in block.chunks_exact(query.len()).zip(out) {
        *o = l2sq_u8(query, row);
    }
}

/// Hamming distance of `query` to each row of `block`.
///
/// # Safety
/// The features of this module; `query` non-empty, `block.len() == out.len() * query.len()`,
/// and for byte rows `query.len() <= 65536`.
#[target_feature(enable = "neon")]
pub unsafe fn hamming_block(query: &[u64], block: &[u64], out: &mut [u32]) {
    for (row, o) in block.chunks_exact(query.len()).zip(out) {
        *o = hamming(query, row);
    }
}
