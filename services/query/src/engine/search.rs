//! The search path of the [`Engine`]: the request's limits, read-your-
//! writes waits, admission, the local search (inline or on the pool) and
//! the fan-out legs for shards this node lacks, merged into one top-k.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Engine, INLINE_MAX_QUERIES};
use crate::collection::Collection;
use crate::cpu::guarded;
use crate::error::ApiError;
use crate::fanout::Gathered;
use crate::prepared::{PreparedSearch, QueryBatch};
use crate::request::check_answer_size;
use crate::results::BatchResult;

impl Engine {
    /// Runs a prepared search over `queries` on `collection`: checks the
    /// answer's size, waits for its `min_offsets` (up to `--max-wait-ms`),
    /// admits the query vectors, then searches, all within
    /// `--request-timeout-ms`. A single graph query runs where it arrived
    /// (a hand-off to the pool costs more than its walk); batches and exact
    /// scans are split across the search pool.
    pub async fn search(
        &self,
        collection: &Arc<Collection>,
        search: &Arc<PreparedSearch>,
        queries: QueryBatch,
    ) -> Result<BatchResult, ApiError> {
        check_answer_size(queries.len(), search.params.k)?;
        self.recall.offer(collection, &queries, search);
        within(
            self.opts.request_timeout,
            self.search_now(collection, search, queries),
        )
        .await
    }

    async fn search_now(
        &self,
        collection: &Arc<Collection>,
        search: &Arc<PreparedSearch>,
        queries: QueryBatch,
    ) -> Result<BatchResult, ApiError> {
        // A fan-out leg searches its shards here; any other search of a
        // split collection asks peers for the shards this node lacks.
        let missing = match &search.only_shards {
            Some(_) => Vec::new(),
            None => collection.missing_shards(),
        };
        if !missing.is_empty() && self.peers.is_none() && !search.params.allow_partial {
            return Err(self.shards_unreachable(collection, &missing));
        }
        if !search.min_offsets.is_empty() {
            // Partitions of missing shards cannot be waited for here.
            let min: BTreeMap<u32, i64> = search
                .min_offsets
                .iter()
                .filter(|(p, _)| collection.serves_partition(**p))
                .map(|(p, o)| (*p, *o))
                .collect();
            self.wait_for(collection, &min).await?;
        }
        let n = queries.len();
        let _admitted = self.admission.admit(n)?;
        let segments = collection.segment_count() as f64;
        // Shared by the legs, the inline search and the pool's chunks.
        let queries = Arc::new(queries);
        let remote = async {
            match (&self.peers, missing.is_empty()) {
                (Some(peers), false) => peers.search(collection, &missing, search, &queries).await,
                _ => Ok(Gathered {
                    missing: missing.clone(),
                    ..Gathered::default()
                }),
            }
        };
        let local = async {
            if n <= INLINE_MAX_QUERIES && !search.params.exact {
                guarded(|| collection.search(&queries, 0..n, search))
            } else {
                self.search_on_pool(collection, search, queries.clone())
                    .await
            }
        };
        // The legs go out first; the local search runs while they travel.
        let (gathered, local) = tokio::join!(remote, local);
        let (gathered, mut result) = (gathered?, local?);
        if !gathered.missing.is_empty() && !search.params.allow_partial {
            return Err(self.shards_unreachable(collection, &gathered.missing));
        }
        if !missing.is_empty() {
            merge_legs(
                &mut result,
                gathered,
                search.params.k,
                collection.def().metric,
            );
        }
        let hist = self
            .metrics
            .segments_searched
            .with_label_values(&[collection.name()]);
        for _ in 0..n {
            hist.observe(segments);
        }
        Ok(result)
    }

    /// The error of a search or count whose `missing` shards no node
    /// answered for.
    pub fn shards_unreachable(&self, collection: &Collection, missing: &[u32]) -> ApiError {
        let peers = match &self.peers {
            None => "no --peers are configured",
            Some(_) => "no peer serving them answered",
        };
        ApiError::Unavailable(format!(
            "collection {:?} has {} shards and this node serves {:?} (--shards); shards {missing:?}: {peers}. Ask a node that serves them, or pass allow_partial for an answer from the shards at hand, marked partial",
            collection.name(),
            collection.def().shards,
            collection.shards(),
        ))
    }

    /// Runs CPU work other than a search (a scan, a filtered count) on the
    /// search pool, within `--request-timeout-ms`.
    pub async fn on_pool<T, F>(&self, work: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        within(self.opts.request_timeout, self.pool.run(work)).await
    }

