//! The drill of issue 13: an 8-partition topic, a collection split into 2
//! shards, 2 ingest workers and 3 query nodes (shard 0 on one, shard 1 on
//! two), every process on an S3 server (moto on loopback) with its own
//! cache and nothing shared on disk. While events flow, one ingest worker
//! and one query node are SIGKILLed and restarted (the query node after a
//! piece of the stream went by without it), and searches keep going to the
//! nodes. Every answer must equal the exact answer over the offsets it says
//! it reflects (the topic read back gives the state at any offsets); at the
//! end `eddy fsck` against the bucket finds nothing lost or doubled, and
//! each node answers exactly at the topic's end.
//!
//! A query node is this test binary run again with its arguments in
//! `EDDY_DRILL_NODE` (the ignored test `drill_node::drill_query_node`
//! serves them), so a kill is a real SIGKILL of a process.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eddy_loadtest::s3_server::S3Server;
use rand::Rng as _;
use serde_json::{json, Value};

use crate::drill_node::{tail, Node};
use crate::processes::{log_count, Group, IngestSpec};
use crate::support::{
    fsck_against, post_json, random_pause, read_log, s3_store, seeded_rng, vector_of, wait_covered,
    workload, EventLog, Model, Producer, DIM,
};
use crate::{cut, profile, start_broker};

/// The environment variable that makes this binary a query node.
pub(crate) const TOPIC: &str = "drill";
const PARTITIONS: u32 = 8;
const SHARDS: u32 = 2;
/// Hits per search.
const K: usize = 10;

/// One answered search: the query, and the node's answer.
struct Answer {
    node: &'static str,
    query: Vec<f32>,
    reply: Value,
}

