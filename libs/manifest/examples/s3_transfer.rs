//! Upload and fetch rates of segment files through the object-store
//! backend, against moto's S3 server on loopback (started here), beside the
//! local write and read of the same bytes.
//!
//! `cargo run --release -p eddy-manifest --example s3_transfer -- [MiB] [files]`
//! (default 64 MiB × 4). Fetches alternate one stream per file
//! (`fetch_ranges=1`) with ranged GETs (the default), three rounds. moto is a Python emulator serving one request at a
//! time: the figures bound what the backend does per byte, not what a real
//! S3 endpoint delivers. `EDDY_BENCH_S3_URL=s3://bucket/prefix` (with the
//! `AWS_*` variables) runs against another S3 server instead.

use std::collections::BTreeMap;
use std::time::Instant;

use eddy_loadtest::s3_server::BenchS3;
use eddy_manifest::{Error, SegmentEntry, Store, StoreLocation};
use eddy_model::CollectionDef;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().map_or(Ok(64), |a| a.parse())?;
    let files: usize = args.next().map_or(Ok(4), |a| a.parse())?;
    let server = BenchS3::from_env("bench")?;
    let config = server.env();
    let location = StoreLocation::parse(&server.store_url("transfer"))?;
    let writer_cache = tempfile::tempdir()?;
    let reader_cache = tempfile::tempdir()?;
    let writer = Store::open_location_with(&location, writer_cache.path(), &config)?;
    let reader = Store::open_location_with(&location, reader_cache.path(), &config)?;
    writer.create_collection(&CollectionDef::new("c", 4))?;
    let bytes: Vec<u8> = (0..mib << 20).map(|i| (i * 31 % 251) as u8).collect();
    let total = (files * (mib << 20)) as f64 / (1 << 20) as f64;

    let started = Instant::now();
    let mut ids = Vec::new();
    for _ in 0..files {
        let (id, path) = writer.new_segment("c");
        std::fs::write(&path, &bytes)?;
        ids.push(id);
    }
    let local_write = started.elapsed().as_secs_f64();

    let started = Instant::now();
    let _ = writer.update::<Error>("c", |latest| {
        let mut next = latest.successor();
        next.segments.extend(ids.iter().map(|id| SegmentEntry {
            id: id.clone(),
            rows: 1,
            bytes: bytes.len() as u64,
            deletes: None,
            deleted: 0,
            offset_ranges: BTreeMap::new(),
            index: None,
        }));
        Ok(Some(next))
    })?;
    let upload = started.elapsed().as_secs_f64();

    // Fetched into fresh caches, alternated: one file at a time in one
    // stream (`fetch_ranges=1`), one file at a time in ranges, and all at
    // once as a node catching up does (several files, each in ranges).
    let names: Vec<String> = ids.iter().map(|id| format!("{id}.seg")).collect();
    let mut one_stream_config = config.clone();
    one_stream_config.push(("fetch_ranges", "1".to_owned()));
    let mut rates = [Vec::new(), Vec::new(), Vec::new()];
    for _round in 0..3 {
        for (mode, rates) in rates.iter_mut().enumerate() {
            let cache = tempfile::tempdir()?;
            let config = if mode == 0 {
                &one_stream_config
            } else {
                &config
            };
            let fetcher = Store::open_location_with(&location, cache.path(), config)?;
            let started = Instant::now();
            if mode == 2 {
                for fetched in fetcher.fetch_files("c", &names) {
                    fetched?;
                }
            } else {
                for id in &ids {
                    fetcher.fetch_segment("c", id)?;
                }
            }
            rates.push(total / started.elapsed().as_secs_f64());
        }
    }
    reader.fetch_segment("c", &ids[0])?;
    for id in &ids[1..] {
        reader.fetch_segment("c", id)?;
    }

    let started = Instant::now();
    let mut read = 0usize;
    for id in &ids {
        read += std::fs::read(reader.segment_path("c", id))?.len();
    }
    let local_read = started.elapsed().as_secs_f64();
    assert_eq!(read, files * bytes.len());

    println!("{files} files x {mib} MiB = {total:.0} MiB");
    println!("local write     {:8.1} MiB/s", total / local_write);
    println!("upload (CRC+put){:8.1} MiB/s", total / upload);
    let show = |rates: &[f64]| {
        rates
            .iter()
            .map(|r| format!("{r:7.1}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!("fetch (get+CRC+fsync), MiB/s in three alternated rounds:");
    println!("  one file at a time, one stream  {}", show(&rates[0]));
    println!("  one file at a time, in ranges   {}", show(&rates[1]));
    println!(
        "  {} files at once, in ranges      {}",
        eddy_manifest::FETCH_STREAMS,
        show(&rates[2])
    );
    println!(
        "local read      {:8.1} MiB/s (page cache)",
        total / local_read
    );
    Ok(())
}
