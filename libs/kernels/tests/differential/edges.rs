//! Special values, normalisation, length checks, and backend selection by name and environment.

use eddy_kernels::{scalar, QueryI7};
use proptest::prelude::*;

use super::*;

#[test]
fn special_values() {
    for k in backends() {
        assert_eq!(k.dot(&[], &[]), 0.0);
        assert_eq!(k.l2sq(&[], &[]), 0.0);
        assert_eq!(k.dot_u8(&[], &[]), 0);
        assert_eq!(k.hamming(&[], &[]), 0);
        let mut out: [f32; 0] = [];
        k.dot_block(&[1.0], &[], &mut out);
        assert!(
            k.dot(&[f32::NAN, 1.0], &[1.0, 1.0]).is_nan(),
            "{}",
            k.name()
        );
    }
}

#[test]
fn normalize_and_cosine() {
    let mut v = vec![3.0f32, 4.0, 0.0];
    assert_eq!(eddy_kernels::normalize(&mut v), 5.0);
    assert!((eddy_kernels::dot(&v, &v) - 1.0).abs() < 1e-6);
    let mut z = vec![0.0f32; 5];
    assert_eq!(eddy_kernels::normalize(&mut z), 0.0);
    assert!(z.iter().all(|&x| x == 0.0));
    let c = eddy_kernels::cosine(&[1.0, 0.0], &[2.0, 2.0]);
    assert!((c - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
    assert_eq!(eddy_kernels::cosine(&[0.0, 0.0], &[2.0, 2.0]), 0.0);
}

#[test]
#[should_panic(expected = "length mismatch")]
fn dot_length_mismatch_panics() {
    eddy_kernels::dot(&[1.0, 2.0], &[1.0]);
}

#[test]
#[should_panic(expected = "length mismatch")]
fn dot_u8_length_mismatch_panics() {
    eddy_kernels::dot_u8(&[1, 2], &[1]);
}

#[test]
#[should_panic(expected = "block length")]
fn block_length_mismatch_panics() {
    let mut out = [0.0; 2];
    eddy_kernels::dot_block(&[1.0, 2.0], &[1.0, 2.0, 3.0], &mut out);
}

#[test]
#[should_panic]
fn ids_out_of_range_panics() {
    let mut out = [0.0; 1];
    eddy_kernels::dot_ids(&[1.0, 2.0], &[1.0, 2.0], &[1], &mut out);
}

#[test]
fn backend_names_parse() {
    for b in Backend::ALL {
        assert_eq!(Backend::parse(b.as_str()), Some(b));
    }
    assert_eq!(Backend::parse("AVX2"), Some(Backend::Avx2));
    assert_eq!(Backend::parse("sse9"), None);
    assert!(Backend::Scalar.is_supported());
    // The process-wide choice is one of the supported tables.
    assert!(eddy_kernels::backend().is_supported());
    assert!(!eddy_kernels::backend_name().is_empty());
}

/// Runs in a child process with `EDDY_KERNELS_BACKEND` set (see `env_var_forces_backend`).
#[test]
fn child_reports_forced_backend() {
    if let Ok(expect) = std::env::var("EDDY_KERNELS_EXPECT") {
        assert_eq!(eddy_kernels::backend().as_str(), expect);
    }
}

#[test]
fn env_var_forces_backend() {
    if std::env::var("EDDY_KERNELS_EXPECT").is_ok() {
        return;
    }
    let exe = std::env::current_exe().expect("test binary path");
    for k in Backend::ALL.into_iter().filter_map(Kernels::for_backend) {
        let status = std::process::Command::new(&exe)
            .args(["--exact", "child_reports_forced_backend", "--quiet"])
            .env(eddy_kernels::BACKEND_ENV, k.backend().as_str())
            .env("EDDY_KERNELS_EXPECT", k.backend().as_str())
            .stdout(std::process::Stdio::null())
            .status()
            .expect("spawn test binary");
        assert!(status.success(), "forcing {} failed", k.name());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, rng_seed: proptest::test_runner::RngSeed::Fixed(7), ..ProptestConfig::default() })]

    #[test]
    fn prop_f32_dot(pairs in prop::collection::vec((-1e3f32..1e3, -1e3f32..1e3), 0..300)) {
        let (a, b): (Vec<f32>, Vec<f32>) = pairs.into_iter().unzip();
        for k in backends() {
            let err = (f64::from(k.dot(&a, &b)) - f64::from(scalar::dot(&a, &b))).abs();
            prop_assert!(err <= F32_REL_TOL * abs_terms(&a, &b, false) + 1e-30);
            let err = (f64::from(k.l2sq(&a, &b)) - f64::from(scalar::l2sq(&a, &b))).abs();
            prop_assert!(err <= F32_REL_TOL * abs_terms(&a, &b, true) + 1e-30);
        }
    }

    #[test]
    fn prop_int_kernels(pairs in prop::collection::vec(any::<(u8, u8)>(), 0..300)) {
        let (a, b): (Vec<u8>, Vec<u8>) = pairs.into_iter().unzip();
        let ai: Vec<i8> = a.iter().map(|&x| x as i8).collect();
        let bi: Vec<i8> = b.iter().map(|&x| x as i8).collect();
        for k in backends() {
            prop_assert_eq!(k.dot_u8(&a, &b), scalar::dot_u8(&a, &b));
            prop_assert_eq!(k.l2sq_u8(&a, &b), scalar::l2sq_u8(&a, &b));
            prop_assert_eq!(k.dot_i8(&ai, &bi), scalar::dot_i8(&ai, &bi));
            let q7: Vec<i8> = bi.iter().map(|&x| (x / 2).clamp(-64, 64)).collect();
            let q = QueryI7::new(&q7).expect("clamped");
            prop_assert_eq!(k.dot_u8_i7(&a, q), scalar::dot_u8_i7(&a, &q7));
        }
    }

    #[test]
    fn prop_bits(pairs in prop::collection::vec(any::<(u64, u64)>(), 0..50)) {
        let (a, b): (Vec<u64>, Vec<u64>) = pairs.into_iter().unzip();
        for k in backends() {
            prop_assert_eq!(k.hamming(&a, &b), scalar::hamming(&a, &b));
            prop_assert_eq!(k.and_popcount(&a, &b), scalar::and_popcount(&a, &b));
        }
    }
}
