//! eddy-query's settings: its clap flags (each with an `EDDY_*` variable)
//! and the engine options derived from them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use eddy_config::CommonArgs;
use eddy_kafka::{KafkaSettings, ProtectedProperty};
use eddy_segment::Residency;

use crate::auth::{ApiKeys, KeysError, SecretKey};
use crate::engine::EngineOptions;
use crate::error::Error;
use crate::fanout::discovery::Discovery;
use crate::fanout::hedge::HedgePolicy;
use crate::fanout::PeerOptions;
use crate::policy::CollectionPolicy;

/// eddy-query settings.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "eddy-query",
    version,
    about = "Sealed segments + fresh Kafka tail -> Flight and HTTP search"
)]
pub struct QueryConfig {
    /// Shared settings.
    #[command(flatten)]
    pub common: CommonArgs,

    /// HTTP listen address.
    #[arg(long, env = "EDDY_HTTP_ADDR", default_value = "127.0.0.1:8080")]
    pub http_addr: SocketAddr,

    /// Arrow Flight (gRPC) listen address.
    #[arg(long, env = "EDDY_FLIGHT_ADDR", default_value = "127.0.0.1:50051")]
    pub flight_addr: SocketAddr,

    /// Shards of split collections this node serves, as a list
    /// (`0,2`); absent = every shard. A search on a collection whose other
    /// shards this node does not serve fails with 503, or with
    /// `allow_partial` answers from these, marked partial.
    #[arg(long, env = "EDDY_SHARDS", value_delimiter = ',')]
    pub shards: Option<Vec<u32>>,

    /// Flight URLs of the other query nodes (`http://host:50051`, or
    /// `https://` with `--peer-ca-file`): a search on a split collection
    /// fans out to those serving the shards this node does not.
    #[arg(long, env = "EDDY_PEERS", value_delimiter = ',')]
    pub peers: Vec<String>,

    /// A file holding the API key (read scope) this node presents to its
    /// peers, when they want keys.
    #[arg(long, env = "EDDY_PEER_KEY_FILE")]
    pub peer_key_file: Option<PathBuf>,

    /// The CA certificate (PEM) that signed the peers' TLS certificates.
    #[arg(long, env = "EDDY_PEER_CA_FILE")]
    pub peer_ca_file: Option<PathBuf>,

    /// How often the peers are asked which shards they serve (ms).
    #[arg(long, env = "EDDY_PEER_REFRESH_MS", default_value_t = 1_000)]
    pub peer_refresh_ms: u64,

    /// Find peers in the store's node registry (besides `--peers`), and
    /// announce this node there at `--advertise-flight-url`.
    #[arg(long, env = "EDDY_PEER_DISCOVERY")]
    pub peer_discovery: bool,

    /// How often a node with `--peer-discovery` announces itself and looks
    /// for the others (ms); a node that dies drops out after three periods.
    #[arg(long, env = "EDDY_PEER_DISCOVERY_MS", default_value_t = 5_000)]
    pub peer_discovery_ms: u64,

    /// The Flight URL peers reach this node at, announced with
    /// `--peer-discovery` (default: the bound `--flight-addr`, when it is a
    /// specific address; `http://`, or `https://` with TLS).
    #[arg(long, env = "EDDY_ADVERTISE_FLIGHT_URL")]
    pub advertise_flight_url: Option<String>,

    /// This node's name in the node registry (default: `$HOSTNAME` and the
    /// Flight port, e.g. `query-0-50051`).
    #[arg(long, env = "EDDY_NODE_ID")]
    pub node_id: Option<String>,

    /// When a fan-out leg that has not answered is asked of a second peer
    /// serving the same shards as well (the first answer wins): `p95` (the
    /// action's measured 95th percentile, at most one hedge per ten legs),
    /// a delay in ms, or `off`.
    #[arg(long, env = "EDDY_PEER_HEDGE", default_value = "p95")]
    pub peer_hedge: HedgePolicy,

    /// How often to look for a new manifest version (ms).
    #[arg(long, env = "EDDY_MANIFEST_POLL_MS", default_value_t = 200)]
    pub manifest_poll_ms: u64,

    /// Search threads (0 = one per core).
    #[arg(long, env = "EDDY_SEARCH_THREADS", default_value_t = 0)]
    pub search_threads: usize,

