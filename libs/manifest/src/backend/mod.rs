//! Where a store's files live: a local directory or an S3-compatible object
//! store, behind one small interface of keys (`collections/<c>/manifests/…`).
//!
//! Everything the store does to its files goes through [`Backend`]: small
//! files (manifests, definitions, markers, leases, delete bitmaps) are read
//! and written whole, and the one operation manifests rest on is
//! [`Backend::create`], an exclusive create that never replaces. Large files
//! (segments, index files) are written by their producers to a local path
//! first and [uploaded](Backend::upload) before a manifest names them; readers
//! [fetch](Backend::fetch) them to a local path they can map. On a local
//! directory both are no-ops: the local path is the file.

pub(crate) mod local;
mod s3;
mod s3_config;
mod s3_fetch;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub(crate) use local::LocalDir;
pub(crate) use s3::ObjectStore;

use crate::Result;

/// A file listed under a directory key.
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    /// Its name within the directory.
    pub name: String,
    /// Its size.
    pub bytes: u64,
    /// When it was last written (the store's clock for object stores).
    pub modified: SystemTime,
}

/// The operations the store needs from where its files live. Keys are
/// `/`-separated paths relative to the store's root.
pub(crate) trait Backend: Send + Sync + fmt::Debug {
    /// Writes `bytes` at `key` only if nothing is there: `Ok(false)` if
    /// something was. Durable on return.
    fn create(&self, key: &str, bytes: &[u8]) -> Result<bool>;
    /// Writes `bytes` at `key`, replacing what is there. Durable on return.
    fn replace(&self, key: &str, bytes: &[u8]) -> Result<()>;
    /// The bytes at `key`, `None` if nothing is there.
    fn read(&self, key: &str) -> Result<Option<Vec<u8>>>;
    /// Whether something is at `key`.
    fn exists(&self, key: &str) -> Result<bool>;
    /// The files directly under directory `dir` (empty if there is none).
    fn list(&self, dir: &str) -> Result<Vec<Listed>>;
    /// The sub-directories directly under directory `dir`.
    fn list_dirs(&self, dir: &str) -> Result<Vec<String>>;
    /// Removes `key`: `Ok(false)` if it was gone already.
    fn remove(&self, key: &str) -> Result<bool>;
    /// Removes everything under directory `dir`.
    fn remove_all(&self, dir: &str) -> Result<()>;
    /// Makes the finished local file `local` the content of `key`; `crc32`,
    /// when the writer computed it as it wrote the file, spares a pass.
    fn upload(&self, key: &str, local: &Path, crc32: Option<u32>) -> Result<()>;
    /// Copies `key` to the local path `local` (whole, or not at all).
    fn fetch(&self, key: &str, local: &Path) -> Result<()>;
    /// Whether the files live elsewhere than the local root (uploads and
    /// fetches move bytes).
    fn is_remote(&self) -> bool;
    /// How errors and logs name `key`.
    fn describe(&self, key: &str) -> PathBuf;
}

/// Where a store lives, as given on the command line: a local directory, or
/// `s3://bucket/prefix` (credentials, region and endpoint from the standard
/// `AWS_*` environment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// A local (or shared POSIX) directory.
    Dir(PathBuf),
    /// An S3-compatible bucket and a key prefix within it.
    S3 {
        /// The bucket.
        bucket: String,
        /// The prefix every key of the store starts with (no trailing `/`;
        /// empty for the bucket's root).
        prefix: String,
    },
}

impl StoreLocation {
    /// Parses `s3://bucket[/prefix]`, or takes anything else as a directory.
    pub fn parse(text: &str) -> std::result::Result<StoreLocation, String> {
        let Some(rest) = text.strip_prefix("s3://") else {
            if text.contains("://") {
                return Err(format!(
                    "store {text:?}: only local directories and s3:// URLs are supported"
                ));
            }
            return Ok(StoreLocation::Dir(PathBuf::from(text)));
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(format!("store {text:?}: no bucket"));
        }
        Ok(StoreLocation::S3 {
            bucket: bucket.to_owned(),
            prefix: prefix.trim_matches('/').to_owned(),
        })
    }
}

impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Dir(dir) => write!(f, "{}", dir.display()),
            StoreLocation::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            StoreLocation::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

impl std::str::FromStr for StoreLocation {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        StoreLocation::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse_and_print_back() {
        assert_eq!(
            StoreLocation::parse("/var/eddy").expect("dir"),
            StoreLocation::Dir(PathBuf::from("/var/eddy"))
        );
        let s3 = StoreLocation::parse("s3://bucket/a/b/").expect("s3");
        assert_eq!(
            s3,
            StoreLocation::S3 {
                bucket: "bucket".into(),
                prefix: "a/b".into()
            }
        );
        assert_eq!(s3.to_string(), "s3://bucket/a/b");
        assert_eq!(
            StoreLocation::parse("s3://only").expect("s3").to_string(),
            "s3://only"
        );
        assert!(StoreLocation::parse("s3:///x").is_err());
        assert!(StoreLocation::parse("gs://b/p").is_err());
    }
}
