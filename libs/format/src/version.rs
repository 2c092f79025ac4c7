//! The supported range of format versions, and the one check against it.

use crate::FormatError;

/// The format versions a build reads: `oldest..=current`; it writes
/// `current`. A file of a newer version is refused (it may mean anything),
/// and so is one older than `oldest` (support for it was dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Versions {
    /// Oldest version this build reads.
    pub oldest: u32,
    /// Version this build writes (and the newest it reads).
    pub current: u32,
}

impl Versions {
    /// A range `oldest..=current`.
    pub const fn new(oldest: u32, current: u32) -> Self {
        Self { oldest, current }
    }

    /// Whether `version` is in the range.
    pub const fn contains(&self, version: u32) -> bool {
        self.oldest <= version && version <= self.current
    }

    /// `Ok` when `found` is readable, else the error naming `what`, the
    /// version found and the range this build reads.
    pub fn check(&self, what: &'static str, found: u32) -> Result<(), FormatError> {
        if self.contains(found) {
            Ok(())
        } else {
            Err(FormatError::UnsupportedVersion {
                what,
                found,
                oldest: self.oldest,
                current: self.current,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_and_older_versions_are_refused_with_the_range() {
        let v = Versions::new(2, 3);
        assert_eq!(v.check("segment file", 2), Ok(()));
        assert_eq!(v.check("segment file", 3), Ok(()));
        let newer = v.check("segment file", 4).expect_err("newer");
        assert_eq!(
            newer.to_string(),
            "segment file written by a newer eddy: format version 4, this build reads 2..=3"
        );
        let older = v.check("manifest", 1).expect_err("older");
        assert_eq!(
            older.to_string(),
            "manifest format version 1 is older than this build reads (2..=3)"
        );
    }
}
