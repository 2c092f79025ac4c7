//! The kernel table: one function pointer per kernel, each with the name of the
//! function it runs, behind methods that check lengths before the `unsafe` call.
//!
//! A [`Kernels`] value exists only for a backend whose CPU features were
//! detected (see [`crate::dispatch`]), so calling through it is sound.

use crate::dispatch::Backend;

pub(crate) type F32Pair = unsafe fn(&[f32], &[f32]) -> f32;
pub(crate) type F32Block = unsafe fn(&[f32], &[f32], &mut [f32]);
pub(crate) type F32Ids = unsafe fn(&[f32], &[f32], &[u32], &mut [f32]);
pub(crate) type U8Pair = unsafe fn(&[u8], &[u8]) -> u32;
pub(crate) type I8Pair = unsafe fn(&[i8], &[i8]) -> i32;
pub(crate) type U8I8Pair = unsafe fn(&[u8], &[i8]) -> i32;
pub(crate) type BitPair = unsafe fn(&[u64], &[u64]) -> u32;
pub(crate) type U8Block = unsafe fn(&[u8], &[u8], &mut [u32]);
pub(crate) type BitBlock = unsafe fn(&[u64], &[u64], &mut [u32]);
pub(crate) type PqAdc = unsafe fn(&[f32], &[u8], &mut [f32]);
pub(crate) type U32Select = unsafe fn(&[u32], u32, &mut [u32]) -> usize;

/// One kernel of a table: the function and its path (e.g. `avx512_int8::dot_u8_vnni`),
/// so a process can report which implementation each kernel really runs.
#[derive(Clone, Copy)]
pub(crate) struct Slot<F> {
    pub(crate) run: F,
    pub(crate) path: &'static str,
}

impl<F> std::fmt::Debug for Slot<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.path)
    }
}

/// `slot!(module::function)`: a [`Slot`] whose path is the function's path as written.
macro_rules! slot {
    ($f:path) => {
        $crate::table::Slot {
            run: $f,
            path: stringify!($f),
        }
    };
}
pub(crate) use slot;

/// An i8 query whose values all lie in `-64..=64`, checked once at construction so
/// [`Kernels::dot_u8_i7`] can use saturating byte multiplies (`vpmaddubsw`) per row.
#[derive(Debug, Clone, Copy)]
pub struct QueryI7<'a>(&'a [i8]);

impl<'a> QueryI7<'a> {
    /// Largest magnitude a value may have.
    pub const MAX: i8 = 64;

    /// The empty query (for callers that hold one only in some modes).
    pub const EMPTY: QueryI7<'static> = QueryI7(&[]);

    /// `Some` if every value is within `-64..=64`.
    pub fn new(values: &'a [i8]) -> Option<Self> {
        values
            .iter()
            .all(|v| (-Self::MAX..=Self::MAX).contains(v))
            .then_some(Self(values))
    }

    /// The values.
    pub fn values(&self) -> &'a [i8] {
        self.0
    }
}

/// A table of kernels for one backend.
///
/// The function pointers are `unsafe fn` whose contract is: the CPU supports
/// the backend (guaranteed because a table is only handed out after detection)
/// and the lengths were checked (done by each method before the call).
#[derive(Debug)]
pub struct Kernels {
    pub(crate) backend: Backend,
    pub(crate) name: &'static str,
    pub(crate) dot: Slot<F32Pair>,
    pub(crate) l2sq: Slot<F32Pair>,
    pub(crate) dot_block: Slot<F32Block>,
    pub(crate) l2sq_block: Slot<F32Block>,
    pub(crate) dot_ids: Slot<F32Ids>,
    pub(crate) l2sq_ids: Slot<F32Ids>,
    pub(crate) dot_u8: Slot<U8Pair>,
    pub(crate) l2sq_u8: Slot<U8Pair>,
    pub(crate) dot_i8: Slot<I8Pair>,
    pub(crate) dot_u8_i7: Slot<U8I8Pair>,
    pub(crate) hamming: Slot<BitPair>,
    pub(crate) and_popcount: Slot<BitPair>,
    pub(crate) dot_u8_block: Slot<U8Block>,
    pub(crate) l2sq_u8_block: Slot<U8Block>,
    pub(crate) hamming_block: Slot<BitBlock>,
    pub(crate) and_popcount_weighted: Slot<BitPair>,
    pub(crate) pq_adc: Slot<PqAdc>,
    pub(crate) dot_u8_u4: Slot<U8Pair>,
    pub(crate) positions_at_most: Slot<U32Select>,
}

/// Longest code vector the integer kernels accept (keeps every partial sum exact).
pub const MAX_INT_LEN: usize = 1 << 16;

