//! A small cluster for tests: Tansu, one topic, eddy-ingest and eddy-query.

use std::time::{Duration, Instant};

use clap::Parser as _;
use eddy_loadtest::broker::Tansu;
use eddy_loadtest::secured_broker::SecuredTansu;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use serde_json::{json, Value};

/// Dimension of the test vectors.
pub const DIM: usize = 8;

mod nodes;
mod secured;
mod vectors;

pub use nodes::*;
pub use secured::*;
pub use vectors::*;

/// The cluster's broker: plain, or SCRAM over TLS for a secured cluster.
enum Broker {
    Plain(Tansu),
    Secured(SecuredTansu),
}

/// A running test cluster.
pub struct Cluster {
    /// Kept alive for the cluster's lifetime (stopped on drop).
    broker: Broker,
    /// The Kafka flags every eddy service of this cluster takes (the
    /// secured broker's properties and secrets file; none when plain).
    pub kafka_args: Vec<String>,
    pub topic: String,
    pub ingest: Option<eddy_ingest::Ingest>,
    pub query: Option<eddy_query::Query>,
    pub producer: FutureProducer,
    /// Sends the admin key when the cluster is secured.
    pub http: reqwest::Client,
    /// TLS and keys, when the query service runs with them.
    pub secured: Option<Secured>,
    /// The store flags the services were given (empty: the temporary
    /// directory below is the store).
    store_args: Vec<String>,
    /// Removed on drop.
    _store: tempfile::TempDir,
}

impl Cluster {
    /// Starts Tansu, creates `collection`'s topic and starts both services.
    pub async fn start(collection: &str, partitions: u32) -> Cluster {
        Self::start_with(collection, partitions, None, &[]).await
    }

    /// Like [`Cluster::start`]; with `secured`, eddy-query serves TLS and
    /// wants keys, and `query_args` are added to its flags.
    pub async fn start_with(
        collection: &str,
        partitions: u32,
        secured: Option<Secured>,
        query_args: &[&str],
    ) -> Cluster {
        Self::start_on(collection, partitions, secured, query_args, &[]).await
    }

    /// Like [`Cluster::start_with`], the services' store given by
    /// `store_args` (e.g. `--store s3://…` with its options); by default a
    /// temporary directory both share.
    pub async fn start_on(
        collection: &str,
        partitions: u32,
        secured: Option<Secured>,
        query_args: &[&str],
        store_args: &[String],
    ) -> Cluster {
        Self::start_split(collection, partitions, 1, secured, query_args, store_args).await
    }

