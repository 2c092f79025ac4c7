//! x86_64 backends: AVX2 + FMA and AVX-512 (F, BW; VNNI and VPOPCNTDQ when present).
//!
//! The AVX-512 table is per kernel: a kernel runs its AVX-512 variant only
//! where that variant was measured faster than the AVX2 function on AVX-512
//! hardware (see [`avx512_table`] for the choice and the README for the
//! numbers); everywhere else it runs the AVX2 function. The variants the
//! dispatch does not pick stay reachable through [`avx512_variant_tables`],
//! which the differential tests and the benches use.

use std::sync::OnceLock;

use crate::dispatch::Backend;
use crate::table::{slot, Kernels};

pub mod avx2;
pub mod avx2_codes;
pub mod avx2_select;
pub mod avx512;
pub mod avx512_bits;
pub mod avx512_int8;
pub mod avx512_select;

fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("popcnt")
}

fn has_avx512() -> bool {
    has_avx2() && is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw")
}

/// The optional AVX-512 extensions this CPU has.
#[derive(Debug, Clone, Copy)]
struct Extensions {
    vnni: bool,
    vpopcntdq: bool,
}

impl Extensions {
    fn detect() -> Self {
        Self {
            vnni: is_x86_feature_detected!("avx512vnni"),
            vpopcntdq: is_x86_feature_detected!("avx512vpopcntdq"),
        }
    }

    /// `base` plus the extensions, e.g. `avx512+vnni+vpopcntdq`.
    fn name(self, base: &str) -> &'static str {
        let name = match (self.vnni, self.vpopcntdq) {
            (true, true) => format!("{base}+vnni+vpopcntdq"),
            (true, false) => format!("{base}+vnni"),
            (false, true) => format!("{base}+vpopcntdq"),
            (false, false) => base.to_owned(),
        };
        // Built once per table per process (the tables live in `OnceLock`s).
        Box::leak(name.into_boxed_str())
    }
}

const AVX2_TABLE: Kernels = Kernels {
    backend: Backend::Avx2,
    name: "avx2",
    dot: slot!(avx2::dot),
    l2sq: slot!(avx2::l2sq),
    dot_block: slot!(avx2::dot_block),
    l2sq_block: slot!(avx2::l2sq_block),
    dot_ids: slot!(avx2::dot_ids),
    l2sq_ids: slot!(avx2::l2sq_ids),
    dot_u8: slot!(avx2::dot_u8),
    l2sq_u8: slot!(avx2::l2sq_u8),
    dot_i8: slot!(avx2::dot_i8),
    dot_u8_i7: slot!(avx2::dot_u8_i7),
    hamming: slot!(avx2_codes::hamming),
    and_popcount: slot!(avx2_codes::and_popcount),
    dot_u8_block: slot!(avx2::dot_u8_block),
    l2sq_u8_block: slot!(avx2::l2sq_u8_block),
    hamming_block: slot!(avx2_codes::hamming_block),
    and_popcount_weighted: slot!(avx2_codes::and_popcount_weighted),
    pq_adc: slot!(avx2_codes::pq_adc),
    dot_u8_u4: slot!(avx2_codes::dot_u8_u4),
    positions_at_most: slot!(avx2_select::positions_at_most),
};

static AVX2: Kernels = AVX2_TABLE;

/// The AVX2 table if the CPU has AVX2, FMA and POPCNT.
pub(crate) fn avx2_table() -> Option<&'static Kernels> {
    has_avx2().then_some(&AVX2)
}

/// The dispatched AVX-512 table, if the CPU has AVX-512 F and BW (plus AVX2/FMA).
pub(crate) fn avx512_table() -> Option<&'static Kernels> {
    static TABLE: OnceLock<Option<Kernels>> = OnceLock::new();
    TABLE
        .get_or_init(|| has_avx512().then(|| dispatched_avx512(Extensions::detect())))
        .as_ref()
}

