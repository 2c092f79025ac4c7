//! A throwaway [Tansu](https://github.com/tansu-io/tansu) broker for tests and
//! the demo: a real Kafka-protocol broker, one process, SQLite storage in a
//! temp dir, on a free loopback port; killed and cleaned up on drop.
//!
//! Also the small process helpers the demo and the service integration tests
//! use to run eddy binaries: [`free_port`] and [`ChildGuard`].
//!
//! Everything here is synchronous (std processes, blocking rdkafka metadata
//! calls with timeouts) so it works from plain `#[test]`s, from async tests and
//! from `Drop`. From async code, call the slow parts ([`Tansu::start`],
//! [`Tansu::create_topic`]) in `tokio::task::spawn_blocking` if the runtime
//! has other work to do meanwhile.

use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::metadata::Metadata;

use crate::process::file_tail;
pub use crate::process::{free_port, ChildGuard};

mod error;
mod slow_fetch;

pub(crate) use error::io_err;
pub use error::{Error, Result};
pub use slow_fetch::SlowFetchTansu;

/// Environment variable naming the `tansu` binary to run.
pub const TANSU_BIN_ENV: &str = "TANSU_BIN";

/// The command that installs Tansu with the SQLite engine.
pub const TANSU_INSTALL: &str = "cargo install --locked tansu --features libsql";

/// How long [`Tansu::start`] waits for the broker to answer a metadata request.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`Tansu::create_topic`] waits for the topic to appear.
pub const TOPIC_TIMEOUT: Duration = Duration::from_secs(30);

/// How much of the broker log an error message carries.
const LOG_TAIL_BYTES: u64 = 4096;

/// Environment variable with the broker's own log filter (`RUST_LOG` syntax;
/// default `warn`). The caller's `RUST_LOG` is never passed on: at `info`
/// Tansu traces every span it enters, gigabytes a minute under load, until it
/// stops answering.
pub const TANSU_LOG_ENV: &str = "EDDY_TANSU_LOG";

/// The broker's log filter: `EDDY_TANSU_LOG`, or `warn`.
pub fn tansu_log_filter() -> String {
    log_filter(std::env::var_os(TANSU_LOG_ENV))
}

/// `value` unless it is missing or empty, else `warn`.
fn log_filter(value: Option<std::ffi::OsString>) -> String {
    value
        .map(|v| v.to_string_lossy().trim().to_owned())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "warn".to_owned())
}

/// Finds the `tansu` binary: `$TANSU_BIN`, else `tansu` on `PATH`, else
/// `~/.cargo/bin/tansu`.
pub fn find_tansu() -> Result<PathBuf> {
    let mut searched = Vec::new();
    if let Some(bin) = std::env::var_os(TANSU_BIN_ENV) {
        let bin = PathBuf::from(bin);
        if bin.is_file() {
            return Ok(bin);
        }
        searched.push(format!("${TANSU_BIN_ENV}={}", bin.display()));
    }
    if let Some(path) = std::env::var_os("PATH") {
        if let Some(bin) = std::env::split_paths(&path)
            .map(|dir| dir.join("tansu"))
            .find(|p| p.is_file())
        {
            return Ok(bin);
        }
        searched.push("tansu on PATH".to_owned());
    }
    if let Some(home) = std::env::var_os("HOME") {
        let bin = Path::new(&home).join(".cargo/bin/tansu");
        if bin.is_file() {
            return Ok(bin);
        }
        searched.push(bin.display().to_string());
    }
    Err(Error::NotInstalled {
        searched: searched.join(", "),
    })
}

/// A running Tansu broker with SQLite storage in a temp dir.
///
/// Dropping it kills the broker and deletes its data and log.
#[derive(Debug)]
pub struct Tansu {
    pub(crate) bin: PathBuf,
    pub(crate) port: u16,
    pub(crate) log_path: PathBuf,
    // Field order matters: the process is stopped before the dir is removed.
    pub(crate) child: Mutex<ChildGuard>,
    pub(crate) dir: tempfile::TempDir,
}

