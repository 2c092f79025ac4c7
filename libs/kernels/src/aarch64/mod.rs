//! aarch64 backend: NEON (ASIMD), part of the aarch64 baseline.

use crate::dispatch::Backend;
use crate::scalar;
use crate::table::{slot, Kernels};

pub mod neon;

static NEON: Kernels = Kernels {
    backend: Backend::Neon,
    name: "neon",
    dot: slot!(neon::dot),
    l2sq: slot!(neon::l2sq),
    dot_block: slot!(neon::dot_block),
    l2sq_block: slot!(neon::l2sq_block),
    dot_ids: slot!(neon::dot_ids),
    l2sq_ids: slot!(neon::l2sq_ids),
    dot_u8: slot!(neon::dot_u8),
    l2sq_u8: slot!(neon::l2sq_u8),
    dot_i8: slot!(neon::dot_i8),
    dot_u8_i7: slot!(neon::dot_u8_i7),
    hamming: slot!(neon::hamming),
    and_popcount: slot!(neon::and_popcount),
    dot_u8_block: slot!(neon::dot_u8_block),
    l2sq_u8_block: slot!(neon::l2sq_u8_block),
    hamming_block: slot!(neon::hamming_block),
    and_popcount_weighted: slot!(scalar::and_popcount_weighted),
    pq_adc: slot!(scalar::pq_adc),
    dot_u8_u4: slot!(scalar::dot_u8_u4),
    positions_at_most: slot!(scalar::positions_at_most),
};

/// The NEON table if the CPU reports NEON (always on aarch64 Linux/macOS).
pub(crate) fn neon_table() -> Option<&'static Kernels> {
    std::arch::is_aarch64_feature_detected!("neon").then_some(&NEON)
}
