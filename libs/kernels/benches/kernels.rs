//! Kernel benchmarks: every kernel × backend × dim, next to `simsimd` where it
//! has the same kernel, plus a block scan over more than L3 next to a memcpy of
//! the same bytes. Ends with a summary table (ns/op and ratios).
//!
//! ```text
//! cargo bench -p eddy-kernels --bench kernels -- --warm-up-time 1 --measurement-time 2
//! ```

use std::hint::black_box;
use std::path::{Path, PathBuf};

use criterion::{BenchmarkId, Criterion, Throughput};
use eddy_kernels::Kernels;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use simsimd::{BinarySimilarity, SpatialSimilarity};

const DIMS: [usize; 4] = [128, 384, 768, 1536];
/// Bytes of f32 rows scanned by the block benchmark: 8x the 32 MiB L3 here.
const SCAN_BYTES: usize = 256 << 20;

/// Every table this CPU can run, the variants the dispatch does not pick included.
fn tables() -> Vec<&'static Kernels> {
    Kernels::variants()
}

fn rng() -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(11)
}

fn f32s(n: usize) -> Vec<f32> {
    let mut r = rng();
    (0..n).map(|_| r.random_range(-1.0f32..1.0)).collect()
}

fn bytes<T>(n: usize) -> Vec<T>
where
    rand::distr::StandardUniform: rand::distr::Distribution<T>,
{
    let mut r = rng();
    (0..n).map(|_| r.random()).collect()
}

fn pairs(c: &mut Criterion) {
    for dim in DIMS {
        let (a, b) = (f32s(dim), f32s(dim + 1)[1..].to_vec());
        let mut g = c.benchmark_group(format!("dot_f32/{dim}"));
        for k in tables() {
            g.bench_function(k.name(), |bn| {
                bn.iter(|| k.dot(black_box(&a), black_box(&b)))
            });
        }
        g.bench_function("simsimd", |bn| {
            bn.iter(|| f32::dot(black_box(&a), black_box(&b)))
        });
        g.finish();

        let mut g = c.benchmark_group(format!("l2sq_f32/{dim}"));
        for k in tables() {
            g.bench_function(k.name(), |bn| {
                bn.iter(|| k.l2sq(black_box(&a), black_box(&b)))
            });
        }
        g.bench_function("simsimd", |bn| {
            bn.iter(|| f32::sqeuclidean(black_box(&a), black_box(&b)))
        });
        g.finish();

        let (ai, bi): (Vec<i8>, Vec<i8>) = (bytes(dim), bytes::<i8>(dim + 1)[1..].to_vec());
        let mut g = c.benchmark_group(format!("dot_i8/{dim}"));
        for k in tables() {
            g.bench_function(k.name(), |bn| {
                bn.iter(|| k.dot_i8(black_box(&ai), black_box(&bi)))
            });
        }
        g.bench_function("simsimd", |bn| {
            bn.iter(|| i8::dot(black_box(&ai), black_box(&bi)))
        });
        g.finish();

        let (au, bu): (Vec<u8>, Vec<u8>) = (bytes(dim), bytes::<u8>(dim + 1)[1..].to_vec());
        let mut g = c.benchmark_group(format!("dot_u8/{dim}"));
        for k in tables() {
            g.bench_function(k.name(), |bn| {
                bn.iter(|| k.dot_u8(black_box(&au), black_box(&bu)))
            });
        }
        g.finish();

        // simsimd has no u8 L2 in its Rust API; its i8 L2 is the closest kernel.
        let mut g = c.benchmark_group(format!("l2sq_u8/{dim}"));
        for k in tables() {
            g.bench_function(k.name(), |bn| {
                bn.iter(|| k.l2sq_u8(black_box(&au), black_box(&bu)))
            });
        }
        g.bench_function("simsimd", |bn| {
            bn.iter(|| i8::sqeuclidean(black_box(&ai), black_box(&bi)))
        });
        g.finish();

        // `dim` bits per code.
        let (wa, wb): (Vec<u64>, Vec<u64>) =
            (bytes(dim / 64), bytes::<u64>(dim / 64 + 1)[1..].to_vec());
        let (ba, bb): (Vec<u8>, Vec<u8>) = (au[..dim / 8].to_vec(), bu[..dim / 8].to_vec());
        let mut g = c.benchmark_group(format!("hamming/{dim}"));
        for k in tables() {
            g.bench_function(k.name(), |bn| {
                bn.iter(|| k.hamming(black_box(&wa), black_box(&wb)))
            });
        }
        g.bench_function("simsimd", |bn| {
            bn.iter(|| u8::hamming(black_box(&ba), black_box(&bb)))
        });
        g.finish();

        let q4: Vec<u8> = bytes(dim);
        let c4: Vec<u8> = bytes(dim / 2);
        let mut g = c.benchmark_group(format!("dot_u8_u4/{dim}"));
        for k in tables() {
            g.bench_function(k.name(), |bn| {
                bn.iter(|| k.dot_u8_u4(black_box(&q4), black_box(&c4)))
            });
        }
        g.finish();
    }
}

