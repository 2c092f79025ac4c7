//! Every backend against its scalar twin (integration test binary).
//!
//! Dimensions 1..=130 cover every register width ±1 for 4-, 8- and 16-lane f32
//! (and the 64-float unrolled step) and 16-, 32- and 64-byte integer paths; the
//! lengths around 192, 256, 320, 448 and 512 cover the 256-byte unrolled byte
//! step and the whole chunks after it; the large ones cover long loops.
//! Integer kernels must match bit for bit; f32 kernels must agree within
//! `F32_REL_TOL` of `Σ|aᵢ·bᵢ|` (the summation-order error bound scale).
//!
//! The tables under test are `Kernels::variants()`: every supported backend's
//! dispatched table plus the tables of the variants the dispatch does not pick
//! (e.g. `avx512-all`, `avx512-bw`), so every SIMD function runs here.

use eddy_kernels::{scalar, Backend, Kernels, QueryI7};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Relative tolerance for f32 kernels, relative to the sum of absolute terms.
const F32_REL_TOL: f64 = 1e-5;

fn dims() -> Vec<usize> {
    (1..=130)
        .chain([
            191, 192, 193, 255, 256, 257, 319, 320, 321, 384, 447, 448, 449,
        ])
        .chain([511, 512, 513, 768, 1024, 1536, 3072])
        .collect()
}

/// Every table this machine can run, variants included; unsupported backends
/// are reported and skipped.
fn backends() -> Vec<&'static Kernels> {
    for b in Backend::ALL {
        if !b.is_supported() {
            eprintln!("backend {b} not supported on this CPU: skipped");
        }
    }
    Kernels::variants()
}

fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

fn f32s(r: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| r.random_range(-1.0f32..1.0)).collect()
}

fn abs_terms(a: &[f32], b: &[f32], l2: bool) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| {
            let (x, y) = (f64::from(x), f64::from(y));
            if l2 {
                (x - y) * (x - y)
            } else {
                (x * y).abs()
            }
        })
        .sum()
}

fn assert_close(kernel: &str, k: &Kernels, n: usize, got: f32, want: f32, scale: f64) {
    let err = (f64::from(got) - f64::from(want)).abs();
    assert!(
        err <= F32_REL_TOL * scale + 1e-30,
        "{kernel} on {}: n={n} got {got} want {want} (err {err}, scale {scale})",
        k.name()
    );
}

#[test]
fn f32_pairs_match_scalar() {
    let mut r = rng(1);
    for &n in &dims() {
        for _ in 0..3 {
            let (a, b) = (f32s(&mut r, n), f32s(&mut r, n));
            for k in backends() {
                assert_close(
                    "dot",
                    k,
                    n,
                    k.dot(&a, &b),
                    scalar::dot(&a, &b),
                    abs_terms(&a, &b, false),
                );
                assert_close(
                    "l2sq",
                    k,
                    n,
                    k.l2sq(&a, &b),
                    scalar::l2sq(&a, &b),
                    abs_terms(&a, &b, true),
                );
            }
        }
    }
}

