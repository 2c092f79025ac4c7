//! aarch64 backend: NEON (ASIMD), part of the aarch64 baseline.

use crate::dispatch::{Backend, Kernels};
use crate::scalar;

pub mod neon;

static NEON: Kernels = Kernels {
    backend: Backend::Neon,
    name: "neon",
    dot: neon::dot,
    l2sq: neon::l2sq,
    dot_block: neon::dot_block,
    l2sq_block: neon::l2sq_block,
    dot_ids: neon::dot_ids,
    l2sq_ids: neon::l2sq_ids,
    dot_u8: neon::dot_u8,
    l2sq_u8: neon::l2sq_u8,
    dot_i8: neon::dot_i8,
    dot_u8_i7: neon::dot_u8_i7,
    hamming: neon::hamming,
    and_popcount: neon::and_popcount,
    dot_u8_block: neon::dot_u8_block,
    l2sq_u8_block: neon::l2sq_u8_block,
    hamming_block: neon::hamming_block,
    and_popcount_weighted: scalar::and_popcount_weighted,
    pq_adc: scalar::pq_adc,
    dot_u8_u4: scalar::dot_u8_u4,
};

/// The NEON table if the CPU reports NEON (always on aarch64 Linux/macOS).
pub(crate) fn neon_table() -> Option<&'static Kernels> {
    std::arch::is_aarch64_feature_detected!("neon").then_some(&NEON)
}
