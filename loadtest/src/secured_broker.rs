//! A throwaway broker secured the way production Kafka is: clients speak
//! `SASL_SSL` with `SCRAM-SHA-512`. Tansu checks the SCRAM credentials
//! itself; TLS is terminated in front of it by `socat`, because Tansu
//! 0.6's `--cert` and `--key` flags sit in one mutually exclusive group, so
//! its own TLS cannot be switched on from its command line.
//!
//! Start-up: a plain broker creates the user and the topics (with
//! authentication on, Tansu refuses its own CLI), then restarts on the same
//! storage with `--authentication`, advertising the TLS port.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::BaseConsumer;

use crate::broker::{lists_a_broker, Error, Result, Tansu, START_TIMEOUT};
use crate::process::{free_port, ChildGuard};

/// The SASL mechanism the secured broker takes.
pub const MECHANISM: &str = "SCRAM-SHA-512";

/// A running Tansu that wants SCRAM credentials, behind a TLS terminator.
/// Dropping it stops both.
#[derive(Debug)]
pub struct SecuredTansu {
    // Field order: the terminator stops before the broker.
    _tls: ChildGuard,
    tansu: Tansu,
    tls_port: u16,
    ca: PathBuf,
    user: String,
    password: String,
}

impl SecuredTansu {
    /// Starts the broker with user `user` / `password` and `topics`
    /// (name, partitions), then serves TLS with `cert` / `key` (PEM files;
    /// the certificate must name `localhost`; clients trust it as their CA).
    pub fn start(
        user: &str,
        password: &str,
        cert: &Path,
        key: &Path,
        topics: &[(&str, u32)],
    ) -> Result<Self> {
        let tansu = Tansu::start()?;
        let (status, output) = tansu.run_cli(
            "user-create",
            &["user", "create", "--mechanism", "scram512", user, password],
        )?;
        if !status.is_some_and(|s| s.success()) {
            return Err(Error::UserCreate {
                user: user.to_owned(),
                status: status.map_or_else(|| "timed out".to_owned(), |s| s.to_string()),
                output,
                log: tansu.log_tail(),
            });
        }
        for (topic, partitions) in topics {
            tansu.create_topic(topic, *partitions)?;
        }
        let tls_port = free_port()?;
        tansu.restart_advertising(
            &format!("tcp://localhost:{tls_port}"),
            &["--authentication"],
        )?;
        let listen = format!(
            "openssl-listen:{tls_port},bind=127.0.0.1,reuseaddr,fork,cert={},key={},verify=0",
            cert.display(),
            key.display()
        );
        let mut socat = Command::new("socat");
        socat
            .arg(listen)
            .arg(format!("tcp:127.0.0.1:{}", tansu.port));
        let tls = ChildGuard::spawn("socat (TLS in front of tansu)", &mut socat)?;
        let secured = Self {
            _tls: tls,
            tansu,
            tls_port,
            ca: cert.to_owned(),
            user: user.to_owned(),
            password: password.to_owned(),
        };
        secured.wait_ready(START_TIMEOUT)?;
        Ok(secured)
    }

    /// The bootstrap address clients use, `localhost:<tls port>`.
    pub fn bootstrap(&self) -> String {
        format!("localhost:{}", self.tls_port)
    }

    /// The client properties of the secured broker, all but the password
    /// (which belongs in a secrets file): protocol, mechanism, user, CA.
    pub fn client_properties(&self) -> Vec<(String, String)> {
        [
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", MECHANISM),
            ("sasl.username", self.user.as_str()),
            ("ssl.ca.location", &self.ca.display().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    /// The password of the broker's user.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// A client configuration with every property, the password included
    /// (for test producers and consumers).
    pub fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", self.bootstrap());
        for (key, value) in self.client_properties() {
            config.set(key, value);
        }
        config.set("sasl.password", &self.password);
        config
    }

    /// The broker under the terminator.
    pub fn tansu(&self) -> &Tansu {
        &self.tansu
    }

    /// Waits until an authenticated TLS client gets metadata.
    fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let consumer: BaseConsumer = self
            .client_config()
            .set("socket.timeout.ms", "2000")
            .create()
            .map_err(|source| Error::Kafka {
                bootstrap: self.bootstrap(),
                source,
            })?;
        let start = Instant::now();
        let mut last_error = "no attempt yet".to_owned();
        while start.elapsed() < timeout {
            if lists_a_broker(&consumer, &mut last_error) {
                return Ok(());
            }
            thread::sleep(Duration::from_millis(100));
        }
        Err(Error::StartTimeout {
            bootstrap: self.bootstrap(),
            waited: start.elapsed(),
            last_error,
            log: self.tansu.log_tail(),
        })
    }
}
