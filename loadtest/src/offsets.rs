//! Delivered offsets: the last offset the broker acknowledged on each
//! partition of a topic. Written as JSON after a run, they are what a
//! read-your-writes search passes as `min_offsets`, and what a freshness
//! check waits for.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Errors reading or writing an offsets file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The file is not an offsets document.
    #[error("{path}: not an offsets file: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The decoding error.
        source: serde_json::Error,
    },
}

/// Result alias for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Partition → last acknowledged offset, for one topic:
/// `{"topic": "t", "min_offsets": {"0": 4999, "1": 5002}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveredOffsets {
    /// The topic.
    pub topic: String,
    /// Last acknowledged offset per partition (the `min_offsets` of a
    /// search that must see every record produced).
    pub min_offsets: BTreeMap<u32, i64>,
}

impl DeliveredOffsets {
    /// No offsets yet, for `topic`.
    pub fn new(topic: impl Into<String>) -> Self {
        Self {
            topic: topic.into(),
            min_offsets: BTreeMap::new(),
        }
    }

    /// Takes one acknowledgement into account (keeps the largest offset).
    pub fn observe(&mut self, partition: i32, offset: i64) {
        let Ok(partition) = u32::try_from(partition) else {
            return;
        };
        let last = self.min_offsets.entry(partition).or_insert(offset);
        *last = (*last).max(offset);
    }

    /// Writes the offsets as pretty JSON.
    pub fn write(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(|source| Error::Parse {
            path: path.to_owned(),
            source,
        })?;
        std::fs::write(path, text + "\n").map_err(|source| Error::Io {
            path: path.to_owned(),
            source,
        })
    }

    /// Reads a file written by [`DeliveredOffsets::write`].
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_owned(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| Error::Parse {
            path: path.to_owned(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_offset_and_round_trips() {
        let mut o = DeliveredOffsets::new("events");
        o.observe(1, 10);
        o.observe(1, 7);
        o.observe(0, 3);
        o.observe(-1, 99); // no partition: ignored
        assert_eq!(o.min_offsets, BTreeMap::from([(0, 3), (1, 10)]));
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("offsets.json");
        o.write(&path).expect("write");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.contains("\"1\": 10"), "{text}");
        assert_eq!(DeliveredOffsets::read(&path).expect("read back"), o);
        std::fs::write(&path, "[]").expect("write");
        assert!(DeliveredOffsets::read(&path).is_err());
    }
}
