//! The host and versions a suite report was measured with.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{peers, SuiteArgs};

/// The host and versions the report was measured with.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Host {
    /// CPU model.
    pub cpu: String,
    /// Logical CPUs.
    pub cpus: usize,
    /// The kernel dispatch eddy's search uses.
    pub kernels: String,
    /// eddy's commit (`git describe`), where the repository tells.
    pub eddy: String,
    /// Tansu's version.
    pub tansu: String,
    /// Package versions of the peers.
    pub packages: BTreeMap<String, String>,
}

/// The host the suite runs on: CPU, kernels, eddy's commit and the
/// versions of Tansu and the peers.
pub(super) fn host(args: &SuiteArgs) -> Host {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_else(|| "unknown".into());
    let run = |cmd: &str, a: &[&str]| {
        std::process::Command::new(cmd)
            .args(a)
            .current_dir(&args.repo)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_else(|| "unknown".into())
    };
    Host {
        cpu,
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        kernels: eddy_kernels::backend_name().to_owned(),
        eddy: run("git", &["describe", "--always", "--dirty"]),
        tansu: run("tansu", &["--version"]),
        packages: peers::versions(&args.python),
    }
}