    /// Like [`Cluster::start_on`], the collection split into `shards`.
    pub async fn start_split(
        collection: &str,
        partitions: u32,
        shards: u32,
        secured: Option<Secured>,
        query_args: &[&str],
        store_args: &[String],
    ) -> Cluster {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_test_writer()
            .try_init();
        let topic = collection.to_owned();
        let broker = match &secured {
            None => {
                let tansu = tokio::task::spawn_blocking(Tansu::start)
                    .await
                    .expect("join")
                    .expect(
                        "Tansu starts (install it with `cargo install --locked tansu --features libsql`)",
                    );
                tansu
                    .create_topic(&topic, partitions)
                    .expect("topic created");
                Broker::Plain(tansu)
            }
            Some(s) => {
                let (cert, key, password) =
                    (s.cert.clone(), s.key.clone(), s.kafka_password.clone());
                let topic = topic.clone();
                Broker::Secured(
                    tokio::task::spawn_blocking(move || {
                        SecuredTansu::start(
                            KAFKA_USER,
                            &password,
                            &cert,
                            &key,
                            &[(&topic, partitions)],
                        )
                    })
                    .await
                    .expect("join")
                    .expect("the secured broker starts (Tansu with SCRAM, socat for TLS)"),
                )
            }
        };
        let (brokers, kafka_args) = match (&broker, &secured) {
            (Broker::Secured(b), Some(s)) => {
                let mut args = Vec::new();
                for (key, value) in b.client_properties() {
                    args.extend(["--kafka-property".to_owned(), format!("{key}={value}")]);
                }
                args.extend([
                    "--kafka-secrets-file".to_owned(),
                    s.kafka_secrets_file.display().to_string(),
                ]);
                (b.bootstrap(), args)
            }
            (Broker::Secured(b), None) => (b.bootstrap(), Vec::new()),
            (Broker::Plain(t), _) => (t.bootstrap(), Vec::new()),
        };
        let store = tempfile::tempdir().expect("tmp store");
        let spec = format!(
            "name={collection},dim={DIM},metric=l2,shards={shards},field.kind=keyword,field.i=integer"
        );
        let dir = store.path().to_str().expect("utf-8 path").to_owned();
        // A store of their own gives each service its own cache directory:
        // nothing is shared on disk.
        let store_flags = |service: &str| -> Vec<String> {
            if store_args.is_empty() {
                vec!["--store".to_owned(), dir.clone()]
            } else {
                let mut flags = store_args.to_vec();
                flags.extend(["--store-cache".to_owned(), format!("{dir}/{service}-cache")]);
                flags
            }
        };
        let ingest_args: Vec<String> = [
            "eddy-ingest",
            "--brokers",
            &brokers,
            "--collection",
            &spec,
            "--seal-rows",
            "64",
            "--seal-age-ms",
            "300",
            // Every sealed segment gets a graph and SQ8 codes, so the checks
            // against exact results cover graph walks too.
            "--min-graph-rows",
            "16",
            "--index-poll-ms",
            "50",
            "--metrics-addr",
            "127.0.0.1:0",
            "--collection-poll-ms",
            "100",
        ]
        .iter()
        .map(|a| (*a).to_owned())
        .chain(kafka_args.iter().cloned())
        .chain(store_flags("ingest"))
        .collect();
        let ingest = eddy_ingest::start(eddy_ingest::IngestConfig::parse_from(ingest_args))
            .await
            .expect("ingest starts");
        let mut args: Vec<String> = crate::cluster::query_args(&brokers)
            .into_iter()
            .chain(query_args.iter().map(|a| (*a).to_owned()))
            .chain(kafka_args.iter().cloned())
            .chain(store_flags("query"))
            .collect();
        if let Some(s) = &secured {
            args.extend([
                "--tls-cert".to_owned(),
                s.cert.display().to_string(),
                "--tls-key".to_owned(),
                s.key.display().to_string(),
                "--read-api-keys".to_owned(),
                s.read_key.clone(),
                "--admin-api-keys".to_owned(),
                s.admin_key.clone(),
            ]);
        }
        let query = eddy_query::start(eddy_query::QueryConfig::parse_from(args))
            .await
            .expect("query starts");
        let mut producer_config = match &broker {
            Broker::Plain(_) => {
                let mut c = ClientConfig::new();
                c.set("bootstrap.servers", &brokers);
                c
            }
            Broker::Secured(b) => b.client_config(),
        };
        let producer: FutureProducer = producer_config
            .set("linger.ms", "5")
            .set("acks", "all")
            .create()
            .expect("producer");
        let cluster = Cluster {
            broker,
            kafka_args,
            topic,
            ingest: Some(ingest),
            query: Some(query),
            producer,
            http: secured
                .as_ref()
                .map_or_else(reqwest::Client::new, |s| s.client_with_key(&s.admin_key)),
            secured,
            store_args: store_args.to_vec(),
            _store: store,
        };
        cluster.wait_ready().await;
        cluster
    }

    /// The broker of a secured cluster (SCRAM over TLS).
    pub fn secured_kafka(&self) -> Option<&SecuredTansu> {
        match &self.broker {
            Broker::Secured(b) => Some(b),
            Broker::Plain(_) => None,
        }
    }

    /// The store both services share.
    pub fn store_path(&self) -> &std::path::Path {
        self._store.path()
    }

    /// The services' store, opened by the test (its own cache for an object
    /// store).
    pub fn open_store(&self) -> eddy_manifest::Store {
        if self.store_args.is_empty() {
            return eddy_manifest::Store::open(self._store.path()).expect("store");
        }
        let mut args = vec!["eddy-test".to_owned()];
        args.extend(self.store_args.iter().cloned());
        args.extend([
            "--store-cache".to_owned(),
            self._store.path().join("test-cache").display().to_string(),
        ]);
        #[derive(clap::Parser)]
        struct StoreCli {
            #[command(flatten)]
            store: eddy_config::StoreArgs,
        }
        <StoreCli as clap::Parser>::parse_from(args)
            .store
            .open()
            .expect("store")
    }

    /// The broker's bootstrap address.
    pub fn brokers(&self) -> String {
        match &self.broker {
            Broker::Plain(t) => t.bootstrap(),
            Broker::Secured(b) => b.bootstrap(),
        }
    }

    /// The status of `GET /v1/collections/{collection}/points/{id}`.
    pub async fn point_status(&self, collection: &str, id: u64) -> u16 {
        self.http
            .get(self.url(&format!("/v1/collections/{collection}/points/{id}")))
            .send()
            .await
            .expect("get")
            .status()
            .as_u16()
    }

    /// Base URL of the HTTP API.
    pub fn url(&self, path: &str) -> String {
        let q = self.query.as_ref().expect("query running");
        match &self.secured {
            Some(_) => format!("https://localhost:{}{path}", q.http_addr().port()),
            None => format!("http://{}{path}", q.http_addr()),
        }
    }

