//! What a run measured: one point per (mode, ef), one per filtered strategy,
//! and the whole report, printed as tables or as one JSON document.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

/// Recall and QPS of one mode at one ef.
#[derive(Serialize, Debug, Clone)]
pub(crate) struct Point {
    pub(crate) mode: String,
    pub(crate) ef: usize,
    pub(crate) recall1: f64,
    pub(crate) recall10: f64,
    pub(crate) recall100: f64,
    pub(crate) qps1: f64,
    pub(crate) qps2: Option<f64>,
}

/// Recall and QPS of one filtered strategy (exact scan, or graph at one ef).
#[derive(Serialize, Debug, Clone)]
pub(crate) struct FilterPoint {
    pub(crate) filter: String,
    pub(crate) selectivity: f64,
    pub(crate) strategy: String,
    pub(crate) policy: bool,
    pub(crate) ef: Option<usize>,
    pub(crate) recall10: f64,
    pub(crate) qps1: f64,
}

/// Everything one run measured (the `--json` document peers.py reads).
#[derive(Serialize, Debug)]
pub(crate) struct Report {
    pub(crate) dataset: String,
    pub(crate) n: usize,
    pub(crate) dim: usize,
    pub(crate) queries: usize,
    pub(crate) m: usize,
    pub(crate) ef_construction: usize,
    pub(crate) build_threads: usize,
    pub(crate) build_secs: f64,
    pub(crate) unreachable: usize,
    pub(crate) duplicates_folded: usize,
    pub(crate) graph_bytes: usize,
    pub(crate) vector_bytes: usize,
    pub(crate) sq8_bytes: usize,
    /// Code bytes of the binary / 4-bit modes, by mode name.
    pub(crate) code_bytes: BTreeMap<String, usize>,
    pub(crate) rss_bytes: u64,
    pub(crate) kernels: String,
    pub(crate) points: Vec<Point>,
    pub(crate) filtered: Vec<FilterPoint>,
}

impl Report {
    /// Print the JSON document (`json`) or the closing memory line of the tables.
    pub(crate) fn print(&self, json: bool, huge_pages: bool) -> Result<()> {
        if json {
            println!("{}", serde_json::to_string_pretty(self)?);
            return Ok(());
        }
        let codes: String = self
            .code_bytes
            .iter()
            .map(|(m, b)| format!(", {m} codes {:.1} MB", *b as f64 / 1e6))
            .collect();
        println!(
            "\nmemory: graph {:.1} MB, vectors {:.1} MB, sq8 codes {:.1} MB{codes}, RSS {:.1} MB{}",
            self.graph_bytes as f64 / 1e6,
            self.vector_bytes as f64 / 1e6,
            self.sq8_bytes as f64 / 1e6,
            self.rss_bytes as f64 / 1e6,
            if huge_pages {
                " (includes the huge-page copies beside the loaded arrays: measure the RSS target with --huge-pages false)"
            } else {
                ""
            }
        );
        Ok(())
    }
}

/// Resident set size of this process (0 where /proc is missing).
pub(crate) fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}
