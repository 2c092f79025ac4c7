//! Running `eddy-ingest` and `eddy-query` as child processes (the demo and
//! the benchmark suite), and waiting for what they serve.

use std::fs::File;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context as _};
use tokio::time::Instant;

use eddy_manifest::{Store, StoreLocation};

use crate::broker::Tansu;
use crate::http::QueryClient;
use crate::process::{file_tail, free_port, ChildGuard};

/// How much of each service log a failure report shows.
const LOG_TAIL_BYTES: u64 = 3000;

/// What the services are started with.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Directory holding the `eddy-ingest` and `eddy-query` binaries.
    pub bin_dir: PathBuf,
    /// Kafka bootstrap servers.
    pub brokers: String,
    /// Segment store: a directory, or an `s3://bucket/prefix` the services
    /// reach through the `AWS_*` environment they inherit.
    pub store: StoreLocation,
    /// Where the services' object-store caches live (one directory each)
    /// and this tool's own; unused on a directory store.
    pub cache_dir: PathBuf,
    /// Directory for the services' log files.
    pub log_dir: PathBuf,
    /// The `--collection` spec.
    pub collection: String,
    /// More flags for eddy-ingest (e.g. its segment policy).
    pub ingest_args: Vec<String>,
    /// More flags for eddy-query.
    pub query_args: Vec<String>,
}

impl ServiceConfig {
    /// The store, opened as the services open it (this tool's own cache on
    /// an object store).
    pub fn open_store(&self) -> anyhow::Result<Store> {
        Store::open_location(&self.store, &self.cache_of("eddy-loadtest"))
            .with_context(|| format!("opening the store {}", self.store))
    }

    /// The object-store cache directory of `service`.
    fn cache_of(&self, service: &str) -> PathBuf {
        self.cache_dir.join(service)
    }
}

/// The two running services and where they listen.
#[derive(Debug)]
pub struct Services {
    ingest: ChildGuard,
    query: ChildGuard,
    /// eddy-query's HTTP address.
    pub http_addr: String,
    /// eddy-query's Arrow Flight address.
    pub flight_addr: String,
    /// eddy-ingest's metrics address.
    pub ingest_metrics_addr: String,
    /// eddy-ingest's log file.
    pub ingest_log: PathBuf,
    /// eddy-query's log file.
    pub query_log: PathBuf,
}

/// Resolves on Ctrl-C (SIGINT) or SIGTERM, so `kill` stops the demo and the
/// suite as cleanly as Ctrl-C does: the services and the broker are stopped
/// and their temp dirs removed, instead of left running as orphans.
pub async fn shutdown_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C"),
        _ = term.recv() => Ok(()),
    }
}

/// Starts a Tansu broker with one topic of `partitions` partitions.
pub async fn start_broker(topic: &str, partitions: u32) -> anyhow::Result<Tansu> {
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || -> anyhow::Result<Tansu> {
        let tansu = Tansu::start()?;
        tansu.create_topic(&topic, partitions)?;
        Ok(tansu)
    })
    .await
    .context("broker start panicked")?
}

/// The directory of the running executable (where cargo puts sibling binaries).
pub fn default_bin_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the eddy-loadtest executable")?;
    exe.parent()
        .map(Path::to_owned)
        .context("the executable has no parent directory")
}

/// Fails with a clear message unless both service binaries are in `bin_dir`.
pub fn check_binaries(bin_dir: &Path) -> anyhow::Result<()> {
    binary(bin_dir, "eddy-ingest")?;
    binary(bin_dir, "eddy-query")?;
    Ok(())
}

impl Services {
    /// Starts both services on free loopback ports.
    pub fn start(cfg: &ServiceConfig) -> anyhow::Result<Self> {
        let ingest_bin = binary(&cfg.bin_dir, "eddy-ingest")?;
        let query_bin = binary(&cfg.bin_dir, "eddy-query")?;
        let ingest_metrics_addr = format!("127.0.0.1:{}", free_port()?);
        let http_addr = format!("127.0.0.1:{}", free_port()?);
        let flight_addr = format!("127.0.0.1:{}", free_port()?);
        let ingest_log = cfg.log_dir.join("eddy-ingest.log");
        let query_log = cfg.log_dir.join("eddy-query.log");

        let mut ingest_cmd = common(&ingest_bin, "eddy-ingest", cfg, &ingest_log)?;
        ingest_cmd
            .arg("--metrics-addr")
            .arg(&ingest_metrics_addr)
            .args(&cfg.ingest_args);
        let ingest = ChildGuard::spawn("eddy-ingest", &mut ingest_cmd)?;
        let query = spawn_query(&query_bin, cfg, &query_log, &http_addr, &flight_addr)?;
        tracing::info!(%http_addr, %flight_addr, %ingest_metrics_addr, "services started");
        Ok(Self {
            ingest,
            query,
            http_addr,
            flight_addr,
            ingest_metrics_addr,
            ingest_log,
            query_log,
        })
    }