    /// Threads serving HTTP connections, each with a runtime of its own
    /// (0 = one per core). A connection stays on one thread; small
    /// searches run there, batches go to the search threads.
    #[arg(long, env = "EDDY_HTTP_THREADS", default_value_t = 0)]
    pub http_threads: usize,

    /// Rows the tail holds at most. At the bound (ingest is not sealing)
    /// it stops reading: answers report the collection stale and
    /// `/readyz` not ready, until sealing makes room.
    #[arg(long, env = "EDDY_MAX_TAIL_ROWS", default_value_t = 1_000_000)]
    pub max_tail_rows: usize,

    /// Approximate bytes the tail holds at most (same effect as
    /// `--max-tail-rows`).
    #[arg(long, env = "EDDY_MAX_TAIL_BYTES", default_value_t = 2 << 30)]
    pub max_tail_bytes: usize,

    /// Longest a request waits for its `min_offsets` (ms).
    #[arg(long, env = "EDDY_MAX_WAIT_MS", default_value_t = 5_000)]
    pub max_wait_ms: u64,

    /// How served segment and index files are held: `huge-pages` reads them
    /// into memory backed by transparent huge pages (fewer TLB misses on a
    /// graph walk, measured 1.2-1.4x queries/s; a starting node serves its
    /// first snapshot from maps and moves them in right after), `mapped`
    /// memory-maps them (zero copy, evictable).
    #[arg(long, env = "EDDY_SEGMENT_RESIDENCY", default_value_t = Residency::HugePages)]
    pub segment_residency: Residency,

    /// Query vectors admitted at once (queued on or running in the search
    /// pool); more are refused with HTTP 429 / gRPC RESOURCE_EXHAUSTED.
    #[arg(long, env = "EDDY_MAX_QUEUED_QUERIES", default_value_t = 10_000)]
    pub max_queued_queries: usize,

    /// Longest a search may take (ms) before it is answered with HTTP 504 /
    /// gRPC DEADLINE_EXCEEDED.
    #[arg(long, env = "EDDY_REQUEST_TIMEOUT_MS", default_value_t = 30_000)]
    pub request_timeout_ms: u64,

    /// Requests served at once (HTTP requests, Flight calls, open
    /// DoExchange streams); one more gets HTTP 429 / RESOURCE_EXHAUSTED.
    #[arg(long, env = "EDDY_MAX_CONCURRENT_REQUESTS", default_value_t = 512)]
    pub max_concurrent_requests: usize,

    /// Longest a DoExchange may wait for its client's next batch (ms); then
    /// it ends with DEADLINE_EXCEEDED and frees its slot.
    #[arg(long, env = "EDDY_EXCHANGE_IDLE_MS", default_value_t = 60_000)]
    pub exchange_idle_ms: u64,

    /// How long a pinned snapshot (GetFlightInfo) lives unused, in
    /// seconds; each use extends it. Its store lease keeps garbage
    /// collection away from its files for as long.
    #[arg(long, env = "EDDY_SNAPSHOT_TTL_SECS", default_value_t = 600)]
    pub snapshot_ttl_secs: u64,

    /// Share of live queries (0..=1) searched again, on idle CPU, as asked
    /// and exactly on the same snapshot, for the online recall estimate
    /// (`eddy_query_recall_estimate`); 0 = off.
    #[arg(long, env = "EDDY_RECALL_SAMPLE_RATE", default_value_t = 0.01)]
    pub recall_sample_rate: f64,

    /// Share of one core (0..=1) the recall estimate's searches may take:
    /// after each sample it rests long enough to stay within it, and
    /// queries arriving meanwhile are not sampled. 1 = no rest.
    #[arg(long, env = "EDDY_RECALL_CPU_SHARE", default_value_t = 0.02)]
    pub recall_cpu_share: f64,

    /// API keys that may read (search, points, count, listings, metrics),
    /// comma-separated. With no key configured at all the service is open,
    /// which it allows only on loopback listeners (or with
    /// `--insecure-no-auth`).
    #[arg(
        long,
        env = "EDDY_READ_API_KEYS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub read_api_keys: Vec<SecretKey>,