    /// Splits `queries` into one chunk per search thread and runs them on
    /// the pool.
    async fn search_on_pool(
        &self,
        collection: &Arc<Collection>,
        search: &Arc<PreparedSearch>,
        queries: Arc<QueryBatch>,
    ) -> Result<BatchResult, ApiError> {
        let n = queries.len();
        let chunk = n.div_ceil(self.pool.threads()).max(1);
        let parts: Vec<_> = (0..n)
            .step_by(chunk)
            .map(|start| {
                let (collection, search, queries) =
                    (collection.clone(), search.clone(), queries.clone());
                let range = start..(start + chunk).min(n);
                self.pool
                    .run(move || collection.search(&queries, range, &search))
            })
            .collect();
        let mut result = BatchResult::default();
        for part in parts {
            result.extend(part.await?);
        }
        Ok(result)
    }

    async fn wait_for(
        &self,
        collection: &Collection,
        min: &BTreeMap<u32, i64>,
    ) -> Result<(), ApiError> {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + self.opts.max_wait;
        if !collection.wait_for(min, deadline).await {
            return Err(ApiError::Timeout(format!(
                "offsets {min:?} were not searchable within {} ms",
                self.opts.max_wait.as_millis()
            )));
        }
        self.metrics
            .freshness_wait
            .with_label_values(&[collection.name()])
            .observe(started.elapsed().as_secs_f64());
        Ok(())
    }
}

/// Merges the hits peers `gathered` into `result`: per query the best `k`
/// of both (scores compared as `metric` orders them), the peers'
/// partitions' offsets added, and the shards nobody answered for recorded.
fn merge_legs(result: &mut BatchResult, gathered: Gathered, k: usize, metric: eddy_model::Metric) {
    for (hits, more) in result.hits.iter_mut().zip(gathered.hits) {
        hits.extend(more);
        // `reported` flips L2 back to "higher is closer"; stable, so ties
        // keep the local hits first.
        hits.sort_by(|a, b| {
            metric
                .reported(b.score)
                .total_cmp(&metric.reported(a.score))
        });
        hits.truncate(k);
    }
    result.offsets.extend(gathered.offsets);
    result.add_missing(gathered.missing);
}

/// Runs `work`, answering [`ApiError::Timeout`] if it takes longer than
/// `limit`. Work already on a search thread finishes there (bounded by the
/// request caps); work still queued is skipped ([`crate::cpu`]).
pub async fn within<T>(
    limit: Duration,
    work: impl std::future::Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
        Err(ApiError::Timeout(format!(
            "the search took longer than {} ms (--request-timeout-ms)",
            limit.as_millis()
        )))
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;

    fn hit(id: u64, score: f32) -> crate::results::Hit {
        crate::results::Hit {
            id: eddy_model::PointId::Num(id),
            score,
            payload: None,
        }
    }

    /// Legs' hits merge with the local ones in the metric's order (L2:
    /// lowest distance first), the offsets of their partitions join the
    /// local ones, and shards nobody answered for are recorded.
    #[test]
    fn legs_merge_into_one_top_k() {
        let ids = |r: &BatchResult| -> Vec<Vec<u64>> {
            r.hits
                .iter()
                .map(|h| {
                    h.iter()
                        .map(|h| match h.id {
                            eddy_model::PointId::Num(n) => n,
                            _ => u64::MAX,
                        })
                        .collect()
                })
                .collect()
        };
        for (metric, want) in [
            (eddy_model::Metric::L2, vec![4, 1, 3]),
            (eddy_model::Metric::Cosine, vec![2, 3, 1]),
        ] {
            let mut result = BatchResult {
                hits: vec![vec![hit(1, 1.0), hit(2, 3.0)]],
                offsets: BTreeMap::from([(0, 5)]),
                missing_shards: Vec::new(),
            };
            let gathered = Gathered {
                hits: vec![vec![hit(3, 2.0), hit(4, 0.5)]],
                offsets: BTreeMap::from([(1, 7)]),
                missing: vec![2],
            };
            merge_legs(&mut result, gathered, 3, metric);
            assert_eq!(ids(&result), vec![want], "{metric:?}");
            assert_eq!(result.offsets, BTreeMap::from([(0, 5), (1, 7)]));
            assert_eq!(result.missing_shards, vec![2]);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn work_past_the_limit_is_a_timeout() {
        let limit = Duration::from_millis(50);
        let done = within(limit, async { Ok::<_, ApiError>(7) }).await;
        assert_eq!(done.expect("in time"), 7);
        let slow = within(limit, std::future::pending::<Result<u8, ApiError>>()).await;
        let err = slow.expect_err("past the limit");
        assert_eq!(err.status().as_u16(), 504);
        assert_eq!(err.code(), tonic::Code::DeadlineExceeded);
    }
}
