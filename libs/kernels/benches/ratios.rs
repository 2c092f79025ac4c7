//! Interleaved ratio benchmark: robust ratios on a busy machine.
//!
//! Criterion measures one function after another, so load from other processes
//! (this machine has 2 cores shared with concurrent builds) skews ratios. Here
//! every contender runs a short burst in turn, round after round, and the
//! report gives the median ns/op and the median of the per-round ratios.
//!
//! Contenders: the dispatched table first, then every other table of
//! `Kernels::variants()` (e.g. `avx2`, `avx512-all`, `avx512-bw`, `scalar`),
//! then simsimd where it has the kernel. Where both exist, the last ratio,
//! `512/2`, is AVX2 ns over `avx512-all` ns per round (> 1: the AVX-512
//! variant is faster): the number the per-kernel dispatch rule reads.
//!
//! Memory layout, as in eddy: every row (the second operand; the code operand
//! of `dot_u8_i7`) starts on a 64-byte boundary, like the rows of a segment
//! (64-byte aligned sections, rows a multiple of 64 bytes), and every query
//! starts [`QUERY_OFFSET`] bytes past one, like a heap-allocated query
//! (glibc's malloc aligns to 16). Unaligned 512-bit loads split two cache
//! lines, so the layout moves the f32 AVX-512/AVX2 ratio by up to 1.5x.
//!
//! ```text
//! cargo bench -p eddy-kernels --bench ratios              # every row
//! cargo bench -p eddy-kernels --bench ratios -- dot_u8    # rows whose name contains a filter
//! ```

use std::hint::black_box;
use std::time::Instant;

use eddy_kernels::{Kernels, QueryI7};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use simsimd::{BinarySimilarity, SpatialSimilarity};

const DIMS: [usize; 4] = [128, 384, 768, 1536];
const ROUNDS: usize = 41;
const BURST_NS: f64 = 1e6;
const SCAN_BYTES: usize = 256 << 20;

/// Bytes past a 64-byte boundary at which each query starts (rows start on one).
const QUERY_OFFSET: usize = 16;

type Case<'a> = (String, Box<dyn FnMut() + 'a>);

/// A copy of some values that starts a chosen number of bytes past a 64-byte boundary.
struct Placed<T> {
    buf: Vec<T>,
    start: usize,
    len: usize,
}

impl<T: Copy + Default> Placed<T> {
    fn new(values: &[T], offset: usize) -> Self {
        let size = std::mem::size_of::<T>();
        let mut buf = vec![T::default(); values.len() + 128 / size];
        let misalignment = buf.as_ptr() as usize % 64;
        let start = ((64 - misalignment) % 64 + offset) / size;
        buf[start..start + values.len()].copy_from_slice(values);
        Self {
            buf,
            start,
            len: values.len(),
        }
    }

    /// A query: [`QUERY_OFFSET`] bytes past a cache line.
    fn query(values: Vec<T>) -> Self {
        Self::new(&values, QUERY_OFFSET)
    }

    /// A row or block of rows: on a cache line.
    fn row(values: Vec<T>) -> Self {
        Self::new(&values, 0)
    }
}

impl<T> std::ops::Deref for Placed<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.buf[self.start..self.start + self.len]
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the cases interleaved; returns per-round ns/op of each.
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

/// Median of the per-round ratios `ns[num] / ns[den]`.
fn ratio(ns: &[Vec<f64>], num: usize, den: usize) -> f64 {
    median(ns[num].iter().zip(&ns[den]).map(|(a, b)| a / b).collect())
}

/// The rows to run: those whose name contains one of the command-line filters.
struct Rows {
    filters: Vec<String>,
}

impl Rows {
    fn wanted(&self, kernel: &str) -> bool {
        self.filters.is_empty() || self.filters.iter().any(|f| kernel.contains(f.as_str()))
    }

