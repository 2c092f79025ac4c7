//! SIMD distance kernels for eddy.
//!
//! Distance computation is most of the CPU time of every search and graph
//! build. Every kernel here has a public scalar reference in [`scalar`]; the
//! SIMD backends (`x86_64::{avx2, avx512}`, `aarch64::neon`) are tested
//! against it. The free functions below dispatch through a [`Kernels`] table
//! chosen once per process (the fastest the CPU supports that passes a
//! start-up self-check against [`scalar`], or the one named in [`BACKEND_ENV`])
//! and logged with `tracing`. Use [`Kernels::get`] to hold the
//! table in a hot loop, and [`Kernels::for_backend`] to call one backend
//! explicitly (tests, benches). Within a backend's table each kernel runs the
//! variant measured fastest (see the dispatch rule in `dispatch.rs`);
//! [`Kernels::implementations`] says which.
//!
//! Length mismatches panic with a clear message; they are caller bugs and never
//! undefined behaviour.
#![expect(
    unsafe_code,
    reason = "SIMD kernels: target_feature functions and raw loads"
)]

mod dispatch;
pub mod scalar;
mod selfcheck;
mod table;

#[cfg(target_arch = "aarch64")]
pub mod aarch64;
#[cfg(target_arch = "x86_64")]
pub mod x86_64;

pub use dispatch::{Backend, BACKEND_ENV};
pub use table::{Kernels, QueryI7, MAX_INT_LEN};

/// The backend the process-wide table uses (for a log line or a metric label).
pub fn backend() -> Backend {
    Kernels::get().backend()
}

/// Descriptive name of the process-wide backend, e.g. `avx512+vnni+vpopcntdq`.
pub fn backend_name() -> &'static str {
    Kernels::get().name()
}

/// Inner product of two equally long f32 vectors.
///
/// # Panics
/// If the lengths differ (a caller bug, never undefined behaviour).
#[inline]
#[track_caller]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    Kernels::get().dot(a, b)
}

/// Squared Euclidean distance of two equally long f32 vectors.
///
/// # Panics
/// If the lengths differ.
#[inline]
#[track_caller]
pub fn l2sq(a: &[f32], b: &[f32]) -> f32 {
    Kernels::get().l2sq(a, b)
}

/// Cosine similarity; 0 when either vector is zero. For unit vectors prefer [`dot`].
///
/// # Panics
/// If the lengths differ.
#[inline]
#[track_caller]
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let k = Kernels::get();
    let ab = k.dot(a, b);
    let norms = (k.dot(a, a) * k.dot(b, b)).sqrt();
    if norms > 0.0 {
        ab / norms
    } else {
        0.0
    }
}

/// `out[r] = dot(query, block[r*dim..(r+1)*dim])` for a contiguous row-major block.
///
/// # Panics
/// Unless `block.len() == out.len() * query.len()`.
#[inline]
#[track_caller]
pub fn dot_block(query: &[f32], block: &[f32], out: &mut [f32]) {
    Kernels::get().dot_block(query, block, out);
}

/// `out[r] = l2sq(query, row r of block)` for a contiguous row-major block.
///
/// # Panics
/// Unless `block.len() == out.len() * query.len()`.
#[inline]
#[track_caller]
pub fn l2sq_block(query: &[f32], block: &[f32], out: &mut [f32]) {
    Kernels::get().l2sq_block(query, block, out);
}

/// `out[i] = dot(query, row ids[i] of data)`, prefetching upcoming rows (graph traversal).
///
/// # Panics
/// On a length mismatch or an id past the last row.
#[inline]
#[track_caller]
pub fn dot_ids(query: &[f32], data: &[f32], ids: &[u32], out: &mut [f32]) {
    Kernels::get().dot_ids(query, data, ids, out);
}

/// `out[i] = l2sq(query, row ids[i] of data)`, prefetching upcoming rows.
///
/// # Panics
/// On a length mismatch or an id past the last row.
#[inline]
#[track_caller]
pub fn l2sq_ids(query: &[f32], data: &[f32], ids: &[u32], out: &mut [f32]) {
    Kernels::get().l2sq_ids(query, data, ids, out);
}

/// Scale `v` to unit length in place and return its original norm.
///
/// Zero (or non-finite norm) vectors are left unchanged.
#[inline]
pub fn normalize(v: &mut [f32]) -> f32 {
    let norm = dot(v, v).sqrt();
    scalar::scale_to_unit(v, norm);
    norm
}

/// Exact inner product of u8 codes (SQ8).
///
/// # Panics
/// On length mismatch or a length above [`MAX_INT_LEN`].
#[inline]
#[track_caller]
pub fn dot_u8(a: &[u8], b: &[u8]) -> u32 {
    Kernels::get().dot_u8(a, b)
}

