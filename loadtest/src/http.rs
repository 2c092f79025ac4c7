//! A small client for eddy-query's HTTP JSON API (the calls the demo and the
//! load generator make).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::options::SearchOptions;

/// Errors of the HTTP client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request could not be sent or its body not read.
    #[error("{what}: {source}")]
    Transport {
        /// The request.
        what: String,
        /// The underlying error.
        source: reqwest::Error,
    },
    /// The server answered with an unexpected status.
    #[error("{what}: HTTP {status}: {body}")]
    Status {
        /// The request.
        what: String,
        /// The status code.
        status: u16,
        /// The response body (truncated).
        body: String,
    },
    /// The response body is not the expected JSON.
    #[error("{what}: bad response body: {source}")]
    Body {
        /// The request.
        what: String,
        /// The decoding error.
        source: serde_json::Error,
    },
}

/// Result alias for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One search request (`POST /v1/collections/{c}/search`).
#[derive(Debug, Clone, Serialize)]
pub struct SearchRequest<'a> {
    /// The query vector.
    pub vector: &'a [f32],
    /// `k`, exact or `ef`, filter.
    #[serde(flatten)]
    pub options: &'a SearchOptions,
    /// Whether to return payloads.
    pub with_payload: bool,
    /// Read-your-writes: partition → offset the answer must reflect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_offsets: Option<&'a BTreeMap<u32, i64>>,
}

/// One result row.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Hit {
    /// Point id.
    pub id: u64,
    /// Similarity (higher is better).
    pub score: f32,
    /// The payload, when requested.
    #[serde(default)]
    pub payload: Option<serde_json::Value>,
}

/// A search response.
#[derive(Debug, Clone, Deserialize)]
pub struct SearchResponse {
    /// Results, best first.
    pub result: Vec<Hit>,
    /// The offsets (partition -> next offset) the answer reflects.
    #[serde(default)]
    pub offsets: BTreeMap<String, i64>,
    /// Server-side time.
    #[serde(default)]
    pub took_ms: Option<f64>,
}

#[derive(Deserialize)]
struct ScrollPage {
    points: Vec<serde::de::IgnoredAny>,
    next_after: Option<u64>,
}

#[derive(Deserialize)]
struct CountResponse {
    count: u64,
}

/// Client for one collection of one eddy-query server.
#[derive(Debug, Clone)]
pub struct QueryClient {
    client: reqwest::Client,
    base_url: String,
    collection: String,
}

const ERROR_BODY_CHARS: usize = 500;
/// Idle connections kept per host: enough for the load driver's workers.
const POOL_IDLE_PER_HOST: usize = 256;