/// The AVX-512 f32 kernels peel a head up to the row's 64-byte boundary and the
/// block forms copy an unaligned query: every start offset of both operands.
#[test]
fn kernels_at_every_alignment() {
    let mut r = rng(7);
    for n in [63usize, 64, 255, 256, 257, 384, 1000] {
        let a_buf = f32s(&mut r, n + 16);
        let b_buf = f32s(&mut r, 4 * n + 16);
        let a8: Vec<u8> = (0..n + 64).map(|_| r.random()).collect();
        let b8: Vec<u8> = (0..n + 64).map(|_| r.random()).collect();
        for k in backends() {
            for off in 0..16 {
                let (a, b) = (&a_buf[off..off + n], &b_buf[15 - off..15 - off + n]);
                assert_close(
                    "dot",
                    k,
                    n,
                    k.dot(a, b),
                    scalar::dot(a, b),
                    abs_terms(a, b, false),
                );
                assert_close(
                    "l2sq",
                    k,
                    n,
                    k.l2sq(a, b),
                    scalar::l2sq(a, b),
                    abs_terms(a, b, true),
                );
                let block = &b_buf[off..off + 4 * n];
                let mut out = [0.0f32; 4];
                k.dot_block(a, block, &mut out);
                for (row, &o) in block.chunks_exact(n).zip(&out) {
                    assert_eq!(
                        o.to_bits(),
                        k.dot(a, row).to_bits(),
                        "{} n={n} off={off}",
                        k.name()
                    );
                }
                let ids = [3u32, 0, 2, 1, 3];
                let mut out = [0.0f32; 5];
                k.l2sq_ids(a, block, &ids, &mut out);
                for (&id, &o) in ids.iter().zip(&out) {
                    let row = &block[id as usize * n..(id as usize + 1) * n];
                    assert_eq!(
                        o.to_bits(),
                        k.l2sq(a, row).to_bits(),
                        "{} n={n} off={off}",
                        k.name()
                    );
                }
            }
            for off in (0..64).step_by(5) {
                let (a, b) = (&a8[off..off + n], &b8[63 - off..63 - off + n]);
                assert_eq!(
                    k.dot_u8(a, b),
                    scalar::dot_u8(a, b),
                    "{} n={n} off={off}",
                    k.name()
                );
                assert_eq!(
                    k.l2sq_u8(a, b),
                    scalar::l2sq_u8(a, b),
                    "{} n={n} off={off}",
                    k.name()
                );
            }
        }
    }
}

#[test]
fn f32_blocks_and_ids_match_pairs() {
    let mut r = rng(2);
    for &n in &dims() {
        let rows = 1 + n % 7;
        let q = f32s(&mut r, n);
        let block = f32s(&mut r, n * rows);
        let ids: Vec<u32> = (0..2 * rows)
            .map(|_| r.random_range(0..rows as u32))
            .collect();
        for k in backends() {
            let mut out = vec![0.0; rows];
            k.dot_block(&q, &block, &mut out);
            for (row, &o) in block.chunks_exact(n).zip(&out) {
                assert_eq!(
                    o.to_bits(),
                    k.dot(&q, row).to_bits(),
                    "dot_block on {} n={n}",
                    k.name()
                );
                assert_close(
                    "dot_block",
                    k,
                    n,
                    o,
                    scalar::dot(&q, row),
                    abs_terms(&q, row, false),
                );
            }
            k.l2sq_block(&q, &block, &mut out);
            for (row, &o) in block.chunks_exact(n).zip(&out) {
                assert_eq!(
                    o.to_bits(),
                    k.l2sq(&q, row).to_bits(),
                    "l2sq_block on {} n={n}",
                    k.name()
                );
            }
            let mut out = vec![0.0; ids.len()];
            k.dot_ids(&q, &block, &ids, &mut out);
            for (&id, &o) in ids.iter().zip(&out) {
                let row = &block[id as usize * n..(id as usize + 1) * n];
                assert_eq!(
                    o.to_bits(),
                    k.dot(&q, row).to_bits(),
                    "dot_ids on {} n={n}",
                    k.name()
                );
            }
            k.l2sq_ids(&q, &block, &ids, &mut out);
            for (&id, &o) in ids.iter().zip(&out) {
                let row = &block[id as usize * n..(id as usize + 1) * n];
                assert_eq!(
                    o.to_bits(),
                    k.l2sq(&q, row).to_bits(),
                    "l2sq_ids on {} n={n}",
                    k.name()
                );
            }
        }
    }
}