/// The AVX-512 table: the AVX2 table with the kernels whose AVX-512 variant was
/// measured faster swapped in.
///
/// Measured with `cargo bench -p eddy-kernels --bench ratios` (three
/// alternating runs, median of the per-round ratios AVX2 ns / AVX-512 ns, row
/// lengths 128 / 384 / 768 / 1536) on an Intel Xeon of the Sapphire Rapids
/// class (AVX-512 F/BW/VL/VNNI/VPOPCNTDQ); the full table is in the README:
///
/// - f32 `dot` / `l2sq` pair calls: 1.08–1.27x (at 384 floats 1.08x, one
///   run 0.86–0.91x: a query 16 bytes off a cache line splits every 512-bit
///   load); `dot_ids` 1.19–1.36x (aligned query copy).
/// - VNNI `dot_i8` 1.35–3.53x, `dot_u8` 1.16–2.26x, `l2sq_u8` 1.19–1.55x,
///   `dot_u8_i7` 1.19–1.57x; `dot_u8_block` 2.18–2.96x, `l2sq_u8_block`
///   1.32–1.81x.
/// - F/BW byte forms (used only without VNNI): 1.16–2.03x on the same host;
///   no AVX-512 CPU without VNNI was measured.
/// - VPOPCNTDQ `hamming` 1.51–1.83x, `hamming_block` 2.17–4.93x; without
///   VPOPCNTDQ the AVX2 popcounts stay.
/// - `and_popcount_weighted`, `pq_adc`, `dot_u8_u4`: no AVX-512 variant; AVX2.
/// - `positions_at_most` (F only), measured on an AMD EPYC with AVX-512
///   (2026-12-08): 1.06–1.07x AVX2 over 1,024 values keeping 5 % and 50 %,
///   3.5x the branchless scalar loop.
///
/// A kernel whose AVX-512 variant measures slower on some AVX-512 CPU goes
/// back to its AVX2 function here (the variant stays in [`all_avx512`]).
fn dispatched_avx512(ext: Extensions) -> Kernels {
    let mut k = Kernels {
        backend: Backend::Avx512,
        name: ext.name("avx512"),
        ..AVX2_TABLE
    };
    k.dot = slot!(avx512::dot);
    k.l2sq = slot!(avx512::l2sq);
    k.dot_block = slot!(avx512::dot_block);
    k.l2sq_block = slot!(avx512::l2sq_block);
    k.dot_ids = slot!(avx512::dot_ids);
    k.l2sq_ids = slot!(avx512::l2sq_ids);
    k.positions_at_most = slot!(avx512_select::positions_at_most);
    if ext.vnni {
        k.dot_u8 = slot!(avx512_int8::dot_u8_vnni);
        k.l2sq_u8 = slot!(avx512_int8::l2sq_u8_vnni);
        k.dot_i8 = slot!(avx512_int8::dot_i8_vnni);
        k.dot_u8_i7 = slot!(avx512_int8::dot_u8_i7_vnni);
        k.dot_u8_block = slot!(avx512_int8::dot_u8_vnni_block);
        k.l2sq_u8_block = slot!(avx512_int8::l2sq_u8_vnni_block);
    } else {
        k.dot_u8 = slot!(avx512_int8::dot_u8);
        k.l2sq_u8 = slot!(avx512_int8::l2sq_u8);
        k.dot_i8 = slot!(avx512_int8::dot_i8);
        k.dot_u8_i7 = slot!(avx512_int8::dot_u8_i7);
        k.dot_u8_block = slot!(avx512_int8::dot_u8_block);
        k.l2sq_u8_block = slot!(avx512_int8::l2sq_u8_block);
    }
    if ext.vpopcntdq {
        k.hamming = slot!(avx512_bits::hamming);
        k.and_popcount = slot!(avx512_bits::and_popcount);
        k.hamming_block = slot!(avx512_bits::hamming_block);
    }
    k
}

/// Every kernel that has an AVX-512 variant on its F/BW form (no VNNI, no
/// VPOPCNTDQ); the others (popcounts, PQ, 4-bit) on AVX2.
fn bw_avx512() -> Kernels {
    Kernels {
        backend: Backend::Avx512,
        name: "avx512-bw",
        dot: slot!(avx512::dot),
        l2sq: slot!(avx512::l2sq),
        dot_block: slot!(avx512::dot_block),
        l2sq_block: slot!(avx512::l2sq_block),
        dot_ids: slot!(avx512::dot_ids),
        l2sq_ids: slot!(avx512::l2sq_ids),
        dot_u8: slot!(avx512_int8::dot_u8),
        l2sq_u8: slot!(avx512_int8::l2sq_u8),
        dot_i8: slot!(avx512_int8::dot_i8),
        dot_u8_i7: slot!(avx512_int8::dot_u8_i7),
        dot_u8_block: slot!(avx512_int8::dot_u8_block),
        l2sq_u8_block: slot!(avx512_int8::l2sq_u8_block),
        positions_at_most: slot!(avx512_select::positions_at_most),
        ..AVX2_TABLE
    }
}

/// Every kernel on its AVX-512 variant: the VNNI / VPOPCNTDQ forms where the
/// CPU has them, else the F/BW forms.
fn all_avx512(ext: Extensions) -> Kernels {
    let mut k = bw_avx512();
    k.name = ext.name("avx512-all");
    if ext.vnni {
        k.dot_u8 = slot!(avx512_int8::dot_u8_vnni);
        k.l2sq_u8 = slot!(avx512_int8::l2sq_u8_vnni);
        k.dot_i8 = slot!(avx512_int8::dot_i8_vnni);
        k.dot_u8_i7 = slot!(avx512_int8::dot_u8_i7_vnni);
        k.dot_u8_block = slot!(avx512_int8::dot_u8_vnni_block);
        k.l2sq_u8_block = slot!(avx512_int8::l2sq_u8_vnni_block);
    }
    if ext.vpopcntdq {
        k.hamming = slot!(avx512_bits::hamming);
        k.and_popcount = slot!(avx512_bits::and_popcount);
        k.hamming_block = slot!(avx512_bits::hamming_block);
    }
    k
}

/// Tables of the AVX-512 variants, for tests and benches: `avx512-all` and, on
/// a CPU with VNNI, `avx512-bw` (whose byte kernels `avx512-all` replaces).
/// Empty without AVX-512 F/BW.
pub(crate) fn avx512_variant_tables() -> impl Iterator<Item = &'static Kernels> {
    static TABLES: OnceLock<Vec<Kernels>> = OnceLock::new();
    TABLES
        .get_or_init(|| {
            if !has_avx512() {
                return Vec::new();
            }
            let ext = Extensions::detect();
            let mut tables = vec![all_avx512(ext)];
            if ext.vnni {
                tables.push(bw_avx512());
            }
            tables
        })
        .iter()
}

#[cfg(test)]
mod tests;
