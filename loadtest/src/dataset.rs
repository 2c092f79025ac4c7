//! Loading a benchmark dataset directory: base vectors, their payloads,
//! queries and exact ground truth.
//!
//! Two layouts are accepted, file by file: the committed sample's names
//! (`queries.fvecs`, `gt.ivecs`, `gt-scores.fvecs`) and the full
//! debian-minilm names (`queries-public.fvecs`, `gt-public.ivecs`,
//! `gt-public-scores.fvecs`). Both have `base.fvecs` and `base-payload.jsonl`.
//! The full layout also has filtered ground truth ([`Truth::F1`],
//! [`Truth::F10`]), which [`QuerySet::load`] reads with its filter.

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
const GT_F1_IDS: &[&str] = &["gt-f1.ivecs", "gt-public-f1.ivecs"];
const GT_F1_SCORES: &[&str] = &["gt-f1-scores.fvecs", "gt-public-f1-scores.fvecs"];
const GT_F10_IDS: &[&str] = &["gt-f10.ivecs", "gt-public-f10.ivecs"];
const GT_F10_SCORES: &[&str] = &["gt-f10-scores.fvecs", "gt-public-f10-scores.fvecs"];

/// A base point's payload (one `base-payload.jsonl` line).
pub type Payload = serde_json::Map<String, serde_json::Value>;

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
    pub payloads: Vec<Payload>,
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
        let Base { vectors, payloads } = Base::load(dir, None)?;
        let q = QuerySet::load(dir, Truth::All, max_queries)?;
        let ds = Self {
            dir: dir.to_owned(),
            base: vectors,
            payloads,
            queries: q.vectors,
            gt_ids: q.gt_ids,
            gt_scores: q.gt_scores,
        };
        ds.check()?;
        Ok(ds)
    }

    /// The vector dimension.
    pub fn dim(&self) -> usize {
        self.base.dim
    }

    /// The queries and their (unfiltered) ground truth, for the driver.
    pub fn query_set(&self) -> QuerySet {
        QuerySet {
            truth: Truth::All,
            vectors: self.queries.clone(),
            gt_ids: self.gt_ids.clone(),
            gt_scores: self.gt_scores.clone(),
        }
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

/// The base of a dataset: what a producer publishes. Row `i` has point id `i`.
#[derive(Debug, Clone)]
pub struct Base {
    /// Base vectors, one row per point.
    pub vectors: Matrix<f32>,
    /// One JSON object per row (the point's payload).
    pub payloads: Vec<Payload>,
}

impl Base {
    /// Loads the first `limit` rows (all when `None`) of `dir`'s base
    /// vectors and payloads.
    pub fn load(dir: &Path, limit: Option<usize>) -> Result<Self> {
        let vectors = read_fvecs(&find(dir, "base vectors", BASE)?, limit)?;
        let payloads = read_payloads(&find(dir, "payload", PAYLOADS)?, limit)?;
        if payloads.len() != vectors.rows() {
            return Err(Error::Inconsistent {
                dir: dir.to_owned(),
                reason: format!(
                    "{} payload lines for {} base vectors",
                    payloads.len(),
                    vectors.rows()
                ),
            });
        }
        Ok(Self { vectors, payloads })
    }

    /// Number of points.
    pub fn len(&self) -> usize {
        self.vectors.rows()
    }

    /// Whether there are no points.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Which ground truth a query run is scored against, and the payload filter
/// that goes with it (see the debian-minilm README).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Truth {
    /// No filter (`gt.ivecs` / `gt-public.ivecs`).
    All,
    /// `section == "games"`, ~1.7 % of the base (`gt-public-f1.ivecs`).
    F1,
    /// `section in ["admin", "net", "text", "utils"]`, ~10.8 % of the base
    /// (`gt-public-f10.ivecs`).
    F10,
}

impl Truth {
    /// The short name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Truth::All => "all",
            Truth::F1 => "f1",
            Truth::F10 => "f10",
        }
    }

    /// The search filter (Qdrant's JSON shape); `None` for [`Truth::All`].
    pub fn filter(self) -> Option<serde_json::Value> {
        let section =
            |m: serde_json::Value| serde_json::json!({"must": [{"key": "section", "match": m}]});
        match self {
            Truth::All => None,
            Truth::F1 => Some(section(serde_json::json!({"value": "games"}))),
            Truth::F10 => Some(section(
                serde_json::json!({"any": ["admin", "net", "text", "utils"]}),
            )),
        }
    }

    fn files(self) -> (&'static [&'static str], &'static [&'static str]) {
        match self {
            Truth::All => (GT_IDS, GT_SCORES),
            Truth::F1 => (GT_F1_IDS, GT_F1_SCORES),
            Truth::F10 => (GT_F10_IDS, GT_F10_SCORES),
        }
    }
}