/// Exact squared L2 of u8 codes.
///
/// # Panics
/// On length mismatch or a length above [`MAX_INT_LEN`].
#[inline]
#[track_caller]
pub fn l2sq_u8(a: &[u8], b: &[u8]) -> u32 {
    Kernels::get().l2sq_u8(a, b)
}

/// Exact inner product of i8 codes.
///
/// # Panics
/// On length mismatch or a length above [`MAX_INT_LEN`].
#[inline]
#[track_caller]
pub fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    Kernels::get().dot_i8(a, b)
}

/// Exact inner product of u8 codes with a 7-bit query (asymmetric SQ8 graph walks).
///
/// # Panics
/// On length mismatch or a length above [`MAX_INT_LEN`].
#[inline]
#[track_caller]
pub fn dot_u8_i7(codes: &[u8], query: QueryI7<'_>) -> i32 {
    Kernels::get().dot_u8_i7(codes, query)
}

/// `out[r] = dot_u8(query, row r of block)` for a contiguous block of code rows (SQ8 scans).
///
/// # Panics
/// Unless `block.len() == out.len() * query.len()` and `query.len() <= MAX_INT_LEN`.
#[inline]
#[track_caller]
pub fn dot_u8_block(query: &[u8], block: &[u8], out: &mut [u32]) {
    Kernels::get().dot_u8_block(query, block, out);
}

/// `out[r] = l2sq_u8(query, row r of block)`.
///
/// # Panics
/// Unless `block.len() == out.len() * query.len()` and `query.len() <= MAX_INT_LEN`.
#[inline]
#[track_caller]
pub fn l2sq_u8_block(query: &[u8], block: &[u8], out: &mut [u32]) {
    Kernels::get().l2sq_u8_block(query, block, out);
}

/// `out[r] = hamming(query, row r of block)` for rows of `query.len()` words (binary scans).
///
/// # Panics
/// Unless `block.len() == out.len() * query.len()`.
#[inline]
#[track_caller]
pub fn hamming_block(query: &[u64], block: &[u64], out: &mut [u32]) {
    Kernels::get().hamming_block(query, block, out);
}

/// Positions of the values of `values` at most `limit`, in order, into the
/// front of `out`; returns how many (a shortlist's rows within a distance,
/// without a branch per row). `out` past them is overwritten.
///
/// # Panics
/// Unless `out.len() >= values.len()` and `values.len() <= u32::MAX`.
#[inline]
#[track_caller]
pub fn positions_at_most(values: &[u32], limit: u32, out: &mut [u32]) -> usize {
    Kernels::get().positions_at_most(values, limit, out)
}

/// Hamming distance of bit vectors: popcount(a XOR b).
///
/// # Panics
/// On length mismatch.
#[inline]
#[track_caller]
pub fn hamming(a: &[u64], b: &[u64]) -> u32 {
    Kernels::get().hamming(a, b)
}

/// popcount(a AND b) of bit vectors (asymmetric binary scoring, one bit plane).
///
/// # Panics
/// On length mismatch.
#[inline]
#[track_caller]
pub fn and_popcount(a: &[u64], b: &[u64]) -> u32 {
    Kernels::get().and_popcount(a, b)
}

/// Weighted popcount of query bit planes against a code (asymmetric binary scoring).
///
/// # Panics
/// Unless `planes.len()` is a multiple of `code.len()` with at most 32 planes.
#[inline]
#[track_caller]
pub fn and_popcount_weighted(planes: &[u64], code: &[u64]) -> u32 {
    Kernels::get().and_popcount_weighted(planes, code)
}

/// PQ asymmetric distance over a batch of codes, see [`Kernels::pq_adc`].
#[inline]
#[track_caller]
pub fn pq_adc(lut: &[f32], codes: &[u8], out: &mut [f32]) {
    Kernels::get().pq_adc(lut, codes, out);
}

/// u8 query · packed 4-bit codes, see [`scalar::dot_u8_u4`] for the layout.
#[inline]
#[track_caller]
pub fn dot_u8_u4(query: &[u8], codes: &[u8]) -> u32 {
    Kernels::get().dot_u8_u4(query, codes)
}

/// Hint the CPU to pull the cache lines of `data` into L1 (a no-op off x86_64).
///
/// Prefetches never fault and never change program state; use it to overlap the
/// memory latency of a row about to be scored (graph traversal).
#[inline(always)]
pub fn prefetch<T>(data: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = data.as_ptr().cast::<i8>();
        let bytes = std::mem::size_of_val(data);
        let mut off = 0;
        while off < bytes {
            // SAFETY: SSE is part of the x86_64 baseline; a prefetch never faults and the
            // address stays inside `data` (formed with `wrapping_add`, never dereferenced).
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off)) };
            off += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = data;
    }
}