    /// API keys that may also create collections, comma-separated.
    #[arg(
        long,
        env = "EDDY_ADMIN_API_KEYS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub admin_api_keys: Vec<SecretKey>,

    /// A file of `read KEY` / `admin KEY` lines (keeps keys out of the
    /// process list and the environment).
    #[arg(long, env = "EDDY_API_KEYS_FILE")]
    pub api_keys_file: Option<PathBuf>,

    /// Serve without API keys on listeners other hosts can reach.
    #[arg(long, env = "EDDY_INSECURE_NO_AUTH")]
    pub insecure_no_auth: bool,

    /// TLS certificate chain (PEM) for both HTTP and Flight; with
    /// `--tls-key`, both doors speak only TLS.
    #[arg(long, env = "EDDY_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// TLS private key (PEM) matching `--tls-cert`.
    #[arg(long, env = "EDDY_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Topics a collection created over the API may read: comma-separated
    /// patterns where `*` matches any run of characters. Internal topics
    /// (`__consumer_offsets`, any `__*`) are refused whatever this says.
    #[arg(
        long,
        env = "EDDY_TOPIC_ALLOW",
        value_delimiter = ',',
        default_value = "*"
    )]
    pub topic_allow: Vec<String>,

    /// Most collections the service holds; creating one more is refused.
    #[arg(long, env = "EDDY_MAX_COLLECTIONS", default_value_t = 256)]
    pub max_collections: usize,
}

impl QueryConfig {
    /// The Kafka connection settings (`--brokers`, `--kafka-property`);
    /// an error names a property eddy refuses (it would make offsets jump).
    pub fn kafka(&self) -> Result<KafkaSettings, ProtectedProperty> {
        KafkaSettings::new(
            self.common.brokers.clone(),
            self.common.kafka.client_properties(),
        )
    }

    /// Search threads: `--search-threads`, or one per core when 0.
    pub fn search_threads(&self) -> usize {
        per_core_unless_set(self.search_threads)
    }

    /// HTTP threads: `--http-threads`, or one per core when 0.
    pub fn http_threads(&self) -> usize {
        per_core_unless_set(self.http_threads)
    }

    /// How collection polling is paced (at least every 50 ms).
    pub fn collection_poll(&self) -> Duration {
        Duration::from_millis(self.common.collection_poll_ms.max(50))
    }

    /// The API keys (flags, environment and keys file).
    pub fn api_keys(&self) -> Result<ApiKeys, KeysError> {
        ApiKeys::load(
            &self.read_api_keys,
            &self.admin_api_keys,
            self.api_keys_file.as_deref(),
        )
    }

    /// How to reach the peers: reads the key and CA files.
    pub fn peer_options(&self) -> std::io::Result<PeerOptions> {
        let key = match &self.peer_key_file {
            Some(path) => Some(std::fs::read_to_string(path)?.trim().to_owned()),
            None => None,
        };
        let ca_pem = match &self.peer_ca_file {
            Some(path) => Some(std::fs::read(path)?),
            None => None,
        };
        Ok(PeerOptions {
            urls: self.peers.clone(),
            key,
            ca_pem,
            refresh: Duration::from_millis(self.peer_refresh_ms.max(50)),
            timeout: Duration::from_millis(self.request_timeout_ms.max(1)),
            hedge: self.peer_hedge,
        })
    }