/// Squared L2 distance.
fn l2(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// Checks `answer` against the exact top [`K`] of the state the topic
/// implies before the offsets the answer reflects. Tie-aware: the scores
/// must be the exact top-k scores, and each hit a live point at exactly
/// its score. Returns what is wrong, if anything.
fn check_exact(answer: &Answer, log: &EventLog) -> Result<(), String> {
    let (node, reply) = (answer.node, &answer.reply);
    let offsets: BTreeMap<u32, i64> = reply["offsets"]
        .as_object()
        .ok_or_else(|| format!("{node}: no offsets: {reply}"))?
        .iter()
        .map(|(p, o)| (p.parse().expect("partition"), o.as_i64().expect("offset")))
        .collect();
    // A partition the answer does not name had no event it reflects.
    let full: BTreeMap<u32, i64> = (0..PARTITIONS)
        .map(|p| (p, offsets.get(&p).copied().unwrap_or(0)))
        .collect();
    let state: Model = log.state_before(&full);
    let mut exact: Vec<(f32, u64)> = state
        .iter()
        .filter_map(|(id, v)| v.map(|v| (l2(&answer.query, &vector_of(*id, v)), *id)))
        .collect();
    exact.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    exact.truncate(K);
    let hits = reply["result"].as_array().expect("result");
    if hits.len() != exact.len() {
        return Err(format!("{node}: hit count at {full:?}: {reply}"));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (hit, (want, _)) in hits.iter().zip(&exact) {
        let id = hit["id"].as_u64().expect("id");
        let score = hit["score"].as_f64().expect("score") as f32;
        if !seen.insert(id) {
            return Err(format!("{node}: id {id} twice: {reply}"));
        }
        let Some(Some(v)) = state.get(&id) else {
            return Err(format!("{node}: id {id} is not live at {full:?}: {reply}"));
        };
        let own = l2(&answer.query, &vector_of(id, *v));
        if (own - score).abs() > 1e-4 || (want - score).abs() > 1e-4 {
            return Err(format!(
                "{node}: id {id} scored {score}, its exact distance {own}, the exact rank's {want}; at {full:?}: {reply}\nexact: {exact:?}"
            ));
        }
    }
    Ok(())
}

/// Sends exact searches to `nodes` (round robin) until `stop`, keeping
/// every answer; the first failed search ends it with what failed (a
/// replica of every shard is always up, so none may fail).
async fn search_while_flowing(
    nodes: Vec<(&'static str, String)>,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> Result<Vec<Answer>, String> {
    use rand::SeedableRng as _;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let http = reqwest::Client::new();
    let mut answers = Vec::new();
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let (node, base) = &nodes[i % nodes.len()];
        i += 1;
        let query: Vec<f32> = (0..DIM).map(|_| rng.random_range(0.0..1.0)).collect();
        let r = http
            .post(format!("{base}/search"))
            .json(&json!({"vector": query, "k": K, "exact": true}))
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| format!("{node}: search #{i}: {e}"))?;
        let status = r.status();
        let reply: Value = r
            .json()
            .await
            .map_err(|e| format!("{node}: search #{i}: {e}"))?;
        if !status.is_success() {
            return Err(format!("{node}: search #{i}: {status}: {reply}"));
        }
        if reply.get("missing_shards").is_some_and(|m| m != &json!([])) {
            return Err(format!("{node}: search #{i}: a partial answer: {reply}"));
        }
        answers.push(Answer { node, query, reply });
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(answers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drill_kills_an_ingest_worker_and_a_query_node_while_events_flow() {
    let profile = profile();
    let mut rng = seeded_rng("drill");
    let started = Instant::now();
    let server = tokio::task::spawn_blocking(|| S3Server::start("eddy"))
        .await
        .expect("join")
        .expect("the S3 server starts (install it with `python3 -m pip install 'moto[server]'`)");
    let tansu = start_broker(TOPIC, PARTITIONS).await;
    let brokers = tansu.bootstrap();
    let dir = tempfile::tempdir().expect("tmp");
    let (store_flags, store) = s3_store(&server, TOPIC, dir.path());

    // Two ingest workers in one group, each with its own cache.
    let specs: Vec<IngestSpec> = ["drill-a", "drill-b"]
        .iter()
        .map(|id| {
            let mut spec = IngestSpec::small(&dir.path().join(id), &brokers, TOPIC, id);
            spec.store_flags = Some(store_flags.clone());
            spec.collection_options = format!(",shards={SHARDS}");
            spec.set("seal-rows", &profile.seal_rows.to_string());
            spec
        })
        .collect();
    let logs = vec![dir.path().join("a.log"), dir.path().join("b.log")];
    let mut group = Group::start(specs, logs, PARTITIONS as usize).await;

    // Three query nodes: q0 serves shard 0, q1 and q2 shard 1; each asks
    // the others for the shard it lacks.
    let mut nodes = [
        Node::new("q0", dir.path()),
        Node::new("q1", dir.path()),
        Node::new("q2", dir.path()),
    ];
    let urls: Vec<String> = nodes.iter().map(Node::flight_url).collect();
    for (i, shard) in [0, 1, 1].into_iter().enumerate() {
        let peers: Vec<&str> = (0..3)
            .filter(|j| *j != i)
            .map(|j| urls[j].as_str())
            .collect();
        let mut args: Vec<String> = [
            "eddy-query",
            "--brokers",
            &brokers,
            "--http-addr",
            &format!("127.0.0.1:{}", nodes[i].http),
            "--flight-addr",
            &format!("127.0.0.1:{}", nodes[i].flight),
            "--manifest-poll-ms",
            "50",
            "--collection-poll-ms",
            "100",
            "--shards",
            &shard.to_string(),
            "--peers",
            &peers.join(","),
            "--peer-refresh-ms",
            "200",
            "--store-cache",
            &dir.path()
                .join(format!("{}-cache", nodes[i].name))
                .display()
                .to_string(),
        ]
        .iter()
        .map(|a| (*a).to_owned())
        .collect();
        args.extend(store_flags.iter().cloned());
        nodes[i].args = args;
    }
    // The collection exists once ingest created it.
    for node in &mut nodes {
        node.start().await;
    }
    println!(
        "drill: 2 workers and 3 nodes up after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let stop = Arc::new(AtomicBool::new(false));
    let searching = tokio::spawn(search_while_flowing(
        vec![("q0", nodes[0].base()), ("q2", nodes[2].base())],
        rng.random(),
        stop.clone(),
    ));
    let events = workload(profile.pair_ids, 5, &mut rng);
    let producer = Producer::new(&brokers);
    let pieces = cut(&events, 4, &mut rng);
    for (i, piece) in pieces.iter().enumerate() {
        producer.send(TOPIC, piece).await;
        tokio::time::sleep(random_pause(&mut rng, 400)).await;
        match i {
            0 => {
                // Ingest worker a dies mid-stream and comes back.
                group.restart(0).await;
                println!("drill: ingest worker a killed and back");
            }
            1 => {
                // Query node q1 (shard 1, replicated on q2) dies; q0's
                // searches go to q2 meanwhile.
                nodes[1].kill();
                println!("drill: query node q1 killed");
            }
            2 => {
                nodes[1].start().await;
                println!("drill: query node q1 back");
            }
            _ => {}
        }
    }
    // Until ingest covers the topic, the searches go on.
    let (s, b, l) = (store.clone(), brokers.clone(), group.logs.clone());
    tokio::task::spawn_blocking(move || {
        wait_covered(&s, &b, TOPIC, PARTITIONS, Duration::from_secs(600), &l)
    })
    .await
    .expect("join");
    stop.store(true, Ordering::Relaxed);
    let mut answers = searching
        .await
        .expect("the searches")
        .unwrap_or_else(|failed| {
            let logs: Vec<String> = nodes
                .iter()
                .map(|n| format!("--- {}:\n{}", n.name, tail(&n.log)))
                .collect();
            panic!("{failed}\n{}", logs.join("\n"))
        });
    group.kill_all();

    let log = tokio::task::spawn_blocking({
        let brokers = brokers.clone();
        move || read_log(&brokers, TOPIC, PARTITIONS)
    })
    .await
    .expect("join");
    let model = log.state_before(&BTreeMap::new());
    let checked = fsck_against(&store, &brokers, TOPIC, &model);
    assert_eq!(checked.len(), SHARDS as usize, "one report per shard");

    // At the topic's end (each partition's last event asked for in
    // `min_offsets`), every node answers exactly (q1 fanning out too), and
    // counts the live ids.
    let ends: BTreeMap<String, i64> = log
        .0
        .iter()
        .filter_map(|(p, events)| Some((p.to_string(), events.last()?.0)))
        .collect();
    let http = reqwest::Client::new();
    for node in &nodes {
        for _ in 0..5 {
            let query: Vec<f32> = (0..DIM).map(|_| rng.random_range(0.0..1.0)).collect();
            let body = json!({"vector": query, "k": K, "exact": true, "min_offsets": ends});
            let reply = post_json(&http, format!("{}/search", node.base()), &body).await;
            answers.push(Answer {
                node: node.name,
                query,
                reply,
            });
        }
    }
    // Each node counts every shard (its own, and its peers' for the rest).
    let live = model.values().filter(|v| v.is_some()).count() as u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut counted = Vec::new();
        for node in &nodes {
            let r = post_json(&http, format!("{}/count", node.base()), &json!({})).await;
            counted.push(r["count"].as_u64());
        }
        if counted.iter().all(|c| *c == Some(live)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "q0, q1, q2 count {counted:?}, the topic has {live} live ids"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let wrong: Vec<String> = answers
        .iter()
        .filter_map(|a| check_exact(a, &log).err())
        .collect();
    if let Some(first) = wrong.first() {
        // The nodes' logs and caches stay for a look at what they served.
        let kept = dir.keep();
        let logs: Vec<String> = nodes
            .iter()
            .map(|n| format!("--- {}:\n{}", n.name, tail(&n.log)))
            .collect();
        panic!(
            "{} of {} answers not exact; the first: {first}\n(the drill's directory is kept: {})\n{}",
            wrong.len(),
            answers.len(),
            kept.display(),
            logs.join("\n")
        );
    }
    let lost: usize = checked
        .iter()
        .map(|c| c.offsets.as_ref().map_or(0, |o| o.lost.len()))
        .sum();
    let doubled: usize = checked.iter().map(|c| c.store.duplicates.len()).sum();
    let with_hits = answers
        .iter()
        .filter(|a| a.reply["result"].as_array().is_some_and(|r| r.len() == K))
        .count();
    let failed_over = log_count(&nodes[0].log, "a fan-out leg failed");
    println!(
        "drill: {} events over {PARTITIONS} partitions and {SHARDS} shards, {} answers checked exact ({with_hits} with {K} hits), {failed_over} legs of q0 asked again of another node, {live} live ids, lost {lost}, doubled {doubled}, took {:.1} s",
        events.len(),
        answers.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(with_hits > 0, "no answer had {K} hits");
}
