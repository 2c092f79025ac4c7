//! What the format checks report.

/// A file's framing is damaged, of another kind, or of a version this build
/// does not read. `what` names the kind of file ("segment file"); callers
/// that know the path add it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The bytes do not start with the format's magic.
    #[error("not an eddy {what} (bad magic)")]
    BadMagic {
        /// Kind of file expected.
        what: &'static str,
    },
    /// The bytes end before the header or a section does.
    #[error("{what} is truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Kind of file.
        what: &'static str,
        /// Bytes needed.
        need: u64,
        /// Bytes present.
        have: u64,
    },
    /// The format version is outside what this build reads.
    #[error("{}", version_message(what, *found, *oldest, *current))]
    UnsupportedVersion {
        /// Kind of file.
        what: &'static str,
        /// Version in the file.
        found: u32,
        /// Oldest version this build reads.
        oldest: u32,
        /// Version this build writes.
        current: u32,
    },
    /// The header length stored in the file is not the one of its version.
    #[error("{what} header length is {found} bytes, expected {expected}")]
    HeaderLength {
        /// Kind of file.
        what: &'static str,
        /// Length in the file.
        found: u32,
        /// Length of this version's header.
        expected: u32,
    },
    /// A stored checksum does not match the bytes.
    #[error("{what} checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        /// What the checksum covers ("segment file", "graph header").
        what: &'static str,
        /// Value stored in the file.
        stored: u32,
        /// Value of the bytes.
        computed: u32,
    },
}

fn version_message(what: &str, found: u32, oldest: u32, current: u32) -> String {
    if found > current {
        format!(
            "{what} written by a newer eddy: format version {found}, this build reads {oldest}..={current}"
        )
    } else {
        format!(
            "{what} format version {found} is older than this build reads ({oldest}..={current})"
        )
    }
}
