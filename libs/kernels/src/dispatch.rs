//! Run-time backend selection: one table of kernel pointers per backend, chosen once.
//!
//! A [`Kernels`] value exists only for a backend whose CPU features were
//! detected, so calling through it is sound; every method checks lengths first
//! and panics on a mismatch.

use std::sync::OnceLock;

use crate::scalar;

/// The instruction-set family a kernel table uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Portable Rust, the reference.
    Scalar,
    /// x86_64 AVX2 + FMA (+ POPCNT).
    Avx2,
    /// x86_64 AVX-512 F + BW, with VNNI and VPOPCNTDQ kernels where present.
    Avx512,
    /// aarch64 NEON (ASIMD).
    Neon,
}

impl Backend {
    /// Every backend, fastest first.
    pub const ALL: [Backend; 4] = [
        Backend::Avx512,
        Backend::Avx2,
        Backend::Neon,
        Backend::Scalar,
    ];

    /// Short lower-case name, used for the env var, logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Scalar => "scalar",
            Backend::Avx2 => "avx2",
            Backend::Avx512 => "avx512",
            Backend::Neon => "neon",
        }
    }

    /// Parse a name as accepted by [`BACKEND_ENV`].
    pub fn parse(name: &str) -> Option<Backend> {
        Backend::ALL
            .into_iter()
            .find(|b| b.as_str().eq_ignore_ascii_case(name.trim()))
    }

    /// Whether this CPU can run the backend.
    pub fn is_supported(self) -> bool {
        Kernels::for_backend(self).is_some()
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Environment variable that forces a backend (`scalar`, `avx2`, `avx512`, `neon`).
///
/// An unsupported or unknown value is logged at `warn` and the best backend is used.
pub const BACKEND_ENV: &str = "EDDY_KERNELS_BACKEND";

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
    pub(crate) dot: F32Pair,
    pub(crate) l2sq: F32Pair,
    pub(crate) dot_block: F32Block,
    pub(crate) l2sq_block: F32Block,
    pub(crate) dot_ids: F32Ids,
    pub(crate) l2sq_ids: F32Ids,
    pub(crate) dot_u8: U8Pair,
    pub(crate) l2sq_u8: U8Pair,
    pub(crate) dot_i8: I8Pair,
    pub(crate) dot_u8_i7: U8I8Pair,
    pub(crate) hamming: BitPair,
    pub(crate) and_popcount: BitPair,
    pub(crate) dot_u8_block: U8Block,
    pub(crate) l2sq_u8_block: U8Block,
    pub(crate) hamming_block: BitBlock,
    pub(crate) and_popcount_weighted: BitPair,
    pub(crate) pq_adc: PqAdc,
    pub(crate) dot_u8_u4: U8Pair,
}

static SCALAR: Kernels = Kernels {
    backend: Backend::Scalar,
    name: "scalar",
    dot: scalar::dot,
    l2sq: scalar::l2sq,
    dot_block: scalar::dot_block,
    l2sq_block: scalar::l2sq_block,
    dot_ids: scalar::dot_ids,
    l2sq_ids: scalar::l2sq_ids,
    dot_u8: scalar::dot_u8,
    l2sq_u8: scalar::l2sq_u8,
    dot_i8: scalar::dot_i8,
    dot_u8_i7: scalar::dot_u8_i7,
    hamming: scalar::hamming,
    and_popcount: scalar::and_popcount,
    dot_u8_block: scalar::dot_u8_block,
    l2sq_u8_block: scalar::l2sq_u8_block,
    hamming_block: scalar::hamming_block,
    and_popcount_weighted: scalar::and_popcount_weighted,
    pq_adc: scalar::pq_adc,
    dot_u8_u4: scalar::dot_u8_u4,
};

/// Longest code vector the integer kernels accept (keeps every partial sum exact).
pub const MAX_INT_LEN: usize = 1 << 16;

#[track_caller]
fn check_pair(kernel: &str, a: usize, b: usize) {
    assert!(
        a == b,
        "eddy_kernels::{kernel}: length mismatch ({a} vs {b})"
    );
}

#[track_caller]
fn check_int(kernel: &str, a: usize, b: usize) {
    check_pair(kernel, a, b);
    assert!(
        a <= MAX_INT_LEN,
        "eddy_kernels::{kernel}: length {a} exceeds {MAX_INT_LEN}"
    );
}

