//! eddy-bench: HNSW build and search sweeps on an fvecs dataset (recall, QPS,
//! build time, memory), and a seeded synthetic dataset generator.
//!
//! ```sh
//! eddy-bench --dataset ../shared/datasets/debian-minilm            # f32 + SQ8 sweeps
//! eddy-bench --dataset DIR --filter                                # F1 / F10 filtered
//! eddy-bench --dataset DIR --json > eddy.json                      # for peers.py
//! eddy-bench synth --out DIR --n 1000000 --dim 128                 # synthetic set + GT
//! ```

use std::collections::{BTreeMap, BinaryHeap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use eddy_dataset::{read_fvecs, read_ivecs, recall_at_k, write_fvecs, write_ivecs, Matrix};
use eddy_hnsw::{
    exact_scan, search_codes_into, search_into, search_sq8_into, unreachable_count, BuildOptions,
    Graph, GraphView, HnswParams, SearchContext, Space, Sq8View,
};
use eddy_quant::binary::{BinaryCodes, BinaryConfig, BinaryEncoding, BinaryQuantizer};
use eddy_quant::rabitq::{RabitqCodes, RabitqConfig, RabitqQuantizer};
use eddy_quant::sq8::{Sq8Config, Sq8Quantizer};
use eddy_quant::{CodeScorer, Metric};
use eddy_segment::HugePageBytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

#[derive(Parser, Debug)]
#[command(
    name = "eddy-bench",
    about = "HNSW build/search sweeps on fvecs datasets"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Generate a seeded clustered synthetic dataset with exact top-100 ground truth.
    Synth(SynthArgs),
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Directory with base.fvecs, queries-public.fvecs (or queries.fvecs), gt-public.ivecs and gt-public-scores.fvecs.
    #[arg(long)]
    dataset: Option<PathBuf>,
    /// HNSW M.
    #[arg(long, default_value_t = 16)]
    m: usize,
    /// ef_construction.
    #[arg(long, default_value_t = 100)]
    efc: usize,
    /// Build threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Build seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// ef values to sweep.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "10,16,24,32,48,64,96,128,192,256,384,512"
    )]
    ef: Vec<usize>,
    /// Modes: f32, sq8, bin1 / bin15 / bin2 (binary 1 / 1.5 / 2-bit codes), rq4 (rotated 4-bit RaBitQ).
    #[arg(long, value_delimiter = ',', default_value = "f32,sq8")]
    modes: Vec<String>,
    /// Rescoring depth of the quantized modes (0 = all ef candidates).
    #[arg(long, default_value_t = 0)]
    rescore: usize,
    /// Space: dot or l2.
    #[arg(long, default_value = "dot")]
    space: String,
    /// Use at most this many queries.
    #[arg(long)]
    queries: Option<usize>,
    /// Minimum seconds of timed search per (mode, ef, threads) point.
    #[arg(long, default_value_t = 0.5)]
    min_secs: f64,
    /// Skip the 2-thread QPS measurement.
    #[arg(long)]
    no_mt: bool,
    /// Run the filtered F1 / F10 benchmark (needs base-payload.jsonl and gt-public-f*.ivecs).
    #[arg(long)]
    filter: bool,
    /// Selectivity below which a filter always uses an exact scan over the matching rows.
    #[arg(long, default_value_t = 0.02)]
    scan_below: f64,
    /// Cost model: also scan when matching rows < factor x (ef / selectivity) x 2M
    /// (the walk's expected distance computations; measured ~4x dearer per row than a scan).
    #[arg(long, default_value_t = 4.0)]
    scan_factor: f64,
    /// Build options: disable duplicate folding.
    #[arg(long)]
    no_dedup: bool,
    /// Build options: disable the repair pass.
    #[arg(long)]
    no_repair: bool,
    /// Build options: fill pruned lists to half with pruned candidates (true/false).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    keep_pruned: bool,
    /// Build options: relaxed (Vamana) pruning factor, 1.0 = Malkov's heuristic only.
    #[arg(long, default_value_t = BuildOptions::default().alpha)]
    alpha: f32,
    /// Build options: construction beam over SQ8 codes, f32 rescoring (true/false).
    #[arg(long, default_value_t = BuildOptions::default().sq8_beam, action = clap::ArgAction::Set)]
    sq8_beam: bool,
    /// Build options: minimum level-0 in-degree boost (0 = off).
    #[arg(long, default_value_t = 4)]
    min_in_degree: usize,
    /// Build options: select 2M level-0 links for a new node.
    #[arg(long)]
    wide_level0: bool,
    /// Write the graph to this file (and reopen it with GraphView::from_bytes for the sweep).
    #[arg(long)]
    save_graph: Option<PathBuf>,
    /// Skip the build: open this graph file (written by --save-graph with the same data).
    #[arg(long)]
    load_graph: Option<PathBuf>,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    json: bool,
    /// Hold the vectors, codes and graph in transparent huge pages, as eddy-query
    /// does with `--segment-residency huge-pages` (false: 4 KiB pages, like a mapped file).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    huge_pages: bool,
}

