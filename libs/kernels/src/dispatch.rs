//! Run-time backend selection: one table of kernel pointers per backend, chosen once.
//!
//! A [`Kernels`] value exists only for a backend whose CPU features were
//! detected, so calling through it is sound; every method checks lengths first
//! and panics on a mismatch.
//!
//! # Dispatch rule
//!
//! The process-wide table is the first of AVX-512 > AVX2 > NEON > scalar that
//! the CPU supports and that passes the start-up self-check (or the one named
//! in [`BACKEND_ENV`]). A backend's table need not run that backend's
//! instructions for every kernel: **a kernel uses its AVX-512 variant only
//! where that variant was measured faster than the AVX2 one on AVX-512
//! hardware** (`cargo bench -p eddy-kernels --bench ratios`, interleaved
//! rounds, the ratio outside the run-to-run spread); every other kernel of the
//! AVX-512 table is the AVX2 function. The per-kernel choice and the
//! measurements behind it are in `x86_64/mod.rs` and the crate README.
//! [`Kernels::implementations`] reports what each kernel of a table runs, and
//! [`Kernels::variants`] lists tables holding every variant, so the tests and
//! benches still run the variants the dispatch does not pick.

use std::sync::OnceLock;

use crate::scalar;
use crate::table::{slot, Kernels};

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

static SCALAR: Kernels = Kernels {
    backend: Backend::Scalar,
    name: "scalar",
    dot: slot!(scalar::dot),
    l2sq: slot!(scalar::l2sq),
    dot_block: slot!(scalar::dot_block),
    l2sq_block: slot!(scalar::l2sq_block),
    dot_ids: slot!(scalar::dot_ids),
    l2sq_ids: slot!(scalar::l2sq_ids),
    dot_u8: slot!(scalar::dot_u8),
    l2sq_u8: slot!(scalar::l2sq_u8),
    dot_i8: slot!(scalar::dot_i8),
    dot_u8_i7: slot!(scalar::dot_u8_i7),
    hamming: slot!(scalar::hamming),
    and_popcount: slot!(scalar::and_popcount),
    dot_u8_block: slot!(scalar::dot_u8_block),
    l2sq_u8_block: slot!(scalar::l2sq_u8_block),
    hamming_block: slot!(scalar::hamming_block),
    and_popcount_weighted: slot!(scalar::and_popcount_weighted),
    pq_adc: slot!(scalar::pq_adc),
    dot_u8_u4: slot!(scalar::dot_u8_u4),
    positions_at_most: slot!(scalar::positions_at_most),
};

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

    /// Every table this CPU can run: each supported backend's dispatched table,
    /// then tables of the variants no dispatched table picks (on x86_64 with
    /// AVX-512: `avx512-all`, every kernel on its AVX-512 variant with the
    /// VNNI/VPOPCNTDQ forms where present, and `avx512-bw`, the F/BW-only forms).
    /// The differential tests check each against [`crate::scalar`].
    pub fn variants() -> Vec<&'static Kernels> {
        let mut all: Vec<&'static Kernels> = Backend::ALL
            .into_iter()
            .filter_map(Kernels::for_backend)
            .collect();
        #[cfg(target_arch = "x86_64")]
        all.extend(crate::x86_64::avx512_variant_tables());
        all
    }

    /// The process-wide table: chosen on first use (honouring [`BACKEND_ENV`]) and logged.
    #[inline]
    pub fn get() -> &'static Kernels {
        static ACTIVE: OnceLock<&'static Kernels> = OnceLock::new();
        ACTIVE.get_or_init(select)
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
    for (kernel, function) in chosen.implementations() {
        tracing::debug!(kernel, function, "eddy-kernels: kernel implementation");
    }
    chosen
}
