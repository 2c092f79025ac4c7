//! Crash points (feature `failpoints`): for each named point, eddy-ingest
//! is made to exit exactly there (`EDDY_CRASH_AT`, see
//! `eddy_ingest::failpoints`), restarted without it, and `eddy fsck` with
//! broker access then finds nothing lost and nothing doubled.

use std::process::ExitStatus;
use std::time::{Duration, Instant};

use eddy_ingest::failpoints::{CRASH_AT_ENV, CRASH_EXIT_CODE};
use eddy_manifest::Store;

use super::processes::{log_count, wait_assigned, Ingest, IngestSpec};
use super::support::{
    fsck_against, query_against, read_model, seeded_rng, wait_covered, workload, Producer,
};

/// Waits up to `timeout` for `ingest` to exit by itself.
fn wait_exit(ingest: &mut Ingest, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some(status) = ingest.child.try_wait().expect("try_wait") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// Flags that keep merges away, so that sealed segments reach the index
/// build: a tier merge runs before an index build and writes the merged
/// segment's index itself (that write is covered by
/// `merge::before_publish`, which comes after it).
const NO_MERGES: &[(&str, &str)] = &[("merge-min-segments", "1000000"), ("merge-idle-ms", "0")];

/// Extra `--flag value` pairs a crash point's run needs.
type Flags = &'static [(&'static str, &'static str)];

/// Every crash point, the pass at which the process dies there, and the
/// flags that make the path through it run.
const POINTS: [(&str, u32, Flags); 6] = [
    ("segment::before_fsync", 2, &[]),
    ("seal::before_publish", 2, &[]),
    ("seal::before_commit", 2, &[]),
    ("merge::before_publish", 1, &[]),
    ("index::before_publish", 1, NO_MERGES),
    ("gc::before_delete", 10, &[]),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_each_named_point_loses_and_doubles_nothing() {
    let mut rng = seeded_rng("crash points");
    let tansu = tokio::task::spawn_blocking(eddy_loadtest::broker::Tansu::start)
        .await
        .expect("join")
        .expect("Tansu starts");
    let brokers = tansu.bootstrap();
    for (i, (point, hit, flags)) in POINTS.iter().enumerate() {
        let topic = format!("crash{i}");
        tansu.create_topic(&topic, 2).expect("topic");
        let dir = tempfile::tempdir().expect("tmp");
        let store_dir = dir.path().join("store");
        let log = dir.path().join("ingest.log");
        let mut spec = IngestSpec::small(&store_dir, &brokers, &topic, &format!("crash-{i}"));
        for (name, value) in *flags {
            spec.set(name, value);
        }
        let mut crashing = spec.clone();
        crashing
            .env
            .push((CRASH_AT_ENV.to_owned(), format!("{point}@{hit}")));
        // Produced at once: the crash may come before the first assignment
        // (garbage collection runs from the start).
        let mut ingest = crashing.spawn(&log);
        let events = workload(250, 5, &mut rng);
        let producer = Producer::new(&brokers);
        producer.send(&topic, &events).await;
        let status = wait_exit(&mut ingest, Duration::from_secs(120))
            .unwrap_or_else(|| panic!("{point}: never reached"));
        assert_eq!(status.code(), Some(CRASH_EXIT_CODE), "{point}: {status}");

        spec.env.clear();
        let assigned = log_count(&log, "partitions assigned");
        let mut ingest = spec.spawn(&log);
        wait_assigned(&mut ingest, &log, assigned + 1).await;
        let store = Store::open(&store_dir).expect("store");
        let (s, b, t, l) = (
            store.clone(),
            brokers.clone(),
            topic.clone(),
            vec![log.clone()],
        );
        tokio::task::spawn_blocking(move || {
            wait_covered(&s, &b, &t, 2, Duration::from_secs(120), &l)
        })
        .await
        .expect("join");
        drop(ingest);
        let model = read_model(&brokers, &topic, 2);
        fsck_against(&store, &brokers, &topic, &model);
        query_against(&store_dir, &brokers, &topic, &model, 11).await;
        println!("crash point {point} (pass {hit}): nothing lost, nothing doubled");
    }
}
