//! Bit, PQ and 4-bit kernels: bit for bit.

use eddy_kernels::scalar;
use rand::Rng;

use super::*;

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
