//! How the S3 backend downloads one object: the first ranged GET tells
//! its size and CRC, the other ranges follow several at a time, and every
//! body's bytes go to the caller ([`download`]), who writes them at their
//! offsets and checks them ([`write_pieces`]).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as Key;
use object_store::{Attribute, GetOptions, GetRange, ObjectStore as _};

use super::s3::{other, wait, CRC_METADATA};
use crate::{Error, Result};

/// Bytes asked for by one ranged GET of a fetch.
pub(super) const RANGE_BYTES: u64 = 16 << 20;

/// What a fetch learns from its first answer: the object's size, the CRC32
/// it carries, and the byte ranges it comes in (the first one answered).
pub(super) struct Layout {
    pub(super) size: u64,
    pub(super) crc: Option<String>,
    pub(super) ranges: Vec<std::ops::Range<u64>>,
}

/// Bytes of range `range` (an index into [`Layout::ranges`]), in order
/// within their range.
pub(super) struct Piece {
    pub(super) range: usize,
    pub(super) bytes: Bytes,
}

/// Downloads `path`: a GET of its first [`RANGE_BYTES`] (or of the whole
/// object, where the store refuses the range), whose answer gives the
/// layout sent on `meta`, then the other ranges, `in_flight` at once, every
/// body's bytes sent on `pieces`. Stops when the receiver goes.
pub(super) async fn download(
    store: Arc<dyn object_store::ObjectStore>,
    path: Key,
    in_flight: usize,
    meta: tokio::sync::oneshot::Sender<object_store::Result<Layout>>,
    pieces: tokio::sync::mpsc::Sender<object_store::Result<Piece>>,
) {
    let ranged = GetOptions {
        range: Some(GetRange::Bounded(0..RANGE_BYTES)),
        ..GetOptions::default()
    };
    let first = match store.get_opts(&path, ranged).await {
        Ok(got) => Ok(got),
        Err(e @ object_store::Error::NotFound { .. }) => Err(e),
        // An empty object, or a store that cannot answer ranges: the
        // whole object in one request.
        Err(_) => store.get(&path).await,
    };
    let first = match first {
        Ok(got) => got,
        Err(e) => {
            meta.send(Err(e)).ok();
            return;
        }
    };
    let size = first.meta.size;
    let e_tag = first.meta.e_tag.clone();
    let mut ranges = vec![first.range.clone()];
    let mut start = first.range.end;
    while start < size {
        let end = (start + RANGE_BYTES).min(size);
        ranges.push(start..end);
        start = end;
    }
    let crc = first
        .attributes
        .get(&Attribute::Metadata(CRC_METADATA.into()))
        .map(|v| v.as_ref().to_owned());
    let rest: Vec<_> = ranges.iter().cloned().enumerate().skip(1).collect();
    let layout = Layout { size, crc, ranges };
    if meta.send(Ok(layout)).is_err() {
        return;
    }
    let send_body = |range: usize, body: BoxStream<'static, object_store::Result<Bytes>>| {
        let pieces = pieces.clone();
        async move {
            let mut body = body;
            while let Some(bytes) = body.next().await {
                let piece = bytes.map(|bytes| Piece { range, bytes });
                let failed = piece.is_err();
                if pieces.send(piece).await.is_err() || failed {
                    return Err(());
                }
            }
            Ok(())
        }
    };
    let later = futures::stream::iter(rest).map(|(i, range)| {
        let store = store.clone();
        let path = path.clone();
        let opts = GetOptions {
            range: Some(GetRange::Bounded(range)),
            if_match: e_tag.clone(),
            ..GetOptions::default()
        };
        let pieces = pieces.clone();
        async move {
            match store.get_opts(&path, opts).await {
                Ok(got) => send_body(i, got.into_stream()).await,
                Err(e) => {
                    pieces.send(Err(e)).await.ok();
                    Err(())
                }
            }
        }
    });
    let first = send_body(0, first.into_stream());
    // The first range streams beside the others (one at a time when only
    // one may be in flight); the first failure ends them all, its error
    // already sent.
    if in_flight <= 1 {
        if first.await.is_ok() {
            let _ = later.buffered(1).try_for_each(|()| async { Ok(()) }).await;
        }
    } else {
        let later = later
            .buffer_unordered(in_flight - 1)
            .try_for_each(|()| async { Ok(()) });
        let _ = futures::future::try_join(first, later).await;
    }
}

/// Writes the pieces arriving on `pieces` into the new file `tmp` at their
/// offsets in `layout`, fsyncs it, and checks that every byte came and
/// that their CRC32 (each range hashed on its own, combined in order) is
/// the one the object carries; `key` names the object in errors.
pub(super) fn write_pieces(
    layout: &Layout,
    mut pieces: tokio::sync::mpsc::Receiver<object_store::Result<Piece>>,
    tmp: &Path,
    key: &Path,
) -> Result<()> {
    let file = File::create(tmp).map_err(Error::io(tmp))?;
    let mut hashers = vec![crc32fast::Hasher::new(); layout.ranges.len()];
    let mut received = vec![0u64; layout.ranges.len()];
    while let Some(piece) = wait(pieces.recv()) {
        let piece = piece.map_err(|e| other(key, e))?;
        let range = &layout.ranges[piece.range];
        let at = range.start + received[piece.range];
        if at + piece.bytes.len() as u64 > range.end {
            return Err(Error::Corrupt {
                path: key.to_path_buf(),
                reason: format!("the store sent more than bytes {range:?}"),
            });
        }
        hashers[piece.range].update(&piece.bytes);
        received[piece.range] += piece.bytes.len() as u64;
        std::os::unix::fs::FileExt::write_all_at(&file, &piece.bytes, at)
            .map_err(Error::io(tmp))?;
    }
    let got: u64 = received.iter().sum();
    if got != layout.size {
        return Err(Error::Corrupt {
            path: key.to_path_buf(),
            reason: format!("fetched {got} bytes of {}", layout.size),
        });
    }
    file.sync_all().map_err(Error::io(tmp))?;
    let mut hashers = hashers.into_iter();
    let mut whole = hashers.next().unwrap_or_default();
    for hasher in hashers {
        whole.combine(&hasher);
    }
    let crc = format!("{:08x}", whole.finalize());
    match &layout.crc {
        Some(expected) if *expected != crc => Err(Error::Corrupt {
            path: key.to_path_buf(),
            reason: format!("fetched bytes have CRC32 {crc}, the object carries {expected}"),
        }),
        _ => Ok(()),
    }
}
