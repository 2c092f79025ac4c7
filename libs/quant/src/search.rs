//! Search over codes with oversampling, then exact f32 rescoring.

use eddy_model::Metric;

use crate::{check_query, CodeScorer, Error, Result};

/// Exact similarity of two f32 vectors under `metric`, higher is closer:
/// the inner product for cosine (normalised vectors) and dot, `-l2sq` for L2.
///
/// # Panics
/// If the lengths differ.
pub fn exact_score(metric: Metric, a: &[f32], b: &[f32]) -> f32 {
    match metric {
        Metric::Cosine | Metric::Dot => eddy_kernels::dot(a, b),
        Metric::L2 => -eddy_kernels::l2sq(a, b),
    }
}

/// The `k` highest scores as `(row, score)`, best first; ties go to the smaller row.
pub fn top_k(scores: &[f32], k: usize) -> Vec<(u32, f32)> {
    let k = k.min(scores.len());
    if k == 0 {
        return Vec::new();
    }
    let cmp = |a: &u32, b: &u32| {
        scores[*b as usize]
            .total_cmp(&scores[*a as usize])
            .then(a.cmp(b))
    };
    let mut idx: Vec<u32> = (0..scores.len() as u32).collect();
    if k < idx.len() {
        idx.select_nth_unstable_by(k - 1, cmp);
        idx.truncate(k);
    }
    idx.sort_unstable_by(cmp);
    idx.into_iter().map(|i| (i, scores[i as usize])).collect()
}

/// Exact scores of `candidates` (row ids into the row-major `vectors`), top `k` of them.
///
/// Uses the prefetching id-list kernels.
///
/// # Errors
/// On a query of the wrong dimension or a ragged `vectors`.
///
/// # Panics
/// If a candidate id is past the last row.
pub fn rescore(
    vectors: &[f32],
    metric: Metric,
    query: &[f32],
    candidates: &[u32],
    k: usize,
) -> Result<Vec<(u32, f32)>> {
    let dim = query.len();
    if dim == 0 {
        return Err(Error::ZeroDim);
    }
    if !vectors.len().is_multiple_of(dim) {
        return Err(Error::Ragged {
            len: vectors.len(),
            dim,
        });
    }
    let mut exact = vec![0.0f32; candidates.len()];
    match metric {
        Metric::Cosine | Metric::Dot => {
            eddy_kernels::dot_ids(query, vectors, candidates, &mut exact);
        }
        Metric::L2 => {
            eddy_kernels::l2sq_ids(query, vectors, candidates, &mut exact);
            exact.iter_mut().for_each(|s| *s = -*s);
        }
    }
    Ok(top_k(&exact, k)
        .into_iter()
        .map(|(i, s)| (candidates[i as usize], s))
        .collect())
}

/// Scan every code, keep the best `k × oversampling`, rescore those with f32.
///
/// `oversampling == 0.0` skips rescoring and returns the top `k` by code score.
/// Returned scores are exact when rescored, approximate otherwise.
///
/// # Errors
/// On a bad query, a negative or non-finite oversampling, or `vectors` that do
/// not hold `codes.len()` rows of `codes.dim()`.
pub fn search_with_rescore<C: CodeScorer>(
    codes: &C,
    vectors: &[f32],
    metric: Metric,
    query: &[f32],
    k: usize,
    oversampling: f32,
) -> Result<Vec<(u32, f32)>> {
    check_query(query, codes.dim())?;
    if !(oversampling.is_finite() && oversampling >= 0.0) {
        return Err(Error::InvalidParam {
            name: "oversampling",
            reason: "must be finite and >= 0",
        });
    }
    if vectors.len() != codes.len() * codes.dim() {
        return Err(Error::Ragged {
            len: vectors.len(),
            dim: codes.dim(),
        });
    }
    let prepared = codes.prepare(query)?;
    let mut scores = vec![0.0f32; codes.len()];
    codes.score_all(&prepared, &mut scores);
    if oversampling == 0.0 {
        return Ok(top_k(&scores, k));
    }
    let keep = ((k as f32 * oversampling).ceil() as usize).max(k);
    let candidates: Vec<u32> = top_k(&scores, keep).into_iter().map(|(i, _)| i).collect();
    rescore(vectors, metric, query, &candidates, k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_orders_and_breaks_ties() {
        let s = [0.5, 0.9, 0.5, 0.1, 0.9];
        assert_eq!(top_k(&s, 3), vec![(1, 0.9), (4, 0.9), (0, 0.5)]);
        assert_eq!(top_k(&s, 10).len(), 5);
        assert!(top_k(&s, 0).is_empty());
        assert!(top_k(&[], 3).is_empty());
    }

    #[test]
    fn rescore_picks_exact_best() {
        let vectors = [1.0, 0.0, 0.0, 1.0, 0.7, 0.7];
        let got = rescore(&vectors, Metric::Dot, &[0.0, 1.0], &[0, 1, 2], 2).expect("rescore");
        assert_eq!(got.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 2]);
        let got = rescore(&vectors, Metric::L2, &[1.0, 0.1], &[0, 1, 2], 1).expect("rescore");
        assert_eq!(got[0].0, 0);
        assert!(rescore(&vectors[..5], Metric::Dot, &[0.0, 1.0], &[0], 1).is_err());
    }
}
