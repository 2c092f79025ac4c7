//! f32 kernels: pairs, every alignment, blocks and id lists against pairs.

use eddy_kernels::scalar;
use rand::Rng;

use super::*;

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
