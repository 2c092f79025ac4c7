//! A store in an S3-compatible bucket, through `object_store`.
//!
//! Exclusive create is `PUT` with `If-None-Match: *` (`PutMode::Create`); a
//! store that ignores the header would let two writers publish the same
//! manifest version, so [`ObjectStore::open`] races creates of a probe
//! object and refuses a store on which more than one wins. Requests are
//! retried with backoff by `object_store`; a create whose reply was lost and
//! whose retry then found the object reads it back, so a writer never
//! mistakes its own create for a rival's. Large files go up in parts, and
//! carry a CRC32 of their bytes as object metadata that every fetch checks:
//! a file that was damaged on the way, in either direction, is refused.
//!
//! The store's interface is synchronous (its callers are blocking threads
//! and `spawn_blocking` tasks); requests run on a small runtime of the
//! backend's own and the caller waits for them, from any thread.

use std::fs::{self, File};
use std::future::Future;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as Key;
use object_store::{
    Attribute, AttributeValue, Attributes, ObjectStore as _, PutMode, PutMultipartOptions,
    PutOptions, PutPayload, WriteMultipart,
};

use super::s3_fetch::{download, write_pieces, Layout, Piece};
use super::{s3_config, Backend, Listed};
use crate::store::unique_suffix;
use crate::{Error, Result};

/// Files at least this large are uploaded in parts.
const MULTIPART_FROM: u64 = 16 << 20;
/// Size of one uploaded part (S3 needs at least 5 MiB).
const PART_BYTES: usize = 16 << 20;
/// Parts in flight at once during one upload.
const PARTS_IN_FLIGHT: usize = 4;
/// Metadata key of the CRC32 a file carries.
pub(super) const CRC_METADATA: &str = "eddy-crc32";
/// Creates raced against each other by the start-up probe.
const PROBE_RACERS: usize = 8;

/// The backend's own runtime, shut down without waiting when the last
/// handle goes (a store may be dropped on an async thread).
#[derive(Debug)]
struct IoRuntime(Option<tokio::runtime::Runtime>);

impl Drop for IoRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// A store in an S3-compatible bucket under a key prefix.
#[derive(Debug)]
pub(crate) struct ObjectStore {
    store: Arc<dyn object_store::ObjectStore>,
    prefix: String,
    location: String,
    runtime: IoRuntime,
    /// Ranged GETs in flight per fetched file.
    fetch_ranges: usize,
}

/// An error about `what`; an object the store does not have keeps the
/// `NotFound` kind, so callers can tell a missing file from a failed request.
pub(super) fn other(what: &Path, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    let missing = (&e as &dyn std::any::Any)
        .downcast_ref::<object_store::Error>()
        .is_some_and(|e| matches!(e, object_store::Error::NotFound { .. }));
    let kind = if missing {
        io::ErrorKind::NotFound
    } else {
        io::ErrorKind::Other
    };
    Error::Io {
        path: what.to_owned(),
        source: io::Error::new(kind, e),
    }
}