    /// Stops eddy-query and starts it again on the same store and ports (a
    /// cold start: it loads every segment anew; the page cache stays warm).
    /// On an object store its cache is emptied first, so it downloads and
    /// checks every file again, as a new node does.
    pub fn restart_query(&mut self, cfg: &ServiceConfig) -> anyhow::Result<()> {
        self.query.stop();
        if let StoreLocation::S3 { .. } = cfg.store {
            let cache = cfg.cache_of("eddy-query");
            match std::fs::remove_dir_all(&cache) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).with_context(|| format!("emptying {}", cache.display()));
                }
                _ => {}
            }
        }
        let query_bin = binary(&cfg.bin_dir, "eddy-query")?;
        self.query = spawn_query(
            &query_bin,
            cfg,
            &self.query_log,
            &self.http_addr,
            &self.flight_addr,
        )?;
        Ok(())
    }

    /// Peak resident memory (`VmHWM`) of eddy-ingest and eddy-query, bytes,
    /// where `/proc` tells.
    pub fn peak_rss(&self) -> (Option<u64>, Option<u64>) {
        (
            self.ingest.id().and_then(peak_rss_of),
            self.query.id().and_then(peak_rss_of),
        )
    }

    /// The process ids of eddy-ingest and eddy-query, while they run.
    pub fn pids(&self) -> (Option<u32>, Option<u32>) {
        (self.ingest.id(), self.query.id())
    }

    /// Fails when either service has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        for child in [&mut self.ingest, &mut self.query] {
            if let Some(status) = child.try_wait()? {
                bail!("{} exited unexpectedly ({status})", child.name());
            }
        }
        Ok(())
    }

    /// Resolves with an error as soon as a service exits (checks every 200 ms).
    pub async fn watch(&mut self) -> anyhow::Error {
        loop {
            if let Err(e) = self.check_alive() {
                return e;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until eddy-query's `/readyz` and eddy-ingest's `/healthz` answer 200.
    pub async fn wait_ready(
        &mut self,
        client: &QueryClient,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let healthz = format!("http://{}/healthz", self.ingest_metrics_addr);
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .context("building an HTTP client")?;
        loop {
            self.check_alive()?;
            let ingest_ok =
                matches!(http.get(&healthz).send().await, Ok(r) if r.status().is_success());
            if ingest_ok && client.ready().await {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "services not ready after {timeout:?} (eddy-ingest /healthz ok: {ingest_ok}, eddy-query /readyz at {})",
                    client.base_url()
                );
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }

    /// The ends of both services' logs, for failure reports.
    pub fn log_tails(&self) -> String {
        format!(
            "--- eddy-ingest log ({}) ---\n{}\n--- eddy-query log ({}) ---\n{}",
            self.ingest_log.display(),
            file_tail(&self.ingest_log, LOG_TAIL_BYTES),
            self.query_log.display(),
            file_tail(&self.query_log, LOG_TAIL_BYTES),
        )
    }

    /// Stops both services (SIGTERM, then SIGKILL after the grace period).
    pub fn stop(&mut self) {
        self.query.stop();
        self.ingest.stop();
    }
}

/// Polls `count` until it reaches `expected`.
pub async fn wait_count(
    client: &QueryClient,
    expected: u64,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last = None;
    loop {
        match client.count().await {
            Ok(n) if n == expected => return Ok(()),
            Ok(n) if n > expected => {
                bail!("count is {n}, more than the {expected} points published")
            }
            Ok(n) => last = Some(n),
            Err(e) => tracing::debug!(error = %e, "count failed; retrying"),
        }
        if Instant::now() >= deadline {
            bail!("count did not reach {expected} within {timeout:?} (last: {last:?})");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How far background indexing got: the manifest's segments, those with a
/// graph, and how long the wait took.
#[derive(Debug, Clone, Copy)]
pub struct Indexing {
    /// Segments in the served manifest version.
    pub segments: usize,
    /// Of which carry a graph.
    pub indexed: usize,
    /// How long the wait took.
    pub waited: Duration,
}

/// Waits until the tail is sealed, every segment big enough for a graph has
/// one, and the query service serves that manifest version.
pub async fn wait_indexed(
    client: &QueryClient,
    store: &Store,
    collection: &str,
    timeout: Duration,
) -> anyhow::Result<Indexing> {
    let started = Instant::now();
    loop {
        let manifest = store
            .latest_manifest(collection)
            .context("reading the manifest")?;
        let pending = manifest
            .segments
            .iter()
            .filter(|s| s.index.is_none() && s.rows >= eddy_segment::MIN_GRAPH_ROWS as u64)
            .count();
        let info = client.info().await.ok();
        let served = info
            .as_ref()
            .and_then(|i| i["status"]["manifest_version"].as_u64())
            .unwrap_or(0);
        let tail_rows = info
            .as_ref()
            .and_then(|i| i["status"]["tail_rows"].as_u64())
            .unwrap_or(u64::MAX);
        if pending == 0 && tail_rows == 0 && served >= manifest.version {
            return Ok(Indexing {
                segments: manifest.segments.len(),
                indexed: manifest
                    .segments
                    .iter()
                    .filter(|s| s.index.is_some())
                    .count(),
                waited: started.elapsed(),
            });
        }
        if started.elapsed() >= timeout {
            bail!("{pending} segments still unindexed after {timeout:?}");
        }
        tokio::time::sleep(INDEX_POLL).await;
    }
}

/// Waits, after [`wait_indexed`], until the collection is served as one
/// indexed segment: eddy-ingest merges an idle collection's segments into
/// one (`--merge-idle-ms`, 10 s by default), and a benchmark that starts
/// before that merge measures it too (two cores building a graph) and then
/// a different collection. Returns the state at `timeout` if it never gets
/// there (e.g. segments above `--merge-max-rows`), so the caller can say so.
pub async fn wait_converged(
    client: &QueryClient,
    store: &Store,
    collection: &str,
    timeout: Duration,
) -> anyhow::Result<Indexing> {
    let started = Instant::now();
    loop {
        let left = timeout.saturating_sub(started.elapsed());
        let mut indexing = wait_indexed(client, store, collection, left.max(INDEX_POLL)).await?;
        if indexing.segments <= 1 || started.elapsed() >= timeout {
            indexing.waited = started.elapsed();
            return Ok(indexing);
        }
        tokio::time::sleep(INDEX_POLL).await;
    }
}

/// How often the waits above look again.
const INDEX_POLL: Duration = Duration::from_millis(100);
/// How often [`Services::wait_ready`] asks again: finely, as it times the
/// suite's cold starts.
const READY_POLL: Duration = Duration::from_millis(10);

fn binary(dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join(name);
    if !path.is_file() {
        bail!(
            "{} not found; build it first (`cargo build --release -p {name}`) or pass --bin-dir",
            path.display()
        );
    }
    Ok(path)
}

/// Starts eddy-query on `http` and `flight`, appending to `log`.
fn spawn_query(
    bin: &Path,
    cfg: &ServiceConfig,
    log: &Path,
    http: &str,
    flight: &str,
) -> anyhow::Result<ChildGuard> {
    let mut cmd = common(bin, "eddy-query", cfg, log)?;
    cmd.arg("--http-addr")
        .arg(http)
        .arg("--flight-addr")
        .arg(flight)
        .args(&cfg.query_args);
    Ok(ChildGuard::spawn("eddy-query", &mut cmd)?)
}

/// `VmHWM` of process `pid` in bytes (Linux `/proc`; `None` elsewhere).
fn peak_rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A command with the flags both services share, logging to `log`; on an
/// object store each service caches in a directory of its own.
fn common(bin: &Path, name: &str, cfg: &ServiceConfig, log: &Path) -> anyhow::Result<Command> {
    let out = File::options()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let err = out.try_clone().context("cloning a log file handle")?;
    let mut cmd = Command::new(bin);
    // A process group of their own: a terminal's Ctrl-C reaches only the demo,
    // which then stops the services itself (instead of racing their exit).
    cmd.process_group(0);
    cmd.arg("--store").arg(cfg.store.to_string());
    if let StoreLocation::S3 { .. } = cfg.store {
        cmd.arg("--store-cache").arg(cfg.cache_of(name));
    }
    cmd.arg("--brokers")
        .arg(&cfg.brokers)
        .arg("--collection")
        .arg(&cfg.collection)
        .arg("--log-format")
        .arg("text")
        .stdout(out)
        .stderr(err);
    Ok(cmd)
}