#[derive(clap::Args, Debug)]
struct SynthArgs {
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Base vectors.
    #[arg(long, default_value_t = 1_000_000)]
    n: usize,
    /// Dimension.
    #[arg(long, default_value_t = 128)]
    dim: usize,
    /// Clusters.
    #[arg(long, default_value_t = 1000)]
    clusters: usize,
    /// Queries.
    #[arg(long, default_value_t = 1000)]
    nq: usize,
    /// Cluster spread (noise sigma relative to the centre scale).
    #[arg(long, default_value_t = 0.35)]
    spread: f32,
    /// Seed.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

#[derive(Serialize, Debug, Clone)]
struct Point {
    mode: String,
    ef: usize,
    recall1: f64,
    recall10: f64,
    recall100: f64,
    qps1: f64,
    qps2: Option<f64>,
}

#[derive(Serialize, Debug, Clone)]
struct FilterPoint {
    filter: String,
    selectivity: f64,
    strategy: String,
    policy: bool,
    ef: Option<usize>,
    recall10: f64,
    qps1: f64,
}

#[derive(Serialize, Debug)]
struct Report {
    dataset: String,
    n: usize,
    dim: usize,
    queries: usize,
    m: usize,
    ef_construction: usize,
    build_threads: usize,
    build_secs: f64,
    unreachable: usize,
    duplicates_folded: usize,
    graph_bytes: usize,
    vector_bytes: usize,
    sq8_bytes: usize,
    /// Code bytes of the binary / 4-bit modes, by mode name.
    code_bytes: BTreeMap<String, usize>,
    rss_bytes: u64,
    kernels: String,
    points: Vec<Point>,
    filtered: Vec<FilterPoint>,
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn pool(threads: usize) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .context("rayon pool")
}

fn first_existing(dir: &Path, names: &[&str]) -> Result<PathBuf> {
    names
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.exists())
        .with_context(|| format!("none of {names:?} in {}", dir.display()))
}

/// One search over a query: the closure used by all timed loops.
type SearchFn<'a> = dyn Fn(&mut SearchContext, &[f32], usize, &mut Vec<(u32, f32)>) + Sync + 'a;

/// Codes of a quantized traversal mode (`bin1`, `bin15`, `bin2`, `rq4`).
enum ModeCodes {
    Binary(BinaryCodes),
    Rabitq(RabitqCodes),
}

impl ModeCodes {
    /// Train the mode's quantizer (default config, metric from `space`) and encode `data`.
    fn train(mode: &str, data: &[f32], dim: usize, space: Space) -> Result<Option<Self>> {
        let encoding = match mode {
            "bin1" => BinaryEncoding::OneBit,
            "bin15" => BinaryEncoding::OneAndHalfBits,
            "bin2" => BinaryEncoding::TwoBits,
            "rq4" => {
                let metric = match space {
                    Space::Dot => Metric::Dot,
                    Space::L2 => Metric::L2,
                };
                let cfg = RabitqConfig {
                    metric,
                    ..RabitqConfig::default()
                };
                let codes = RabitqQuantizer::train(data, dim, &cfg)?.encode_all(data)?;
                return Ok(Some(Self::Rabitq(codes)));
            }
            _ => return Ok(None),
        };
        let cfg = BinaryConfig {
            encoding,
            ..BinaryConfig::default()
        };
        let codes = BinaryQuantizer::train(data, dim, &cfg)?.encode_all(data)?;
        Ok(Some(Self::Binary(codes)))
    }

