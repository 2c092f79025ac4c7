//! The APIs the driver loads: HTTP search (one query per request), Flight
//! `DoGet` (one ticket per query) and Flight `DoExchange` (a batch of
//! queries per exchange), behind one cloneable [`Searcher`].

use crate::dataset::QuerySet;
use crate::flight::{FlightSearch, Hits};
use crate::http::{QueryClient, SearchRequest};
use crate::options::SearchOptions;

/// Errors of one request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The HTTP request failed.
    #[error(transparent)]
    Http(#[from] crate::http::Error),
    /// The Flight call failed.
    #[error(transparent)]
    Flight(#[from] crate::flight::Error),
}

/// An API to load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Api {
    /// `POST /v1/collections/{c}/search`, one query per request.
    Http,
    /// Flight `DoGet`, one ticket per query.
    DoGet,
    /// Flight `DoExchange`, a batch of queries per exchange.
    DoExchange,
}

impl Api {
    /// The API's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Api::Http => "http",
            Api::DoGet => "do-get",
            Api::DoExchange => "do-exchange",
        }
    }
}

/// A client for one API of one collection; clones share connections.
#[derive(Debug, Clone)]
pub enum Searcher {
    /// HTTP search.
    Http(QueryClient),
    /// Flight `DoGet`.
    DoGet {
        /// The Flight connection.
        flight: FlightSearch,
        /// The collection.
        collection: String,
    },
    /// Flight `DoExchange`: `batches` input batches of `batch` queries per
    /// exchange (an analytics job streams its batches through one).
    DoExchange {
        /// The Flight connection.
        flight: FlightSearch,
        /// The collection.
        collection: String,
        /// Queries per input batch.
        batch: usize,
        /// Input batches per exchange.
        batches: usize,
    },
}

impl Searcher {
    /// The API this searcher loads.
    pub fn api(&self) -> Api {
        match self {
            Searcher::Http(_) => Api::Http,
            Searcher::DoGet { .. } => Api::DoGet,
            Searcher::DoExchange { .. } => Api::DoExchange,
        }
    }

    /// Queries each request carries.
    pub fn batch(&self) -> usize {
        match self {
            Searcher::DoExchange { batch, batches, .. } => (*batch).max(1) * (*batches).max(1),
            _ => 1,
        }
    }

    /// Runs `queries` (indices into `set`) as one request; one hit list per
    /// query, in order.
    pub async fn search(
        &self,
        set: &QuerySet,
        queries: &[usize],
        options: &SearchOptions,
    ) -> Result<Vec<Hits>, Error> {
        match self {
            Searcher::Http(client) => {
                let mut out = Vec::with_capacity(queries.len());
                for &q in queries {
                    let resp = client
                        .search(&SearchRequest {
                            vector: set.vectors.row(q),
                            options,
                            with_payload: false,
                            min_offsets: None,
                        })
                        .await?;
                    out.push(resp.result.iter().map(|h| (h.id, h.score)).collect());
                }
                Ok(out)
            }
            Searcher::DoGet { flight, collection } => {
                let vectors: Vec<&[f32]> = queries.iter().map(|&q| set.vectors.row(q)).collect();
                Ok(flight.do_get(collection, &vectors, options).await?)
            }
            Searcher::DoExchange {
                flight,
                collection,
                batch,
                ..
            } => {
                let flat: Vec<f32> = queries
                    .iter()
                    .flat_map(|&q| set.vectors.row(q).iter().copied())
                    .collect();
                let dim = set.vectors.dim;
                Ok(flight
                    .do_exchange(collection, &flat, dim, options, *batch)
                    .await?)
            }
        }
    }
}

/// The query indices of request `j` when each request carries `batch`
/// queries of a set of `n`: the next `batch` queries, wrapping around.
pub fn request_queries(j: u64, batch: usize, n: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let first = (j as usize).wrapping_mul(batch) % n;
    (0..batch).map(|i| (first + i) % n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_walk_the_queries_in_order() {
        assert_eq!(request_queries(0, 1, 5), vec![0]);
        assert_eq!(request_queries(7, 1, 5), vec![2]);
        assert_eq!(request_queries(1, 3, 5), vec![3, 4, 0]);
        assert!(request_queries(3, 2, 0).is_empty());
        assert_eq!(Api::DoExchange.name(), "do-exchange");
    }
}