impl QueryClient {
    /// A client for `http://{addr}` and `collection`, with a per-request `timeout`.
    pub fn new(addr: &str, collection: &str, timeout: Duration) -> Result<Self> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .pool_max_idle_per_host(POOL_IDLE_PER_HOST)
            .build()
            .map_err(|source| Error::Transport {
                what: "build HTTP client".into(),
                source,
            })?;
        Ok(Self {
            client,
            base_url: format!("http://{addr}"),
            collection: collection.to_owned(),
        })
    }

    /// The server's base URL.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// `GET /readyz`: true on 200, false on any other status or a connection error.
    pub async fn ready(&self) -> bool {
        let url = format!("{}/readyz", self.base_url);
        matches!(self.client.get(url).send().await, Ok(r) if r.status().is_success())
    }

    /// `POST /v1/collections/{c}/search`.
    pub async fn search(&self, req: &SearchRequest<'_>) -> Result<SearchResponse> {
        let url = format!(
            "{}/v1/collections/{}/search",
            self.base_url, self.collection
        );
        let body = self
            .send(self.client.post(&url).json(req), &url, &[200])
            .await?;
        decode(&url, &body)
    }

    /// `GET /v1/collections/{c}/points/{id}`: `Some(point)` on 200, `None` on 404.
    pub async fn get_point(&self, id: u64) -> Result<Option<serde_json::Value>> {
        let url = format!(
            "{}/v1/collections/{}/points/{id}",
            self.base_url, self.collection
        );
        let resp = self
            .client
            .get(&url)
            .send()
            .await
            .map_err(|source| Error::Transport {
                what: format!("GET {url}"),
                source,
            })?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let body = check(resp, &url, &[200]).await?;
        decode(&url, &body).map(Some)
    }

    /// `GET /v1/collections/{c}`: the definition and serving status.
    pub async fn info(&self) -> Result<serde_json::Value> {
        let url = format!("{}/v1/collections/{}", self.base_url, self.collection);
        let body = self.send(self.client.get(&url), &url, &[200]).await?;
        decode(&url, &body)
    }

    /// `POST /v1/collections/{c}/scroll`: one page of up to `limit` live
    /// points after id `after`, payloads included; returns the points on
    /// the page and the cursor of the next page (`None` at the end).
    pub async fn scroll_page(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<(usize, Option<u64>)> {
        let url = format!(
            "{}/v1/collections/{}/scroll",
            self.base_url, self.collection
        );
        let body = serde_json::json!({"limit": limit, "after": after, "with_payload": true});
        let body = self
            .send(self.client.post(&url).json(&body), &url, &[200])
            .await?;
        let page: ScrollPage = decode(&url, &body)?;
        Ok((page.points.len(), page.next_after))
    }

    /// `POST /v1/collections/{c}/count` with no filter.
    pub async fn count(&self) -> Result<u64> {
        let url = format!("{}/v1/collections/{}/count", self.base_url, self.collection);
        let body = self
            .send(
                self.client.post(&url).json(&serde_json::json!({})),
                &url,
                &[200],
            )
            .await?;
        decode::<CountResponse>(&url, &body).map(|c| c.count)
    }

    async fn send(&self, req: reqwest::RequestBuilder, url: &str, ok: &[u16]) -> Result<Vec<u8>> {
        let resp = req.send().await.map_err(|source| Error::Transport {
            what: url.to_owned(),
            source,
        })?;
        check(resp, url, ok).await
    }
}

async fn check(resp: reqwest::Response, url: &str, ok: &[u16]) -> Result<Vec<u8>> {
    let status = resp.status().as_u16();
    let body = resp.bytes().await.map_err(|source| Error::Transport {
        what: format!("{url}: read body"),
        source,
    })?;
    if !ok.contains(&status) {
        let text: String = String::from_utf8_lossy(&body)
            .chars()
            .take(ERROR_BODY_CHARS)
            .collect();
        return Err(Error::Status {
            what: url.to_owned(),
            status,
            body: text,
        });
    }
    Ok(body.to_vec())
}

fn decode<T: serde::de::DeserializeOwned>(url: &str, body: &[u8]) -> Result<T> {
    serde_json::from_slice(body).map_err(|source| Error::Body {
        what: url.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_request_matches_the_contract() {
        let v = [0.5f32, -1.0];
        let body = serde_json::to_value(SearchRequest {
            vector: &v,
            options: &SearchOptions::new(10, true),
            with_payload: false,
            min_offsets: None,
        })
        .expect("serializes");
        assert_eq!(
            body,
            serde_json::json!({"vector": [0.5, -1.0], "k": 10, "with_payload": false, "exact": true})
        );
        let min = BTreeMap::from([(2u32, 41i64)]);
        let body = serde_json::to_value(SearchRequest {
            vector: &v,
            options: &SearchOptions::new(10, true),
            with_payload: false,
            min_offsets: Some(&min),
        })
        .expect("serializes");
        assert_eq!(body["min_offsets"], serde_json::json!({"2": 41}));
    }

    #[test]
    fn search_response_parses() {
        let r: SearchResponse = serde_json::from_str(
            r#"{"result":[{"id":42,"score":0.93,"payload":{"section":"net"}},{"id":7,"score":0.5}],
                "offsets":{"0":123},"took_ms":0.4}"#,
        )
        .expect("parses");
        assert_eq!(r.result.len(), 2);
        assert_eq!(r.result[0].id, 42);
        assert_eq!(r.result[1].payload, None);
        assert_eq!(r.offsets.get("0"), Some(&123));
    }
}