    /// Measures `cases` and prints one markdown row.
    fn run(&self, kernel: &str, mut cases: Vec<Case<'_>>) {
        if !self.wanted(kernel) {
            return;
        }
        let ns = measure(&mut cases);
        let names: Vec<&str> = cases.iter().map(|c| c.0.as_str()).collect();
        let cells: Vec<String> = ns
            .iter()
            .map(|v| format!("{:.1}", median(v.clone())))
            .collect();
        // Ratios per round against the first case (eddy's dispatched kernel).
        let mut ratios: Vec<String> = (1..ns.len())
            .map(|j| format!("{}: {:.2}x", names[j], ratio(&ns, j, 0)))
            .collect();
        let avx2 = names.iter().position(|n| *n == "avx2");
        let all = names.iter().position(|n| n.starts_with("avx512-all"));
        if let (Some(avx2), Some(all)) = (avx2, all) {
            ratios.push(format!("512/2: {:.2}x", ratio(&ns, avx2, all)));
        }
        println!(
            "| {kernel} | {} | {} |",
            cells.join(" / "),
            ratios.join(", ")
        );
    }
}

/// One case per table, named after the table, running `f(table)`.
fn per_table<'a>(
    tables: &[&'static Kernels],
    f: impl Fn(&'static Kernels) -> Box<dyn FnMut() + 'a>,
) -> Vec<Case<'a>> {
    tables
        .iter()
        .map(|&k| (k.name().to_owned(), f(k)))
        .collect()
}

fn with_reference<'a>(mut cases: Vec<Case<'a>>, name: &str, f: impl FnMut() + 'a) -> Vec<Case<'a>> {
    cases.push((name.to_owned(), Box::new(f)));
    cases
}

fn f32s(r: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| r.random_range(-1.0f32..1.0)).collect()
}

fn randoms<T>(r: &mut ChaCha8Rng, n: usize) -> Vec<T>
where
    rand::distr::StandardUniform: rand::distr::Distribution<T>,
{
    (0..n).map(|_| r.random()).collect()
}

/// The dispatched table first, then every other variant table.
fn tables() -> Vec<&'static Kernels> {
    let best = Kernels::get();
    let mut tables = vec![best];
    tables.extend(
        Kernels::variants()
            .into_iter()
            .filter(|k| k.name() != best.name()),
    );
    tables
}

fn main() {
    // `cargo bench` passes `--bench`; under `cargo test --all-targets` do nothing.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rows = Rows {
        filters: std::env::args()
            .skip(1)
            .filter(|a| !a.starts_with("--"))
            .collect(),
    };
    let tables = tables();
    let best = tables[0];
    println!(
        "dispatched backend: {}; ratio = other ns / eddy ns (> 1: eddy faster)\n",
        best.name()
    );
    let names: Vec<&str> = tables.iter().map(|k| k.name()).collect();
    println!(
        "| kernel | ns/op: {} / reference | ratios |",
        names.join(" / ")
    );
    println!("|---|---|---|");
    let mut r = ChaCha8Rng::seed_from_u64(5);
    for dim in DIMS {
        pair_rows(&rows, &tables, &mut r, dim);
        code_rows(&rows, &tables, &mut r, dim);
    }
    pq_rows(&rows, best, &mut r);
    select_rows(&rows, &tables, &mut r);
    if rows.wanted("scan") {
        block_scan(best, &mut r);
    }
}

