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

mod bits;
mod edges;
mod f32;
mod int;

use eddy_kernels::{Backend, Kernels};
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
