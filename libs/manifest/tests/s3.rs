//! The store on a real S3 server (moto on loopback, started by
//! `eddy_loadtest::s3_server`): manifests published with `If-None-Match: *`
//! never share a version however writers race, segment files go up when a
//! manifest first names them (in parts when large) and come back to another
//! node's cache byte for byte (in ranged GETs, or one at a time), a damaged
//! download is refused by its CRC however many ranges it came in, and
//! a store that lets two creates of one object both succeed is refused at
//! open.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, SystemTime};

use eddy_loadtest::s3_server::S3Server;
use eddy_manifest::{Error, GcPolicy, SegmentEntry, Store, StoreLocation};
use eddy_model::{CollectionDef, FieldType};
use object_store::aws::AmazonS3Builder;
use object_store::{Attribute, AttributeValue, Attributes, ObjectStore, PutOptions, PutPayload};

fn open(server: &S3Server, prefix: &str, cache: &Path) -> Store {
    let location = StoreLocation::parse(&server.store_url(prefix)).expect("location");
    let config: Vec<(&str, String)> = server.env();
    Store::open_location_with(&location, cache, &config).expect("open the S3 store")
}

fn entry(id: &str, bytes: u64) -> SegmentEntry {
    SegmentEntry {
        id: id.to_owned(),
        rows: 1,
        bytes,
        deletes: None,
        deleted: 0,
        offset_ranges: BTreeMap::new(),
        index: None,
    }
}

/// Bytes no two calls repeat at the same offset, so a misplaced part shows.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[i % 4] ^ seed)
        .collect()
}

#[test]
fn collections_and_manifests_live_in_the_bucket_and_racing_writers_never_share_a_version() {
    let server = S3Server::start("eddy").expect("S3 server");
    let cache = tempfile::tempdir().expect("tmp");
    let store = open(&server, "race", cache.path());
    assert!(store.is_remote());
    store
        .create_collection(&CollectionDef::new("c", 4))
        .expect("create");
    let wins: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6u32)
            .map(|w| {
                let store = store.clone();
                s.spawn(move || {
                    let mut wins = 0;
                    for _ in 0..8 {
                        let mut m = store.latest_manifest("c").expect("latest").successor();
                        m.partitions.entry(w).or_default().next_offset += 1;
                        if store.publish(&m).is_ok() {
                            wins += 1;
                        }
                    }
                    wins
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("join")).sum()
    });
    assert!(wins > 0);
    let latest = store.latest_manifest("c").expect("latest");
    assert_eq!(
        latest.version as usize, wins,
        "every version has one writer"
    );
    assert_eq!(
        store.manifest_versions("c").expect("versions"),
        (1..=wins as u64).collect::<Vec<_>>()
    );

    // A second node (its own cache) sees the same store.
    let other_cache = tempfile::tempdir().expect("tmp");
    let other = open(&server, "race", other_cache.path());
    assert_eq!(other.latest_manifest("c").expect("latest"), latest);
    let fields = BTreeMap::from([("tag".to_owned(), FieldType::Keyword)]);
    let altered = other.add_payload_fields("c", &fields).expect("alter");
    assert_eq!(altered.generation, 1);
    assert_eq!(
        store.collection("c").expect("read").expect("exists"),
        altered.def
    );
    assert_eq!(store.collections().expect("list").len(), 1);

    // Drop and collect: the bucket forgets the collection.
    assert!(store.drop_collection("c", "test").expect("drop"));
    assert!(other.is_dropped("c"));
    assert!(other.collection("c").expect("read").is_none());
    let collected = store.collect_dropped(Duration::ZERO).expect("collect");
    assert_eq!(collected.removed, vec!["c".to_owned()]);
    assert!(!other.is_dropped("c"));
    assert!(other.manifest_versions("c").expect("versions").is_empty());
}

