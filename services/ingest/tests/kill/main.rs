//! The kill test of issue 10, at scale: eddy-ingest is SIGKILLed at random
//! moments while a stream of upserts and tombstones (every id written at
//! least five times, some deleted and re-created) is ingested with merges
//! and garbage collection running; then two ingest processes share a
//! four-partition topic and are killed and restarted in turn; and a worker
//! stopped with SIGSTOP while its partitions move on publishes nothing
//! twice once resumed. Each final state is checked against a model read
//! back from the topic itself, through `eddy fsck` (with broker access:
//! every offset accounted for) and through eddy-query.
//!
//! Profiles: the default (CI) one is small; the full one (≥ 200,000
//! events, ≥ 20 SIGKILLs) runs with
//! `EDDY_KILL_PROFILE=full cargo test --release -p eddy-ingest --test kill -- --nocapture`.
//! The single-process test runs once more with the store in an S3 bucket
//! (moto on loopback): uploads cut short by a SIGKILL, segments fetched
//! back for merges and indexes, garbage collection over the bucket.
//! The kill moments come from a seeded generator (`EDDY_KILL_SEED`, printed).
//! `drill.rs` is issue 13's drill: shards, two ingest workers and three
//! query node processes on the S3 server, killed while events flow.
//! With `--features failpoints` the binary also runs the crash-point tests
//! (`crash_points.rs`).

mod support;

#[cfg(feature = "failpoints")]
mod crash_points;
mod drill;
mod drill_node;
mod processes;

use std::time::{Duration, Instant};

use eddy_loadtest::broker::Tansu;
use eddy_loadtest::s3_server::S3Server;
use eddy_manifest::Store;
use processes::{wait_assigned, Group, IngestSpec};
use support::{
    fsck_against, query_against, query_on, random_pause, read_model, s3_store, seeded_rng,
    wait_covered, workload, Producer,
};

/// Sizes of one run.
#[derive(Debug, Clone, Copy)]
struct Profile {
    /// Ids of the single-process stream.
    ids: u64,
    /// Events per id (≥ 5).
    rounds: u64,
    /// SIGKILLs of the single process.
    kills: usize,
    /// Ids of the two-process stream.
    pair_ids: u64,
    /// SIGKILLs of the two processes, in turn.
    pair_kills: usize,
    /// `--seal-rows`.
    seal_rows: u64,
}

fn profile() -> Profile {
    match std::env::var("EDDY_KILL_PROFILE").ok().as_deref() {
        Some("full") => Profile {
            ids: 40_000,
            rounds: 5,
            kills: 24,
            pair_ids: 10_000,
            pair_kills: 6,
            seal_rows: 2_000,
        },
        _ => Profile {
            ids: 300,
            rounds: 5,
            kills: 3,
            pair_ids: 200,
            pair_kills: 2,
            seal_rows: 97,
        },
    }
}

async fn start_broker(topic: &str, partitions: u32) -> Tansu {
    let tansu = tokio::task::spawn_blocking(Tansu::start)
        .await
        .expect("join")
        .expect("Tansu starts");
    tansu.create_topic(topic, partitions).expect("topic");
    tansu
}

