//! Loading a benchmark dataset directory: base vectors, their payloads,
//! queries and exact ground truth.
//!
//! Two layouts are accepted, file by file: the committed sample's names
//! (`queries.fvecs`, `gt.ivecs`, `gt-scores.fvecs`) and the full
//! debian-minilm names (`queries-public.fvecs`, `gt-public.ivecs`,
//! `gt-public-scores.fvecs`). Both have `base.fvecs` and `base-payload.jsonl`.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use eddy_dataset::{read_fvecs, read_ivecs, Matrix};

/// The committed demo sample (10,000 base vectors, 200 queries).
pub const SAMPLE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/debian-minilm-10k");

const BASE: &[&str] = &["base.fvecs"];
const PAYLOADS: &[&str] = &["base-payload.jsonl"];
const QUERIES: &[&str] = &["queries.fvecs", "queries-public.fvecs"];
const GT_IDS: &[&str] = &["gt.ivecs", "gt-public.ivecs"];
const GT_SCORES: &[&str] = &["gt-scores.fvecs", "gt-public-scores.fvecs"];

/// Errors while loading a dataset.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// None of the accepted names for a file exists.
    #[error("{dir}: no {role} file (looked for {tried})")]
    Missing {
        /// The dataset directory.
        dir: PathBuf,
        /// What the file holds.
        role: &'static str,
        /// The names looked for.
        tried: String,
    },
    /// A vecs file could not be read.
    #[error(transparent)]
    Vecs(#[from] eddy_dataset::Error),
    /// The payload file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A payload line is not usable.
    #[error("{path}:{line}: {reason}")]
    Payload {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The files do not fit together.
    #[error("{dir}: {reason}")]
    Inconsistent {
        /// The dataset directory.
        dir: PathBuf,
        /// What does not fit.
        reason: String,
    },
}

/// Result alias for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A loaded dataset. Base row `i` has point id `i`.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// The directory it was loaded from.
    pub dir: PathBuf,
    /// Base vectors, one row per point.
    pub base: Matrix<f32>,
    /// One JSON object per base row (the point's payload).
    pub payloads: Vec<serde_json::Map<String, serde_json::Value>>,
    /// Query vectors.
    pub queries: Matrix<f32>,
    /// Exact top-k base ids per query, by decreasing similarity.
    pub gt_ids: Matrix<i32>,
    /// The matching similarities.
    pub gt_scores: Matrix<f32>,
}

impl Dataset {
    /// Loads `dir`, keeping at most `max_queries` queries (all when `None`).
    pub fn load(dir: &Path, max_queries: Option<usize>) -> Result<Self> {
        let base = read_fvecs(&find(dir, "base vectors", BASE)?, None)?;
        let payloads = read_payloads(&find(dir, "payload", PAYLOADS)?)?;
        let queries = read_fvecs(&find(dir, "query vectors", QUERIES)?, max_queries)?;
        let gt_ids = read_ivecs(&find(dir, "ground-truth ids", GT_IDS)?, max_queries)?;
        let gt_scores = read_fvecs(&find(dir, "ground-truth scores", GT_SCORES)?, max_queries)?;
        let ds = Self {
            dir: dir.to_owned(),
            base,
            payloads,
            queries,
            gt_ids,
            gt_scores,
        };
        ds.check()?;
        Ok(ds)
    }

    /// The vector dimension.
    pub fn dim(&self) -> usize {
        self.base.dim
    }

    /// Number of base points.
    pub fn len(&self) -> usize {
        self.base.rows()
    }

    /// Whether the base is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn check(&self) -> Result<()> {
        let bad = |reason: String| {
            Err(Error::Inconsistent {
                dir: self.dir.clone(),
                reason,
            })
        };
        if self.is_empty() {
            return bad("the base is empty".into());
        }
        if self.payloads.len() != self.base.rows() {
            return bad(format!(
                "{} payload lines for {} base vectors",
                self.payloads.len(),
                self.base.rows()
            ));
        }
        if self.queries.rows() > 0 && self.queries.dim != self.base.dim {
            return bad(format!(
                "queries have dimension {}, the base {}",
                self.queries.dim, self.base.dim
            ));
        }
        if self.gt_ids.rows() < self.queries.rows() || self.gt_scores.rows() < self.queries.rows() {
            return bad(format!(
                "ground truth has {} id rows and {} score rows for {} queries",
                self.gt_ids.rows(),
                self.gt_scores.rows(),
                self.queries.rows()
            ));
        }
        if self.gt_ids.dim != self.gt_scores.dim {
            return bad(format!(
                "ground truth ids have k={}, scores k={}",
                self.gt_ids.dim, self.gt_scores.dim
            ));
        }
        Ok(())
    }
}

fn find(dir: &Path, role: &'static str, names: &[&str]) -> Result<PathBuf> {
    names
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file())
        .ok_or_else(|| Error::Missing {
            dir: dir.to_owned(),
            role,
            tried: names.join(", "),
        })
}

/// Reads one JSON object per line; line `i` must have `"id": i` when it has an id.
fn read_payloads(path: &Path) -> Result<Vec<serde_json::Map<String, serde_json::Value>>> {
    let io_err = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let reader = BufReader::new(File::open(path).map_err(io_err)?);
    let mut out = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(io_err)?;
        let payload_err = |reason: String| Error::Payload {
            path: path.to_owned(),
            line: i + 1,
            reason,
        };
        let value: serde_json::Value =
            serde_json::from_str(&line).map_err(|e| payload_err(e.to_string()))?;
        let serde_json::Value::Object(obj) = value else {
            return Err(payload_err("not a JSON object".into()));
        };
        if let Some(id) = obj.get("id") {
            if id.as_u64() != Some(i as u64) {
                return Err(payload_err(format!("id {id} on line for row {i}")));
            }
        }
        out.push(obj);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_the_committed_sample() {
        let ds = Dataset::load(Path::new(SAMPLE_DIR), Some(20)).expect("sample loads");
        assert_eq!(ds.len(), 10_000);
        assert_eq!(ds.dim(), 384);
        assert_eq!(ds.queries.rows(), 20);
        assert_eq!(ds.gt_ids.rows(), 20);
        assert_eq!(ds.gt_ids.dim, 100);
        assert_eq!(
            ds.payloads[0].get("name").and_then(|v| v.as_str()),
            Some("libtdb1")
        );
        // Ground truth is sorted by decreasing score and its ids are base rows.
        for q in 0..ds.queries.rows() {
            let scores = ds.gt_scores.row(q);
            assert!(scores.windows(2).all(|w| w[0] >= w[1]));
            assert!(ds.gt_ids.row(q).iter().all(|&id| (0..10_000).contains(&id)));
        }
    }

    #[test]
    fn sample_ground_truth_matches_brute_force() {
        let ds = Dataset::load(Path::new(SAMPLE_DIR), Some(5)).expect("sample loads");
        for q in 0..ds.queries.rows() {
            let query = ds.queries.row(q);
            let mut scored: Vec<(u64, f32)> = ds
                .base
                .iter()
                .enumerate()
                .map(|(i, v)| (i as u64, query.iter().zip(v).map(|(a, b)| a * b).sum()))
                .collect();
            scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            let recall =
                eddy_dataset::recall_at_k(&scored[..10], ds.gt_ids.row(q), ds.gt_scores.row(q), 10);
            assert_eq!(recall, 1.0, "query {q}");
        }
    }

    #[test]
    fn missing_files_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = Dataset::load(dir.path(), None).expect_err("empty dir");
        assert!(err.to_string().contains("base.fvecs"), "{err}");
    }
}