    /// Code bytes of the whole collection.
    fn memory_bytes(&self) -> usize {
        match self {
            Self::Binary(c) => c.bytes_per_vector() * c.len(),
            Self::Rabitq(c) => c.bytes_per_vector() * c.len(),
        }
    }
}

/// Prepare `q` for `codes` and run the code traversal (an unpreparable query gives no results).
#[allow(clippy::too_many_arguments)]
fn codes_search<C: CodeScorer>(
    view: &GraphView<'_>,
    ctx: &mut SearchContext,
    codes: &C,
    vectors: &[f32],
    dim: usize,
    space: Space,
    q: &[f32],
    k: usize,
    ef: usize,
    rescore: usize,
    out: &mut Vec<(u32, f32)>,
) {
    match codes.prepare(q) {
        Ok(p) => search_codes_into(
            view, ctx, codes, &p, vectors, dim, space, q, k, ef, rescore, None, out,
        ),
        Err(_) => out.clear(),
    }
}

/// Run all queries once; returns results for recall.
fn run_all(queries: &Matrix<f32>, k: usize, f: &SearchFn<'_>) -> Vec<Vec<(u32, f32)>> {
    let mut ctx = SearchContext::default();
    let mut out = Vec::new();
    queries
        .iter()
        .map(|q| {
            f(&mut ctx, q, k, &mut out);
            out.clone()
        })
        .collect()
}

/// Single-thread QPS: repeat the query set until `min_secs`.
fn qps_single(queries: &Matrix<f32>, k: usize, min_secs: f64, f: &SearchFn<'_>) -> f64 {
    let mut ctx = SearchContext::default();
    let mut out = Vec::with_capacity(k);
    // warm-up
    for q in queries.iter().take(50) {
        f(&mut ctx, q, k, &mut out);
    }
    let start = Instant::now();
    let mut done = 0usize;
    while start.elapsed() < Duration::from_secs_f64(min_secs) || done == 0 {
        for q in queries.iter() {
            f(&mut ctx, q, k, &mut out);
        }
        done += queries.rows();
    }
    done as f64 / start.elapsed().as_secs_f64()
}

/// Multi-thread QPS: every pool thread takes an interleaved share.
fn qps_multi(
    pool: &rayon::ThreadPool,
    queries: &Matrix<f32>,
    k: usize,
    min_secs: f64,
    f: &SearchFn<'_>,
) -> f64 {
    let t = pool.current_num_threads();
    let rows = queries.rows();
    let start = Instant::now();
    let counts = pool.broadcast(|bc| {
        let me = bc.index();
        let mut ctx = SearchContext::default();
        let mut out = Vec::with_capacity(k);
        let mut done = 0usize;
        while start.elapsed() < Duration::from_secs_f64(min_secs) || done == 0 {
            let mut i = me;
            while i < rows {
                f(&mut ctx, queries.row(i), k, &mut out);
                done += 1;
                i += t;
            }
        }
        done
    });
    counts.iter().sum::<usize>() as f64 / start.elapsed().as_secs_f64()
}

fn recall(results: &[Vec<(u32, f32)>], gt: &Matrix<i32>, gts: &Matrix<f32>, k: usize) -> f64 {
    let total: f64 = results
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let ret: Vec<(u64, f32)> = r.iter().map(|&(id, s)| (u64::from(id), s)).collect();
            recall_at_k(&ret, gt.row(i), gts.row(i), k)
        })
        .sum();
    total / results.len().max(1) as f64
}

fn parse_space(s: &str) -> Result<Space> {
    match s {
        "dot" | "ip" | "cosine" => Ok(Space::Dot),
        "l2" => Ok(Space::L2),
        other => bail!("unknown space {other} (dot or l2)"),
    }
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Some(Cmd::Synth(a)) => synth(&a),
        None => run(&cli.run),
    }
}

