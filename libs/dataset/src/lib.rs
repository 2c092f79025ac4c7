//! Benchmark datasets: `.fvecs` / `.ivecs` readers and writers, and tie-aware
//! recall against exact ground truth.
//!
//! Used by the demo, the tests and the benchmarks; never by the services.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Errors while reading a dataset file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The file is not a well-formed vecs file.
    #[error("{path}: malformed vecs file: {reason}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A dense row-major matrix read from a vecs file.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix<T> {
    /// Number of columns (the vector dimension, or k for ground truth).
    pub dim: usize,
    /// `rows * dim` values, row after row.
    pub data: Vec<T>,
}

impl<T> Matrix<T> {
    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.data.len().checked_div(self.dim).unwrap_or(0)
    }

    /// Row `i` as a slice.
    pub fn row(&self, i: usize) -> &[T] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }

    /// Iterator over the rows.
    pub fn iter(&self) -> impl Iterator<Item = &[T]> {
        self.data.chunks_exact(self.dim.max(1))
    }
}

fn read_vecs(path: &Path, limit: Option<usize>) -> Result<Matrix<[u8; 4]>> {
    let bytes = fs::read(path).map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })?;
    let malformed = |reason: String| Error::Malformed {
        path: path.to_owned(),
        reason,
    };
    if bytes.is_empty() {
        return Ok(Matrix {
            dim: 0,
            data: Vec::new(),
        });
    }
    let head: [u8; 4] = bytes
        .get(..4)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(|| malformed("shorter than one header".into()))?;
    let dim = i32::from_le_bytes(head);
    if dim <= 0 {
        return Err(malformed(format!("non-positive dimension {dim}")));
    }
    let dim = dim as usize;
    let stride = 4 * (dim + 1);
    if bytes.len() % stride != 0 {
        return Err(malformed(format!(
            "length {} is not a multiple of the row size {stride}",
            bytes.len()
        )));
    }
    let rows = (bytes.len() / stride).min(limit.unwrap_or(usize::MAX));
    let mut data = Vec::with_capacity(rows * dim);
    for (r, row) in bytes.chunks_exact(stride).take(rows).enumerate() {
        if row[..4] != head {
            return Err(malformed(format!("row {r} has a different dimension")));
        }
        data.extend(row[4..].chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]));
    }
    Ok(Matrix { dim, data })
}

/// Reads an `.fvecs` file (per row: i32 dim, then dim f32, little-endian),
/// keeping at most `limit` rows.
pub fn read_fvecs(path: &Path, limit: Option<usize>) -> Result<Matrix<f32>> {
    let raw = read_vecs(path, limit)?;
    Ok(Matrix {
        dim: raw.dim,
        data: raw.data.into_iter().map(f32::from_le_bytes).collect(),
    })
}

/// Reads an `.ivecs` file (per row: i32 k, then k i32), keeping at most `limit` rows.
pub fn read_ivecs(path: &Path, limit: Option<usize>) -> Result<Matrix<i32>> {
    let raw = read_vecs(path, limit)?;
    Ok(Matrix {
        dim: raw.dim,
        data: raw.data.into_iter().map(i32::from_le_bytes).collect(),
    })
}

fn write_vecs<T: Copy>(path: &Path, m: &Matrix<T>, to_le: impl Fn(T) -> [u8; 4]) -> Result<()> {
    let io_err = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let mut out = io::BufWriter::new(fs::File::create(path).map_err(io_err)?);
    let dim = i32::try_from(m.dim).map_err(|_| Error::Malformed {
        path: path.to_owned(),
        reason: format!("dimension {} does not fit in i32", m.dim),
    })?;
    for row in m.iter() {
        out.write_all(&dim.to_le_bytes()).map_err(io_err)?;
        for &v in row {
            out.write_all(&to_le(v)).map_err(io_err)?;
        }
    }
    out.flush().map_err(io_err)
}

/// Writes an `.fvecs` file.
pub fn write_fvecs(path: &Path, m: &Matrix<f32>) -> Result<()> {
    write_vecs(path, m, f32::to_le_bytes)
}

/// Writes an `.ivecs` file.
pub fn write_ivecs(path: &Path, m: &Matrix<i32>) -> Result<()> {
    write_vecs(path, m, i32::to_le_bytes)
}

/// Slack allowed when comparing a returned score with the ground truth's
/// k-th score (float32 rounding of the float64 truth).
pub const TIE_EPSILON: f32 = 1e-5;

/// Tie-aware recall@k of one query for a similarity (higher is better) metric.
///
/// A returned id is a hit when it is among the true top-k ids, or when its
/// exact score is at least the true k-th score (minus [`TIE_EPSILON`]): with
/// duplicate vectors in the base several ids tie at the k-th place and any of
/// them is a correct answer. `returned` holds (id, exact score) pairs; at most
/// `k` of them are counted.
pub fn recall_at_k(
    returned: &[(u64, f32)],
    truth_ids: &[i32],
    truth_scores: &[f32],
    k: usize,
) -> f64 {
    let k = k.min(truth_ids.len()).min(truth_scores.len());
    if k == 0 {
        return 1.0;
    }
    let kth = truth_scores[k - 1];
    let top: std::collections::HashSet<i64> =
        truth_ids[..k].iter().map(|&i| i64::from(i)).collect();
    let hits = returned
        .iter()
        .take(k)
        .filter(|(id, score)| {
            i64::try_from(*id).is_ok_and(|id| top.contains(&id)) || *score >= kth - TIE_EPSILON
        })
        .count();
    hits as f64 / k as f64
}

/// Plain id-overlap recall@k (no tie handling), for comparison with reports
/// that do not count ties.
pub fn id_recall_at_k(returned: &[u64], truth_ids: &[i32], k: usize) -> f64 {
    let k = k.min(truth_ids.len());
    if k == 0 {
        return 1.0;
    }
    let top: std::collections::HashSet<i64> =
        truth_ids[..k].iter().map(|&i| i64::from(i)).collect();
    let hits = returned
        .iter()
        .take(k)
        .filter(|&&id| i64::try_from(id).is_ok_and(|id| top.contains(&id)))
        .count();
    hits as f64 / k as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fvecs_roundtrip_and_limit() {
        let dir = std::env::temp_dir().join(format!("eddy-dataset-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("tmp dir");
        let path = dir.join("a.fvecs");
        let m = Matrix {
            dim: 3,
            data: vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        };
        write_fvecs(&path, &m).expect("write");
        assert_eq!(read_fvecs(&path, None).expect("read"), m);
        let one = read_fvecs(&path, Some(1)).expect("read");
        assert_eq!(one.rows(), 1);
        assert_eq!(one.row(0), &[1.0, 2.0, 3.0]);
        fs::write(&path, [3, 0, 0, 0, 1]).expect("write");
        assert!(matches!(
            read_fvecs(&path, None),
            Err(Error::Malformed { .. })
        ));
        fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn recall_counts_ties() {
        let truth = [1, 2, 3];
        let scores = [0.9, 0.8, 0.7];
        // id 9 ties with the 3rd true neighbour: a hit.
        assert_eq!(
            recall_at_k(&[(1, 0.9), (2, 0.8), (9, 0.7)], &truth, &scores, 3),
            1.0
        );
        assert!((recall_at_k(&[(1, 0.9), (8, 0.5)], &truth, &scores, 3) - 1.0 / 3.0).abs() < 1e-9);
        assert!((id_recall_at_k(&[1, 2, 9], &truth, 3) - 2.0 / 3.0).abs() < 1e-9);
    }
}
