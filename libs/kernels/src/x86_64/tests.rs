//! Unit tests of the x86_64 tables and of the algebra behind the VNNI kernels.

use crate::{Backend, Kernels};

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

/// Every AVX-512 kernel function, as `slot!` names it.
const AVX512_FUNCTIONS: [&str; 22] = [
    "avx512::dot",
    "avx512::l2sq",
    "avx512::dot_block",
    "avx512::l2sq_block",
    "avx512::dot_ids",
    "avx512::l2sq_ids",
    "avx512_int8::dot_u8",
    "avx512_int8::dot_u8_vnni",
    "avx512_int8::l2sq_u8",
    "avx512_int8::l2sq_u8_vnni",
    "avx512_int8::dot_i8",
    "avx512_int8::dot_i8_vnni",
    "avx512_int8::dot_u8_i7",
    "avx512_int8::dot_u8_i7_vnni",
    "avx512_int8::dot_u8_block",
    "avx512_int8::dot_u8_vnni_block",
    "avx512_int8::l2sq_u8_block",
    "avx512_int8::l2sq_u8_vnni_block",
    "avx512_bits::hamming",
    "avx512_bits::and_popcount",
    "avx512_bits::hamming_block",
    "avx512_select::positions_at_most",
];

/// The differential tests iterate over `Kernels::variants()`: on a CPU with every
/// AVX-512 extension, each AVX-512 function must be in one of those tables, even
/// the ones the dispatched table does not pick.
#[test]
fn variant_tables_hold_every_avx512_function() {
    let full = is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vnni")
        && is_x86_feature_detected!("avx512vpopcntdq")
        && Backend::Avx512.is_supported();
    if !full {
        eprintln!("CPU without AVX-512 F/BW/VNNI/VPOPCNTDQ: coverage not checked");
        return;
    }
    let covered: Vec<&str> = Kernels::variants()
        .iter()
        .flat_map(|k| k.implementations().map(|(_, f)| f))
        .collect();
    for f in AVX512_FUNCTIONS {
        assert!(covered.contains(&f), "{f} is in no variant table");
    }
}

/// The dispatched AVX-512 table only holds functions of the AVX-512 or AVX2
/// modules, each the one of its own kernel.
#[test]
fn dispatched_avx512_table_mixes_only_x86_functions() {
    let Some(k) = Kernels::for_backend(Backend::Avx512) else {
        eprintln!("CPU without AVX-512 F/BW: skipped");
        return;
    };
    for (kernel, f) in k.implementations() {
        assert!(
            f.starts_with("avx512") || f.starts_with("avx2"),
            "{kernel} runs {f}"
        );
        let function = f.rsplit("::").next().unwrap_or(f).replace("_vnni", "");
        assert_eq!(function, kernel, "{kernel} runs {f}");
    }
}
