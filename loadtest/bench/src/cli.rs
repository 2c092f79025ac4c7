//! Command-line flags of eddy-bench, and the values they resolve to.

use std::path::PathBuf;

use anyhow::{anyhow, Result};
use clap::{Parser, Subcommand};
use eddy_hnsw::{BuildOptions, HnswParams};
use eddy_model::Metric;

#[derive(Parser, Debug)]
#[command(
    name = "eddy-bench",
    about = "HNSW build/search sweeps on fvecs datasets"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) cmd: Option<Cmd>,
    #[command(flatten)]
    pub(crate) run: RunArgs,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Cmd {
    /// Generate a seeded clustered synthetic dataset with exact top-100 ground truth.
    Synth(SynthArgs),
}

#[derive(clap::Args, Debug)]
pub(crate) struct RunArgs {
    /// Directory with base.fvecs, queries-public.fvecs (or queries.fvecs), gt-public.ivecs and gt-public-scores.fvecs.
    #[arg(long)]
    pub(crate) dataset: Option<PathBuf>,
    /// HNSW M.
    #[arg(long, default_value_t = 16)]
    pub(crate) m: usize,
    /// ef_construction.
    #[arg(long, default_value_t = 100)]
    pub(crate) efc: usize,
    /// Build threads.
    #[arg(long, default_value_t = 2)]
    pub(crate) threads: usize,
    /// Build seed.
    #[arg(long, default_value_t = 42)]
    pub(crate) seed: u64,
    /// ef values to sweep.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "10,16,24,32,48,64,96,128,192,256,384,512"
    )]
    pub(crate) ef: Vec<usize>,
    /// Modes: f32, sq8, bin1 / bin15 / bin2 (binary 1 / 1.5 / 2-bit codes), rq4 (rotated 4-bit RaBitQ).
    #[arg(long, value_delimiter = ',', default_value = "f32,sq8")]
    pub(crate) modes: Vec<String>,
    /// Rescoring depth of the quantized modes (0 = all ef candidates).
    #[arg(long, default_value_t = 0)]
    pub(crate) rescore: usize,
    /// Metric: dot (ip, cosine) or l2.
    #[arg(long, default_value = "dot")]
    pub(crate) space: String,
    /// Use at most this many queries.
    #[arg(long)]
    pub(crate) queries: Option<usize>,
    /// Minimum seconds of timed search per (mode, ef, threads) point.
    #[arg(long, default_value_t = 0.5)]
    pub(crate) min_secs: f64,
    /// Skip the 2-thread QPS measurement.
    #[arg(long)]
    pub(crate) no_mt: bool,
    /// Run the filtered F1 / F10 benchmark (needs base-payload.jsonl and gt-public-f*.ivecs).
    #[arg(long)]
    pub(crate) filter: bool,
    /// Selectivity below which a filter always uses an exact scan over the matching rows.
    #[arg(long, default_value_t = 0.02)]
    pub(crate) scan_below: f64,
    /// Cost model: also scan when matching rows < factor x (ef / selectivity) x 2M
    /// (the walk's expected distance computations; measured ~4x dearer per row than a scan).
    #[arg(long, default_value_t = 4.0)]
    pub(crate) scan_factor: f64,
    /// Build options: disable duplicate folding.
    #[arg(long)]
    pub(crate) no_dedup: bool,
    /// Build options: disable the repair pass.
    #[arg(long)]
    pub(crate) no_repair: bool,
    /// Build options: fill pruned lists to half with pruned candidates (true/false).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) keep_pruned: bool,
    /// Build options: relaxed (Vamana) pruning factor, 1.0 = Malkov's heuristic only.
    #[arg(long, default_value_t = BuildOptions::default().alpha)]
    pub(crate) alpha: f32,
    /// Build options: construction beam over SQ8 codes, f32 rescoring (true/false).
    #[arg(long, default_value_t = BuildOptions::default().sq8_beam, action = clap::ArgAction::Set)]
    pub(crate) sq8_beam: bool,
    /// Build options: minimum level-0 in-degree boost (0 = off).
    #[arg(long, default_value_t = 4)]
    pub(crate) min_in_degree: usize,
    /// Build options: select 2M level-0 links for a new node.
    #[arg(long)]
    pub(crate) wide_level0: bool,
    /// Write the graph to this file (and reopen it with GraphView::from_bytes for the sweep).
    #[arg(long)]
    pub(crate) save_graph: Option<PathBuf>,
    /// Skip the build: open this graph file (written by --save-graph with the same data).
    #[arg(long)]
    pub(crate) load_graph: Option<PathBuf>,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    pub(crate) json: bool,
    /// Hold the vectors, codes and graph in transparent huge pages, as eddy-query
    /// does with `--segment-residency huge-pages` (false: 4 KiB pages, like a mapped file).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) huge_pages: bool,
}

#[derive(clap::Args, Debug)]
pub(crate) struct SynthArgs {
    /// Output directory.
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// Base vectors.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) n: usize,
    /// Dimension.
    #[arg(long, default_value_t = 128)]
    pub(crate) dim: usize,
    /// Clusters.
    #[arg(long, default_value_t = 1000)]
    pub(crate) clusters: usize,
    /// Queries.
    #[arg(long, default_value_t = 1000)]
    pub(crate) nq: usize,
    /// Cluster spread (noise sigma relative to the centre scale).
    #[arg(long, default_value_t = 0.35)]
    pub(crate) spread: f32,
    /// Seed.
    #[arg(long, default_value_t = 7)]
    pub(crate) seed: u64,
}

impl RunArgs {
    /// The metric of `--space`.
    pub(crate) fn metric(&self) -> Result<Metric> {
        self.space
            .parse::<Metric>()
            .map_err(|e| anyhow!("--space: {e}"))
    }

    /// The graph parameters of `--m`, `--efc`, `--seed`.
    pub(crate) fn hnsw_params(&self) -> HnswParams {
        HnswParams {
            m: self.m,
            ef_construction: self.efc,
            seed: self.seed,
        }
    }

    /// The build switches of the `Build options:` flags.
    pub(crate) fn build_options(&self) -> BuildOptions {
        BuildOptions {
            dedup: !self.no_dedup,
            repair: !self.no_repair,
            keep_pruned: self.keep_pruned,
            min_in_degree: self.min_in_degree,
            wide_level0: self.wide_level0,
            alpha: self.alpha,
            sq8_beam: self.sq8_beam,
            ..BuildOptions::default()
        }
    }
}