// The checks run on every kernel call (one per scored candidate in a walk):
// inlined, they cost a compare and a branch; the panics stay out of line
// (out of line, `check_int` alone was 1.2 % of eddy-query's CPU under a
// Flight batch load, by `perf`).

#[inline]
#[track_caller]
fn check_pair(kernel: &str, a: usize, b: usize) {
    if a != b {
        fail(format_args!(
            "eddy_kernels::{kernel}: length mismatch ({a} vs {b})"
        ));
    }
}

#[inline]
#[track_caller]
fn check_int(kernel: &str, a: usize, b: usize) {
    check_pair(kernel, a, b);
    if a > MAX_INT_LEN {
        fail(format_args!(
            "eddy_kernels::{kernel}: length {a} exceeds {MAX_INT_LEN}"
        ));
    }
}

#[inline]
#[track_caller]
fn check_block(kernel: &str, dim: usize, block: usize, out: usize) {
    if dim == 0 && block != 0 {
        fail(format_args!(
            "eddy_kernels::{kernel}: empty query with a non-empty block"
        ));
    }
    if block != dim * out {
        fail(format_args!(
            "eddy_kernels::{kernel}: block length {block} != rows {out} x dim {dim}"
        ));
    }
}

#[inline]
#[track_caller]
fn check_ids(kernel: &str, dim: usize, data: usize, ids: usize, out: usize) {
    if ids != out {
        fail(format_args!(
            "eddy_kernels::{kernel}: {ids} ids but {out} outputs"
        ));
    }
    if dim == 0 || !data.is_multiple_of(dim) {
        fail(format_args!(
            "eddy_kernels::{kernel}: data length {data} is not a multiple of dim {dim}"
        ));
    }
}

/// A kernel's argument check failed: the caller's bug, reported where it
/// called.
#[cold]
#[inline(never)]
#[track_caller]
fn fail(message: std::fmt::Arguments<'_>) -> ! {
    panic!("{message}")
}

impl Kernels {
    /// The backend of this table.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Descriptive name including optional extensions, e.g. `avx512+vnni+vpopcntdq`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// `(kernel, implementing function)` for every kernel of the table, e.g.
    /// `("dot_u8", "avx512_int8::dot_u8_vnni")` or `("pq_adc", "avx2_codes::pq_adc")`:
    /// what a process really runs, since one backend's table may mix instruction sets.
    pub fn implementations(&self) -> [(&'static str, &'static str); 19] {
        [
            ("dot", self.dot.path),
            ("l2sq", self.l2sq.path),
            ("dot_block", self.dot_block.path),
            ("l2sq_block", self.l2sq_block.path),
            ("dot_ids", self.dot_ids.path),
            ("l2sq_ids", self.l2sq_ids.path),
            ("dot_u8", self.dot_u8.path),
            ("l2sq_u8", self.l2sq_u8.path),
            ("dot_i8", self.dot_i8.path),
            ("dot_u8_i7", self.dot_u8_i7.path),
            ("hamming", self.hamming.path),
            ("and_popcount", self.and_popcount.path),
            ("dot_u8_block", self.dot_u8_block.path),
            ("l2sq_u8_block", self.l2sq_u8_block.path),
            ("hamming_block", self.hamming_block.path),
            ("and_popcount_weighted", self.and_popcount_weighted.path),
            ("pq_adc", self.pq_adc.path),
            ("dot_u8_u4", self.dot_u8_u4.path),
            ("positions_at_most", self.positions_at_most.path),
        ]
    }

    /// Inner product. Panics on length mismatch.
    #[inline]
    #[track_caller]
    pub fn dot(&self, a: &[f32], b: &[f32]) -> f32 {
        check_pair("dot", a.len(), b.len());
        // SAFETY: the table exists only for a detected backend; lengths checked above.
        unsafe { (self.dot.run)(a, b) }
    }

    /// Squared Euclidean distance. Panics on length mismatch.
    #[inline]
    #[track_caller]
    pub fn l2sq(&self, a: &[f32], b: &[f32]) -> f32 {
        check_pair("l2sq", a.len(), b.len());
        // SAFETY: the table exists only for a detected backend; lengths checked above.
        unsafe { (self.l2sq.run)(a, b) }
    }

    /// `out[r] = dot(query, block[r*dim..(r+1)*dim])`. Panics unless `block.len() == out.len() * query.len()`.
    #[inline]
    #[track_caller]
    pub fn dot_block(&self, query: &[f32], block: &[f32], out: &mut [f32]) {
        check_block("dot_block", query.len(), block.len(), out.len());
        if query.is_empty() {
            out.fill(0.0);
            return;
        }
        // SAFETY: detected backend; block holds exactly out.len() rows of query.len().
        unsafe { (self.dot_block.run)(query, block, out) }
    }