impl Tansu {
    /// Starts a broker on a free loopback port and waits (up to [`START_TIMEOUT`])
    /// until it answers a Kafka metadata request. If the broker exits at once
    /// (another process took the port in between), it retries on a new port, twice.
    pub fn start() -> Result<Self> {
        let bin = find_tansu()?;
        let mut attempt = 1;
        loop {
            match Self::start_once(&bin) {
                Err(Error::Exited { status, log, .. }) if attempt < 3 => {
                    tracing::warn!(%status, attempt, log, "tansu exited during start; retrying on a new port");
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    fn start_once(bin: &Path) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("eddy-tansu-")
            .tempdir()
            .map_err(io_err("create temp dir for tansu"))?;
        let port = free_port()?;
        let log_path = dir.path().join("tansu.log");
        let child = spawn_broker(bin, dir.path(), port, &log_path)?;
        let tansu = Self {
            bin: bin.to_owned(),
            port,
            log_path,
            child: Mutex::new(child),
            dir,
        };
        tansu.wait_ready(START_TIMEOUT)?;
        tracing::info!(bootstrap = %tansu.bootstrap(), dir = %tansu.dir.path().display(), "tansu ready");
        Ok(tansu)
    }

    /// Restarts the broker (same data, same port) advertising `advertised`
    /// to clients, with `extra` flags: for something that stands in front
    /// of it (a TLS terminator, a proxy), through which clients must then
    /// reach every broker the metadata names.
    pub(crate) fn restart_advertising(&self, advertised: &str, extra: &[&str]) -> Result<()> {
        let mut child = match self.child.lock() {
            Ok(child) => child,
            Err(poisoned) => poisoned.into_inner(),
        };
        child.stop();
        *child = spawn_broker_with(
            &self.bin,
            self.dir.path(),
            self.port,
            advertised,
            extra,
            &self.log_path,
        )?;
        Ok(())
    }

    /// The broker's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.lock().ok().and_then(|c| c.id())
    }

    /// The bootstrap address, `127.0.0.1:<port>`.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The broker URL the `tansu` CLI takes, `tcp://127.0.0.1:<port>`.
    pub fn broker_url(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.port)
    }

    /// The broker's log file (inside the temp dir).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The temp dir holding the SQLite database and the log.
    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last few KiB of the broker log.
    pub fn log_tail(&self) -> String {
        file_tail(&self.log_path, LOG_TAIL_BYTES)
    }

    /// Creates `name` with `partitions` partitions (`tansu topic create`) and
    /// waits (up to [`TOPIC_TIMEOUT`]) until metadata shows every partition with a leader.
    /// An existing topic with that many partitions is accepted.
    pub fn create_topic(&self, name: &str, partitions: u32) -> Result<()> {
        let partitions_arg = partitions.to_string();
        let (status, output) = self.run_cli(
            &format!("topic-create-{name}"),
            &["topic", "create", name, "--partitions", &partitions_arg],
        )?;
        match status {
            Some(s) if s.success() => {}
            // Idempotent: an existing topic is fine if it has the partitions (checked below).
            Some(_)
                if output.contains("already exists") || output.contains("TopicAlreadyExists") =>
            {
                tracing::debug!(topic = name, "topic already exists");
            }
            other => {
                return Err(Error::TopicCreate {
                    topic: name.to_owned(),
                    status: other.map_or_else(
                        || format!("timed out after {TOPIC_TIMEOUT:?}"),
                        |s| s.to_string(),
                    ),
                    output,
                    log: self.log_tail(),
                })
            }
        }
        self.wait_topic(name, partitions, TOPIC_TIMEOUT)
    }

    /// Runs the `tansu` CLI with `args` and `--broker` this broker (up to
    /// [`TOPIC_TIMEOUT`]); its exit status (`None`: timed out) and output.
    pub(crate) fn run_cli(
        &self,
        label: &str,
        args: &[&str],
    ) -> Result<(Option<ExitStatus>, String)> {
        let out_path = self.dir.path().join(format!("{label}.out"));
        let out =
            File::create(&out_path).map_err(io_err(format!("create {}", out_path.display())))?;
        let err = out.try_clone().map_err(io_err("clone output file"))?;
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .arg("--broker")
            .arg(self.broker_url())
            .env("RUST_LOG", tansu_log_filter())
            // tansu reads `.env` from its working directory: keep it in ours.
            .current_dir(self.dir.path())
            .stdout(out)
            .stderr(err);
        let mut guard =
            ChildGuard::spawn(format!("tansu {label}"), &mut cmd)?.with_grace(Duration::ZERO);
        let deadline = Instant::now() + TOPIC_TIMEOUT;
        let status = loop {
            if let Some(status) = guard.try_wait()? {
                break Some(status);
            }
            if Instant::now() >= deadline {
                break None;
            }
            thread::sleep(Duration::from_millis(20));
        };
        drop(guard);
        Ok((status, file_tail(&out_path, LOG_TAIL_BYTES)))
    }

    fn consumer(&self) -> Result<BaseConsumer> {
        ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap())
            .set("socket.timeout.ms", "2000")
            .set("topic.metadata.refresh.interval.ms", "500")
            .create()
            .map_err(|source| Error::Kafka {
                bootstrap: self.bootstrap(),
                source,
            })
    }