fn batches(c: &mut Criterion) {
    // Graph traversal: 32 random rows of a 100k-row matrix per call.
    let dim = 384;
    let rows = 100_000;
    let data = f32s(rows * dim);
    let q = f32s(dim);
    let mut r = rng();
    let ids: Vec<u32> = (0..32).map(|_| r.random_range(0..rows as u32)).collect();
    let mut out = vec![0.0f32; ids.len()];
    let mut g = c.benchmark_group("dot_ids_f32/384x32");
    for k in tables() {
        g.bench_function(k.name(), |bn| {
            bn.iter(|| k.dot_ids(black_box(&q), &data, &ids, &mut out))
        });
    }
    g.finish();

    // PQ ADC: m = dim / 8 sub-spaces, 1024 codes per call.
    for dim in DIMS {
        let m = dim / 8;
        let lut = f32s(m * 256);
        let codes: Vec<u8> = bytes(1024 * m);
        let mut out = vec![0.0f32; 1024];
        let mut g = c.benchmark_group(format!("pq_adc_x1024/{dim}"));
        for k in tables() {
            g.bench_function(k.name(), |bn| {
                bn.iter(|| k.pq_adc(black_box(&lut), &codes, &mut out))
            });
        }
        g.finish();
    }
}

fn block_scan(c: &mut Criterion) {
    let dim = 384;
    let rows = SCAN_BYTES / (dim * 4);
    let block = f32s(rows * dim);
    let q = f32s(dim);
    let mut out = vec![0.0f32; rows];
    let mut g = c.benchmark_group("scan_256MiB");
    g.sample_size(10);
    g.throughput(Throughput::Bytes((rows * dim * 4) as u64));
    for k in tables() {
        g.bench_with_input(BenchmarkId::new("dot_block", k.name()), &(), |bn, _| {
            bn.iter(|| k.dot_block(black_box(&q), &block, &mut out))
        });
    }
    let mut dst = vec![0.0f32; rows * dim];
    g.bench_function("memcpy", |bn| {
        bn.iter(|| dst.copy_from_slice(black_box(&block)))
    });
    g.finish();
}

/// Mean ns of one criterion benchmark, read from its saved estimates.
fn mean_ns(dir: &Path, group: &str, func: &str) -> Option<f64> {
    let path = dir
        .join(group.replace('/', "_"))
        .join(func)
        .join("new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["mean"]["point_estimate"].as_f64()
}

fn summary() {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from);
    let dir = target.join("criterion");
    let names: Vec<&str> = tables().iter().map(|k| k.name()).collect();
    println!(
        "\n## Summary (mean ns/op; ratio = simsimd ns / best eddy ns, > 1 means eddy is faster)\n"
    );
    println!(
        "| kernel | {} | simsimd | best/simsimd | best/scalar |",
        names.join(" | ")
    );
    println!("|---|{}---|---|---|", "---|".repeat(names.len()));
    let kernels = [
        "dot_f32",
        "l2sq_f32",
        "dot_i8",
        "dot_u8",
        "l2sq_u8",
        "hamming",
        "dot_u8_u4",
        "pq_adc_x1024",
    ];
    for kernel in kernels {
        for dim in DIMS {
            let group = format!("{kernel}/{dim}");
            let ns: Vec<Option<f64>> = names.iter().map(|n| mean_ns(&dir, &group, n)).collect();
            if ns.iter().all(Option::is_none) {
                continue;
            }
            let best = ns.iter().flatten().copied().fold(f64::INFINITY, f64::min);
            let simd = mean_ns(&dir, &group, "simsimd");
            let scalar = mean_ns(&dir, &group, "scalar");
            let cells: Vec<String> = ns
                .iter()
                .map(|x| x.map_or("-".into(), |v| format!("{v:.1}")))
                .collect();
            println!(
                "| {group} | {} | {} | {} | {} |",
                cells.join(" | "),
                simd.map_or("-".into(), |v| format!("{v:.1}")),
                simd.map_or("-".into(), |v| format!("{:.2}x", v / best)),
                scalar.map_or("-".into(), |v| format!("{:.1}x", v / best)),
            );
        }
    }
    let gbps = |func: &str| {
        mean_ns(&dir, "scan_256MiB", func).map(|ns| (SCAN_BYTES / (384 * 4) * 384 * 4) as f64 / ns)
    };
    if let Some(copy) = gbps("memcpy") {
        println!(
            "\nmemcpy of the same {} MiB: {copy:.2} GB/s copied ({:.2} GB/s read+write)",
            SCAN_BYTES >> 20,
            2.0 * copy
        );
        for n in &names {
            if let Some(scan) = gbps(&format!("dot_block/{n}")) {
                println!(
                    "dot_block scan {n}: {scan:.2} GB/s = {:.0}% of copy",
                    100.0 * scan / copy
                );
            }
        }
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    pairs(&mut c);
    batches(&mut c);
    block_scan(&mut c);
    c.final_summary();
    summary();
}
