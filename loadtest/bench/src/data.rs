//! The dataset a sweep runs on: base vectors, queries and their exact top-k.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use eddy_dataset::{read_fvecs, read_ivecs, Matrix};

use crate::cli::RunArgs;

/// Base vectors, queries, ground-truth ids and scores, read from `--dataset`.
pub(crate) struct Dataset {
    /// The dataset directory.
    pub(crate) dir: PathBuf,
    /// Base vectors.
    pub(crate) base: Matrix<f32>,
    /// Queries (at most `--queries`).
    pub(crate) queries: Matrix<f32>,
    /// Exact top-k ids per query.
    pub(crate) gt: Matrix<i32>,
    /// Their scores.
    pub(crate) gts: Matrix<f32>,
}

impl Dataset {
    /// Read the files of `a.dataset` and check their shapes agree.
    pub(crate) fn load(a: &RunArgs) -> Result<Self> {
        let dir = a
            .dataset
            .clone()
            .context("--dataset DIR is required (or use the synth subcommand)")?;
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
        Ok(Self {
            dir,
            base,
            queries,
            gt,
            gts,
        })
    }
}

/// The first of `names` that exists in `dir`.
fn first_existing(dir: &Path, names: &[&str]) -> Result<PathBuf> {
    names
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.exists())
        .with_context(|| format!("none of {names:?} in {}", dir.display()))
}