#[track_caller]
fn check_block(kernel: &str, dim: usize, block: usize, out: usize) {
    assert!(
        dim > 0 || block == 0,
        "eddy_kernels::{kernel}: empty query with a non-empty block"
    );
    assert!(
        block == dim * out,
        "eddy_kernels::{kernel}: block length {block} != rows {out} x dim {dim}"
    );
}

#[track_caller]
fn check_ids(kernel: &str, dim: usize, data: usize, ids: usize, out: usize) {
    assert!(
        ids == out,
        "eddy_kernels::{kernel}: {ids} ids but {out} outputs"
    );
    assert!(
        dim > 0 && data.is_multiple_of(dim),
        "eddy_kernels::{kernel}: data length {data} is not a multiple of dim {dim}"
    );
}

impl Kernels {
    /// The table for `backend`, or `None` if this CPU (or target) cannot run it.
    pub fn for_backend(backend: Backend) -> Option<&'static Kernels> {
        match backend {
            Backend::Scalar => Some(&SCALAR),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => crate::x86_64::avx2_table(),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx512 => crate::x86_64::avx512_table(),
            #[cfg(target_arch = "aarch64")]
            Backend::Neon => crate::aarch64::neon_table(),
            // The backends of other targets.
            _ => None,
        }
    }

    /// The fastest table this CPU supports, ignoring [`BACKEND_ENV`] and the
    /// start-up self-check that [`Kernels::get`] applies.
    pub fn best() -> &'static Kernels {
        Backend::ALL
            .into_iter()
            .find_map(Kernels::for_backend)
            .unwrap_or(&SCALAR)
    }

    /// The process-wide table: chosen on first use (honouring [`BACKEND_ENV`]) and logged.
    #[inline]
    pub fn get() -> &'static Kernels {
        static ACTIVE: OnceLock<&'static Kernels> = OnceLock::new();
        ACTIVE.get_or_init(select)
    }

    /// The backend of this table.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Descriptive name including optional extensions, e.g. `avx512+vnni+vpopcntdq`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Inner product. Panics on length mismatch.
    #[inline]
    #[track_caller]
    pub fn dot(&self, a: &[f32], b: &[f32]) -> f32 {
        check_pair("dot", a.len(), b.len());
        // SAFETY: the table exists only for a detected backend; lengths checked above.
        unsafe { (self.dot)(a, b) }
    }

    /// Squared Euclidean distance. Panics on length mismatch.
    #[inline]
    #[track_caller]
    pub fn l2sq(&self, a: &[f32], b: &[f32]) -> f32 {
        check_pair("l2sq", a.len(), b.len());
        // SAFETY: the table exists only for a detected backend; lengths checked above.
        unsafe { (self.l2sq)(a, b) }
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
        unsafe { (self.dot_block)(query, block, out) }
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
        unsafe { (self.l2sq_block)(query, block, out) }
    }

    /// `out[i] = dot(query, row ids[i] of data)`, prefetching rows ahead.
    ///
    /// Panics on a length mismatch or an id past the last row.
    #[inline]
    #[track_caller]
    pub fn dot_ids(&self, query: &[f32], data: &[f32], ids: &[u32], out: &mut [f32]) {
        check_ids("dot_ids", query.len(), data.len(), ids.len(), out.len());
        // SAFETY: detected backend; lengths checked; row slicing is bounds-checked inside.
        unsafe { (self.dot_ids)(query, data, ids, out) }
    }

    /// `out[i] = l2sq(query, row ids[i] of data)`, prefetching rows ahead.
    ///
    /// Panics on a length mismatch or an id past the last row.
    #[inline]
    #[track_caller]
    pub fn l2sq_ids(&self, query: &[f32], data: &[f32], ids: &[u32], out: &mut [f32]) {
        check_ids("l2sq_ids", query.len(), data.len(), ids.len(), out.len());
        // SAFETY: detected backend; lengths checked; row slicing is bounds-checked inside.
        unsafe { (self.l2sq_ids)(query, data, ids, out) }
    }

    /// Exact inner product of u8 codes. Panics on mismatch or length > [`MAX_INT_LEN`].
    #[inline]
    #[track_caller]
    pub fn dot_u8(&self, a: &[u8], b: &[u8]) -> u32 {
        check_int("dot_u8", a.len(), b.len());
        // SAFETY: detected backend; lengths checked above.
        unsafe { (self.dot_u8)(a, b) }
    }

    /// Exact squared L2 of u8 codes. Panics on mismatch or length > [`MAX_INT_LEN`].
    #[inline]
    #[track_caller]
    pub fn l2sq_u8(&self, a: &[u8], b: &[u8]) -> u32 {
        check_int("l2sq_u8", a.len(), b.len());
        // SAFETY: detected backend; lengths checked above.
        unsafe { (self.l2sq_u8)(a, b) }
    }

    /// Exact inner product of i8 codes. Panics on mismatch or length > [`MAX_INT_LEN`].
    #[inline]
    #[track_caller]
    pub fn dot_i8(&self, a: &[i8], b: &[i8]) -> i32 {
        check_int("dot_i8", a.len(), b.len());
        // SAFETY: detected backend; lengths checked above.
        unsafe { (self.dot_i8)(a, b) }
    }

    /// Exact inner product of u8 codes with a 7-bit query (asymmetric SQ8 scoring).
    /// Panics on mismatch or length > [`MAX_INT_LEN`].
    #[inline]
    #[track_caller]
    pub fn dot_u8_i7(&self, codes: &[u8], query: QueryI7<'_>) -> i32 {
        check_int("dot_u8_i7", codes.len(), query.0.len());
        // SAFETY: detected backend; lengths checked above; `QueryI7` guarantees the
        // value range the saturating kernels need.
        unsafe { (self.dot_u8_i7)(codes, query.0) }
    }

    /// popcount(a XOR b) over bit vectors. Panics on length mismatch.
    #[inline]
    #[track_caller]
    pub fn hamming(&self, a: &[u64], b: &[u64]) -> u32 {
        check_pair("hamming", a.len(), b.len());
        // SAFETY: detected backend; lengths checked above.
        unsafe { (self.hamming)(a, b) }
    }

    /// popcount(a AND b) over bit vectors. Panics on length mismatch.
    #[inline]
    #[track_caller]
    pub fn and_popcount(&self, a: &[u64], b: &[u64]) -> u32 {
        check_pair("and_popcount", a.len(), b.len());
        // SAFETY: detected backend; lengths checked above.
        unsafe { (self.and_popcount)(a, b) }
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
        unsafe { (self.dot_u8_block)(query, block, out) }
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
        unsafe { (self.l2sq_u8_block)(query, block, out) }
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
        unsafe { (self.hamming_block)(query, block, out) }
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
        unsafe { (self.and_popcount_weighted)(planes, code) }
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
        unsafe { (self.pq_adc)(lut, codes, out) }
    }

    /// Dot product of a u8 query with packed 4-bit codes, see [`scalar::dot_u8_u4`].
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
        unsafe { (self.dot_u8_u4)(query, codes) }
    }
}

/// The first table, in `order`, whose start-up self-check passes (scalar last).
fn first_sound(order: impl IntoIterator<Item = Backend>) -> &'static Kernels {
    for b in order {
        let Some(k) = Kernels::for_backend(b) else {
            continue;
        };
        match crate::selfcheck::check(k) {
            Ok(()) => return k,
            Err(kernel) => tracing::error!(
                backend = k.name(),
                kernel,
                "eddy-kernels: backend disagrees with the scalar reference, not used"
            ),
        }
    }
    &SCALAR
}

fn select() -> &'static Kernels {
    let best = first_sound(Backend::ALL);
    let chosen = match std::env::var(BACKEND_ENV) {
        Ok(value) if !value.trim().is_empty() => match Backend::parse(&value) {
            Some(forced) if forced.is_supported() => first_sound([forced, Backend::Scalar]),
            _ => {
                tracing::warn!(
                    requested = %value,
                    using = best.name(),
                    "{BACKEND_ENV}: unknown or unsupported backend, using the best available"
                );
                best
            }
        },
        _ => best,
    };
    tracing::info!(
        backend = chosen.name(),
        best = best.name(),
        "eddy-kernels: distance kernel backend selected"
    );
    chosen
}
