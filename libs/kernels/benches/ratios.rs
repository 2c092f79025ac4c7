//! Interleaved ratio benchmark: robust ratios on a busy machine.
//!
//! Criterion measures one function after another, so load from other processes
//! (this machine has 2 cores shared with concurrent builds) skews ratios. Here
//! every contender runs a short burst in turn, round after round, and the
//! report gives the median ns/op and the median of the per-round ratios.
//!
//! ```text
//! cargo bench -p eddy-kernels --bench ratios
//! ```

use std::hint::black_box;
use std::time::Instant;

use eddy_kernels::{Backend, Kernels};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use simsimd::{BinarySimilarity, SpatialSimilarity};

const DIMS: [usize; 4] = [128, 384, 768, 1536];
const ROUNDS: usize = 41;
const BURST_NS: f64 = 1e6;
const SCAN_BYTES: usize = 256 << 20;

type Case<'a> = (String, Box<dyn FnMut() + 'a>);

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the cases interleaved; returns median ns/op of each and per-round ns.
fn measure(cases: &mut [Case<'_>]) -> Vec<Vec<f64>> {
    let mut iters = vec![1u64; cases.len()];
    for (i, (_, f)) in cases.iter_mut().enumerate() {
        let t = Instant::now();
        let mut n = 0u64;
        while t.elapsed().as_nanos() < 200_000 {
            f();
            n += 1;
        }
        iters[i] = ((n as f64 * BURST_NS / 2e5) as u64).max(1);
    }
    let mut ns = vec![Vec::with_capacity(ROUNDS); cases.len()];
    for _ in 0..ROUNDS {
        for (i, (_, f)) in cases.iter_mut().enumerate() {
            let t = Instant::now();
            for _ in 0..iters[i] {
                f();
            }
            ns[i].push(t.elapsed().as_nanos() as f64 / iters[i] as f64);
        }
    }
    ns
}

fn row(kernel: &str, cases: &mut [Case<'_>]) {
    let ns = measure(cases);
    let names: Vec<&str> = cases.iter().map(|c| c.0.as_str()).collect();
    let cells: Vec<String> = ns
        .iter()
        .map(|v| format!("{:.1}", median(v.clone())))
        .collect();
    // Ratios per round against the first case (eddy's dispatched kernel).
    let ratios: Vec<String> = (1..ns.len())
        .map(|j| {
            let r: Vec<f64> = ns[0].iter().zip(&ns[j]).map(|(a, b)| b / a).collect();
            format!("{}: {:.2}x", names[j], median(r))
        })
        .collect();
    println!(
        "| {kernel} | {} | {} |",
        cells.join(" / "),
        ratios.join(", ")
    );
}

fn f32s(r: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| r.random_range(-1.0f32..1.0)).collect()
}

fn main() {
    // `cargo bench` passes `--bench`; under `cargo test --all-targets` do nothing.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let best = Kernels::get();
    let others: Vec<&'static Kernels> = Backend::ALL
        .into_iter()
        .filter_map(Kernels::for_backend)
        .filter(|k| k.backend() != best.backend())
        .collect();
    let mut r = ChaCha8Rng::seed_from_u64(5);
    println!(
        "dispatched backend: {}; ratio = other ns / eddy ns (> 1: eddy faster)\n",
        best.name()
    );
    let other_names: Vec<&str> = others.iter().map(|k| k.backend().as_str()).collect();
    println!(
        "| kernel | ns/op: eddy-{} / {} / simsimd | ratios |",
        best.backend(),
        other_names.join(" / ")
    );
    println!("|---|---|---|");
    for dim in DIMS {
        let (a, b) = (f32s(&mut r, dim), f32s(&mut r, dim));
        let (ai, bi): (Vec<i8>, Vec<i8>) = (
            (0..dim).map(|_| r.random()).collect(),
            (0..dim).map(|_| r.random()).collect(),
        );
        let (au, bu): (Vec<u8>, Vec<u8>) = (
            (0..dim).map(|_| r.random()).collect(),
            (0..dim).map(|_| r.random()).collect(),
        );
        let (wa, wb): (Vec<u64>, Vec<u64>) = (
            (0..dim / 64).map(|_| r.random()).collect(),
            (0..dim / 64).map(|_| r.random()).collect(),
        );
        let (ba, bb) = (au[..dim / 8].to_vec(), bu[..dim / 8].to_vec());

        let mut cases: Vec<Case<'_>> = vec![(
            best.name().into(),
            Box::new(|| {
                black_box(best.dot(black_box(&a), black_box(&b)));
            }),
        )];
        for k in &others {
            cases.push((
                k.name().into(),
                Box::new(|| {
                    black_box(k.dot(black_box(&a), black_box(&b)));
                }),
            ));
        }
        cases.push((
            "simsimd".into(),
            Box::new(|| {
                black_box(f32::dot(black_box(&a), black_box(&b)));
            }),
        ));
        row(&format!("dot_f32/{dim}"), &mut cases);

        let mut cases: Vec<Case<'_>> = vec![(
            best.name().into(),
            Box::new(|| {
                black_box(best.l2sq(black_box(&a), black_box(&b)));
            }),
        )];
        for k in &others {
            cases.push((
                k.name().into(),
                Box::new(|| {
                    black_box(k.l2sq(black_box(&a), black_box(&b)));
                }),
            ));
        }
        cases.push((
            "simsimd".into(),
            Box::new(|| {
                black_box(f32::sqeuclidean(black_box(&a), black_box(&b)));
            }),
        ));
        row(&format!("l2sq_f32/{dim}"), &mut cases);

        let mut cases: Vec<Case<'_>> = vec![(
            best.name().into(),
            Box::new(|| {
                black_box(best.dot_i8(black_box(&ai), black_box(&bi)));
            }),
        )];
        for k in &others {
            cases.push((
                k.name().into(),
                Box::new(|| {
                    black_box(k.dot_i8(black_box(&ai), black_box(&bi)));
                }),
            ));
        }
        cases.push((
            "simsimd".into(),
            Box::new(|| {
                black_box(i8::dot(black_box(&ai), black_box(&bi)));
            }),
        ));
        row(&format!("dot_i8/{dim}"), &mut cases);

        let mut cases: Vec<Case<'_>> = vec![(
            best.name().into(),
            Box::new(|| {
                black_box(best.dot_u8(black_box(&au), black_box(&bu)));
            }),
        )];
        for k in &others {
            cases.push((
                k.name().into(),
                Box::new(|| {
                    black_box(k.dot_u8(black_box(&au), black_box(&bu)));
                }),
            ));
        }
        cases.push((
            "simsimd i8".into(),
            Box::new(|| {
                black_box(i8::dot(black_box(&ai), black_box(&bi)));
            }),
        ));
        row(&format!("dot_u8/{dim}"), &mut cases);

        let mut cases: Vec<Case<'_>> = vec![(
            best.name().into(),
            Box::new(|| {
                black_box(best.l2sq_u8(black_box(&au), black_box(&bu)));
            }),
        )];
        for k in &others {
            cases.push((
                k.name().into(),
                Box::new(|| {
                    black_box(k.l2sq_u8(black_box(&au), black_box(&bu)));
                }),
            ));
        }
        cases.push((
            "simsimd i8".into(),
            Box::new(|| {
                black_box(i8::sqeuclidean(black_box(&ai), black_box(&bi)));
            }),
        ));
        row(&format!("l2sq_u8/{dim}"), &mut cases);

        let mut cases: Vec<Case<'_>> = vec![(
            best.name().into(),
            Box::new(|| {
                black_box(best.hamming(black_box(&wa), black_box(&wb)));
            }),
        )];
        for k in &others {
            cases.push((
                k.name().into(),
                Box::new(|| {
                    black_box(k.hamming(black_box(&wa), black_box(&wb)));
                }),
            ));
        }
        cases.push((
            "simsimd".into(),
            Box::new(|| {
                black_box(u8::hamming(black_box(&ba), black_box(&bb)));
            }),
        ));
        row(&format!("hamming/{dim}b"), &mut cases);

        // Batch form: one query against 256 codes (per-row ns), next to per-call simsimd.
        let rows = 256;
        let words = dim / 64;
        let wblock: Vec<u64> = (0..rows * words).map(|_| r.random()).collect();
        let bblock: Vec<u8> = (0..rows * dim / 8).map(|_| r.random()).collect();
        let mut hout = vec![0u32; rows];
        let mut cases: Vec<Case<'_>> = vec![(
            best.name().into(),
            Box::new(|| {
                best.hamming_block(black_box(&wa), black_box(&wblock), &mut hout);
            }),
        )];
        cases.push((
            "simsimd x256".into(),
            Box::new(|| {
                for row in bblock.chunks_exact(dim / 8) {
                    black_box(u8::hamming(black_box(&ba), row));
                }
            }),
        ));
        row(&format!("hamming_block x256/{dim}b"), &mut cases);

        // Asymmetric binary: a 4-bit query (4 bit planes) against a 1-bit code.
        let planes: Vec<u64> = (0..4 * words).map(|_| r.random()).collect();
        let mut cases: Vec<Case<'_>> = vec![(
            best.name().into(),
            Box::new(|| {
                black_box(best.and_popcount_weighted(black_box(&planes), black_box(&wb)));
            }),
        )];
        for k in &others {
            cases.push((
                k.name().into(),
                Box::new(|| {
                    black_box(k.and_popcount_weighted(black_box(&planes), black_box(&wb)));
                }),
            ));
        }
        row(&format!("and_popcount_weighted 4x{dim}b"), &mut cases);
    }

    // PQ ADC: m = dim / 8 sub-spaces, 1024 codes per call (per-call ns).
    for dim in DIMS {
        let m = dim / 8;
        let lut = f32s(&mut r, m * 256);
        let codes: Vec<u8> = (0..1024 * m).map(|_| r.random()).collect();
        let mut out = vec![0.0f32; 1024];
        let mut out2 = vec![0.0f32; 1024];
        let mut cases: Vec<Case<'_>> = vec![(
            best.name().into(),
            Box::new(|| best.pq_adc(black_box(&lut), &codes, &mut out)),
        )];
        cases.push((
            "naive scalar".into(),
            Box::new(|| {
                for (row, o) in codes.chunks_exact(m).zip(out2.iter_mut()) {
                    *o = row
                        .iter()
                        .enumerate()
                        .map(|(j, &c)| lut[j * 256 + usize::from(c)])
                        .sum();
                }
                black_box(&out2);
            }),
        ));
        row(&format!("pq_adc x1024/m={m}"), &mut cases);
    }

    // Block scan over 8x L3 next to a memcpy of the same bytes, interleaved.
    let dim = 384;
    let rows = SCAN_BYTES / (dim * 4);
    let block = f32s(&mut r, rows * dim);
    let q = f32s(&mut r, dim);
    let mut out = vec![0.0f32; rows];
    let mut dst = vec![0.0f32; rows * dim];
    let codes: Vec<u8> = (0..SCAN_BYTES / dim * dim)
        .map(|i| (i * 31 % 251) as u8)
        .collect();
    let qc: Vec<u8> = codes[..dim].to_vec();
    let mut out_u = vec![0u32; SCAN_BYTES / dim];
    let mut scans = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..9 {
        let t = Instant::now();
        best.dot_block(black_box(&q), &block, &mut out);
        scans[0].push(SCAN_BYTES as f64 / t.elapsed().as_nanos() as f64);
        let t = Instant::now();
        dst.copy_from_slice(black_box(&block));
        scans[1].push(SCAN_BYTES as f64 / t.elapsed().as_nanos() as f64);
        let t = Instant::now();
        best.dot_u8_block(black_box(&qc), &codes, &mut out_u);
        scans[2].push(SCAN_BYTES as f64 / t.elapsed().as_nanos() as f64);
    }
    black_box((&out, &dst, &out_u));
    let [f32_scan, copy, u8_scan] = scans.map(median);
    println!(
        "\nblock scan over {} MiB (L3 = 32 MiB), median of 9 interleaved rounds:",
        SCAN_BYTES >> 20
    );
    println!(
        "- memcpy: {copy:.2} GB/s copied ({:.2} GB/s read+write)",
        2.0 * copy
    );
    println!(
        "- dot_block f32 (dim 384): {f32_scan:.2} GB/s = {:.0}% of copy ({:.0}% of read+write)",
        100.0 * f32_scan / copy,
        50.0 * f32_scan / copy
    );
    println!(
        "- dot_u8_block (dim 384): {u8_scan:.2} GB/s = {:.0}% of copy ({:.0}% of read+write)",
        100.0 * u8_scan / copy,
        50.0 * u8_scan / copy
    );
}