    /// `out[r] = l2sq(query, row r of block)`. Panics unless `block.len() == out.len() * query.len()`.
    #[inline]
    #[track_caller]
    pub fn l2sq_block(&self, query: &[f32], block: &[f32], out: &mut [f32]) {
        check_block("l2sq_block", query.len(), block.len(), out.len());
        if query.is_empty() {
            out.fill(0.0);
            return;
        }
        // SAFETY: detected backend; block holds exactly out.len() rows of query.len().
        unsafe { (self.l2sq_block.run)(query, block, out) }
    }

    /// `out[i] = dot(query, row ids[i] of data)`, prefetching rows ahead.
    ///
    /// Panics on a length mismatch or an id past the last row.
    #[inline]
    #[track_caller]
    pub fn dot_ids(&self, query: &[f32], data: &[f32], ids: &[u32], out: &mut [f32]) {
        check_ids("dot_ids", query.len(), data.len(), ids.len(), out.len());
        // SAFETY: detected backend; lengths checked; row slicing is bounds-checked inside.
        unsafe { (self.dot_ids.run)(query, data, ids, out) }
    }

    /// `out[i] = l2sq(query, row ids[i] of data)`, prefetching rows ahead.
    ///
    /// Panics on a length mismatch or an id past the last row.
    #[inline]
    #[track_caller]
    pub fn l2sq_ids(&self, query: &[f32], data: &[f32], ids: &[u32], out: &mut [f32]) {
        check_ids("l2sq_ids", query.len(), data.len(), ids.len(), out.len());
        // SAFETY: detected backend; lengths checked; row slicing is bounds-checked inside.
        unsafe { (self.l2sq_ids.run)(query, data, ids, out) }
    }

    /// Exact inner product of u8 codes. Panics on mismatch or length > [`MAX_INT_LEN`].
    #[inline]
    #[track_caller]
    pub fn dot_u8(&self, a: &[u8], b: &[u8]) -> u32 {
        check_int("dot_u8", a.len(), b.len());
        // SAFETY: detected backend; lengths checked above.
        unsafe { (self.dot_u8.run)(a, b) }
    }

    /// Exact squared L2 of u8 codes. Panics on mismatch or length > [`MAX_INT_LEN`].
    #[inline]
    #[track_caller]
    pub fn l2sq_u8(&self, a: &[u8], b: &[u8]) -> u32 {
        check_int("l2sq_u8", a.len(), b.len());
        // SAFETY: detected backend; lengths checked above.
        unsafe { (self.l2sq_u8.run)(a, b) }
    }

    /// Exact inner product of i8 codes. Panics on mismatch or length > [`MAX_INT_LEN`].
    #[inline]
    #[track_caller]
    pub fn dot_i8(&self, a: &[i8], b: &[i8]) -> i32 {
        check_int("dot_i8", a.len(), b.len());
        // SAFETY: detected backend; lengths checked above.
        unsafe { (self.dot_i8.run)(a, b) }
    }

    /// Exact inner product of u8 codes with a 7-bit query (asymmetric SQ8 scoring).
    /// Panics on mismatch or length > [`MAX_INT_LEN`].
    #[inline]
    #[track_caller]
    pub fn dot_u8_i7(&self, codes: &[u8], query: QueryI7<'_>) -> i32 {
        check_int("dot_u8_i7", codes.len(), query.0.len());
        // SAFETY: detected backend; lengths checked above; `QueryI7` guarantees the
        // value range the saturating kernels need.
        unsafe { (self.dot_u8_i7.run)(codes, query.0) }
    }

    /// popcount(a XOR b) over bit vectors. Panics on length mismatch.
    #[inline]
    #[track_caller]
    pub fn hamming(&self, a: &[u64], b: &[u64]) -> u32 {
        check_pair("hamming", a.len(), b.len());
        // SAFETY: detected backend; lengths checked above.
        unsafe { (self.hamming.run)(a, b) }
    }

    /// popcount(a AND b) over bit vectors. Panics on length mismatch.
    #[inline]
    #[track_caller]
    pub fn and_popcount(&self, a: &[u64], b: &[u64]) -> u32 {
        check_pair("and_popcount", a.len(), b.len());
        // SAFETY: detected backend; lengths checked above.
        unsafe { (self.and_popcount.run)(a, b) }
    }

    /// `out[r] = dot_u8(query, row r of block)`, prefetching ahead.
    ///
    /// Panics unless `block.len() == out.len() * query.len()` and `query.len() <= MAX_INT_LEN`.
    #[inline]
    #[track_caller]
    pub fn dot_u8_block(&self, query: &[u8], block: &[u8], out: &mut [u32]) {
        check_block("dot_u8_block", query.len(), block.len(), out.len());
        check_int("dot_u8_block", query.len(), query.len());
        if query.is_empty() {
            out.fill(0);
            return;
        }
        // SAFETY: detected backend; block holds exactly out.len() rows of query.len().
        unsafe { (self.dot_u8_block.run)(query, block, out) }
    }