    /// Fails with [`Error::Exited`] when the broker process has exited.
    fn check_alive(&self) -> Result<()> {
        let status = match self.child.lock() {
            Ok(mut child) => child.try_wait()?,
            Err(poisoned) => poisoned.into_inner().try_wait()?,
        };
        match status {
            Some(status) => Err(Error::Exited {
                status,
                log_path: self.log_path.clone(),
                log: self.log_tail(),
            }),
            None => Ok(()),
        }
    }

    fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let start = Instant::now();
        let mut last_error = "no attempt yet".to_owned();
        let consumer = self.consumer()?;
        while start.elapsed() < timeout {
            self.check_alive()?;
            if let Err(e) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                last_error = format!("connect {addr}: {e}");
                thread::sleep(Duration::from_millis(50));
                continue;
            }
            if lists_a_broker(&consumer, &mut last_error) {
                return Ok(());
            }
            thread::sleep(Duration::from_millis(100));
        }
        Err(Error::StartTimeout {
            bootstrap: self.bootstrap(),
            waited: start.elapsed(),
            last_error,
            log: self.log_tail(),
        })
    }

    fn wait_topic(&self, topic: &str, partitions: u32, timeout: Duration) -> Result<()> {
        let consumer = self.consumer()?;
        let start = Instant::now();
        let mut seen = "nothing".to_owned();
        while start.elapsed() < timeout {
            match consumer.fetch_metadata(Some(topic), Duration::from_secs(2)) {
                Ok(md) => {
                    let (ready, what) = topic_ready(&md, topic, partitions);
                    if ready {
                        return Ok(());
                    }
                    seen = what;
                }
                Err(e) => seen = format!("metadata error: {e}"),
            }
            self.check_alive()?;
            thread::sleep(Duration::from_millis(100));
        }
        Err(Error::TopicTimeout {
            topic: topic.to_owned(),
            partitions,
            waited: start.elapsed(),
            seen,
            log: self.log_tail(),
        })
    }
}

/// One metadata request: whether it lists a broker; if not, why, in
/// `last_error`.
pub(crate) fn lists_a_broker<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
    last_error: &mut String,
) -> bool {
    match consumer.fetch_metadata(None, Duration::from_secs(2)) {
        Ok(md) if !md.brokers().is_empty() => true,
        Ok(_) => {
            *last_error = "metadata lists no brokers".to_owned();
            false
        }
        Err(e) => {
            *last_error = format!("metadata: {e}");
            false
        }
    }
}