#[test]
fn segment_files_upload_on_publish_and_fetch_into_another_cache() {
    let server = S3Server::start("eddy").expect("S3 server");
    let writer_cache = tempfile::tempdir().expect("tmp");
    let writer = open(&server, "files", writer_cache.path());
    writer
        .create_collection(&CollectionDef::new("c", 4))
        .expect("create");

    // A small file goes up whole, a large one (over 16 MiB) in parts.
    let small = pattern(100_000, 1);
    let large = pattern((16 << 20) * 2 + 12_345, 2);
    let mut ids = Vec::new();
    for bytes in [&small, &large] {
        let (id, path) = writer.new_segment("c");
        fs::write(&path, bytes).expect("write segment");
        ids.push((id, bytes.len() as u64));
    }
    let lease = writer
        .take_lease("c", "test", Duration::from_secs(60), None)
        .expect("lease");
    assert_eq!(writer.leases("c").expect("leases").len(), 1);
    let updated = writer
        .update::<Error>("c", |latest| {
            let mut next = latest.successor();
            next.segments
                .extend(ids.iter().map(|(id, bytes)| entry(id, *bytes)));
            Ok(Some(next))
        })
        .expect("publish");
    assert_eq!(updated.published.map(|m| m.version), Some(1));
    drop(lease);
    assert!(writer.leases("c").expect("leases").is_empty());

    // A name the writer has no file for is refused before publishing.
    let err = writer
        .update::<Error>("c", |latest| {
            let mut next = latest.successor();
            next.segments.push(entry("never-written", 1));
            Ok(Some(next))
        })
        .expect_err("missing file");
    assert!(matches!(err, Error::MissingFile { .. }), "{err}");

    let reader_cache = tempfile::tempdir().expect("tmp");
    let reader = open(&server, "files", reader_cache.path());
    for ((id, _), bytes) in ids.iter().zip([&small, &large]) {
        let path = reader.fetch_segment("c", id).expect("fetch");
        assert!(path.starts_with(reader_cache.path()));
        assert!(
            fs::read(&path).expect("read") == *bytes,
            "{id} came back whole"
        );
    }

    // One request at a time (`fetch_ranges=1`): the same bytes.
    let one_stream_cache = tempfile::tempdir().expect("tmp");
    let location = StoreLocation::parse(&server.store_url("files")).expect("location");
    let mut config = server.env();
    config.push(("fetch_ranges", "1".to_owned()));
    let one_stream = Store::open_location_with(&location, one_stream_cache.path(), &config)
        .expect("open with one range in flight");
    let path = one_stream.fetch_segment("c", &ids[1].0).expect("fetch");
    assert!(fs::read(&path).expect("read") == large, "came back whole");

    // Fetched at once into another cache, each in its place, byte for
    // byte; a name the bucket lacks fails alone, in its own place.
    let parallel_cache = tempfile::tempdir().expect("tmp");
    let parallel = open(&server, "files", parallel_cache.path());
    let mut names: Vec<String> = ids.iter().map(|(id, _)| format!("{id}.seg")).collect();
    names.insert(1, "never-written.seg".to_owned());
    let fetched = parallel.fetch_files("c", &names);
    assert_eq!(fetched.len(), 3);
    assert!(fetched[1].is_err(), "the missing file fails");
    for (outcome, bytes) in [&fetched[0], &fetched[2]].into_iter().zip([&small, &large]) {
        let path = outcome.as_ref().expect("fetched");
        assert!(path.starts_with(parallel_cache.path()));
        assert!(
            fs::read(path).expect("read") == *bytes,
            "{path:?} came back whole"
        );
    }

    // A cache bounded below both files keeps only the one used last, and
    // fetches the other again when asked.
    let bounded_cache = tempfile::tempdir().expect("tmp");
    let bounded = open(&server, "files", bounded_cache.path()).with_cache_limit(20 << 20);
    let small_path = bounded.fetch_segment("c", &ids[0].0).expect("fetch small");
    let large_path = bounded.fetch_segment("c", &ids[1].0).expect("fetch large");
    assert!(
        !small_path.exists() && large_path.exists(),
        "the older file went"
    );
    assert_eq!(bounded.cached_bytes(), Some(large.len() as u64));
    let small_again = bounded.fetch_segment("c", &ids[0].0).expect("fetch again");
    assert!(fs::read(&small_again).expect("read") == small);
    assert!(
        !large_path.exists(),
        "over the bound again: the large file went"
    );

    // Delete bitmaps live in the bucket only.
    let bits = [3u32, 7].into_iter().collect();
    let name = writer
        .write_deletes("c", &ids[0].0, &bits)
        .expect("deletes");
    assert_eq!(reader.read_deletes("c", &name).expect("read"), bits);

    // Garbage collection removes what no retained manifest names.
    let updated = writer
        .update::<Error>("c", |latest| {
            let mut next = latest.successor();
            next.segments.retain(|s| s.id == ids[1].0);
            Ok(Some(next))
        })
        .expect("publish v2");
    assert_eq!(updated.published.map(|m| m.version), Some(2));
    let policy = GcPolicy {
        keep_versions: 1,
        grace: Duration::ZERO,
    };
    let report = writer
        .collect_garbage("c", &policy, SystemTime::now() + Duration::from_secs(5))
        .expect("gc");
    assert_eq!(
        (report.manifests, report.segments, report.deletes),
        (1, 1, 1)
    );
    assert_eq!(reader.manifest_versions("c").expect("versions"), vec![2]);
}