    /// `out[r] = l2sq_u8(query, row r of block)`, prefetching ahead.
    ///
    /// Panics unless `block.len() == out.len() * query.len()` and `query.len() <= MAX_INT_LEN`.
    #[inline]
    #[track_caller]
    pub fn l2sq_u8_block(&self, query: &[u8], block: &[u8], out: &mut [u32]) {
        check_block("l2sq_u8_block", query.len(), block.len(), out.len());
        check_int("l2sq_u8_block", query.len(), query.len());
        if query.is_empty() {
            out.fill(0);
            return;
        }
        // SAFETY: detected backend; block holds exactly out.len() rows of query.len().
        unsafe { (self.l2sq_u8_block.run)(query, block, out) }
    }

    /// Positions of the values of `values` at most `limit`, in order, into
    /// the front of `out`; returns how many. `out` past them is overwritten
    /// with unspecified values (the SIMD forms store whole registers).
    ///
    /// Panics unless `out.len() >= values.len()` and `values.len() <= u32::MAX`.
    #[inline]
    #[track_caller]
    pub fn positions_at_most(&self, values: &[u32], limit: u32, out: &mut [u32]) -> usize {
        if out.len() < values.len() || u32::try_from(values.len()).is_err() {
            fail(format_args!(
                "eddy_kernels::positions_at_most: {} values, room for {} positions",
                values.len(),
                out.len()
            ));
        }
        // SAFETY: detected backend; out holds a position per value, and every
        // position fits a u32.
        unsafe { (self.positions_at_most.run)(values, limit, out) }
    }

    /// `out[r] = hamming(query, row r of block)` for rows of `query.len()` words.
    ///
    /// Panics unless `block.len() == out.len() * query.len()`.
    #[inline]
    #[track_caller]
    pub fn hamming_block(&self, query: &[u64], block: &[u64], out: &mut [u32]) {
        check_block("hamming_block", query.len(), block.len(), out.len());
        if query.is_empty() {
            out.fill(0);
            return;
        }
        // SAFETY: detected backend; block holds exactly out.len() rows of query.len().
        unsafe { (self.hamming_block.run)(query, block, out) }
    }

    /// `Σ_b 2^b · popcount(planes[b] AND code)` over `planes.len() / code.len()` planes.
    ///
    /// Panics unless `planes.len()` is a multiple of `code.len()` with at most 32 planes.
    #[inline]
    #[track_caller]
    pub fn and_popcount_weighted(&self, planes: &[u64], code: &[u64]) -> u32 {
        let n = code.len();
        assert!(
            (n == 0 && planes.is_empty())
                || (n > 0 && planes.len().is_multiple_of(n) && planes.len() / n <= 32),
            "eddy_kernels::and_popcount_weighted: {} plane words for a {n}-word code",
            planes.len()
        );
        // SAFETY: detected backend; lengths checked above.
        unsafe { (self.and_popcount_weighted.run)(planes, code) }
    }

    /// PQ asymmetric distance: `out[r] = Σ_j lut[j*256 + codes[r*m + j]]`, `m = lut.len() / 256`.
    ///
    /// Panics unless `lut.len()` is a non-zero multiple of 256 and `codes.len() == out.len() * m`.
    #[inline]
    #[track_caller]
    pub fn pq_adc(&self, lut: &[f32], codes: &[u8], out: &mut [f32]) {
        let m = lut.len() / 256;
        assert!(
            m > 0 && lut.len().is_multiple_of(256),
            "eddy_kernels::pq_adc: lut length {} is not a non-zero multiple of 256",
            lut.len()
        );
        assert!(
            codes.len() == out.len() * m,
            "eddy_kernels::pq_adc: codes length {} != rows {} x m {m}",
            codes.len(),
            out.len()
        );
        // SAFETY: detected backend; lengths checked above.
        unsafe { (self.pq_adc.run)(lut, codes, out) }
    }

    /// Dot product of a u8 query with packed 4-bit codes, see [`crate::scalar::dot_u8_u4`].
    ///
    /// Panics unless `query.len() == 2 * codes.len()`, `codes.len() % 32 == 0`
    /// and `query.len() <= MAX_INT_LEN`.
    #[inline]
    #[track_caller]
    pub fn dot_u8_u4(&self, query: &[u8], codes: &[u8]) -> u32 {
        check_int("dot_u8_u4", query.len(), codes.len() * 2);
        assert!(
            codes.len().is_multiple_of(32),
            "eddy_kernels::dot_u8_u4: codes length {} is not a multiple of 32",
            codes.len()
        );
        // SAFETY: detected backend; lengths checked above.
        unsafe { (self.dot_u8_u4.run)(query, codes) }
    }
}
