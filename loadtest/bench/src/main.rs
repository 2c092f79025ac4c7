//! eddy-bench: HNSW build and search sweeps on an fvecs dataset (recall, QPS,
//! build time, memory), and a seeded synthetic dataset generator.
//!
//! ```sh
//! eddy-bench --dataset ../shared/datasets/debian-minilm            # f32 + SQ8 sweeps
//! eddy-bench --dataset DIR --filter                                # F1 / F10 filtered
//! eddy-bench --dataset DIR --json > eddy.json                      # for peers.py
//! eddy-bench synth --out DIR --n 1000000 --dim 128                 # synthetic set + GT
//! ```
//!
//! Modules: [`cli`] (flags), [`data`] (the dataset), [`run`] (the sweep,
//! step by step), [`modes`] (f32 / SQ8 / binary / 4-bit traversals),
//! [`filter`] (F1 / F10), [`measure`] (timed loops and recall), [`report`]
//! (tables and JSON), [`synth`] (the generator).

mod cli;
mod data;
mod filter;
mod measure;
mod modes;
mod report;
mod run;
mod synth;

use anyhow::Result;
use clap::Parser;

use crate::cli::{Cli, Cmd};

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Some(Cmd::Synth(a)) => synth::synth(&a),
        None => run::run(&cli.run),
    }
}