/// The stream cut into `pieces` pieces of random sizes.
fn cut<'a, T>(items: &'a [T], pieces: usize, rng: &mut rand_chacha::ChaCha8Rng) -> Vec<&'a [T]> {
    use rand::Rng as _;
    let mut bounds: Vec<usize> = (1..pieces)
        .map(|_| rng.random_range(1..items.len()))
        .collect();
    bounds.sort_unstable();
    bounds.dedup();
    let mut out = Vec::new();
    let mut start = 0;
    for b in bounds.into_iter().chain([items.len()]) {
        out.push(&items[start..b]);
        start = b;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkills_at_random_moments_lose_and_double_nothing() {
    sigkills_at_random_moments("kill", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkills_over_an_object_store_lose_and_double_nothing() {
    let server = tokio::task::spawn_blocking(|| S3Server::start("eddy"))
        .await
        .expect("join")
        .expect("the S3 server starts (install it with `python3 -m pip install 'moto[server]'`)");
    sigkills_at_random_moments("kills3", Some(&server)).await;
}

/// SIGKILLs one ingest process at random moments of a stream on `topic`,
/// its store in a local directory or, with `s3`, in a bucket of that server.
async fn sigkills_at_random_moments(topic: &'static str, s3: Option<&S3Server>) {
    let profile = profile();
    let mut rng = seeded_rng(topic);
    let started = Instant::now();
    let tansu = start_broker(topic, 3).await;
    let brokers = tansu.bootstrap();
    let dir = tempfile::tempdir().expect("tmp");
    let store_dir = dir.path().join("store");
    let log = dir.path().join("ingest.log");
    let mut spec = IngestSpec::small(&store_dir, &brokers, topic, "kill-0");
    spec.set("seal-rows", &profile.seal_rows.to_string());
    let store = match s3 {
        None => Store::open(&store_dir).expect("store"),
        Some(server) => {
            let (flags, store) = s3_store(server, topic, dir.path());
            spec.store_flags = Some(flags);
            store
        }
    };

    let events = workload(profile.ids, profile.rounds, &mut rng);
    let producer = Producer::new(&brokers);
    let mut ingest = spec.spawn(&log);
    let mut spawns = 1;
    wait_assigned(&mut ingest, &log, spawns).await;
    let pieces = cut(&events, profile.kills + 1, &mut rng);
    let mut kills = 0;
    for (i, piece) in pieces.iter().enumerate() {
        producer.send(topic, piece).await;
        if i + 1 < pieces.len() {
            tokio::time::sleep(random_pause(&mut rng, 400)).await;
            ingest.kill();
            kills += 1;
            ingest = spec.spawn(&log);
            spawns += 1;
            wait_assigned(&mut ingest, &log, spawns).await;
        }
    }
    let (s, b, l) = (store.clone(), brokers.clone(), vec![log.clone()]);
    tokio::task::spawn_blocking(move || {
        wait_covered(&s, &b, topic, 3, Duration::from_secs(600), &l)
    })
    .await
    .expect("join");
    ingest.kill();

    let model = read_model(&brokers, topic, 3);
    let checked = fsck_against(&store, &brokers, topic, &model).remove(0);
    match &spec.store_flags {
        None => query_against(&store_dir, &brokers, topic, &model, 7).await,
        Some(flags) => {
            let mut flags = flags.clone();
            let cache = dir.path().join("query-cache").display().to_string();
            flags.extend(["--store-cache".to_owned(), cache]);
            query_on(&flags, &brokers, topic, &model, 7).await;
        }
    }
    let offsets = checked.offsets.expect("with broker access");
    println!(
        "kill test ({}): {} events, {kills} SIGKILLs, {} live ids, lost {}, doubled {}, deletes honoured {} (visible after delete {}), took {:.1} s",
        store.location(),
        events.len(),
        checked.store.live_rows,
        offsets.lost.len(),
        checked.store.duplicates.len(),
        offsets.deleted,
        offsets.deleted_but_visible.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(kills >= profile.kills.min(pieces.len() - 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_on_four_partitions_killed_in_turn_lose_and_double_nothing() {
    let profile = profile();
    let mut rng = seeded_rng("pair");
    const TOPIC: &str = "pair";
    let tansu = start_broker(TOPIC, 4).await;
    let brokers = tansu.bootstrap();
    let dir = tempfile::tempdir().expect("tmp");
    let store_dir = dir.path().join("store");
    let specs: Vec<IngestSpec> = ["pair-a", "pair-b"]
        .iter()
        .map(|id| {
            let mut spec = IngestSpec::small(&store_dir, &brokers, TOPIC, id);
            spec.set("seal-rows", &profile.seal_rows.to_string());
            spec
        })
        .collect();
    let logs = vec![dir.path().join("a.log"), dir.path().join("b.log")];
    let mut group = Group::start(specs, logs, 4).await;
    let events = workload(profile.pair_ids, 5, &mut rng);
    let producer = Producer::new(&brokers);
    let pieces = cut(&events, profile.pair_kills + 1, &mut rng);
    for (i, piece) in pieces.iter().enumerate() {
        producer.send(TOPIC, piece).await;
        if i + 1 < pieces.len() {
            tokio::time::sleep(random_pause(&mut rng, 400)).await;
            group.restart(i % 2).await;
        }
    }
    let store = Store::open(&store_dir).expect("store");
    let (s, b, l) = (store.clone(), brokers.clone(), group.logs.clone());
    tokio::task::spawn_blocking(move || {
        wait_covered(&s, &b, TOPIC, 4, Duration::from_secs(300), &l)
    })
    .await
    .expect("join");
    group.kill_all();
    let model = read_model(&brokers, TOPIC, 4);
    let checked = fsck_against(&store, &brokers, TOPIC, &model).remove(0);
    query_against(&store_dir, &brokers, TOPIC, &model, 5).await;
    println!(
        "pair test: {} events, {} SIGKILLs in turn, {} live ids",
        events.len(),
        pieces.len() - 1,
        checked.store.live_rows
    );
}

/// Fencing: worker A holds unsealed events when it is stopped with
/// SIGSTOP; meanwhile its partitions move to worker B (B runs in its own
/// consumer group, so the move does not wait for the coordinator to expire
/// A: correctness must never depend on it) and B bumps their owner epochs.
/// Resumed with SIGCONT, A's late publish is refused for those partitions
/// (its rows go in pre-deleted, its offsets do not move) and nothing is
/// doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_worker_resumed_after_its_partitions_moved_doubles_nothing() {
    let mut rng = seeded_rng("fence");
    const TOPIC: &str = "fence";
    let tansu = start_broker(TOPIC, 2).await;
    let brokers = tansu.bootstrap();
    let dir = tempfile::tempdir().expect("tmp");
    let store_dir = dir.path().join("store");
    let store = Store::open(&store_dir).expect("store");
    let (log_a, log_b) = (dir.path().join("a.log"), dir.path().join("b.log"));
    let mut spec_a = IngestSpec::small(&store_dir, &brokers, TOPIC, "fence-a");
    spec_a
        .set("seal-age-ms", "3000")
        .set("seal-quiet-ms", "0")
        .set("seal-rows", "100000");
    let mut a = spec_a.spawn(&log_a);
    wait_assigned(&mut a, &log_a, 1).await;
    let events = workload(300, 5, &mut rng);
    let producer = Producer::new(&brokers);
    let (first, second) = events.split_at(events.len() / 2);
    producer.send(TOPIC, first).await;
    let (s, b, l) = (store.clone(), brokers.clone(), vec![log_a.clone()]);
    tokio::task::spawn_blocking(move || {
        wait_covered(&s, &b, TOPIC, 2, Duration::from_secs(60), &l)
    })
    .await
    .expect("join");
    // A consumes the second half into its buffer (sealed only after 3 s)
    // and is stopped before it seals.
    producer.send(TOPIC, second).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    a.signal("STOP");
    let covered_by_a = store.latest_manifest(TOPIC).expect("manifest");
    // B takes both partitions over and ingests the rest.
    let mut spec_b = IngestSpec::small(&store_dir, &brokers, TOPIC, "fence-b");
    spec_b.set("group-prefix", "fence-takeover");
    let mut worker_b = spec_b.spawn(&log_b);
    wait_assigned(&mut worker_b, &log_b, 1).await;
    let taken = store.latest_manifest(TOPIC).expect("manifest");
    for (p, state) in &taken.partitions {
        assert!(
            state.owner_epoch > covered_by_a.partitions[p].owner_epoch,
            "partition {p} moved"
        );
    }
    let (s, b, l) = (
        store.clone(),
        brokers.clone(),
        vec![log_a.clone(), log_b.clone()],
    );
    tokio::task::spawn_blocking(move || {
        wait_covered(&s, &b, TOPIC, 2, Duration::from_secs(60), &l)
    })
    .await
    .expect("join");
    // Resumed, A seals what it held: refused for both partitions.
    a.signal("CONT");
    let deadline = Instant::now() + Duration::from_secs(60);
    while processes::log_count(&log_a, "partition fenced by a newer owner") == 0 {
        assert!(
            Instant::now() < deadline,
            "A's late publish was never fenced\n{}",
            processes::log_tails(std::slice::from_ref(&log_a))
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let model = read_model(&brokers, TOPIC, 2);
    fsck_against(&store, &brokers, TOPIC, &model);
    query_against(&store_dir, &brokers, TOPIC, &model, 3).await;
    drop((a, worker_b));
}
