//! AVX-512 f32 kernels (x86_64, F + BW): dot, squared L2 and their block and
//! id-list forms, plus the prefetch helpers the byte kernels share.
//!
//! Loop shape: four independent 16-lane accumulators over 64 floats per step
//! (unmasked loads only), then up to three whole vectors left, each into its
//! own accumulator, then the last partial vector read once with a
//! zero-filling masked load; one horizontal reduction at the end.
//!
//! The loop is load-bound (two 64-byte loads per FMA), and an unaligned
//! 512-bit load splits two cache lines, so alignment decides its speed
//! (measured on Sapphire Rapids: 1.4–1.6x AVX2 with both operands aligned,
//! 0.8–0.9x with both unaligned). Rows of [`PEEL_MIN_LEN`]+ floats therefore
//! start with one masked load up to the row's next 64-byte boundary, and the
//! block and id-list forms copy an unaligned query to an aligned buffer.
//!
//! Every function is `unsafe`: it needs the named CPU features and equal input
//! lengths, both guaranteed by [`crate::Kernels`].

use core::arch::x86_64::*;
use std::mem::MaybeUninit;

/// Rows fetched ahead in the id-list kernels.
const PREFETCH_AHEAD: usize = 4;

/// Bytes ahead of the current row that the block scans prefetch.
const SCAN_PREFETCH_DISTANCE: usize = 4096;

/// Rows at least this long first align the loads of `b` (see [`fold_f32`]).
pub const PEEL_MIN_LEN: usize = 256;

/// Sums `step(x, y, acc)` over the 16-float vectors of `a` and `b` (length `n`)
/// in the loop shape of this module, then adds the accumulators and lanes.
///
/// `#[inline(always)]` without `target_feature`: it is only ever inlined into
/// the AVX-512 kernels below, which carry the features (the memchr pattern).
///
/// # Safety
/// AVX-512 F; `a` and `b` point to `n` readable floats each.
#[inline(always)]
unsafe fn fold_f32(
    a: *const f32,
    b: *const f32,
    n: usize,
    step: impl Fn(__m512, __m512, __m512) -> __m512,
) -> f32 {
    let mut acc0 = _mm512_setzero_ps();
    let mut acc1 = _mm512_setzero_ps();
    let mut acc2 = _mm512_setzero_ps();
    let mut acc3 = _mm512_setzero_ps();
    let mut i = 0;
    if n >= PEEL_MIN_LEN {
        // Floats of `b` before its next 64-byte boundary: read them with one
        // masked load so every later load of `b` stays inside one cache line.
        let head = (16 - ((b as usize >> 2) & 15)) & 15;
        if head > 0 {
            let m: __mmask16 = (1u16 << head) - 1;
            acc3 = step(
                _mm512_maskz_loadu_ps(m, a),
                _mm512_maskz_loadu_ps(m, b),
                acc3,
            );
            i = head;
        }
    }
    while i + 64 <= n {
        acc0 = step(_mm512_loadu_ps(a.add(i)), _mm512_loadu_ps(b.add(i)), acc0);
        acc1 = step(
            _mm512_loadu_ps(a.add(i + 16)),
            _mm512_loadu_ps(b.add(i + 16)),
            acc1,
        );
        acc2 = step(
            _mm512_loadu_ps(a.add(i + 32)),
            _mm512_loadu_ps(b.add(i + 32)),
            acc2,
        );
        acc3 = step(
            _mm512_loadu_ps(a.add(i + 48)),
            _mm512_loadu_ps(b.add(i + 48)),
            acc3,
        );
        i += 64;
    }
    if i + 16 <= n {
        acc0 = step(_mm512_loadu_ps(a.add(i)), _mm512_loadu_ps(b.add(i)), acc0);
        i += 16;
        if i + 16 <= n {
            acc1 = step(_mm512_loadu_ps(a.add(i)), _mm512_loadu_ps(b.add(i)), acc1);
            i += 16;
            if i + 16 <= n {
                acc2 = step(_mm512_loadu_ps(a.add(i)), _mm512_loadu_ps(b.add(i)), acc2);
                i += 16;
            }
        }
    }
    if i < n {
        // Masked-off lanes are zero and never read from memory.
        let m: __mmask16 = (1u16 << (n - i)) - 1;
        acc3 = step(
            _mm512_maskz_loadu_ps(m, a.add(i)),
            _mm512_maskz_loadu_ps(m, b.add(i)),
            acc3,
        );
    }
    _mm512_reduce_add_ps(_mm512_add_ps(
        _mm512_add_ps(acc0, acc1),
        _mm512_add_ps(acc2, acc3),
    ))
}