impl ObjectStore {
    /// Connects to `bucket` (configured from the standard `AWS_*`
    /// environment: credentials, region, `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`,
    /// then from `config`, pairs named like those variables) and checks it
    /// honours exclusive create.
    pub(crate) fn open(
        bucket: &str,
        prefix: &str,
        config: &[(&str, String)],
    ) -> Result<ObjectStore> {
        let location = if prefix.is_empty() {
            format!("s3://{bucket}")
        } else {
            format!("s3://{bucket}/{prefix}")
        };
        // Held by its drop-safe wrapper from the start: an error below
        // drops it, maybe on an async thread, where a plain runtime's drop
        // panics.
        let runtime = IoRuntime(Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("eddy-store-io")
                .enable_all()
                .build()
                .map_err(|e| Error::Io {
                    path: PathBuf::from(&location),
                    source: e,
                })?,
        ));
        let settings = s3_config::settings(&location, config)?;
        let store = settings
            .builder
            .with_bucket_name(bucket)
            .build()
            .map_err(|e| other(Path::new(&location), e))?;
        let backend = ObjectStore {
            store: Arc::new(store),
            prefix: prefix.to_owned(),
            location,
            runtime,
            fetch_ranges: settings.fetch_ranges,
        };
        backend.prove_exclusive_create()?;
        Ok(backend)
    }

    fn key(&self, key: &str) -> Key {
        if self.prefix.is_empty() {
            Key::from(key)
        } else {
            Key::from(format!("{}/{key}", self.prefix))
        }
    }

    /// Runs `fut` on the backend's runtime and waits for it.
    fn run<T: Send + 'static>(&self, fut: impl Future<Output = T> + Send + 'static) -> Result<T> {
        let rt = self.runtime.0.as_ref().ok_or_else(|| Error::Io {
            path: PathBuf::from(&self.location),
            source: io::Error::other("store runtime shut down"),
        })?;
        wait(rt.spawn(fut)).map_err(|e| other(Path::new(&self.location), e))
    }

    /// Races [`PROBE_RACERS`] creates of one fresh probe object: exactly one
    /// must win, or manifests could be published twice.
    fn prove_exclusive_create(&self) -> Result<()> {
        let key = self.key(&format!(".cas-probe-{}", unique_suffix()));
        let store = self.store.clone();
        let racer_key = key.clone();
        let wins = self.run(async move {
            let racers = (0..PROBE_RACERS).map(|i| {
                let store = store.clone();
                let key = racer_key.clone();
                async move {
                    let opts = PutOptions {
                        mode: PutMode::Create,
                        ..PutOptions::default()
                    };
                    store
                        .put_opts(&key, PutPayload::from(vec![i as u8]), opts)
                        .await
                }
            });
            futures::future::join_all(racers).await
        })?;
        let mut won = 0;
        for outcome in wins {
            match outcome {
                Ok(_) => won += 1,
                Err(
                    object_store::Error::AlreadyExists { .. }
                    | object_store::Error::Precondition { .. },
                ) => {}
                Err(e) => return Err(other(&self.describe(".cas-probe"), e)),
            }
        }
        let store = self.store.clone();
        self.run(async move { store.delete(&key).await.ok() })?;
        if won != 1 {
            tracing::error!(store = %self.location, winners = won, racers = PROBE_RACERS, "exclusive create is not honoured");
            return Err(Error::NoCompareAndSwap(PathBuf::from(&self.location)));
        }
        Ok(())
    }
}

/// The CRC32 of a local file.
/// Blocks this thread until `fut` is ready: the store's calls are
/// synchronous, and their futures run on the store's own runtime.
///
/// futures' executor, not tokio's blocking calls, because a caller may be
/// on an async thread of another runtime; and outside tokio's cooperative
/// budget, because such a caller's task may have spent its budget (128
/// ready polls in one turn), after which every tokio resource answers
/// "pending" and wakes itself at once, and this wait would spin forever
/// (`tests/s3.rs`, `a_large_fetch_from_inside_a_tokio_task_finishes`).
pub(super) fn wait<F: Future>(fut: F) -> F::Output {
    futures::executor::block_on(tokio::task::unconstrained(fut))
}

fn file_crc(path: &Path) -> io::Result<u32> {
    let mut file = File::open(path)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(hasher.finalize());
        }
        hasher.update(&buf[..n]);
    }
}

fn crc_attributes(crc: u32) -> Attributes {
    let mut attributes = Attributes::new();
    attributes.insert(
        Attribute::Metadata(CRC_METADATA.into()),
        AttributeValue::from(format!("{crc:08x}")),
    );
    attributes
}

