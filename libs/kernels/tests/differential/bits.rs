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

/// Block Hamming over every row width up to 20 words (the widths with a
/// kernel of their own among them) and row counts from none to many cache
/// lines, against the scalar pair kernel row by row.
#[test]
fn hamming_block_bit_exact_for_every_short_row_width() {
    let mut r = rng(7);
    for words in 1..=20usize {
        let query: Vec<u64> = (0..words).map(|_| r.random()).collect();
        for rows in [0usize, 1, 2, 5, 63, 130] {
            let block: Vec<u64> = (0..words * rows).map(|_| r.random()).collect();
            let want: Vec<u32> = block
                .chunks_exact(words)
                .map(|row| scalar::hamming(&query, row))
                .collect();
            for k in backends() {
                let mut out = vec![u32::MAX; rows];
                k.hamming_block(&query, &block, &mut out);
                assert_eq!(
                    out,
                    want,
                    "hamming_block {} words={words} rows={rows}",
                    k.name()
                );
            }
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

/// The positions of the values at most a limit, for lengths around every
/// register width and limits keeping none, a few %, half and all values,
/// against the scalar kernel: the same positions, in order (what lies past
/// them in `out` is unspecified).
#[test]
fn positions_at_most_match_the_scalar_selection() {
    let mut r = rng(11);
    for len in [0usize, 1, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1_024, 1_031] {
        let values: Vec<u32> = (0..len).map(|_| r.random_range(0..400u32)).collect();
        for limit in [0, 12, 200, 399, u32::MAX] {
            let mut want = vec![0u32; len];
            let n = scalar::positions_at_most(&values, limit, &mut want);
            want.truncate(n);
            let plain: Vec<u32> = (0..len as u32)
                .filter(|&i| values[i as usize] <= limit)
                .collect();
            assert_eq!(want, plain, "scalar len={len} limit={limit}");
            for k in backends() {
                let mut got = vec![u32::MAX; len];
                let m = k.positions_at_most(&values, limit, &mut got);
                assert_eq!(
                    &got[..m],
                    &want[..],
                    "positions_at_most {} len={len} limit={limit}",
                    k.name()
                );
            }
        }
    }
}
