//! Start-up self-check of a kernel table against the scalar reference.
//!
//! Backends the build machine cannot run (AVX-512 on an AVX2 box, say) are
//! only exercised by the differential tests on a machine that has them. As a
//! guard, the process-wide table is checked once, on fixed inputs, before it
//! is used; a table that disagrees with `scalar` is logged at `error` and the
//! next backend is used instead. It costs a few microseconds.

use crate::scalar;
use crate::table::Kernels;

/// Deterministic pseudo-random bytes (64-bit LCG).
fn lcg_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 56) as u8
        })
        .collect()
}

fn close(got: f32, want: f32, scale: f32) -> bool {
    (got - want).abs() <= 1e-4 * scale + 1e-6
}

/// `Err(kernel)` names the first kernel that disagrees with the scalar reference.
pub(crate) fn check(k: &Kernels) -> Result<(), &'static str> {
    for n in [1usize, 7, 16, 33, 64, 100, 384] {
        let a8 = lcg_bytes(n, 1 + n as u64);
        let b8 = lcg_bytes(n, 1000 + n as u64);
        let a: Vec<f32> = a8.iter().map(|&x| f32::from(x) / 128.0 - 1.0).collect();
        let b: Vec<f32> = b8.iter().map(|&x| f32::from(x) / 128.0 - 1.0).collect();
        let scale = n as f32 * 4.0;
        if !close(k.dot(&a, &b), scalar::dot(&a, &b), scale) {
            return Err("dot");
        }
        if !close(k.l2sq(&a, &b), scalar::l2sq(&a, &b), scale) {
            return Err("l2sq");
        }
        let mut out = [0.0f32; 2];
        let block = [a.clone(), b.clone()].concat();
        k.dot_block(&a, &block, &mut out);
        if !close(out[1], scalar::dot(&a, &b), scale) {
            return Err("dot_block");
        }
        if k.dot_u8(&a8, &b8) != scalar::dot_u8(&a8, &b8) {
            return Err("dot_u8");
        }
        if k.l2sq_u8(&a8, &b8) != scalar::l2sq_u8(&a8, &b8) {
            return Err("l2sq_u8");
        }
        let (ai, bi): (Vec<i8>, Vec<i8>) = (
            a8.iter().map(|&x| x as i8).collect(),
            b8.iter().map(|&x| x as i8).collect(),
        );
        if k.dot_i8(&ai, &bi) != scalar::dot_i8(&ai, &bi) {
            return Err("dot_i8");
        }
        let q7: Vec<i8> = a8
            .iter()
            .map(|&x| (i16::from(x % 129) - 64) as i8)
            .collect();
        if let Some(q) = crate::QueryI7::new(&q7) {
            if k.dot_u8_i7(&b8, q) != scalar::dot_u8_i7(&b8, &q7) {
                return Err("dot_u8_i7");
            }
        }
        let mut outu = [0u32; 2];
        let block8 = [a8.clone(), b8.clone()].concat();
        k.dot_u8_block(&a8, &block8, &mut outu);
        if outu[1] != scalar::dot_u8(&a8, &b8) {
            return Err("dot_u8_block");
        }
        let wa: Vec<u64> = a8
            .chunks(8)
            .map(|c| c.iter().fold(0u64, |w, &x| w << 8 | u64::from(x)))
            .collect();
        let wb: Vec<u64> = b8
            .chunks(8)
            .map(|c| c.iter().fold(0u64, |w, &x| w << 8 | u64::from(x)))
            .collect();
        if k.hamming(&wa, &wb) != scalar::hamming(&wa, &wb) {
            return Err("hamming");
        }
        if k.and_popcount(&wa, &wb) != scalar::and_popcount(&wa, &wb) {
            return Err("and_popcount");
        }
        let block_w = [wa.clone(), wb.clone()].concat();
        k.hamming_block(&wa, &block_w, &mut outu);
        if outu[1] != scalar::hamming(&wa, &wb) {
            return Err("hamming_block");
        }
    }
    let q = lcg_bytes(128, 7);
    let c = lcg_bytes(64, 8);
    if k.dot_u8_u4(&q, &c) != scalar::dot_u8_u4(&q, &c) {
        return Err("dot_u8_u4");
    }
    // 40 values (whole registers and a tail), about half of them kept.
    let values: Vec<u32> = lcg_bytes(40, 9).into_iter().map(u32::from).collect();
    let (mut got, mut want) = ([0u32; 40], [0u32; 40]);
    let n = k.positions_at_most(&values, 127, &mut got);
    let m = scalar::positions_at_most(&values, 127, &mut want);
    if got[..n] != want[..m] {
        return Err("positions_at_most");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::{Backend, Kernels};

    #[test]
    fn every_supported_backend_passes() {
        for b in Backend::ALL {
            if let Some(k) = Kernels::for_backend(b) {
                assert_eq!(super::check(k), Ok(()), "{}", k.name());
            }
        }
    }
}
