//! The benchmark suite's workloads and report against a real broker and
//! both services (in process): the 10k sample published, every workload run
//! briefly, and the report written as JSON, Markdown and HTML that say what
//! was measured. Graphs are off in this cluster, so every answer is an exact
//! scan: recall@10 is 1.0 at every `ef`.

use std::sync::atomic::AtomicBool;

use eddy_loadtest::driver::Load;
use eddy_loadtest::encode::Format;
use eddy_loadtest::produce::{self, ProduceArgs};
use eddy_loadtest::suite::{self, Host, PeerResults, Plan, SuiteReport, Target};

use crate::cluster::Cluster;

const COLLECTION: &str = "st";
const SAMPLE_POINTS: u64 = 10_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_runs_every_workload_and_writes_its_report() {
    let _serial = crate::SERIAL.lock().await;
    let cluster = Cluster::start(&[COLLECTION]).await;
    let mut args = ProduceArgs::new(&cluster.tansu.bootstrap(), COLLECTION);
    args.format = Format::Protobuf;
    args.rate = 1000.0;
    args.kafka = vec![
        ("request.timeout.ms".into(), "120000".into()),
        ("message.timeout.ms".into(), "120000".into()),
    ];
    produce::produce(&args, &AtomicBool::new(false))
        .await
        .expect("the sample is published");
    cluster.wait_count(COLLECTION, SAMPLE_POINTS).await;

    let target = Target {
        http: cluster.http(),
        flight: cluster.flight(),
        brokers: cluster.tansu.bootstrap(),
        topic: COLLECTION.into(),
        collection: COLLECTION.into(),
        declared_format: Format::Protobuf,
        processes: cluster
            .tansu
            .pid()
            .map(|pid| ("broker".to_owned(), pid))
            .into_iter()
            .collect(),
    };
    let plan = Plan {
        dataset: eddy_loadtest::dataset::SAMPLE_DIR.into(),
        queries: Some(50),
        duration: 0.3,
        mixed_duration: 0.5,
        rounds: 2,
        ef: vec![16, 64],
        workers: 2,
        write_rates: vec![0.0, 200.0],
        // The writer publishes Arrow batches, the probes protobuf events.
        write_batch: 10,
        batch: 10,
        exchange_batches: 3,
        target_recall: 0.95,
    };
    let settles = std::sync::atomic::AtomicUsize::new(0);
    let settle = async || {
        settles.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        cluster.wait_settled(COLLECTION).await
    };
    let runs = suite::run_workloads(&target, &plan, settle)
        .await
        .expect("the workloads run");

    // Four sweeps (HTTP, DoExchange one batch per exchange and three
    // streamed through one, HTTP with f32 walks), alternated over two
    // rounds, exact.
    assert_eq!(runs.sweeps.len(), 4);
    assert_eq!(
        runs.sweeps[2].curve.name,
        "eddy DoExchange ×10, 3 per exchange"
    );
    assert_eq!(runs.sweeps[2].curve.batch, 30);
    assert_eq!(runs.sweeps[3].quantization.as_deref(), Some("none"));
    assert_eq!(runs.sweeps[3].curve.name, "eddy HTTP, quantization none");
    assert!(runs.sweeps[3]
        .phases
        .iter()
        .all(|p| p.mode.ends_with("quantization=none") && p.errors == 0));
    for s in &runs.sweeps {
        assert_eq!(s.curve.rounds.len(), 2, "{}", s.curve.name);
        assert_eq!(s.phases.len(), 4, "{}", s.curve.name);
        let efs: Vec<usize> = s.curve.points.iter().map(|p| p.ef).collect();
        assert_eq!(efs, [16, 64]);
        for p in &s.curve.points {
            assert_eq!(p.recall10, 1.0, "{} ef {}", s.curve.name, p.ef);
            assert!(p.qps > 0.0);
        }
    }
    assert_eq!(runs.sweeps[1].curve.batch, 10);
    assert_eq!(runs.chosen_ef, Some(16));
    let answered = |p: &eddy_loadtest::driver::PhaseResult| p.answered > 0 && p.errors == 0;
    assert!(runs.exact.iter().all(answered) && runs.exact.len() == 1);
    assert!(runs.do_get.iter().all(answered) && runs.do_get.len() == 1);
    // A saturating closed loop, then open loops at 50/70/90 % of it.
    let fractions: Vec<Option<f64>> = runs
        .load
        .iter()
        .filter_map(|p| match p.load {
            Load::Open { fraction, .. } => Some(fraction),
            Load::Closed { .. } => None,
        })
        .collect();
    assert_eq!(fractions, [Some(0.5), Some(0.7), Some(0.9)]);
    assert!(matches!(runs.load[0].load, Load::Closed { workers: 2 }));
    // The sample has no filtered ground truth: said, not silently skipped.
    assert!(runs.filtered.is_empty());
    assert!(runs.notes.iter().any(|n| n.contains("filtered")));
    // Mixed: probes alone, then with a writer; every probe seen.
    assert_eq!(runs.mixed.len(), 2);
    for m in &runs.mixed {
        let f = m.report.freshness.as_ref().expect("probes ran");
        // Probes at 10/s over the whole mixed phase, not only its first
        // `duration` seconds.
        let probes = (plan.mixed_duration * 10.0).ceil() as u64;
        assert_eq!(
            (f.visible, f.timed_out),
            (probes, 0),
            "at {}/s",
            m.write_rate
        );
        assert_eq!(
            f.timeline.len() as u64,
            probes,
            "one point per visible probe"
        );
        assert!(m.ratio_to_read_only.is_some());
        assert!(
            m.read_only_qps.is_some_and(|q| q > 0.0),
            "a read-only reference beside each mixed phase"
        );
        // ... run on the settled collection: the previous phase's probes
        // sealed into segments first.
        let settled = m.settled.expect("settled before the reference");
        assert!(settled.segments >= 1, "{settled:?}");
    }
    assert_eq!(
        settles.load(std::sync::atomic::Ordering::Relaxed),
        plan.write_rates.len(),
        "one settle before each mixed phase's reference"
    );
    assert!(
        !runs.notes.iter().any(|n| n.contains("mixed")),
        "{:?}",
        runs.notes
    );
    for m in &runs.mixed {
        let broker = m.cpu_cores.iter().find(|(n, _)| n == "broker");
        assert!(broker.is_some_and(|(_, c)| *c >= 0.0), "{:?}", m.cpu_cores);
    }
    assert!(runs.mixed[0].report.writer.is_none());
    assert!(runs.mixed[1]
        .report
        .writer
        .as_ref()
        .is_some_and(|w| w.events > 0));
    // Every event the writer and the probes published was indexed: none
    // went to the dead-letter topic (an Arrow batch labelled as another
    // format would).
    let rejected = cluster.rejected_once_sealed(COLLECTION).await;
    assert!(
        rejected.iter().all(|(_, n)| *n == 0.0),
        "events rejected: {rejected:?}"
    );
    let scroll = runs.scroll.expect("scrolled");
    assert_eq!(scroll.points, SAMPLE_POINTS);
    assert_eq!(scroll.pages, SAMPLE_POINTS.div_ceil(1000));

    let report = SuiteReport {
        command: "test".into(),
        dataset: "debian-minilm-10k".into(),
        points: SAMPLE_POINTS as usize,
        dim: 384,
        queries: 50,
        duration_s: plan.duration,
        mixed_duration_s: plan.mixed_duration,
        rounds: plan.rounds,
        target_recall: plan.target_recall,
        workers: plan.workers,
        write_batch: plan.write_batch,
        host: Host::default(),
        ingest: None,
        eddy: runs,
        peak_rss: (None, None),
        cold_start: None,
        peers: PeerResults::default(),
        elapsed_s: 1.0,
    };
    let out = tempfile::tempdir().expect("tempdir");
    suite::write_report(&report, out.path()).expect("the report is written");
    let md = std::fs::read_to_string(out.path().join("report.md")).expect("report.md");
    for heading in [
        "## Summary",
        "## Throughput against recall",
        "## Latency under load (HTTP)",
        "## Mixed read/write and freshness",
        "## Scroll export and cold start",
    ] {
        assert!(md.contains(heading), "{heading} missing:\n{md}");
    }
    assert!(md.contains("| 16 | 1.0000 |"), "sweep rows:\n{md}");
    assert!(md.contains("eddy DoExchange ×10 (10 queries per request, 2 rounds)"));
    assert!(md.contains("10000 points in"));
    assert!(
        md.contains("on the settled collection") && !md.contains("not settled"),
        "the mixed rows name their settled reference:\n{md}"
    );
    let html = std::fs::read_to_string(out.path().join("report.html")).expect("report.html");
    // Three curve charts, latency against load, freshness against writes
    // and over time (one line per write rate).
    assert_eq!(html.matches("<svg").count(), 6);
    assert!(html.matches("<polyline").count() >= 2 + 3 + 2 + 2);
    assert!(html.contains("Freshness over time"));
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.path().join("report.json")).expect("report.json"),
    )
    .expect("report.json parses");
    assert_eq!(json["eddy"]["sweeps"].as_array().map(Vec::len), Some(4));
    cluster.shutdown().await;
}