/// Queries with the ground truth they are scored against.
#[derive(Debug, Clone)]
pub struct QuerySet {
    /// Which ground truth (and filter).
    pub truth: Truth,
    /// Query vectors.
    pub vectors: Matrix<f32>,
    /// Exact top-k base ids per query, by decreasing similarity.
    pub gt_ids: Matrix<i32>,
    /// The matching similarities.
    pub gt_scores: Matrix<f32>,
}

impl QuerySet {
    /// Loads at most `max_queries` queries (all when `None`) of `dir` and
    /// the `truth` ground truth for them.
    pub fn load(dir: &Path, truth: Truth, max_queries: Option<usize>) -> Result<Self> {
        let (ids, scores) = truth.files();
        let vectors = read_fvecs(&find(dir, "query vectors", QUERIES)?, max_queries)?;
        let gt_ids = read_ivecs(&find(dir, "ground-truth ids", ids)?, max_queries)?;
        let gt_scores = read_fvecs(&find(dir, "ground-truth scores", scores)?, max_queries)?;
        if gt_ids.rows() < vectors.rows() || gt_scores.rows() < vectors.rows() {
            return Err(Error::Inconsistent {
                dir: dir.to_owned(),
                reason: format!(
                    "{} ground truth has {} id rows and {} score rows for {} queries",
                    truth.name(),
                    gt_ids.rows(),
                    gt_scores.rows(),
                    vectors.rows()
                ),
            });
        }
        Ok(Self {
            truth,
            vectors,
            gt_ids,
            gt_scores,
        })
    }

    /// Number of queries.
    pub fn len(&self) -> usize {
        self.vectors.rows()
    }

    /// Whether there are no queries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tie-aware recall@k of `hits` for query `q` (see
    /// [`eddy_dataset::recall_at_k`]).
    pub fn recall(&self, q: usize, hits: &[(u64, f32)], k: usize) -> f64 {
        eddy_dataset::recall_at_k(hits, self.gt_ids.row(q), self.gt_scores.row(q), k)
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

/// Reads one JSON object per line (the first `limit` lines, or all); line
/// `i` must have `"id": i` when it has an id.
fn read_payloads(path: &Path, limit: Option<usize>) -> Result<Vec<Payload>> {
    let io_err = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let reader = BufReader::new(File::open(path).map_err(io_err)?);
    let mut out = Vec::new();
    for (i, line) in reader.lines().take(limit.unwrap_or(usize::MAX)).enumerate() {
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
    fn base_and_query_sets_load_on_their_own() {
        let base = Base::load(Path::new(SAMPLE_DIR), Some(100)).expect("base loads");
        assert_eq!((base.len(), base.payloads.len()), (100, 100));
        let q = QuerySet::load(Path::new(SAMPLE_DIR), Truth::All, Some(3)).expect("queries");
        assert_eq!(q.len(), 3);
        let exact: Vec<(u64, f32)> = q
            .gt_ids
            .row(0)
            .iter()
            .zip(q.gt_scores.row(0))
            .map(|(&id, &s)| (id as u64, s))
            .collect();
        assert_eq!(q.recall(0, &exact, 100), 1.0);
        // The sample has no filtered ground truth: the error names the files.
        let err = QuerySet::load(Path::new(SAMPLE_DIR), Truth::F1, None).expect_err("no f1");
        assert!(err.to_string().contains("gt-public-f1.ivecs"), "{err}");
    }

    #[test]
    fn filters_match_the_dataset_readme() {
        assert_eq!(Truth::All.filter(), None);
        assert_eq!(
            Truth::F1.filter(),
            Some(serde_json::json!({"must": [{"key": "section", "match": {"value": "games"}}]}))
        );
        let f10 = Truth::F10.filter().expect("filter").to_string();
        assert!(f10.contains(r#"["admin","net","text","utils"]"#), "{f10}");
    }

    #[test]
    fn missing_files_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = Dataset::load(dir.path(), None).expect_err("empty dir");
        assert!(err.to_string().contains("base.fvecs"), "{err}");
    }
}