#[test]
fn int8_kernels_bit_exact() {
    let mut r = rng(3);
    for &n in &dims() {
        let a: Vec<u8> = (0..n).map(|_| r.random()).collect();
        let b: Vec<u8> = (0..n).map(|_| r.random()).collect();
        let ai: Vec<i8> = (0..n).map(|_| r.random()).collect();
        let bi: Vec<i8> = (0..n).map(|_| r.random()).collect();
        let max = vec![255u8; n];
        let zero = vec![0u8; n];
        let min_i = vec![i8::MIN; n];
        for k in backends() {
            let name = k.name();
            assert_eq!(
                k.dot_u8(&a, &b),
                scalar::dot_u8(&a, &b),
                "dot_u8 {name} n={n}"
            );
            assert_eq!(
                k.dot_u8(&max, &max),
                scalar::dot_u8(&max, &max),
                "dot_u8 max {name} n={n}"
            );
            assert_eq!(
                k.l2sq_u8(&a, &b),
                scalar::l2sq_u8(&a, &b),
                "l2sq_u8 {name} n={n}"
            );
            assert_eq!(
                k.l2sq_u8(&max, &zero),
                scalar::l2sq_u8(&max, &zero),
                "l2sq_u8 max {name}"
            );
            assert_eq!(
                k.dot_i8(&ai, &bi),
                scalar::dot_i8(&ai, &bi),
                "dot_i8 {name} n={n}"
            );
            assert_eq!(
                k.dot_i8(&min_i, &min_i),
                scalar::dot_i8(&min_i, &min_i),
                "dot_i8 min {name}"
            );
            assert_eq!(
                k.dot_i8(&min_i, &bi),
                scalar::dot_i8(&min_i, &bi),
                "dot_i8 min/b {name}"
            );
            let q7: Vec<i8> = ai.iter().map(|&x| x / 2).collect();
            let q7 = QueryI7::new(&q7).expect("halved i8 is within -64..=64");
            assert_eq!(
                k.dot_u8_i7(&a, q7),
                scalar::dot_u8_i7(&a, q7.values()),
                "dot_u8_i7 {name} n={n}"
            );
            for extreme in [64i8, -64] {
                let qe = vec![extreme; n];
                let qe = QueryI7::new(&qe).expect("in range");
                assert_eq!(
                    k.dot_u8_i7(&max, qe),
                    scalar::dot_u8_i7(&max, qe.values()),
                    "dot_u8_i7 extreme {extreme} {name} n={n}"
                );
            }
        }
    }
}

#[test]
fn int_blocks_match_pairs() {
    let mut r = rng(6);
    for &n in &dims() {
        let rows = 1 + n % 5;
        let q: Vec<u8> = (0..n).map(|_| r.random()).collect();
        let block: Vec<u8> = (0..n * rows).map(|_| r.random()).collect();
        let words = n.div_ceil(64);
        let qb: Vec<u64> = (0..words).map(|_| r.random()).collect();
        let bb: Vec<u64> = (0..words * rows).map(|_| r.random()).collect();
        for k in backends() {
            let mut out = vec![0u32; rows];
            k.dot_u8_block(&q, &block, &mut out);
            let want: Vec<u32> = block
                .chunks_exact(n)
                .map(|row| scalar::dot_u8(&q, row))
                .collect();
            assert_eq!(out, want, "dot_u8_block {} n={n}", k.name());
            k.l2sq_u8_block(&q, &block, &mut out);
            let want: Vec<u32> = block
                .chunks_exact(n)
                .map(|row| scalar::l2sq_u8(&q, row))
                .collect();
            assert_eq!(out, want, "l2sq_u8_block {} n={n}", k.name());
            let planes: Vec<u64> = (0..words * 4).map(|_| r.random()).collect();
            let row0 = &bb[..words];
            assert_eq!(
                k.and_popcount_weighted(&planes, row0),
                scalar::and_popcount_weighted(&planes, row0),
                "and_popcount_weighted {} words={words}",
                k.name()
            );
            k.hamming_block(&qb, &bb, &mut out);
            let want: Vec<u32> = bb
                .chunks_exact(words)
                .map(|row| scalar::hamming(&qb, row))
                .collect();
            assert_eq!(out, want, "hamming_block {} words={words}", k.name());
        }
    }
}