impl Backend for ObjectStore {
    fn create(&self, key: &str, bytes: &[u8]) -> Result<bool> {
        let path = self.key(key);
        let store = self.store.clone();
        let payload = Bytes::copy_from_slice(bytes);
        let sent = payload.clone();
        let outcome = self.run(async move {
            let opts = PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            };
            match store.put_opts(&path, PutPayload::from(sent), opts).await {
                Ok(_) => Ok(true),
                Err(
                    object_store::Error::AlreadyExists { .. }
                    | object_store::Error::Precondition { .. },
                ) => {
                    // A retry of our own create finds our object: read it
                    // back before calling it a rival's.
                    let held = store.get(&path).await?.bytes().await?;
                    Ok(held == payload)
                }
                Err(e) => Err(e),
            }
        })?;
        outcome.map_err(|e| other(&self.describe(key), e))
    }

    fn replace(&self, key: &str, bytes: &[u8]) -> Result<()> {
        let path = self.key(key);
        let store = self.store.clone();
        let payload = PutPayload::from(Bytes::copy_from_slice(bytes));
        self.run(async move { store.put(&path, payload).await })?
            .map(drop)
            .map_err(|e| other(&self.describe(key), e))
    }

    fn read(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let path = self.key(key);
        let store = self.store.clone();
        let got = self.run(async move {
            match store.get(&path).await {
                Ok(got) => got.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        got.map(|b| b.map(|b| b.to_vec()))
            .map_err(|e| other(&self.describe(key), e))
    }

    fn exists(&self, key: &str) -> Result<bool> {
        let path = self.key(key);
        let store = self.store.clone();
        let head = self.run(async move {
            match store.head(&path).await {
                Ok(_) => Ok(true),
                Err(object_store::Error::NotFound { .. }) => Ok(false),
                Err(e) => Err(e),
            }
        })?;
        head.map_err(|e| other(&self.describe(key), e))
    }

    fn list(&self, dir: &str) -> Result<Vec<Listed>> {
        Ok(self
            .list_level(dir)?
            .objects
            .into_iter()
            .filter_map(|meta| {
                Some(Listed {
                    name: meta.location.filename()?.to_owned(),
                    bytes: meta.size,
                    modified: meta.last_modified.into(),
                })
            })
            .collect())
    }

    fn list_dirs(&self, dir: &str) -> Result<Vec<String>> {
        Ok(self
            .list_level(dir)?
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_owned))
            .collect())
    }

    fn remove(&self, key: &str) -> Result<bool> {
        let path = self.key(key);
        let store = self.store.clone();
        let removed = self.run(async move {
            match store.delete(&path).await {
                Ok(()) => Ok(true),
                Err(object_store::Error::NotFound { .. }) => Ok(false),
                Err(e) => Err(e),
            }
        })?;
        removed.map_err(|e| other(&self.describe(key), e))
    }

    fn remove_all(&self, dir: &str) -> Result<()> {
        let path = self.key(dir);
        let store = self.store.clone();
        self.run(async move {
            let keys = store.list(Some(&path)).map_ok(|meta| meta.location).boxed();
            store
                .delete_stream(keys)
                .try_for_each(|_| async { Ok(()) })
                .await
        })?
        .map_err(|e| other(&self.describe(dir), e))
    }

    fn upload(&self, key: &str, local: &Path, crc32: Option<u32>) -> Result<()> {
        let len = fs::metadata(local).map_err(Error::io(local))?.len();
        let path = self.key(key);
        let store = self.store.clone();
        if len < MULTIPART_FROM {
            // Read once: the CRC comes from the bytes sent.
            let bytes = fs::read(local).map_err(Error::io(local))?;
            let attributes = crc_attributes(crc32fast::hash(&bytes));
            let opts = PutOptions {
                attributes,
                ..PutOptions::default()
            };
            return self
                .run(async move { store.put_opts(&path, PutPayload::from(bytes), opts).await })?
                .map(drop)
                .map_err(|e| other(&self.describe(key), e));
        }
        // The CRC travels as metadata at the upload's start: the writer's,
        // or a pass over the file first.
        let crc = match crc32 {
            Some(crc) => crc,
            None => file_crc(local).map_err(Error::io(local))?,
        };
        let attributes = crc_attributes(crc);
        let mut file = File::open(local).map_err(Error::io(local))?;
        let opts = PutMultipartOptions {
            attributes,
            ..PutMultipartOptions::default()
        };
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(2);
        let uploading = {
            let rt = self
                .runtime
                .0
                .as_ref()
                .ok_or_else(|| other(local, io::Error::other("store runtime shut down")))?;
            rt.spawn(async move {
                let upload = store.put_multipart_opts(&path, opts).await?;
                let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
                while let Some(chunk) = rx.recv().await {
                    writer.wait_for_capacity(PARTS_IN_FLIGHT).await?;
                    writer.put(chunk);
                }
                writer.finish().await
            })
        };
        let mut sent = 0u64;
        let mut read_error = None;
        while sent < len {
            let mut chunk = vec![0u8; PART_BYTES.min((len - sent) as usize)];
            if let Err(e) = file.read_exact(&mut chunk) {
                read_error = Some(e);
                break;
            }
            sent += chunk.len() as u64;
            if wait(tx.send(Bytes::from(chunk))).is_err() {
                break;
            }
        }
        drop(tx);
        let finished = wait(uploading).map_err(|e| other(local, e))?;
        if let Some(e) = read_error {
            // The unfinished upload is aborted when the writer is dropped.
            return Err(Error::Io {
                path: local.to_owned(),
                source: e,
            });
        }
        finished
            .map(drop)
            .map_err(|e| other(&self.describe(key), e))
    }

    fn fetch(&self, key: &str, local: &Path) -> Result<()> {
        let dir = local
            .parent()
            .ok_or_else(|| other(local, io::Error::other("no parent directory")))?;
        super::local::create_dirs(dir)?;
        let tmp = dir.join(format!(".fetch-{}", unique_suffix()));
        let fetched = self.fetch_to(key, &tmp);
        let renamed = fetched.and_then(|()| fs::rename(&tmp, local).map_err(Error::io(local)));
        if renamed.is_err() {
            fs::remove_file(&tmp).ok();
        }
        renamed
    }

    fn is_remote(&self) -> bool {
        true
    }

    fn describe(&self, key: &str) -> PathBuf {
        PathBuf::from(format!("{}/{key}", self.location))
    }
}

