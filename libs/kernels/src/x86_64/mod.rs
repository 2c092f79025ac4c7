//! x86_64 backends: AVX2 + FMA and AVX-512 (F, BW; VNNI and VPOPCNTDQ when present).

use std::sync::OnceLock;

use crate::dispatch::{Backend, Kernels};

pub mod avx2;
pub mod avx2_codes;
pub mod avx512;

fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("popcnt")
}

fn has_avx512() -> bool {
    has_avx2() && is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw")
}

static AVX2: Kernels = Kernels {
    backend: Backend::Avx2,
    name: "avx2",
    dot: avx2::dot,
    l2sq: avx2::l2sq,
    dot_block: avx2::dot_block,
    l2sq_block: avx2::l2sq_block,
    dot_ids: avx2::dot_ids,
    l2sq_ids: avx2::l2sq_ids,
    dot_u8: avx2::dot_u8,
    l2sq_u8: avx2::l2sq_u8,
    dot_i8: avx2::dot_i8,
    dot_u8_i7: avx2::dot_u8_i7,
    hamming: avx2_codes::hamming,
    and_popcount: avx2_codes::and_popcount,
    dot_u8_block: avx2::dot_u8_block,
    l2sq_u8_block: avx2::l2sq_u8_block,
    hamming_block: avx2_codes::hamming_block,
    and_popcount_weighted: avx2_codes::and_popcount_weighted,
    pq_adc: avx2_codes::pq_adc,
    dot_u8_u4: avx2_codes::dot_u8_u4,
};

/// The AVX2 table if the CPU has AVX2, FMA and POPCNT.
pub(crate) fn avx2_table() -> Option<&'static Kernels> {
    has_avx2().then_some(&AVX2)
}

/// The AVX-512 table if the CPU has AVX-512 F and BW (plus AVX2/FMA), with the
/// VNNI int8 and VPOPCNTDQ popcount kernels swapped in when those are present.
pub(crate) fn avx512_table() -> Option<&'static Kernels> {
    static TABLE: OnceLock<Option<Kernels>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            if !has_avx512() {
                return None;
            }
            let vnni = is_x86_feature_detected!("avx512vnni");
            let vpopcnt = is_x86_feature_detected!("avx512vpopcntdq");
            let name = match (vnni, vpopcnt) {
                (true, true) => "avx512+vnni+vpopcntdq",
                (true, false) => "avx512+vnni",
                (false, true) => "avx512+vpopcntdq",
                (false, false) => "avx512",
            };
            Some(Kernels {
                backend: Backend::Avx512,
                name,
                dot: avx512::dot,
                l2sq: avx512::l2sq,
                dot_block: avx512::dot_block,
                l2sq_block: avx512::l2sq_block,
                dot_ids: avx512::dot_ids,
                l2sq_ids: avx512::l2sq_ids,
                dot_u8: if vnni {
                    avx512::dot_u8_vnni
                } else {
                    avx512::dot_u8
                },
                l2sq_u8: avx512::l2sq_u8,
                dot_i8: if vnni {
                    avx512::dot_i8_vnni
                } else {
                    avx512::dot_i8
                },
                dot_u8_i7: if vnni {
                    avx512::dot_u8_i7_vnni
                } else {
                    avx512::dot_u8_i7
                },
                hamming: if vpopcnt {
                    avx512::hamming
                } else {
                    avx2_codes::hamming
                },
                and_popcount: if vpopcnt {
                    avx512::and_popcount
                } else {
                    avx2_codes::and_popcount
                },
                dot_u8_block: if vnni {
                    avx512::dot_u8_vnni_block
                } else {
                    avx512::dot_u8_block
                },
                l2sq_u8_block: avx512::l2sq_u8_block,
                hamming_block: if vpopcnt {
                    avx512::hamming_block
                } else {
                    avx2_codes::hamming_block
                },
                and_popcount_weighted: avx2_codes::and_popcount_weighted,
                pq_adc: avx2_codes::pq_adc,
                dot_u8_u4: avx2_codes::dot_u8_u4,
            })
        })
        .as_ref()
}

#[cfg(test)]
mod tests {
    /// The algebra behind the VNNI kernels, checked in scalar form so it is
    /// exercised on machines without AVX-512 VNNI: `vpdpbusd` multiplies
    /// unsigned by signed bytes, so u8·u8 and i8·i8 products are rebased.
    #[test]
    fn vnni_rebasing_identities() {
        let vals: Vec<u8> = (0..=255).collect();
        for &a in &vals {
            for &b in vals.iter().step_by(7) {
                // u8·u8 = a·(b XOR 0x80 as i8) + 128·a
                let signed_b = i32::from((b ^ 0x80) as i8);
                assert_eq!(
                    i32::from(a) * signed_b + 128 * i32::from(a),
                    i32::from(a) * i32::from(b)
                );
                // i8·i8 = (a XOR 0x80 as u8)·b − 128·b
                let (ai, bi) = (i32::from(a as i8), i32::from(b as i8));
                assert_eq!(i32::from(a ^ 0x80) * bi - 128 * bi, ai * bi);
            }
        }
    }
}
