//! A request made ready for its collection, once per request (or once per
//! DoExchange): options validated, the filter parsed against the indexed
//! fields, and the query vectors checked, normalised and laid out flat.

use std::collections::BTreeMap;
use std::ops::Range;

use eddy_filter::Filter;
use eddy_model::CollectionDef;
use eddy_segment::SealedQuery;

use crate::error::ApiError;
use crate::request::{SearchParams, SearchRequest, Vectors, MAX_BATCH_QUERIES, MAX_EF};

/// A search request checked against its collection.
#[derive(Debug)]
pub struct PreparedSearch {
    /// The options.
    pub params: SearchParams,
    /// The filter, parsed once.
    pub filter: Option<Filter>,
    /// Read-your-writes offsets.
    pub min_offsets: BTreeMap<u32, i64>,
    /// Set on a fan-out leg: search only these shards of a split
    /// collection, here (never fanning out again).
    pub only_shards: Option<ShardSet>,
}

/// Some shards of a split collection: which rows a fan-out leg searches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSet {
    /// The collection's shard count.
    pub of: u32,
    /// The shards, ascending.
    pub shards: Vec<u32>,
}

impl ShardSet {
    /// `shards` of `def` (sorted, each once).
    pub fn new(def: &CollectionDef, mut shards: Vec<u32>) -> Self {
        shards.sort_unstable();
        shards.dedup();
        Self {
            of: def.shards,
            shards,
        }
    }

    /// Whether it holds `shard`.
    pub fn has(&self, shard: u32) -> bool {
        self.shards.binary_search(&shard).is_ok()
    }

    /// Whether it holds the shard of `partition`.
    pub fn has_partition(&self, partition: u32) -> bool {
        self.has(partition % self.of.max(1))
    }
}

impl PreparedSearch {
    /// Validates `request`'s options and parses its filter against `def`'s
    /// indexed payload fields.
    pub fn new(def: &CollectionDef, request: SearchRequest) -> Result<Self, ApiError> {
        request.params.validate()?;
        let filter = match &request.params.filter {
            None => None,
            Some(v) => Some(
                Filter::parse(v, &def.payload_fields)
                    .map_err(|e| ApiError::BadRequest(e.to_string()))?,
            ),
        };
        Ok(Self {
            params: request.params,
            filter,
            min_offsets: request.min_offsets,
            only_shards: None,
        })
    }

    /// This search restricted to `shards` of `def` (a fan-out leg).
    pub fn only(mut self, def: &CollectionDef, shards: Vec<u32>) -> Self {
        self.only_shards = Some(ShardSet::new(def, shards));
        self
    }

    /// How one query searches one sealed segment.
    pub fn sealed(&self) -> SealedQuery<'_> {
        let defaults = SealedQuery::default();
        let p = &self.params;
        SealedQuery {
            k: p.k,
            ef: p.ef.unwrap_or(defaults.ef),
            exact: p.exact,
            quantization: p.quantization,
            oversampling: capped_oversampling(p.k, p.oversampling.unwrap_or(defaults.oversampling)),
            rescore: p.rescore,
            filter: self.filter.as_ref(),
            planner: defaults.planner,
        }
    }
}

/// The oversampling a walk uses: the beam is `max(ef, k × oversampling)`,
/// so the factor is lowered until that stays within `max(MAX_EF, k)` and
/// the `ef` cap holds whatever `k` and oversampling a request combines.
fn capped_oversampling(k: usize, asked: f32) -> f32 {
    let most = MAX_EF.max(k) as f32 / k.max(1) as f32;
    asked.min(most).max(1.0)
}

/// Query vectors in one flat buffer: checked (dimension, finite values),
/// unit length for cosine, at most [`MAX_BATCH_QUERIES`].
#[derive(Debug, Clone, PartialEq)]
pub struct QueryBatch {
    dim: usize,
    values: Vec<f32>,
}

impl QueryBatch {
    /// The vectors a door received, for a collection defined by `def`.
    pub fn new(def: &CollectionDef, vectors: Vectors) -> Result<Self, ApiError> {
        let dim = def.dimension as usize;
        match vectors {
            Vectors::Rows(rows) => Self::from_rows(def, rows.iter().map(Vec::as_slice)),
            Vectors::Flat(values) => {
                if dim == 0 || values.is_empty() || !values.len().is_multiple_of(dim) {
                    return Err(ApiError::BadRequest(format!(
                        "{} floats are not a positive multiple of the dimension {dim}",
                        values.len()
                    )));
                }
                Self::checked(def, values)
            }
        }
    }