#[allow(clippy::too_many_lines)]
fn run(a: &RunArgs) -> Result<()> {
    let dir = a
        .dataset
        .clone()
        .context("--dataset DIR is required (or use the synth subcommand)")?;
    let space = parse_space(&a.space)?;
    let base = read_fvecs(&first_existing(&dir, &["base.fvecs"])?, None)?;
    let qpath = first_existing(&dir, &["queries-public.fvecs", "queries.fvecs"])?;
    let queries = read_fvecs(&qpath, a.queries)?;
    let gt = read_ivecs(
        &first_existing(&dir, &["gt-public.ivecs", "gt.ivecs"])?,
        a.queries,
    )?;
    let gts = read_fvecs(
        &first_existing(&dir, &["gt-public-scores.fvecs", "gt-scores.fvecs"])?,
        a.queries,
    )?;
    let dim = base.dim;
    if queries.dim != dim || gt.rows() < queries.rows() || gts.rows() < queries.rows() {
        bail!(
            "dataset shapes disagree (dim {dim} vs {}, gt rows {})",
            queries.dim,
            gt.rows()
        );
    }
    let n = base.rows();
    let log = |s: String| {
        if !a.json {
            println!("{s}");
        }
    };
    log(format!(
        "dataset {} n={n} dim={dim} queries={} kernels={}",
        dir.display(),
        queries.rows(),
        eddy_kernels::backend_name()
    ));
    let params = HnswParams {
        m: a.m,
        ef_construction: a.efc,
        seed: a.seed,
    };
    let opts = BuildOptions {
        dedup: !a.no_dedup,
        repair: !a.no_repair,
        keep_pruned: a.keep_pruned,
        min_in_degree: a.min_in_degree,
        wide_level0: a.wide_level0,
        alpha: a.alpha,
        sq8_beam: a.sq8_beam,
    };
    if a.sq8_beam && a.load_graph.is_none() {
        let fidelity = eddy_hnsw::sq8_beam_fidelity(&base.data, dim, space, a.seed)?;
        log(format!(
            "sq8 beam fidelity {fidelity:.4} (construction beam on {})",
            if fidelity >= eddy_hnsw::SQ8_BEAM_MIN_FIDELITY {
                "SQ8 codes"
            } else {
                "f32: below the threshold"
            }
        ));
    }
    let huge_base = if a.huge_pages {
        Some(HugePageBytes::copy_of(bytemuck::cast_slice(&base.data))?)
    } else {
        None
    };
    let base_data: &[f32] = huge_base
        .as_ref()
        .map_or(&base.data[..], |h| bytemuck::cast_slice(h.as_bytes()));
    let build_pool = pool(a.threads)?;
    let t0 = Instant::now();
    let graph = if a.load_graph.is_some() {
        Graph::build(&[], dim, space, &params)?
    } else {
        build_pool.install(|| Graph::build_with(base_data, dim, space, &params, &opts))?
    };
    let build_secs = t0.elapsed().as_secs_f64();
    // Optionally round-trip through the on-disk format.
    let mut file_bytes = eddy_hnsw::AlignedBytes::default();
    if let Some(p) = &a.save_graph {
        let mut f = std::io::BufWriter::new(std::fs::File::create(p)?);
        graph.write_to(&mut f)?;
        drop(f);
        file_bytes = eddy_hnsw::AlignedBytes::from_slice(&std::fs::read(p)?);
    }
    if let Some(p) = &a.load_graph {
        file_bytes = eddy_hnsw::AlignedBytes::from_slice(&std::fs::read(p)?);
    }
    if a.huge_pages && file_bytes.as_bytes().is_empty() {
        let mut buf = Vec::new();
        graph.write_to(&mut buf)?;
        file_bytes = eddy_hnsw::AlignedBytes::from_slice(&buf);
    }
    let huge_graph = if a.huge_pages {
        Some(HugePageBytes::copy_of(file_bytes.as_bytes())?)
    } else {
        None
    };
    let view: GraphView<'_> = if let Some(h) = &huge_graph {
        GraphView::from_bytes(h.as_bytes())?
    } else if a.save_graph.is_some() || a.load_graph.is_some() {
        GraphView::from_bytes(file_bytes.as_bytes())?
    } else {
        graph.view()
    };
    let unreachable = unreachable_count(&view);
    let links0: usize = (0..n as u32).map(|i| view.neighbors(i).len()).sum();
    let nodes = n - view.duplicate_count();
    let mean_degree0 = links0 as f64 / nodes.max(1) as f64;
    log(format!(
        "build: {build_secs:.2} s on {} threads (M={} efc={} alpha={}), unreachable={unreachable}, duplicates folded={}, max level={}, mean level-0 degree={mean_degree0:.1}",
        a.threads, a.m, a.efc, a.alpha, view.duplicate_count(), view.max_level()
    ));

    if let Ok(list) = std::env::var("EDDY_BENCH_NODES") {
        let mut indeg = vec![0u32; n];
        for i in 0..n as u32 {
            for &v in view.neighbors(i) {
                indeg[v as usize] += 1;
            }
        }
        for tok in list.split(',') {
            let x: u32 = tok.parse()?;
            let innodes: Vec<u32> = (0..n as u32)
                .filter(|&i| view.neighbors(i).contains(&x))
                .collect();
            let xv = base.row(x as usize);
            let nb: Vec<(u32, f32, u32)> = view
                .neighbors(x)
                .iter()
                .map(|&v| {
                    (
                        v,
                        eddy_kernels::dot(xv, base.row(v as usize)),
                        indeg[v as usize],
                    )
                })
                .collect();
            eprintln!(
                "node {x}: indeg {} in-from {innodes:?} dups {:?}\n  out {nb:?}",
                indeg[x as usize],
                view.duplicates(x)
            );
            let mut ctx = SearchContext::default();
            let r = eddy_hnsw::search(&view, &mut ctx, &base.data, dim, space, xv, 10, 64, None);
            eprintln!("  self-search ef64: {r:?}");
        }
    }
    let mt_pool = pool(2)?;
    let mut points = Vec::new();
    let mut sq8_bytes = 0;
    let mut code_bytes = BTreeMap::new();
    for mode in &a.modes {
        let t_codes = Instant::now();
        let mode_codes = ModeCodes::train(mode, &base.data, dim, space)?;
        let sq8 = if mode == "sq8" {
            let metric = match space {
                Space::Dot => Metric::Dot,
                Space::L2 => Metric::L2,
            };
            let q = Sq8Quantizer::train(
                &base.data,
                dim,
                &Sq8Config {
                    metric,
                    ..Sq8Config::default()
                },
            )?;
            Some(q.encode_all(&base.data)?)
        } else if mode == "f32" || mode_codes.is_some() {
            None
        } else {
            bail!("unknown mode {mode}");
        };
        let huge_codes = match (&sq8, a.huge_pages) {
            (Some(c), true) => Some((
                HugePageBytes::copy_of(c.codes())?,
                HugePageBytes::copy_of(bytemuck::cast_slice(c.corrections()))?,
            )),
            _ => None,
        };
        let sq8_view = match (&sq8, &huge_codes) {
            (Some(c), Some((hc, hk))) => Some(Sq8View::from_parts(
                dim,
                c.quantizer().lo(),
                c.quantizer().delta(),
                hc.as_bytes(),
                bytemuck::cast_slice(hk.as_bytes()),
            )?),
            (Some(c), None) => Some(Sq8View::from_codes(c)),
            _ => None,
        };
        if let Some(v) = &sq8_view {
            sq8_bytes = v.memory_bytes();
        }
        if let Some(c) = &mode_codes {
            code_bytes.insert(mode.clone(), c.memory_bytes());
        }
        let rescoring = if a.rescore == 0 {
            "all ef candidates".to_string()
        } else {
            a.rescore.to_string()
        };
        log(format!(
            "\nmode {mode}{}",
            if let Some(c) = &mode_codes {
                format!(
                    " ({} traversal, {} B/vector, trained+encoded in {:.1} s, exact f32 rescoring of {rescoring})",
                    match c {
                        ModeCodes::Binary(_) => "binary code",
                        ModeCodes::Rabitq(_) => "rotated 4-bit code",
                    },
                    c.memory_bytes() / n.max(1),
                    t_codes.elapsed().as_secs_f64()
                )
            } else if sq8_view.is_some() {
                format!(
                    " (SQ8 traversal, exact f32 rescoring of {})",
                    if a.rescore == 0 {
                        "all ef candidates".to_string()
                    } else {
                        a.rescore.to_string()
                    }
                )
            } else {
                String::new()
            }
        ));
        log(format!(
            "{:>5} {:>9} {:>9} {:>9} {:>10} {:>10}",
            "ef", "recall@1", "recall@10", "recall@100", "QPS 1T", "QPS 2T"
        ));
        for &ef in &a.ef {
            let base_ref = base_data;
            let view_ref = &view;
            let sq8_ref = sq8_view.as_ref();
            let codes_ref = mode_codes.as_ref();
            let rescore = a.rescore;
            let f =
                move |ctx: &mut SearchContext, q: &[f32], k: usize, out: &mut Vec<(u32, f32)>| {
                    let r = if rescore == 0 { ef } else { rescore };
                    match (sq8_ref, codes_ref) {
                        (None, Some(ModeCodes::Binary(c))) => {
                            codes_search(view_ref, ctx, c, base_ref, dim, space, q, k, ef, r, out);
                        }
                        (None, Some(ModeCodes::Rabitq(c))) => {
                            codes_search(view_ref, ctx, c, base_ref, dim, space, q, k, ef, r, out);
                        }
                        (None, None) => {
                            search_into(view_ref, ctx, base_ref, dim, space, q, k, ef, None, out);
                        }
                        (Some(c), _) => {
                            search_sq8_into(
                                view_ref, ctx, c, base_ref, dim, space, q, k, ef, r, None, out,
                            );
                        }
                    }
                };
            let r10 = run_all(&queries, 10, &f);
            let r100 = run_all(&queries, 100, &f);
            let recall1 = recall(&r10, &gt, &gts, 1);
            let recall10 = recall(&r10, &gt, &gts, 10);
            let recall100 = recall(&r100, &gt, &gts, 100);
            if std::env::var_os("EDDY_BENCH_DIAG").is_some() {
                for (i, r) in r10.iter().enumerate() {
                    let ret: Vec<(u64, f32)> =
                        r.iter().map(|&(id, s)| (u64::from(id), s)).collect();
                    let rc = recall_at_k(&ret, gt.row(i), gts.row(i), 10);
                    if rc < 1.0 {
                        eprintln!(
                            "diag ef={ef} q={i} recall={rc} gt={:?} gts={:?} got={:?}",
                            &gt.row(i)[..10],
                            &gts.row(i)[..10],
                            r
                        );
                    }
                }
            }
            let qps1 = qps_single(&queries, 10, a.min_secs, &f);
            let qps2 = (!a.no_mt).then(|| qps_multi(&mt_pool, &queries, 10, a.min_secs, &f));
            log(format!(
                "{ef:>5} {recall1:>9.4} {recall10:>9.4} {recall100:>10.4} {qps1:>10.0} {:>10}",
                qps2.map_or("-".to_string(), |q| format!("{q:.0}"))
            ));
            points.push(Point {
                mode: mode.clone(),
                ef,
                recall1,
                recall10,
                recall100,
                qps1,
                qps2,
            });
        }
    }
    let filtered = if a.filter {
        filter_bench(a, &dir, &base, &queries, &view, space, &log)?
    } else {
        Vec::new()
    };
    let report = Report {
        dataset: dir.display().to_string(),
        n,
        dim,
        queries: queries.rows(),
        m: a.m,
        ef_construction: a.efc,
        build_threads: a.threads,
        build_secs,
        unreachable,
        duplicates_folded: view.duplicate_count(),
        graph_bytes: view.memory_bytes(),
        vector_bytes: base.data.len() * 4,
        sq8_bytes,
        code_bytes,
        rss_bytes: rss_bytes(),
        kernels: eddy_kernels::backend_name().to_string(),
        points,
        filtered,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let codes: String = report
            .code_bytes
            .iter()
            .map(|(m, b)| format!(", {m} codes {:.1} MB", *b as f64 / 1e6))
            .collect();
        println!(
            "\nmemory: graph {:.1} MB, vectors {:.1} MB, sq8 codes {:.1} MB{codes}, RSS {:.1} MB{}",
            report.graph_bytes as f64 / 1e6,
            report.vector_bytes as f64 / 1e6,
            report.sq8_bytes as f64 / 1e6,
            report.rss_bytes as f64 / 1e6,
            if a.huge_pages {
                " (includes the huge-page copies beside the loaded arrays: measure the RSS target with --huge-pages false)"
            } else {
                ""
            }
        );
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn filter_bench(
    a: &RunArgs,
    dir: &Path,
    base: &Matrix<f32>,
    queries: &Matrix<f32>,
    view: &GraphView<'_>,
    space: Space,
    log: &dyn Fn(String),
) -> Result<Vec<FilterPoint>> {
    use std::io::BufRead;
    let dim = base.dim;
    let n = base.rows();
    let f = std::fs::File::open(dir.join("base-payload.jsonl")).context("base-payload.jsonl")?;
    let mut section = vec![String::new(); n];
    for line in std::io::BufReader::new(f).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&line)?;
        let id = v["id"].as_u64().context("payload row without id")? as usize;
        if id < n {
            section[id] = v["section"].as_str().unwrap_or_default().to_string();
        }
    }
    let filters: [(&str, &str, Vec<&str>); 2] = [
        ("F1", "f1", vec!["games"]),
        ("F10", "f10", vec!["admin", "net", "text", "utils"]),
    ];
    let mut out = Vec::new();
    for (name, suffix, sections) in filters {
        let ok: Vec<bool> = section
            .iter()
            .map(|s| sections.contains(&s.as_str()))
            .collect();
        let rows: Vec<u32> = (0..n as u32).filter(|&i| ok[i as usize]).collect();
        let sel = rows.len() as f64 / n as f64;
        let gt = read_ivecs(&dir.join(format!("gt-public-{suffix}.ivecs")), a.queries)?;
        let gts = read_fvecs(
            &dir.join(format!("gt-public-{suffix}-scores.fvecs")),
            a.queries,
        )?;
        let scan_at = |ef: usize| {
            sel < a.scan_below
                || (rows.len() as f64)
                    < a.scan_factor * (ef.max(10) as f64 / sel) * 2.0 * a.m as f64
        };
        log(format!(
            "\nfilter {name}: {} rows, selectivity {sel:.4}; policy: scan when selectivity < {} or rows < {} x (ef/selectivity) x 2M",
            rows.len(),
            a.scan_below,
            a.scan_factor
        ));
        log(format!(
            "{:>10} {:>5} {:>9} {:>10} {:>7}",
            "strategy", "ef", "recall@10", "QPS 1T", "policy"
        ));
        // Exact scan over the matching rows.
        let base_ref = &base.data;
        let rows_ref = &rows;
        let scan = move |_: &mut SearchContext, q: &[f32], k: usize, o: &mut Vec<(u32, f32)>| {
            *o = exact_scan(base_ref, dim, space, q, rows_ref, k);
        };
        let r = run_all(queries, 10, &scan);
        let recall10 = recall(&r, &gt, &gts, 10);
        let qps1 = qps_single(queries, 10, a.min_secs, &scan);
        log(format!(
            "{:>10} {:>5} {recall10:>9.4} {qps1:>10.0} {:>7}",
            "scan",
            "-",
            if a.ef.iter().any(|&ef| scan_at(ef)) {
                "yes"
            } else {
                ""
            }
        ));
        out.push(FilterPoint {
            filter: name.into(),
            selectivity: sel,
            strategy: "scan".into(),
            policy: a.ef.iter().any(|&ef| scan_at(ef)),
            ef: None,
            recall10,
            qps1,
        });
        for &ef in &a.ef {
            let ok_ref = &ok;
            let g = move |ctx: &mut SearchContext, q: &[f32], k: usize, o: &mut Vec<(u32, f32)>| {
                let acc = |id: u32| ok_ref[id as usize];
                search_into(view, ctx, base_ref, dim, space, q, k, ef, Some(&acc), o);
            };
            let r = run_all(queries, 10, &g);
            let recall10 = recall(&r, &gt, &gts, 10);
            let qps1 = qps_single(queries, 10, a.min_secs.min(0.3), &g);
            log(format!(
                "{:>10} {ef:>5} {recall10:>9.4} {qps1:>10.0} {:>7}",
                "graph",
                if scan_at(ef) { "" } else { "yes" }
            ));
            out.push(FilterPoint {
                filter: name.into(),
                selectivity: sel,
                strategy: "graph".into(),
                policy: !scan_at(ef),
                ef: Some(ef),
                recall10,
                qps1,
            });
        }
    }
    Ok(out)
}