/// Inner product.
///
/// # Safety
/// AVX-512 F/BW, AVX2, FMA; `a.len() == b.len()`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
pub unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    fold_f32(a.as_ptr(), b.as_ptr(), a.len(), |x, y, acc| {
        _mm512_fmadd_ps(x, y, acc)
    })
}

/// Squared Euclidean distance.
///
/// # Safety
/// AVX-512 F/BW, AVX2, FMA; `a.len() == b.len()`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
pub unsafe fn l2sq(a: &[f32], b: &[f32]) -> f32 {
    fold_f32(a.as_ptr(), b.as_ptr(), a.len(), |x, y, acc| {
        let d = _mm512_sub_ps(x, y);
        _mm512_fmadd_ps(d, d, acc)
    })
}

/// Longest query the block and id-list kernels copy to a 64-byte aligned
/// buffer on the stack (16 KiB).
pub const ALIGNED_QUERY_MAX: usize = 4096;

/// Fewest rows for which the block and id-list kernels align the query.
pub const ALIGNED_QUERY_MIN_ROWS: usize = 4;

/// Stack space for a query copy that starts on a cache line.
#[repr(C, align(64))]
struct QueryBuf(MaybeUninit<[f32; ALIGNED_QUERY_MAX]>);

/// Runs `f` on `query`, copied first to a 64-byte aligned buffer when it is
/// not aligned, fits [`ALIGNED_QUERY_MAX`] and serves at least
/// [`ALIGNED_QUERY_MIN_ROWS`] rows: a 512-bit load of an unaligned query
/// splits two cache lines every time, which costs the f32 kernels (load-bound)
/// up to 1.3x per row, more than one copy of the query costs.
#[inline(always)]
fn with_aligned_query<R>(query: &[f32], rows: usize, f: impl FnOnce(&[f32]) -> R) -> R {
    let n = query.len();
    if n > ALIGNED_QUERY_MAX
        || rows < ALIGNED_QUERY_MIN_ROWS
        || (query.as_ptr() as usize).is_multiple_of(64)
    {
        return f(query);
    }
    let mut buf = QueryBuf(MaybeUninit::uninit());
    let dst = buf.0.as_mut_ptr().cast::<f32>();
    // SAFETY: `buf` holds ALIGNED_QUERY_MAX >= n floats and does not overlap
    // `query`; the first n floats are initialised by the copy before the slice
    // over them is formed, and `buf` outlives the slice (dropped after `f`).
    let aligned = unsafe {
        std::ptr::copy_nonoverlapping(query.as_ptr(), dst, n);
        std::slice::from_raw_parts(dst, n)
    };
    f(aligned)
}

/// Prefetch `len` bytes starting `SCAN_PREFETCH_DISTANCE` past `p`. Prefetches
/// never fault, so addresses past the end of the block are harmless; the
/// pointer is formed with `wrapping_add` and never dereferenced.
///
/// # Safety
/// The CPU must support the target features enabled on this function.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
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
/// As [`dot`]; `query` non-empty and `block.len() == out.len() * query.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
pub unsafe fn dot_block(query: &[f32], block: &[f32], out: &mut [f32]) {
    with_aligned_query(query, out.len(), |query| {
        let row_bytes = query.len() * 4;
        for (row, o) in block.chunks_exact(query.len()).zip(out) {
            prefetch_ahead(row.as_ptr().cast(), row_bytes);
            *o = dot(query, row);
        }
    });
}

/// Squared L2 of `query` to each row of `block`.
///
/// # Safety
/// As [`dot_block`].
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
pub unsafe fn l2sq_block(query: &[f32], block: &[f32], out: &mut [f32]) {
    with_aligned_query(query, out.len(), |query| {
        let row_bytes = query.len() * 4;
        for (row, o) in block.chunks_exact(query.len()).zip(out) {
            prefetch_ahead(row.as_ptr().cast(), row_bytes);
            *o = l2sq(query, row);
        }
    });
}

/// Prefetches row `id` of `data` (rows of `dim` floats) if it exists.
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
    with_aligned_query(query, ids.len(), |query| {
        for (k, (&id, o)) in ids.iter().zip(out).enumerate() {
            if let Some(&next) = ids.get(k + PREFETCH_AHEAD) {
                prefetch_row(data, next, dim);
            }
            let start = id as usize * dim;
            *o = dot(query, &data[start..start + dim]);
        }
    });
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
    with_aligned_query(query, ids.len(), |query| {
        for (k, (&id, o)) in ids.iter().zip(out).enumerate() {
            if let Some(&next) = ids.get(k + PREFETCH_AHEAD) {
                prefetch_row(data, next, dim);
            }
            let start = id as usize * dim;
            *o = l2sq(query, &data[start..start + dim]);
        }
    });
}
