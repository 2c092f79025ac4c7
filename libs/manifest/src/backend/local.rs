//! A store in a local (or shared POSIX) directory: exclusive create is a
//! hard link that refuses to replace, every write is fsynced with its
//! directory, and large files are written in place (upload and fetch do
//! nothing).

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::{Backend, Listed};
use crate::store::unique_suffix;
use crate::{Error, Result};

/// A store rooted at a local directory.
#[derive(Debug)]
pub(crate) struct LocalDir {
    root: PathBuf,
}

impl LocalDir {
    /// The store at `root` (created by [`create_dirs`] by the caller).
    pub(crate) fn new(root: &Path) -> LocalDir {
        LocalDir {
            root: root.to_owned(),
        }
    }

    fn path(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }
}

/// fsyncs a directory, so entries created or renamed in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(Error::io(dir))
}

/// Creates `dir` and its missing parents, fsyncing the parent of each one
/// created so the new entries survive a crash.
pub(crate) fn create_dirs(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dirs(parent)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => {
            return Err(Error::Io {
                path: dir.to_owned(),
                source: e,
            })
        }
    }
    match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => sync_dir(parent),
        _ => Ok(()),
    }
}

fn parent_of(path: &Path) -> Result<&Path> {
    path.parent().ok_or_else(|| Error::Io {
        path: path.to_owned(),
        source: io::Error::other("no parent directory"),
    })
}

/// Writes `bytes` to a fresh temporary file in `dir`, fsynced.
fn write_temp(dir: &Path, bytes: &[u8]) -> Result<PathBuf> {
    let tmp = dir.join(format!(".tmp-{}", unique_suffix()));
    let written = File::create(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    match written {
        Ok(()) => Ok(tmp),
        Err(source) => {
            fs::remove_file(&tmp).ok();
            Err(Error::Io { path: tmp, source })
        }
    }
}

/// Writes `bytes` to `path` only if `path` does not exist: the data goes to a
/// temporary file that is fsynced, then hard-linked to `path` (link never
/// replaces), then the directory is fsynced. Returns false if `path` existed.
pub(crate) fn create_exclusive(path: &Path, bytes: &[u8]) -> Result<bool> {
    let dir = parent_of(path)?;
    create_dirs(dir)?;
    let tmp = write_temp(dir, bytes)?;
    let linked = match fs::hard_link(&tmp, path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(Error::Io {
            path: path.to_owned(),
            source: e,
        }),
    };
    fs::remove_file(&tmp).ok();
    if let Ok(true) = linked {
        sync_dir(dir)?;
    }
    linked
}

/// Writes `bytes` to `path`, replacing it: a temporary file, fsynced, is
/// renamed over it and the directory is fsynced. For files only their
/// owner writes (leases), never for manifests.
fn replace_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = parent_of(path)?;
    create_dirs(dir)?;
    let tmp = write_temp(dir, bytes)?;
    if let Err(source) = fs::rename(&tmp, path) {
        fs::remove_file(&tmp).ok();
        return Err(Error::Io {
            path: path.to_owned(),
            source,
        });
    }
    sync_dir(dir)
}

/// The entries of `dir` (none if it does not exist) that pass `keep`.
fn entries(
    dir: &Path,
    keep: impl Fn(&fs::Metadata) -> bool,
) -> Result<Vec<(String, fs::Metadata)>> {
    let iter = match fs::read_dir(dir) {
        Ok(it) => it,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(Error::Io {
                path: dir.to_owned(),
                source: e,
            })
        }
    };
    let mut out = Vec::new();
    for entry in iter {
        let entry = entry.map_err(Error::io(dir))?;
        let meta = match entry.metadata() {
            Ok(m) => m,
            // Removed meanwhile (another collector): not listed.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(Error::Io {
                    path: entry.path(),
                    source: e,
                })
            }
        };
        if !keep(&meta) {
            continue;
        }
        if let Some(name) = entry.file_name().to_str() {
            out.push((name.to_owned(), meta));
        }
    }
    Ok(out)
}

impl Backend for LocalDir {
    fn create(&self, key: &str, bytes: &[u8]) -> Result<bool> {
        create_exclusive(&self.path(key), bytes)
    }

    fn replace(&self, key: &str, bytes: &[u8]) -> Result<()> {
        replace_file(&self.path(key), bytes)
    }

    fn read(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let path = self.path(key);
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::Io { path, source: e }),
        }
    }

    fn exists(&self, key: &str) -> Result<bool> {
        let path = self.path(key);
        match fs::metadata(&path) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::Io { path, source: e }),
        }
    }

    fn list(&self, dir: &str) -> Result<Vec<Listed>> {
        let dir = self.path(dir);
        entries(&dir, fs::Metadata::is_file)?
            .into_iter()
            .map(|(name, meta)| {
                Ok(Listed {
                    name,
                    bytes: meta.len(),
                    modified: meta.modified().map_err(Error::io(&dir))?,
                })
            })
            .collect()
    }

    fn list_dirs(&self, dir: &str) -> Result<Vec<String>> {
        Ok(entries(&self.path(dir), fs::Metadata::is_dir)?
            .into_iter()
            .map(|(name, _)| name)
            .collect())
    }

    fn remove(&self, key: &str) -> Result<bool> {
        let path = self.path(key);
        match fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::Io { path, source: e }),
        }
    }

    fn remove_all(&self, dir: &str) -> Result<()> {
        let path = self.path(dir);
        match fs::remove_dir_all(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::Io { path, source: e }),
        }
    }

    fn upload(&self, _key: &str, _local: &Path, _crc32: Option<u32>) -> Result<()> {
        Ok(())
    }

    fn fetch(&self, _key: &str, _local: &Path) -> Result<()> {
        Ok(())
    }

    fn is_remote(&self) -> bool {
        false
    }

    fn describe(&self, key: &str) -> PathBuf {
        self.path(key)
    }
}