fn normalize(v: &mut [f32]) {
    eddy_kernels::normalize(v);
}

fn synth(a: &SynthArgs) -> Result<()> {
    std::fs::create_dir_all(&a.out)?;
    let (n, dim) = (a.n, a.dim);
    let mut rng = ChaCha8Rng::seed_from_u64(a.seed);
    let gauss = |rng: &mut ChaCha8Rng| -> f32 {
        // Box-Muller
        let u1: f32 = rng.random::<f32>().max(1e-12);
        let u2: f32 = rng.random::<f32>();
        (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
    };
    let centres: Vec<f32> = (0..a.clusters * dim).map(|_| gauss(&mut rng)).collect();
    let gen = |count: usize, rng: &mut ChaCha8Rng| -> Vec<f32> {
        let mut v = vec![0.0f32; count * dim];
        for row in v.chunks_exact_mut(dim) {
            let c = rng.random_range(0..a.clusters);
            for (j, x) in row.iter_mut().enumerate() {
                *x = centres[c * dim + j] + a.spread * gauss(rng);
            }
            normalize(row);
        }
        v
    };
    let t0 = Instant::now();
    let base = gen(n, &mut rng);
    let queries = gen(a.nq, &mut rng);
    println!(
        "generated {n} x {dim} in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let k = 100.min(n);
    let t1 = Instant::now();
    use rayon::prelude::*;
    let gt: Vec<(Vec<i32>, Vec<f32>)> = queries
        .par_chunks_exact(dim)
        .map(|q| {
            let mut heap: BinaryHeap<std::cmp::Reverse<(OrdF32, u32)>> = BinaryHeap::new();
            let mut scores = vec![0.0f32; 4096];
            for (b, block) in base.chunks(4096 * dim).enumerate() {
                let rows = block.len() / dim;
                eddy_kernels::dot_block(q, block, &mut scores[..rows]);
                for (r, &s) in scores[..rows].iter().enumerate() {
                    let id = (b * 4096 + r) as u32;
                    let item = std::cmp::Reverse((OrdF32(s), u32::MAX - id));
                    if heap.len() < k {
                        heap.push(item);
                    } else if let Some(top) = heap.peek() {
                        if item < *top {
                            heap.pop();
                            heap.push(item);
                        }
                    }
                }
            }
            let mut v: Vec<(f32, u32)> = heap
                .into_iter()
                .map(|std::cmp::Reverse((s, id))| (s.0, u32::MAX - id))
                .collect();
            v.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
            (
                v.iter().map(|x| x.1 as i32).collect(),
                v.iter().map(|x| x.0).collect(),
            )
        })
        .collect();
    println!("ground truth in {:.1} s", t1.elapsed().as_secs_f64());
    write_fvecs(&a.out.join("base.fvecs"), &Matrix { dim, data: base })?;
    write_fvecs(&a.out.join("queries.fvecs"), &Matrix { dim, data: queries })?;
    write_ivecs(
        &a.out.join("gt.ivecs"),
        &Matrix {
            dim: k,
            data: gt.iter().flat_map(|g| g.0.iter().copied()).collect(),
        },
    )?;
    write_fvecs(
        &a.out.join("gt-scores.fvecs"),
        &Matrix {
            dim: k,
            data: gt.iter().flat_map(|g| g.1.iter().copied()).collect(),
        },
    )?;
    std::fs::write(
        a.out.join("README.md"),
        format!(
            "Synthetic clustered set from `eddy-bench synth`: n={n} dim={dim} clusters={} spread={} seed={} queries={}; unit vectors, dot product; gt = exact top-{k} (ties by smaller id).\n",
            a.clusters, a.spread, a.seed, a.nq
        ),
    )?;
    println!("wrote {}", a.out.display());
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct OrdF32(f32);
impl Eq for OrdF32 {}
impl PartialOrd for OrdF32 {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for OrdF32 {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}