impl ObjectStore {
    /// The objects and common prefixes directly under directory `dir`.
    fn list_level(&self, dir: &str) -> Result<object_store::ListResult> {
        let path = self.key(dir);
        let store = self.store.clone();
        self.run(async move { store.list_with_delimiter(Some(&path)).await })?
            .map_err(|e| other(&self.describe(dir), e))
    }

    /// Streams `key` into the new file `tmp`, fsynced, checking its CRC32
    /// against the one the object carries. A file larger than one range
    /// comes in [`RANGE_BYTES`](super::s3_fetch::RANGE_BYTES) ranged GETs, `fetch_ranges` of them in
    /// flight, each written at its offset and hashed on its own; the
    /// ranges' CRCs are combined in order, and every range after the first
    /// asks for the first one's ETag, so a file is never stitched from two
    /// versions of an object.
    fn fetch_to(&self, key: &str, tmp: &Path) -> Result<()> {
        let path = self.key(key);
        let store = self.store.clone();
        let (tx, rx) = tokio::sync::mpsc::channel::<object_store::Result<Piece>>(16);
        let (meta_tx, meta_rx) = tokio::sync::oneshot::channel::<object_store::Result<Layout>>();
        let rt = self
            .runtime
            .0
            .as_ref()
            .ok_or_else(|| other(tmp, io::Error::other("store runtime shut down")))?;
        rt.spawn(download(store, path, self.fetch_ranges, meta_tx, tx));
        let layout = wait(meta_rx)
            .map_err(|e| other(tmp, e))?
            .map_err(|e| other(&self.describe(key), e))?;
        write_pieces(&layout, rx, tmp, &self.describe(key))
    }
}
