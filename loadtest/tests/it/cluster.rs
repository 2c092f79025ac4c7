//! Tansu plus eddy-ingest and eddy-query, run in process (their library
//! entry points), with one 384-d cosine collection per topic (declaring
//! protobuf for events without a `content-type` header).

use std::time::Duration;

use clap::Parser as _;
use eddy_loadtest::broker::Tansu;
use eddy_loadtest::http::QueryClient;
use eddy_loadtest::suite::Settled;
use tokio::time::Instant;

/// Partitions of every test topic.
pub const PARTITIONS: u32 = 2;

/// A running broker and both services.
pub struct Cluster {
    pub tansu: Tansu,
    pub ingest: Option<eddy_ingest::Ingest>,
    pub query: Option<eddy_query::Query>,
    _store: tempfile::TempDir,
}

impl Cluster {
    /// Starts Tansu, one topic and collection per name in `collections`,
    /// and both services; returns once eddy-query is ready.
    pub async fn start(collections: &[&str]) -> Cluster {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_test_writer()
            .try_init();
        let names: Vec<String> = collections.iter().map(|c| (*c).to_owned()).collect();
        let tansu = tokio::task::spawn_blocking(move || {
            let tansu = Tansu::start()?;
            for name in &names {
                tansu.create_topic(name, PARTITIONS)?;
            }
            Ok::<_, eddy_loadtest::broker::Error>(tansu)
        })
        .await
        .expect("join")
        .expect("Tansu starts (install it with `cargo install --locked tansu --features libsql`)");
        let store = tempfile::tempdir().expect("tmp store");
        let store_path = store.path().to_str().expect("utf-8 path").to_owned();
        let brokers = tansu.bootstrap();
        let mut ingest_args = vec![
            "eddy-ingest".to_owned(),
            "--store".into(),
            store_path.clone(),
            "--brokers".into(),
            brokers.clone(),
            // No graph builds: the tests search exactly, and a debug-build
            // graph build would only take CPU from them.
            "--min-graph-rows".into(),
            "100000000".into(),
            "--metrics-addr".into(),
            "127.0.0.1:0".into(),
            "--collection-poll-ms".into(),
            "100".into(),
            // Tansu on a busy 2-core machine can stall for more than the
            // default 10 s session; a member it times out mid-join can leave
            // its group unable to rebalance (README, Known issues).
            "--kafka-property".into(),
            "session.timeout.ms=60000".into(),
        ];
        for c in collections {
            ingest_args.push("--collection".into());
            ingest_args.push(format!(
                "name={c},dim=384,metric=cosine,topic={c},id=u64,format=protobuf,field.section=keyword"
            ));
        }
        let ingest = eddy_ingest::start(eddy_ingest::IngestConfig::parse_from(ingest_args))
            .await
            .expect("ingest starts");
        let query = eddy_query::start(eddy_query::QueryConfig::parse_from([
            "eddy-query",
            "--store",
            &store_path,
            "--brokers",
            &brokers,
            "--http-addr",
            "127.0.0.1:0",
            "--flight-addr",
            "127.0.0.1:0",
            "--manifest-poll-ms",
            "50",
            "--collection-poll-ms",
            "100",
        ]))
        .await
        .expect("query starts");
        let cluster = Cluster {
            tansu,
            ingest: Some(ingest),
            query: Some(query),
            _store: store,
        };
        let client = cluster.client(collections[0]);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !client.ready().await {
            assert!(
                Instant::now() < deadline,
                "eddy-query not ready within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        cluster
    }

    /// eddy-query's HTTP address.
    pub fn http(&self) -> String {
        self.query
            .as_ref()
            .expect("query running")
            .http_addr()
            .to_string()
    }

    /// eddy-query's Flight address.
    pub fn flight(&self) -> String {
        self.query
            .as_ref()
            .expect("query running")
            .flight_addr()
            .to_string()
    }

    /// An HTTP client for `collection`.
    pub fn client(&self, collection: &str) -> QueryClient {
        QueryClient::new(&self.http(), collection, Duration::from_secs(30)).expect("client")
    }

    /// Waits until `collection` counts `expected` points (120 s at most).
    pub async fn wait_count(&self, collection: &str, expected: u64) {
        let client = self.client(collection);
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut last = None;
        loop {
            if let Ok(n) = client.count().await {
                assert!(n <= expected, "{collection}: count {n} > {expected}");
                if n == expected {
                    return;
                }
                last = Some(n);
            }
            assert!(
                Instant::now() < deadline,
                "{collection}: count {last:?}, not {expected}, after 120 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until `collection`'s query tail is empty (every event sealed
    /// and served from a segment; 120 s at most) and says how it found the
    /// collection: the suite's settle step in this cluster, whose graphs
    /// are off.
    pub async fn wait_settled(&self, collection: &str) -> anyhow::Result<Settled> {
        let client = self.client(collection);
        let started = Instant::now();
        loop {
            let info = client.info().await?;
            let status = &info["status"];
            if status["tail_rows"].as_u64() == Some(0) {
                let count = |k: &str| status[k].as_u64().map_or(0, |n| n as usize);
                return Ok(Settled {
                    segments: count("segments"),
                    indexed: count("indexed_segments"),
                    waited_s: started.elapsed().as_secs_f64(),
                });
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(120),
                "{collection}: tail not sealed within 120 s: {status}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until eddy-ingest has sealed every event published to
    /// `collection`'s topic (its manifest lag is 0 on every partition; 120
    /// s at most), then returns its rejected events by reason.
    pub async fn rejected_once_sealed(&self, collection: &str) -> Vec<(String, f64)> {
        let ingest = self.ingest.as_ref().expect("ingest running");
        let url = format!("http://{}/metrics", ingest.metrics_addr());
        let deadline = Instant::now() + Duration::from_secs(120);
        let ours = format!("collection=\"{collection}\"");
        loop {
            let text = reqwest::get(&url)
                .await
                .expect("ingest metrics reachable")
                .text()
                .await
                .expect("metrics text");
            let samples = |name: &str| -> Vec<(String, f64)> {
                text.lines()
                    .filter(|l| l.starts_with(name) && l.contains(&ours))
                    .filter_map(|l| {
                        let (series, value) = l.rsplit_once(' ')?;
                        Some((series.to_owned(), value.parse().ok()?))
                    })
                    .collect()
            };
            let lag = samples("eddy_ingest_manifest_lag{");
            if lag.len() == PARTITIONS as usize && lag.iter().all(|(_, v)| *v == 0.0) {
                return samples("eddy_ingest_rejected_total{");
            }
            assert!(
                Instant::now() < deadline,
                "{collection}: not sealed within 120 s: {lag:?}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Stops both services (the broker stops on drop).
    pub async fn shutdown(mut self) {
        if let Some(q) = self.query.take() {
            q.shutdown().await;
        }
        if let Some(i) = self.ingest.take() {
            i.shutdown().await;
        }
    }
}