#[test]
fn a_download_that_does_not_match_its_crc_is_refused() {
    let server = S3Server::start("eddy").expect("S3 server");
    let cache = tempfile::tempdir().expect("tmp");
    let store = open(&server, "crc", cache.path());
    store
        .create_collection(&CollectionDef::new("c", 4))
        .expect("create");
    // An object whose bytes differ from the CRC it carries, as a damaged
    // upload or a bit flip at rest would leave it.
    let mut raw = AmazonS3Builder::new().with_bucket_name("eddy");
    for (name, value) in server.env() {
        raw = raw.with_config(name.to_ascii_lowercase().parse().expect("key"), value);
    }
    let raw = raw.build().expect("client");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    // One small object, and one large enough to come in several ranged
    // GETs, whose ranges' CRCs are combined before the check.
    let large = pattern((16 << 20) * 2 + 777, 3);
    for (id, body) in [("bad", b"not what was sent".to_vec()), ("bad-large", large)] {
        let mut attributes = Attributes::new();
        attributes.insert(
            Attribute::Metadata("eddy-crc32".into()),
            AttributeValue::from("00000000"),
        );
        let put = PutOptions {
            attributes,
            ..PutOptions::default()
        };
        runtime
            .block_on(raw.put_opts(
                &format!("crc/collections/c/segments/{id}.seg").into(),
                PutPayload::from(body),
                put,
            ))
            .expect("put");
        let err = store.fetch_segment("c", id).expect_err("damaged");
        assert!(matches!(err, Error::Corrupt { .. }), "{id}: {err}");
        assert!(err.to_string().contains("CRC32"), "{id}: {err}");
        assert!(
            !store.segment_path("c", id).exists(),
            "{id}: nothing cached"
        );
    }
}

/// A server that answers every request with success, as a store that
/// ignores `If-None-Match` would: eddy must refuse to run on it.
#[test]
fn a_store_that_lets_two_creates_win_is_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0u8; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let reply = "HTTP/1.1 200 OK\r\nETag: \"x\"\r\nContent-Length: 0\r\n\r\n";
                    if stream.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let cache = tempfile::tempdir().expect("tmp");
    let location = StoreLocation::parse("s3://eddy/lax").expect("location");
    let config = vec![
        ("AWS_ENDPOINT", format!("http://127.0.0.1:{port}")),
        ("AWS_ALLOW_HTTP", "true".to_owned()),
        ("AWS_REGION", "us-east-1".to_owned()),
        ("AWS_ACCESS_KEY_ID", "k".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "s".to_owned()),
    ];
    let err = Store::open_location_with(&location, cache.path(), &config).expect_err("refused");
    assert!(matches!(err, Error::NoCompareAndSwap(_)), "{err}");
    assert!(err.to_string().contains("s3://eddy/lax"), "{err}");
}

/// A setting the client refuses is an error, not a panic, when the store
/// is opened from async code (as both services open it at start-up).
#[tokio::test]
async fn a_refused_setting_is_an_error_in_async_code_too() {
    let cache = tempfile::tempdir().expect("tmp");
    let location = StoreLocation::parse("s3://eddy/settings").expect("location");
    for setting in [("aws_no_such_setting", "1"), ("fetch_ranges", "0")] {
        let config = vec![(setting.0, setting.1.to_owned())];
        let err = Store::open_location_with(&location, cache.path(), &config).expect_err("refused");
        assert!(err.to_string().contains("s3://eddy/settings"), "{err}");
    }
}

/// A fetch called from inside a tokio task (as the kill test's helpers and
/// any async caller do) finishes: the store's blocking waits do not spend
/// the calling task's cooperative budget. Before, once the task's budget
/// was spent (128 ready polls in one turn: work before the call, or a
/// download of more than 128 pieces), every further wait answered
/// "pending" and woke itself at once, and the caller spun forever (the
/// full kill profile's object-store test hung there).
#[test]
fn a_large_fetch_from_inside_a_tokio_task_finishes() {
    let server = S3Server::start("eddy").expect("S3 server");
    let cache = tempfile::tempdir().expect("tmp");
    let writer = open(&server, "budget", cache.path());
    writer
        .create_collection(&CollectionDef::new("c", 4))
        .expect("create");
    // Many more pieces than a task's budget of 128 polls.
    let large = pattern(24 << 20, 3);
    let (id, path) = writer.new_segment("c");
    fs::write(&path, &large).expect("write segment");
    let updated = writer
        .update::<Error>("c", |latest| {
            let mut next = latest.successor();
            next.segments.push(entry(&id, large.len() as u64));
            Ok(Some(next))
        })
        .expect("publish");
    assert!(updated.published.is_some());

    let reader_cache = tempfile::tempdir().expect("tmp");
    let reader = open(&server, "budget", reader_cache.path());
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    // On a thread of its own, so a spinning fetch fails the test (after a
    // bound far above the fetch's time) instead of hanging it.
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let fetched = runtime.block_on(async {
            // The task has done cooperative work in this poll already:
            // 128 ready receives leave its budget spent.
            let (tx, mut rx) = tokio::sync::mpsc::channel::<u8>(128);
            for _ in 0..128 {
                tx.try_send(0).expect("room");
            }
            for _ in 0..128 {
                rx.recv().await;
            }
            reader.fetch_segment("c", &id)
        });
        let _ = done_tx.send(fetched.map(|p| fs::read(p).expect("read")));
    });
    let fetched = done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the fetch finishes (it spun on an exhausted budget)")
        .expect("fetch");
    assert!(fetched == large, "came back whole");
}