    /// Copies rows (an Arrow column, JSON lists) into one flat batch.
    pub fn from_rows<'a>(
        def: &CollectionDef,
        rows: impl ExactSizeIterator<Item = &'a [f32]>,
    ) -> Result<Self, ApiError> {
        let dim = def.dimension as usize;
        check_count(rows.len())?;
        let mut values = Vec::with_capacity(rows.len() * dim);
        for (i, row) in rows.enumerate() {
            if row.len() != dim {
                return Err(ApiError::BadRequest(format!(
                    "{}query vector has {} values, collection {} has dimension {dim}",
                    query_prefix(i),
                    row.len(),
                    def.name
                )));
            }
            values.extend_from_slice(row);
        }
        Self::checked(def, values)
    }

    fn checked(def: &CollectionDef, mut values: Vec<f32>) -> Result<Self, ApiError> {
        let dim = def.dimension as usize;
        check_count(values.len() / dim.max(1))?;
        for (i, v) in values.chunks_exact_mut(dim).enumerate() {
            eddy_event::validate_vector(v).map_err(|r| {
                ApiError::BadRequest(format!("{}query {}", query_prefix(i), r.detail))
            })?;
            if def.metric.normalizes() && !eddy_event::normalize(v) {
                return Err(ApiError::BadRequest(format!(
                    "{}query vector is all zeros (cosine needs a direction)",
                    query_prefix(i)
                )));
            }
        }
        Ok(Self { dim, values })
    }

    /// Number of query vectors.
    pub fn len(&self) -> usize {
        self.values.len() / self.dim.max(1)
    }

    /// The vectors, concatenated.
    pub fn values(&self) -> &[f32] {
        &self.values
    }

    /// Whether there are none (never, once built).
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Query `i`.
    pub fn get(&self, i: usize) -> &[f32] {
        &self.values[i * self.dim..(i + 1) * self.dim]
    }

    /// Query `i` alone, as a batch of one.
    pub fn row(&self, i: usize) -> Option<QueryBatch> {
        (i < self.len()).then(|| QueryBatch {
            dim: self.dim,
            values: self.get(i).to_vec(),
        })
    }

    /// The queries in `range`, in order.
    pub fn iter(&self, range: Range<usize>) -> impl Iterator<Item = &[f32]> {
        range.map(move |i| self.get(i))
    }
}

fn check_count(n: usize) -> Result<(), ApiError> {
    if n == 0 {
        return Err(ApiError::BadRequest("no query vectors given".into()));
    }
    if n > MAX_BATCH_QUERIES {
        return Err(ApiError::BadRequest(format!(
            "{n} query vectors in one request; at most {MAX_BATCH_QUERIES}"
        )));
    }
    Ok(())
}

/// "query i: " for every query but the first, so a single search's error
/// reads as before.
fn query_prefix(i: usize) -> String {
    if i == 0 {
        String::new()
    } else {
        format!("query {i}: ")
    }
}

#[cfg(test)]
mod tests {
    use eddy_model::Metric;

    use super::*;

    fn def(metric: Metric) -> CollectionDef {
        CollectionDef {
            metric,
            ..CollectionDef::new("c", 2)
        }
    }

    #[test]
    fn the_beam_stays_within_the_ef_cap() {
        let beam = |k: usize, oversampling: f32| {
            let mut request = SearchRequest::default();
            request.params.k = k;
            request.params.oversampling = Some(oversampling);
            let search = PreparedSearch::new(&def(Metric::L2), request).expect("valid");
            let q = search.sealed();
            ((q.k as f32) * q.oversampling).ceil() as usize
        };
        assert_eq!(beam(10, 4.0), 40, "ordinary requests are untouched");
        assert_eq!(beam(5_000, 100.0), MAX_EF);
        assert_eq!(beam(100, 100.0), MAX_EF);
        // k itself past the cap: the beam is k, never k x oversampling.
        assert_eq!(beam(10_000, 4.0), 10_000);
        assert!(beam(8_000, 2.0) <= MAX_EF);
    }

    #[test]
    fn batches_are_flat_checked_and_normalised() {
        let b = QueryBatch::new(
            &def(Metric::Cosine),
            Vectors::Rows(vec![vec![3.0, 4.0], vec![0.0, 2.0]]),
        )
        .expect("valid");
        assert_eq!(b.len(), 2);
        assert_eq!(b.get(0), &[0.6, 0.8]);
        assert_eq!(b.get(1), &[0.0, 1.0]);
        let flat = QueryBatch::new(&def(Metric::L2), Vectors::Flat(vec![3.0, 4.0, 1.0, 1.0]))
            .expect("valid");
        assert_eq!(flat.get(0), &[3.0, 4.0]);
        for (vectors, want) in [
            (Vectors::Rows(vec![]), "no query vectors"),
            (Vectors::Rows(vec![vec![1.0]]), "has 1 values"),
            (
                Vectors::Rows(vec![vec![1.0, 1.0], vec![f32::NAN, 1.0]]),
                "query 1:",
            ),
            (Vectors::Rows(vec![vec![0.0, 0.0]]), "all zeros"),
            (
                Vectors::Flat(vec![1.0, 2.0, 3.0]),
                "not a positive multiple",
            ),
        ] {
            let err = QueryBatch::new(&def(Metric::Cosine), vectors).expect_err(want);
            assert!(err.to_string().contains(want), "{err} lacks {want}");
        }
    }
}
