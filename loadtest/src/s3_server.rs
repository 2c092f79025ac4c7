//! An S3-compatible server on loopback for tests and benchmarks of the
//! object-store backend: moto's S3 (`loadtest/scripts/s3_server.py`), one
//! request at a time so conditional creates are atomic, with one bucket.
//!
//! Dropping it stops the server; moto keeps objects in memory only.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::process::{file_tail, free_port, ChildGuard};

/// The command that installs the server's Python package.
pub const S3_SERVER_INSTALL: &str = "python3 -m pip install 'moto[server]'";

/// How long [`S3Server::start`] waits for the server to answer.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Errors of the S3 server harness.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// moto is not installed for the Python the harness runs.
    #[error("moto is not installed for {python}; install it with `{S3_SERVER_INSTALL}`")]
    NotInstalled {
        /// The interpreter asked.
        python: String,
    },
    /// Spawning the server or finding it a port failed.
    #[error(transparent)]
    Process(#[from] crate::process::Error),
    /// An I/O operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: io::Error,
    },
    /// The server did not answer in time, or refused to create the bucket.
    #[error("S3 server on port {port}: {reason}; log:\n{log}")]
    NotReady {
        /// Its port.
        port: u16,
        /// What went wrong.
        reason: String,
        /// The end of its log.
        log: String,
    },
}

/// Result alias for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// A running S3 server with one bucket.
#[derive(Debug)]
pub struct S3Server {
    port: u16,
    bucket: String,
    log_path: PathBuf,
    // Field order matters: the process is stopped before the dir is removed.
    _child: ChildGuard,
    _dir: tempfile::TempDir,
}

/// The interpreter that runs the server (`$PYTHON`, else `python3`).
fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// Sends one HTTP/1.0 request without a body and returns the status code.
fn http_status(port: u16, method: &str, path: &str) -> io::Result<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\n\r\n"
    )?;
    let mut head = Vec::new();
    stream.read_to_end(&mut head)?;
    let text = String::from_utf8_lossy(&head);
    text.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| {
            io::Error::other(format!(
                "no status line in {:?}",
                &text[..text.len().min(80)]
            ))
        })
}

impl S3Server {
    /// Starts the server on a free loopback port and creates `bucket`.
    pub fn start(bucket: &str) -> Result<S3Server> {
        let python = python();
        let installed = Command::new(&python)
            .args(["-c", "import moto.moto_server.werkzeug_app"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !installed {
            return Err(Error::NotInstalled { python });
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/s3_server.py");
        let dir = tempfile::Builder::new()
            .prefix("eddy-s3-")
            .tempdir()
            .map_err(io_err("create temp dir for the S3 server"))?;
        let port = free_port()?;
        let log_path = dir.path().join("s3.log");
        let log = std::fs::File::create(&log_path).map_err(io_err("create the S3 server log"))?;
        let err = log.try_clone().map_err(io_err("clone the S3 server log"))?;
        let mut cmd = Command::new(&python);
        cmd.arg(&script)
            .arg("127.0.0.1")
            .arg(port.to_string())
            .stdout(log)
            .stderr(err);
        let child = ChildGuard::spawn("s3 server", &mut cmd)?.with_grace(Duration::ZERO);
        let server = S3Server {
            port,
            bucket: bucket.to_owned(),
            log_path,
            _child: child,
            _dir: dir,
        };
        server.wait_ready()?;
        match http_status(port, "PUT", &format!("/{bucket}")) {
            Ok(200) => {}
            other => return Err(server.not_ready(format!("creating bucket {bucket}: {other:?}"))),
        }
        tracing::info!(port, bucket, "S3 server ready");
        Ok(server)
    }

    fn not_ready(&self, reason: String) -> Error {
        Error::NotReady {
            port: self.port,
            reason,
            log: file_tail(&self.log_path, 4096),
        }
    }

    fn wait_ready(&self) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match http_status(self.port, "GET", "/") {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() >= deadline => {
                    return Err(self.not_ready(format!("no answer within {START_TIMEOUT:?}: {e}")))
                }
                Err(_) => thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// The endpoint URL, `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The store location of a store under `prefix` in the bucket.
    pub fn store_url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.bucket)
    }

    /// The environment an eddy process (or an `object_store` client) needs
    /// to reach the server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".to_owned()),
            ("AWS_REGION", "us-east-1".to_owned()),
            ("AWS_ACCESS_KEY_ID", "eddy-test".to_owned()),
            ("AWS_SECRET_ACCESS_KEY", "eddy-test-secret".to_owned()),
        ]
    }
}

/// Variable naming a benchmark's S3 store instead of moto: a store URL
/// (`s3://bucket/prefix`, the bucket existing), reached with the standard
/// `AWS_*` variables (`AWS_ENDPOINT`, `AWS_ALLOW_HTTP`, keys, region).
pub const BENCH_S3_URL_ENV: &str = "EDDY_BENCH_S3_URL";

/// The S3 store a benchmark runs against: moto's server started here, or
/// the one [`BENCH_S3_URL_ENV`] names (a faster server, or a real bucket).
pub enum BenchS3 {
    /// moto on loopback, stopped on drop.
    Moto(S3Server),
    /// A store URL reached through the process's environment.
    External(String),
}

impl BenchS3 {
    /// The store [`BENCH_S3_URL_ENV`] names, else moto started with `bucket`.
    pub fn from_env(bucket: &str) -> Result<BenchS3> {
        match std::env::var(BENCH_S3_URL_ENV) {
            Ok(url) if !url.is_empty() => {
                Ok(BenchS3::External(url.trim_end_matches('/').to_owned()))
            }
            _ => S3Server::start(bucket).map(BenchS3::Moto),
        }
    }

    /// The store location of a store under `prefix`.
    pub fn store_url(&self, prefix: &str) -> String {
        match self {
            BenchS3::Moto(server) => server.store_url(prefix),
            BenchS3::External(url) => format!("{url}/{prefix}"),
        }
    }

    /// Object-store settings to pass on (moto's; none for an external
    /// store, which the environment describes).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            BenchS3::Moto(server) => server.env(),
            BenchS3::External(_) => Vec::new(),
        }
    }
}