    /// How this node takes part in the node registry (`None` without
    /// `--peer-discovery`), once its Flight port is bound at `flight_addr`.
    ///
    /// # Errors
    /// A node id the registry cannot name, or no URL to announce: the
    /// Flight address is unspecified (`0.0.0.0`) and
    /// `--advertise-flight-url` is not given.
    pub fn discovery(
        &self,
        store: &eddy_manifest::Store,
        flight_addr: SocketAddr,
        tls: bool,
    ) -> Result<Option<Discovery>, Error> {
        if !self.peer_discovery {
            return Ok(None);
        }
        let advertise = match &self.advertise_flight_url {
            Some(url) => url.clone(),
            None if flight_addr.ip().is_unspecified() => {
                return Err(Error::Peers(format!(
                    "--peer-discovery: the Flight address {flight_addr} is unspecified; \
                     name the URL peers reach this node at with --advertise-flight-url"
                )))
            }
            None => format!("{}://{flight_addr}", if tls { "https" } else { "http" }),
        };
        let node_id = match &self.node_id {
            Some(id) => id.clone(),
            None => {
                let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "query".to_owned());
                let host: String = host
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || c == '-' {
                            c
                        } else {
                            '-'
                        }
                    })
                    .collect();
                format!("{}-{}", host.trim_start_matches('-'), flight_addr.port())
            }
        };
        if !eddy_manifest::valid_node_id(&node_id) {
            return Err(Error::Peers(format!(
                "--node-id {node_id:?}: use letters, digits, '-', '_' and '.' (at most 128)"
            )));
        }
        Ok(Some(Discovery {
            store: store.clone(),
            node_id,
            advertise: Some(advertise),
            every: Duration::from_millis(self.peer_discovery_ms.max(50)),
            withdrawn: Default::default(),
        }))
    }

    /// Which collections the API may create.
    pub fn collection_policy(&self) -> CollectionPolicy {
        CollectionPolicy::new(self.topic_allow.clone(), self.max_collections)
    }

    /// The engine's options; fails on a Kafka property eddy refuses, or
    /// an unreadable peer key or CA file.
    pub fn engine_options(&self) -> Result<EngineOptions, Error> {
        Ok(EngineOptions {
            kafka: self.kafka()?,
            search_threads: self.search_threads(),
            manifest_poll: Duration::from_millis(self.manifest_poll_ms.max(10)),
            max_wait: Duration::from_millis(self.max_wait_ms),
            max_tail_rows: self.max_tail_rows.max(1),
            max_tail_bytes: self.max_tail_bytes.max(1),
            residency: self.segment_residency,
            max_queued_queries: self.max_queued_queries,
            request_timeout: Duration::from_millis(self.request_timeout_ms.max(1)),
            max_concurrent_requests: self.max_concurrent_requests,
            exchange_idle: Duration::from_millis(self.exchange_idle_ms.max(1)),
            snapshot_ttl: Duration::from_secs(self.snapshot_ttl_secs.max(1)),
            recall_sample_rate: self.recall_sample_rate,
            recall_cpu_share: self.recall_cpu_share,
            policy: self.collection_policy(),
            shards: self.shards.clone(),
            peers: self.peer_options().map_err(|e| {
                Error::Peers(format!("reading --peer-key-file or --peer-ca-file: {e}"))
            })?,
            peer_discovery: self.peer_discovery,
        })
    }
}

/// `n`, or one per core when `n` is 0.
fn per_core_unless_set(n: usize) -> usize {
    match n {
        0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
        n => n,
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[test]
    fn defaults_and_engine_options() {
        let config = QueryConfig::parse_from(["eddy-query", "--search-threads", "3"]);
        assert_eq!(config.http_addr.port(), 8080);
        assert_eq!(config.flight_addr.port(), 50051);
        let options = config.engine_options().expect("no protected property");
        assert_eq!(options.search_threads, 3);
        assert_eq!(options.manifest_poll, Duration::from_millis(200));
        assert_eq!(options.max_wait, Duration::from_secs(5));
        assert_eq!(options.kafka.brokers(), "127.0.0.1:9092");
        assert_eq!(config.collection_poll(), Duration::from_secs(1));
        let auto = QueryConfig::parse_from(["eddy-query"]);
        assert!(auto.search_threads() >= 1);
        assert!(!auto.api_keys().expect("no keys").enabled());
        assert!(auto.tls_cert.is_none());
    }

    #[test]
    fn keys_stay_out_of_help_and_debug() {
        let key = "very-secret-admin-key-42";
        let config = QueryConfig::parse_from(["eddy-query", "--admin-api-keys", key]);
        assert!(config.api_keys().expect("keys").enabled());
        assert!(!format!("{config:?}").contains(key));
        let command = <QueryConfig as clap::CommandFactory>::command();
        for id in ["read_api_keys", "admin_api_keys"] {
            let arg = command.get_arguments().find(|a| a.get_id() == id);
            assert!(arg.is_some_and(|a| a.is_hide_env_values_set()), "{id}");
        }
        // A TLS key without its certificate is refused.
        assert!(QueryConfig::try_parse_from(["eddy-query", "--tls-key", "k.pem"]).is_err());
    }
}