/// f32 and byte kernels on one pair of `dim`-long vectors.
fn pair_rows(rows: &Rows, tables: &[&'static Kernels], r: &mut ChaCha8Rng, dim: usize) {
    let (a, b) = (Placed::query(f32s(r, dim)), Placed::row(f32s(r, dim)));
    let (ai, bi) = (Placed::query(randoms(r, dim)), Placed::row(randoms(r, dim)));
    let (au, bu) = (Placed::query(randoms(r, dim)), Placed::row(randoms(r, dim)));
    let q7 = Placed::query(ai.iter().map(|&x: &i8| (x / 2).clamp(-64, 64)).collect());
    let (a, b): (&[f32], &[f32]) = (&a, &b);
    let (ai, bi): (&[i8], &[i8]) = (&ai, &bi);
    let (au, bu): (&[u8], &[u8]) = (&au, &bu);
    let q7 = QueryI7::new(&q7).expect("halved i8 lies in -64..=64");

    let cases = per_table(tables, |k| {
        Box::new(move || {
            black_box(k.dot(black_box(a), black_box(b)));
        })
    });
    rows.run(
        &format!("dot_f32/{dim}"),
        with_reference(cases, "simsimd", || {
            black_box(f32::dot(black_box(a), black_box(b)));
        }),
    );
    let cases = per_table(tables, |k| {
        Box::new(move || {
            black_box(k.l2sq(black_box(a), black_box(b)));
        })
    });
    rows.run(
        &format!("l2sq_f32/{dim}"),
        with_reference(cases, "simsimd", || {
            black_box(f32::sqeuclidean(black_box(a), black_box(b)));
        }),
    );
    let cases = per_table(tables, |k| {
        Box::new(move || {
            black_box(k.dot_i8(black_box(ai), black_box(bi)));
        })
    });
    rows.run(
        &format!("dot_i8/{dim}"),
        with_reference(cases, "simsimd", || {
            black_box(i8::dot(black_box(ai), black_box(bi)));
        }),
    );
    // simsimd's Rust API has no u8 dot or L2: its i8 kernels are the same work.
    let cases = per_table(tables, |k| {
        Box::new(move || {
            black_box(k.dot_u8(black_box(au), black_box(bu)));
        })
    });
    rows.run(
        &format!("dot_u8/{dim}"),
        with_reference(cases, "simsimd i8", || {
            black_box(i8::dot(black_box(ai), black_box(bi)));
        }),
    );
    let cases = per_table(tables, |k| {
        Box::new(move || {
            black_box(k.l2sq_u8(black_box(au), black_box(bu)));
        })
    });
    rows.run(
        &format!("l2sq_u8/{dim}"),
        with_reference(cases, "simsimd i8", || {
            black_box(i8::sqeuclidean(black_box(ai), black_box(bi)));
        }),
    );
    // The f32 graph walk's kernel: 32 rows of a 1024-row matrix (in cache) per call.
    let data = Placed::row(f32s(r, 1024 * dim));
    let data: &[f32] = &data;
    let ids: Vec<u32> = (0..32).map(|_| r.random_range(0..1024)).collect();
    let ids = &ids;
    let cases = per_table(tables, |k| {
        let mut out = vec![0.0f32; ids.len()];
        Box::new(move || k.dot_ids(black_box(a), black_box(data), ids, &mut out))
    });
    rows.run(&format!("dot_ids x32/{dim}"), cases);
    // The SQ8 graph walk's kernel (u8 codes x 7-bit query).
    let cases = per_table(tables, |k| {
        Box::new(move || {
            black_box(k.dot_u8_i7(black_box(bu), black_box(q7)));
        })
    });
    rows.run(&format!("dot_u8_i7/{dim}"), cases);
}

/// Block and binary kernels at `dim` (bytes per u8 row, bits per binary code).
fn code_rows(rows: &Rows, tables: &[&'static Kernels], r: &mut ChaCha8Rng, dim: usize) {
    // Batch forms: one query against 256 rows (per-call ns).
    let n_rows = 256;
    let words = dim / 64;
    let qu = Placed::<u8>::query(randoms(r, dim));
    let ublock = Placed::<u8>::row(randoms(r, n_rows * dim));
    let (wa, wb) = (
        Placed::<u64>::query(randoms(r, words)),
        Placed::<u64>::row(randoms(r, words)),
    );
    let wblock = Placed::<u64>::row(randoms(r, n_rows * words));
    let bblock = Placed::<u8>::row(randoms(r, n_rows * dim / 8));
    let ba = Placed::<u8>::query(randoms(r, dim / 8));
    let bb = Placed::<u8>::row(randoms(r, dim / 8));
    let planes = Placed::<u64>::query(randoms(r, 4 * words));
    let (qu, ublock): (&[u8], &[u8]) = (&qu, &ublock);
    let (wa, wb, wblock): (&[u64], &[u64], &[u64]) = (&wa, &wb, &wblock);
    let (bblock, ba, bb, planes): (&[u8], &[u8], &[u8], &[u64]) = (&bblock, &ba, &bb, &planes);

    let cases = per_table(tables, |k| {
        let mut out = vec![0u32; n_rows];
        Box::new(move || k.dot_u8_block(black_box(qu), black_box(ublock), &mut out))
    });
    rows.run(&format!("dot_u8_block x256/{dim}"), cases);
    let cases = per_table(tables, |k| {
        let mut out = vec![0u32; n_rows];
        Box::new(move || k.l2sq_u8_block(black_box(qu), black_box(ublock), &mut out))
    });
    rows.run(&format!("l2sq_u8_block x256/{dim}"), cases);
    let cases = per_table(tables, |k| {
        Box::new(move || {
            black_box(k.hamming(black_box(wa), black_box(wb)));
        })
    });
    rows.run(
        &format!("hamming/{dim}b"),
        with_reference(cases, "simsimd", || {
            black_box(u8::hamming(black_box(ba), black_box(bb)));
        }),
    );
    let cases = per_table(tables, |k| {
        let mut out = vec![0u32; n_rows];
        Box::new(move || k.hamming_block(black_box(wa), black_box(wblock), &mut out))
    });
    rows.run(
        &format!("hamming_block x256/{dim}b"),
        with_reference(cases, "simsimd x256", || {
            for row in bblock.chunks_exact(dim / 8) {
                black_box(u8::hamming(black_box(ba), row));
            }
        }),
    );
    // Asymmetric binary: a 4-bit query (4 bit planes) against a 1-bit code.
    let cases = per_table(tables, |k| {
        Box::new(move || {
            black_box(k.and_popcount_weighted(black_box(planes), black_box(wb)));
        })
    });
    rows.run(&format!("and_popcount_weighted 4x{dim}b"), cases);
}

/// Positions of the values at most a limit over 1,024 Hamming-like
/// distances (0..384), the limit keeping ~5 % (a shortlist's first pass)
/// and ~50 % of them (per-call ns).
fn select_rows(rows: &Rows, tables: &[&'static Kernels], r: &mut ChaCha8Rng) {
    let values: Vec<u32> = (0..1024)
        .map(|_| (0..6).map(|_| r.random::<u64>().count_ones()).sum::<u32>() / 2)
        .collect();
    let values = &values;
    for (limit, kept) in [(88, "5%"), (96, "50%")] {
        let cases = per_table(tables, |k| {
            let mut out = vec![0u32; values.len()];
            Box::new(move || {
                black_box(k.positions_at_most(black_box(values), limit, &mut out));
            })
        });
        rows.run(&format!("positions_at_most x1024/{kept}"), cases);
    }
}

/// PQ ADC: m = dim / 8 sub-spaces, 1024 codes per call (per-call ns).
fn pq_rows(rows: &Rows, best: &'static Kernels, r: &mut ChaCha8Rng) {
    for dim in DIMS {
        let m = dim / 8;
        let lut = f32s(r, m * 256);
        let codes: Vec<u8> = randoms(r, 1024 * m);
        let (lut, codes) = (&lut, &codes);
        let mut out2 = vec![0.0f32; 1024];
        let cases = per_table(&[best], |k| {
            let mut out = vec![0.0f32; 1024];
            Box::new(move || k.pq_adc(black_box(lut), codes, &mut out))
        });
        let cases = with_reference(cases, "naive scalar", || {
            for (row, o) in codes.chunks_exact(m).zip(out2.iter_mut()) {
                *o = row
                    .iter()
                    .enumerate()
                    .map(|(j, &c)| lut[j * 256 + usize::from(c)])
                    .sum();
            }
            black_box(&out2);
        });
        rows.run(&format!("pq_adc x1024/m={m}"), cases);
    }
}

/// Block scan over 8x L3 next to a memcpy of the same bytes, interleaved.
fn block_scan(best: &'static Kernels, r: &mut ChaCha8Rng) {
    let dim = 384;
    let rows = SCAN_BYTES / (dim * 4);
    let block = Placed::row(f32s(r, rows * dim));
    let q = Placed::query(f32s(r, dim));
    let mut out = vec![0.0f32; rows];
    let mut dst = vec![0.0f32; rows * dim];
    let codes = Placed::row(
        (0..SCAN_BYTES / dim * dim)
            .map(|i| (i * 31 % 251) as u8)
            .collect(),
    );
    let qc = Placed::query(codes[..dim].to_vec());
    let mut out_u = vec![0u32; SCAN_BYTES / dim];
    let mut scans = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..9 {
        let t = Instant::now();
        best.dot_block(black_box(&q[..]), &block, &mut out);
        scans[0].push(SCAN_BYTES as f64 / t.elapsed().as_nanos() as f64);
        let t = Instant::now();
        dst.copy_from_slice(black_box(&block[..]));
        scans[1].push(SCAN_BYTES as f64 / t.elapsed().as_nanos() as f64);
        let t = Instant::now();
        best.dot_u8_block(black_box(&qc[..]), &codes, &mut out_u);
        scans[2].push(SCAN_BYTES as f64 / t.elapsed().as_nanos() as f64);
    }
    black_box((&out, &dst, &out_u));
    let [f32_scan, copy, u8_scan] = scans.map(median);
    println!(
        "\nblock scan over {} MiB, median of 9 interleaved rounds:",
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