/// Whether metadata shows `topic` with `partitions` partitions, each led by a
/// broker; and a description of what it shows.
fn topic_ready(md: &Metadata, topic: &str, partitions: u32) -> (bool, String) {
    let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
        return (false, "topic absent".to_owned());
    };
    if let Some(err) = t.error() {
        return (false, format!("topic error {err:?}"));
    }
    let led = t
        .partitions()
        .iter()
        .filter(|p| p.error().is_none() && p.leader() >= 0)
        .count();
    let ready = t.partitions().len() == partitions as usize && led == partitions as usize;
    (
        ready,
        format!("{} partitions, {led} with a leader", t.partitions().len()),
    )
}

fn spawn_broker(bin: &Path, dir: &Path, port: u16, log_path: &Path) -> Result<ChildGuard> {
    let url = format!("tcp://127.0.0.1:{port}");
    spawn_broker_with(bin, dir, port, &url, &[], log_path)
}

/// Spawns the broker listening on `port`, advertising `advertised`, with
/// `extra` flags; its output goes to `log_path` (appended to).
pub(crate) fn spawn_broker_with(
    bin: &Path,
    dir: &Path,
    port: u16,
    advertised: &str,
    extra: &[&str],
    log_path: &Path,
) -> Result<ChildGuard> {
    let log = File::options()
        .create(true)
        .append(true)
        .open(log_path)
        .map_err(io_err(format!("open {}", log_path.display())))?;
    let log_err = log.try_clone().map_err(io_err("clone log file"))?;
    let mut cmd = broker_command(bin, dir, port, advertised, extra);
    cmd.stdout(log).stderr(log_err);
    Ok(ChildGuard::spawn("tansu broker", &mut cmd)?)
}

/// The `tansu broker` command line: SQLite storage in `dir`, listening on
/// `port`, advertising `advertised`, with `extra` flags.
fn broker_command(bin: &Path, dir: &Path, port: u16, advertised: &str, extra: &[&str]) -> Command {
    let url = format!("tcp://127.0.0.1:{port}");
    let mut cmd = Command::new(bin);
    // Tansu 0.6 resolves a sqlite URL as `<cwd>/<host><path>` (a leading `/`
    // is stripped, so an absolute path does not work): run it in the temp dir
    // and name the file relative to it.
    cmd.arg("broker")
        .arg("--storage-engine")
        .arg("sqlite://tansu.db")
        .arg("--listener-url")
        .arg(&url)
        .arg("--advertised-listener-url")
        .arg(advertised)
        .arg("--cluster-id")
        .arg("eddy-test")
        .args(extra)
        .env("RUST_LOG", tansu_log_filter())
        .current_dir(dir);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `RUST_LOG` a command sets for its child, if it sets one.
    fn rust_log(cmd: &Command) -> Option<String> {
        cmd.get_envs()
            .find(|(k, _)| *k == "RUST_LOG")
            .and_then(|(_, v)| v.map(|v| v.to_string_lossy().into_owned()))
    }

    #[test]
    fn broker_log_level_is_its_own_not_the_callers() {
        // A caller running with RUST_LOG=info made Tansu trace every decoded
        // varint (gigabytes a minute) until it stopped answering.
        let cmd = broker_command(
            Path::new("tansu"),
            Path::new("/tmp"),
            9092,
            "tcp://x:1",
            &[],
        );
        assert_eq!(rust_log(&cmd).as_deref(), Some(tansu_log_filter().as_str()));
    }

    #[test]
    fn broker_log_filter_defaults_to_warnings() {
        assert_eq!(log_filter(None), "warn");
        assert_eq!(log_filter(Some("debug".into())), "debug");
        assert_eq!(log_filter(Some("".into())), "warn");
    }
}
