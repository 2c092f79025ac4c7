//! Integer kernels (u8, i8, 7-bit queries): bit for bit, blocks against pairs, the longest rows.

use eddy_kernels::{scalar, QueryI7};
use rand::Rng;

use super::*;

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