#[test]
fn query_i7_rejects_out_of_range_values() {
    assert!(QueryI7::new(&[0, 64, -64]).is_some());
    assert!(QueryI7::new(&[65]).is_none());
    assert!(QueryI7::new(&[3, -65]).is_none());
    assert!(QueryI7::new(&[i8::MIN]).is_none());
}

#[test]
fn int8_kernels_at_max_length() {
    let n = eddy_kernels::MAX_INT_LEN;
    let max = vec![255u8; n];
    let zero = vec![0u8; n];
    let min_i = vec![i8::MIN; n];
    for k in backends() {
        assert_eq!(
            k.dot_u8(&max, &max),
            scalar::dot_u8(&max, &max),
            "{}",
            k.name()
        );
        assert_eq!(
            k.l2sq_u8(&max, &zero),
            scalar::l2sq_u8(&max, &zero),
            "{}",
            k.name()
        );
        let mut out = [0u32; 1];
        k.dot_u8_block(&max, &max, &mut out);
        assert_eq!(out[0], scalar::dot_u8(&max, &max), "{}", k.name());
        k.l2sq_u8_block(&zero, &max, &mut out);
        assert_eq!(out[0], scalar::l2sq_u8(&zero, &max), "{}", k.name());
        assert_eq!(
            k.dot_i8(&min_i, &min_i),
            scalar::dot_i8(&min_i, &min_i),
            "{}",
            k.name()
        );
        for extreme in [64i8, -64] {
            let qe = vec![extreme; n];
            let qe = QueryI7::new(&qe).expect("in range");
            assert_eq!(
                k.dot_u8_i7(&max, qe),
                scalar::dot_u8_i7(&max, qe.values()),
                "{}",
                k.name()
            );
        }
    }
}

#[test]
fn bit_kernels_bit_exact() {
    let mut r = rng(4);
    // Words: 1..=130 bits-worth and the large dims, rounded up to u64 words.
    let mut words: Vec<usize> = (1..=40).collect();
    words.extend([48, 64, 96, 128]);
    for &w in &words {
        let a: Vec<u64> = (0..w).map(|_| r.random()).collect();
        let b: Vec<u64> = (0..w).map(|_| r.random()).collect();
        for k in backends() {
            assert_eq!(
                k.hamming(&a, &b),
                scalar::hamming(&a, &b),
                "hamming {} w={w}",
                k.name()
            );
            assert_eq!(
                k.and_popcount(&a, &b),
                scalar::and_popcount(&a, &b),
                "and_popcount {} w={w}",
                k.name()
            );
        }
    }
}

#[test]
fn pq_and_u4_bit_exact() {
    let mut r = rng(5);
    for m in [1usize, 2, 8, 16, 48, 96] {
        let lut = f32s(&mut r, m * 256);
        for rows in [0usize, 1, 7, 8, 9, 33] {
            let codes: Vec<u8> = (0..rows * m).map(|_| r.random()).collect();
            let mut want = vec![0.0; rows];
            scalar::pq_adc(&lut, &codes, &mut want);
            for k in backends() {
                let mut got = vec![1.0; rows];
                k.pq_adc(&lut, &codes, &mut got);
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(g, w)| g.to_bits() == w.to_bits());
                assert!(same, "pq_adc {} m={m} rows={rows}", k.name());
            }
        }
    }
    for blocks in [1usize, 2, 6, 12, 24] {
        let q: Vec<u8> = (0..64 * blocks).map(|_| r.random()).collect();
        let c: Vec<u8> = (0..32 * blocks).map(|_| r.random()).collect();
        for k in backends() {
            assert_eq!(
                k.dot_u8_u4(&q, &c),
                scalar::dot_u8_u4(&q, &c),
                "dot_u8_u4 {}",
                k.name()
            );
        }
    }
}

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