    /// Flight endpoint.
    pub fn flight_url(&self) -> String {
        let q = self.query.as_ref().expect("query running");
        match &self.secured {
            Some(_) => format!("https://localhost:{}", q.flight_addr().port()),
            None => format!("http://{}", q.flight_addr()),
        }
    }

    async fn wait_ready(&self) {
        wait_node_ready(&self.http, &self.url("")).await;
    }

    /// Produces one record (value `None` = tombstone) and returns (partition, offset).
    pub async fn produce(&self, key: &str, value: Option<&[u8]>) -> (i32, i64) {
        let mut record: FutureRecord<'_, str, [u8]> = FutureRecord::to(&self.topic).key(key);
        if let Some(v) = value {
            record = record.payload(v);
        }
        let delivery = self
            .producer
            .send(record, Duration::from_secs(10))
            .await
            .expect("delivered");
        (delivery.partition, delivery.offset)
    }

    /// Produces an upsert event.
    pub async fn upsert(&self, id: u64, vector: &[f32], payload: Value) -> (i32, i64) {
        let value = json!({"id": id, "vector": vector, "payload": payload}).to_string();
        self.produce(&id.to_string(), Some(value.as_bytes())).await
    }

    /// POSTs `body` to `path` of the HTTP API; the JSON answer.
    pub async fn post(&self, path: &str, body: &Value) -> Value {
        self.http
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"))
            .json()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: not JSON: {e}"))
    }

    /// The collection's `count`, as HTTP reports it.
    pub async fn count(&self, collection: &str) -> u64 {
        let path = format!("/v1/collections/{collection}/count");
        let r = self.post(&path, &json!({})).await;
        r["count"].as_u64().expect("count is a number")
    }

    /// Waits until `count` equals `n` (bounded).
    pub async fn wait_count(&self, collection: &str, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let c = self.count(collection).await;
            if c == n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "count stuck at {c}, expected {n}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the collection's tail is empty: everything is sealed.
    pub async fn wait_sealed(&self, collection: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let info = self.info(collection).await;
            if info["status"]["tail_rows"] == 0
                && info["status"]["segments"].as_u64().unwrap_or(0) > 0
            {
                return info;
            }
            assert!(Instant::now() < deadline, "not sealed within 60 s: {info}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `GET /v1/collections/{collection}`.
    pub async fn info(&self, collection: &str) -> Value {
        self.http
            .get(self.url(&format!("/v1/collections/{collection}")))
            .send()
            .await
            .expect("info request")
            .json()
            .await
            .expect("info json")
    }

    /// Waits until ingest has indexed every segment that gets a graph and the
    /// query service serves that manifest version; returns the number of
    /// indexed segments.
    pub async fn wait_indexed(&self, collection: &str) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let m = self.ingest_metrics().await;
            let store = self.open_store();
            let def = store
                .collection(collection)
                .expect("store")
                .expect("collection");
            // A split collection: every shard's chain (its version in the
            // served snapshot is the sum of the chains').
            let (mut unindexed, mut indexed, mut version) = (0.0, 0, 0);
            for chain in def.chains() {
                unindexed +=
                    metric_sum(&m, "eddy_ingest_unindexed_rows", &[("collection", &chain)]);
                let manifest = store.latest_manifest(&chain).expect("manifest");
                indexed += manifest
                    .segments
                    .iter()
                    .filter(|s| s.index.is_some())
                    .count() as u64;
                version += manifest.version;
            }
            let info = self.info(collection).await;
            if unindexed == 0.0
                && indexed > 0
                && info["status"]["manifest_version"].as_u64() >= Some(version)
                && info["status"]["indexed_segments"].as_u64() >= Some(indexed)
            {
                return indexed;
            }
            assert!(
                Instant::now() < deadline,
                "segments not indexed within 60 s: {indexed} indexed, {unindexed} rows pending; {info}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Text of a metrics endpoint.
    pub async fn metrics_text(&self, url: String) -> String {
        self.http
            .get(url)
            .send()
            .await
            .expect("metrics request")
            .text()
            .await
            .expect("metrics text")
    }

    /// The ingest service's metrics.
    pub async fn ingest_metrics(&self) -> String {
        let addr = self.ingest.as_ref().expect("ingest running").metrics_addr();
        self.metrics_text(format!("http://{addr}/metrics")).await
    }

    /// Stops the services.
    pub async fn stop(mut self) {
        if let Some(q) = self.query.take() {
            q.shutdown().await;
        }
        if let Some(i) = self.ingest.take() {
            i.shutdown().await;
        }
    }
}
