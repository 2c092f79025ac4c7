//! Process helpers for tests and the demo: a free loopback port, and child
//! processes that are stopped (SIGTERM, then SIGKILL) when their guard drops.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Errors of the process helpers.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: io::Error,
    },
}

/// Result alias for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// Returns a port that was free on 127.0.0.1 a moment ago (bound to port 0,
/// then released). Another process may take it before you bind it; good enough
/// for tests and the demo.
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io_err("bind 127.0.0.1:0"))?;
    let port = listener
        .local_addr()
        .map_err(io_err("local address of 127.0.0.1:0"))?
        .port();
    Ok(port)
}

/// A child process that is stopped when the guard drops: SIGTERM, then
/// SIGKILL if it has not exited after the grace period.
#[derive(Debug)]
pub struct ChildGuard {
    name: String,
    child: Option<Child>,
    grace: Duration,
}

impl ChildGuard {
    /// Grace period between SIGTERM and SIGKILL, unless changed with [`ChildGuard::with_grace`].
    pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

    /// Spawns `cmd` (stdin closed) and guards the child. `name` appears in errors and logs.
    pub fn spawn(name: impl Into<String>, cmd: &mut Command) -> Result<Self> {
        let name = name.into();
        let child = cmd
            .stdin(Stdio::null())
            .spawn()
            .map_err(io_err(format!("spawn {name} ({:?})", cmd.get_program())))?;
        Ok(Self::new(name, child))
    }

    /// Guards an already running child.
    pub fn new(name: impl Into<String>, child: Child) -> Self {
        Self {
            name: name.into(),
            child: Some(child),
            grace: Self::DEFAULT_GRACE,
        }
    }

    /// Sets the grace period between SIGTERM and SIGKILL (zero = SIGKILL at once).
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The name given at spawn.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id, while the child has not been stopped.
    pub fn id(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `Some(status)` when the child has exited (without waiting for it).
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        match self.child.as_mut() {
            Some(child) => child
                .try_wait()
                .map_err(io_err(format!("wait for {}", self.name))),
            None => Ok(None),
        }
    }

    /// Stops the child (SIGTERM, grace period, SIGKILL) and reaps it.
    /// Returns its exit status; `None` if it was already stopped.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if !self.grace.is_zero() && terminate(&child) {
            let deadline = Instant::now() + self.grace;
            while Instant::now() < deadline {
                match child.try_wait() {
                    Ok(Some(status)) => {
                        tracing::debug!(name = %self.name, %status, "child exited after SIGTERM");
                        return Some(status);
                    }
                    Ok(None) => thread::sleep(Duration::from_millis(20)),
                    Err(_) => break,
                }
            }
            tracing::warn!(name = %self.name, grace = ?self.grace, "child ignored SIGTERM; killing");
        }
        if let Err(e) = child.kill() {
            tracing::warn!(name = %self.name, error = %e, "kill failed");
        }
        child.wait().ok()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Sends SIGTERM to `child` through kill(1) (no `unsafe` outside the
/// kernels and mmap code); false if that was not possible.
fn terminate(child: &Child) -> bool {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The last `max` bytes of a file, lossily decoded; a note when unreadable.
pub fn file_tail(path: &Path, max: u64) -> String {
    let read = || -> io::Result<String> {
        let mut f = File::open(path)?;
        let len = f.metadata()?.len();
        let from = len.saturating_sub(max);
        f.seek(SeekFrom::Start(from))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        Ok(if from > 0 { format!("…{text}") } else { text })
    };
    read().unwrap_or_else(|e| format!("(cannot read {}: {e})", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_port_is_bindable() {
        let port = free_port().expect("free port");
        assert_ne!(port, 0);
        TcpListener::bind(("127.0.0.1", port)).expect("port is free");
    }

    #[test]
    fn child_guard_stops_a_sleeping_child() {
        let mut guard = ChildGuard::spawn("sleep", Command::new("sleep").arg("30"))
            .expect("spawn sleep")
            .with_grace(Duration::from_secs(2));
        assert!(guard.try_wait().expect("try_wait").is_none());
        let status = guard.stop().expect("status");
        assert!(!status.success());
        assert!(guard.stop().is_none(), "second stop is a no-op");
    }

    #[test]
    fn child_guard_kills_a_child_that_ignores_sigterm() {
        let mut guard = ChildGuard::spawn(
            "stubborn",
            Command::new("sh").args(["-c", "trap '' TERM; exec sleep 30"]),
        )
        .expect("spawn sh")
        .with_grace(Duration::from_millis(300));
        // Give the shell time to install its trap.
        thread::sleep(Duration::from_millis(200));
        let status = guard.stop().expect("status");
        assert!(!status.success());
    }

    #[test]
    fn file_tail_keeps_the_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log");
        std::fs::write(&path, "0123456789").expect("write");
        assert_eq!(file_tail(&path, 4), "…6789");
        assert_eq!(file_tail(&path, 100), "0123456789");
        assert!(file_tail(&dir.path().join("missing"), 4).starts_with("(cannot read"));
    }
}

/// CPU time (user + system) process `pid` has used so far, in seconds, from
/// `/proc/<pid>/stat` (`None` off Linux or once the process is gone).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_cpu_seconds(&stat)
}

/// utime + stime of a `/proc/<pid>/stat` line, in seconds. The command name
/// (field 2) may hold spaces and parentheses, so fields are counted after
/// its last `)`; the kernel reports them in USER_HZ (100 on Linux).
fn parse_cpu_seconds(stat: &str) -> Option<f64> {
    const USER_HZ: f64 = 100.0;
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the name: state is field 3, utime 14, stime 15.
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

#[cfg(test)]
mod cpu_tests {
    use super::*;

    #[test]
    fn cpu_seconds_read_utime_and_stime_after_the_name() {
        let stat =
            "4242 (tokio (rt) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 130 0 0 20 0 9 0 100 0";
        assert_eq!(parse_cpu_seconds(stat), Some(3.8));
        assert_eq!(parse_cpu_seconds("garbage"), None);
        assert!(cpu_seconds(std::process::id()).is_some_and(|s| s >= 0.0));
    }
}
