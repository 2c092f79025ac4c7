//! Unit tests: recall against brute force, determinism, filters/deletes,
//! duplicates, SQ8 traversal, format round trip and corruption.

use eddy_format::FormatError;
use eddy_model::Metric;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::*;

pub(crate) fn clustered(n: usize, dim: usize, seed: u64, normalise: bool) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let centres: Vec<f32> = (0..10 * dim).map(|_| rng.random_range(-1.0..1.0)).collect();
    let mut v = Vec::with_capacity(n * dim);
    for _ in 0..n {
        let c = rng.random_range(0..10);
        let start = v.len();
        for j in 0..dim {
            v.push(centres[c * dim + j] + 0.3 * rng.random_range(-1.0f32..1.0));
        }
        if normalise {
            eddy_kernels::normalize(&mut v[start..]);
        }
    }
    v
}

fn brute(
    data: &[f32],
    dim: usize,
    metric: Metric,
    q: &[f32],
    k: usize,
    ok: impl Fn(u32) -> bool,
) -> Vec<(u32, f32)> {
    let mut all: Vec<(u32, f32)> = data
        .chunks_exact(dim)
        .enumerate()
        .filter(|(i, _)| ok(*i as u32))
        .map(|(i, v)| (i as u32, eddy_quant::exact_score(metric, q, v)))
        .collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    all.truncate(k);
    all
}

/// Tie-aware recall: a hit when the returned score reaches the k-th true score.
fn recall(got: &[(u32, f32)], truth: &[(u32, f32)]) -> f64 {
    let Some(kth) = truth.last().map(|t| t.1) else {
        return 1.0;
    };
    let hits = got
        .iter()
        .take(truth.len())
        .filter(|g| g.1 >= kth - 1e-5)
        .count();
    hits as f64 / truth.len() as f64
}

fn one_thread<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool")
        .install(f)
}

/// A graph over `data` built on one thread with default parameters.
fn graph_1t(data: &[f32], dim: usize, metric: Metric) -> Graph {
    one_thread(|| Graph::build(&Vectors::new(data, dim, metric), &HnswParams::default()))
        .expect("build")
}

fn mean_recall(
    g: &GraphView<'_>,
    data: &[f32],
    queries: &[f32],
    dim: usize,
    metric: Metric,
    ef: usize,
) -> f64 {
    let mut ctx = SearchContext::default();
    let mut total = 0.0;
    let nq = queries.len() / dim;
    let vectors = Vectors::new(data, dim, metric);
    for q in queries.chunks_exact(dim) {
        let got = search(g, &vectors, &Query::new(10, ef), q, &mut ctx);
        let truth = brute(data, dim, metric, q, 10, |_| true);
        total += recall(&got, &truth);
    }
    total / nq as f64
}

#[test]
fn recall_dot_and_l2() {
    let dim = 16;
    for metric in [Metric::Dot, Metric::L2] {
        let data = clustered(1500, dim, 1, metric == Metric::Dot);
        let queries = clustered(40, dim, 2, metric == Metric::Dot);
        let g = graph_1t(&data, dim, metric);
        assert_eq!(g.len(), 1500);
        let r = mean_recall(&g.view(), &data, &queries, dim, metric, 64);
        assert!(r > 0.95, "{metric:?} recall {r}");
        assert_eq!(unreachable_count(&g.view()), 0);
    }
}

#[test]
fn parallel_build_has_recall() {
    let dim = 16;
    let data = clustered(1500, dim, 3, true);
    let queries = clustered(30, dim, 4, true);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .expect("pool");
    let vectors = Vectors::new(&data, dim, Metric::Dot);
    let g = pool
        .install(|| Graph::build(&vectors, &HnswParams::default()))
        .expect("build");
    let r = mean_recall(&g.view(), &data, &queries, dim, Metric::Dot, 64);
    assert!(r > 0.95, "recall {r}");
}

/// A build handed the caller's SQ8 codes makes the same graph as one that
/// trains the same codes itself, and codes of other data are refused.
#[test]
fn build_with_given_sq8_codes_matches_its_own_training() {
    use eddy_quant::sq8::{Sq8Config, Sq8Quantizer};
    let dim = 16;
    let data = clustered(800, dim, 6, true);
    let q = Sq8Quantizer::train(&data, dim, &Sq8Config::default()).expect("train");
    let codes = q.encode_all(&data).expect("encode");
    let view = Sq8View::from_codes(&codes);
    let (p, o) = (HnswParams::default(), BuildOptions::default());
    let vectors = Vectors::new(&data, dim, Metric::Dot);
    let own = one_thread(|| Graph::build_with(&vectors, &p, &o)).expect("build");
    let given =
        one_thread(|| Graph::build_with_sq8(&vectors, &p, &o, &view)).expect("build with codes");
    assert_eq!(own, given);
    let half = Vectors::new(&data[..400 * dim], dim, Metric::Dot);
    let err =
        Graph::build_with_sq8(&half, &p, &o, &view).expect_err("codes of 800 rows for 400 vectors");
    assert!(err.to_string().contains("800 rows"), "{err}");
}

#[test]
fn single_thread_build_is_deterministic() {
    let dim = 8;
    let data = clustered(600, dim, 5, true);
    let p = HnswParams {
        m: 8,
        ef_construction: 40,
        seed: 9,
    };
    let vectors = Vectors::new(&data, dim, Metric::Dot);
    let a = one_thread(|| Graph::build(&vectors, &p)).expect("build");
    let b = one_thread(|| Graph::build(&vectors, &p)).expect("build");
    assert_eq!(a, b);
    let c = one_thread(|| Graph::build(&vectors, &HnswParams { seed: 10, ..p })).expect("build");
    assert_ne!(a, c);
}

#[test]
fn filter_restricts_results_not_walk() {
    let dim = 16;
    let data = clustered(1200, dim, 6, true);
    let queries = clustered(30, dim, 7, true);
    let g = graph_1t(&data, dim, Metric::Dot);
    let vectors = Vectors::new(&data, dim, Metric::Dot);
    let v = g.view();
    let mut ctx = SearchContext::default();
    // Keep one row in 4: rejected rows must still route the walk.
    let ok = |id: u32| id.is_multiple_of(4);
    let mut total = 0.0;
    for q in queries.chunks_exact(dim) {
        let got = search(
            &v,
            &vectors,
            &Query::new(10, 64).with_accept(&ok),
            q,
            &mut ctx,
        );
        assert_eq!(got.len(), 10);
        assert!(got.iter().all(|&(id, _)| ok(id)));
        assert!(got.windows(2).all(|w| w[0].1 >= w[1].1), "best first");
        total += recall(&got, &brute(&data, dim, Metric::Dot, q, 10, ok));
    }
    assert!(total / 30.0 > 0.9, "filtered recall {}", total / 30.0);
}

#[test]
fn deleted_rows_are_never_returned() {
    let dim = 8;
    let data = clustered(800, dim, 8, false);
    let g = graph_1t(&data, dim, Metric::L2);
    let vectors = Vectors::new(&data, dim, Metric::L2);
    let v = g.view();
    let mut ctx = SearchContext::default();
    for (qi, q) in data.chunks_exact(dim).take(50).enumerate() {
        // Delete the query row itself and every 3rd row.
        let alive = |id: u32| id as usize != qi && !id.is_multiple_of(3);
        let got = search(
            &v,
            &vectors,
            &Query::new(5, 32).with_accept(&alive),
            q,
            &mut ctx,
        );
        assert!(got.iter().all(|&(id, _)| alive(id)));
        assert_eq!(got.len(), 5);
    }
    // Everything deleted: nothing returned.
    let none = |_: u32| false;
    let got = search(
        &v,
        &vectors,
        &Query::new(5, 32).with_accept(&none),
        &data[..dim],
        &mut ctx,
    );
    assert!(got.is_empty());
}

#[test]
fn exact_duplicates_are_folded_and_returned() {
    let dim = 8;
    let mut data = clustered(400, dim, 11, true);
    // 40 copies of row 7 and 3 copies of row 100, appended.
    let r7 = data[7 * dim..8 * dim].to_vec();
    let r100 = data[100 * dim..101 * dim].to_vec();
    for _ in 0..40 {
        data.extend_from_slice(&r7);
    }
    for _ in 0..3 {
        data.extend_from_slice(&r100);
    }
    let n = data.len() / dim;
    let g = graph_1t(&data, dim, Metric::Dot);
    let vectors = Vectors::new(&data, dim, Metric::Dot);
    let v = g.view();
    assert_eq!(v.duplicate_count(), 43);
    assert_eq!(v.duplicates(7).len(), 40);
    assert_eq!(unreachable_count(&v), 0);
    let mut ctx = SearchContext::default();
    let got = search(&v, &vectors, &Query::new(41, 64), &r7, &mut ctx);
    let mut ids: Vec<u32> = got.iter().map(|g| g.0).collect();
    ids.sort_unstable();
    let mut want: Vec<u32> = std::iter::once(7).chain(400..440).collect();
    want.sort_unstable();
    assert_eq!(ids, want);
    // The representative deleted: its duplicates still come back.
    let alive = |id: u32| id != 7;
    let got = search(
        &v,
        &vectors,
        &Query::new(3, 64).with_accept(&alive),
        &r7,
        &mut ctx,
    );
    assert!(got.iter().all(|g| (400..440).contains(&g.0)), "{got:?}");
    // Dedup off: still a valid graph.
    let opts = BuildOptions {
        dedup: false,
        ..BuildOptions::default()
    };
    let g2 = one_thread(|| {
        Graph::build_with(
            &Vectors::new(&data, dim, Metric::Dot),
            &HnswParams::default(),
            &opts,
        )
    })
    .expect("build");
    assert_eq!(g2.view().duplicate_count(), 0);
    assert_eq!(g2.len(), n);
}

#[test]
fn sq8_traversal_with_rescore() {
    use eddy_quant::sq8::{Sq8Config, Sq8Quantizer};
    let dim = 32;
    let data = clustered(1500, dim, 12, true);
    let queries = clustered(30, dim, 13, true);
    let g = graph_1t(&data, dim, Metric::Dot);
    let vectors = Vectors::new(&data, dim, Metric::Dot);
    let q = Sq8Quantizer::train(&data, dim, &Sq8Config::default()).expect("train");
    let codes = q.encode_all(&data).expect("encode");
    // Borrowed view over plain bytes, as from a file.
    let raw = codes.codes().to_vec();
    let corr = codes.corrections().to_vec();
    let sv = Sq8View::new(&q, &raw, &corr).expect("view");
    assert!(Sq8View::new(&q, &raw[1..], &corr).is_err());
    let mut ctx = SearchContext::default();
    let mut total = 0.0;
    for qv in queries.chunks_exact(dim) {
        let got = search_sq8(
            &g.view(),
            &vectors,
            &sv,
            &Query::new(10, 128).with_rescore(128),
            qv,
            &mut ctx,
        );
        for &(id, s) in &got {
            let exact = eddy_kernels::dot(qv, &data[id as usize * dim..(id as usize + 1) * dim]);
            assert!((s - exact).abs() < 1e-6, "scores are exact after rescoring");
        }
        total += recall(&got, &brute(&data, dim, Metric::Dot, qv, 10, |_| true));
    }
    assert!(total / 30.0 > 0.93, "sq8 recall {}", total / 30.0);
}

#[test]
fn empty_and_tiny_inputs() {
    let g =
        Graph::build(&Vectors::new(&[], 4, Metric::Dot), &HnswParams::default()).expect("empty");
    assert!(g.is_empty());
    let mut ctx = SearchContext::default();
    assert!(search(
        &g.view(),
        &Vectors::new(&[], 4, Metric::Dot),
        &Query::new(3, 10),
        &[0.0; 4],
        &mut ctx,
    )
    .is_empty());
    assert_eq!(unreachable_count(&g.view()), 0);
    let one = [1.0, 0.0, 0.0, 0.0];
    let g = Graph::build(&Vectors::new(&one, 4, Metric::L2), &HnswParams::default()).expect("one");
    let r = search(
        &g.view(),
        &Vectors::new(&one, 4, Metric::L2),
        &Query::new(3, 10),
        &one,
        &mut ctx,
    );
    assert_eq!(r, vec![(0, 0.0)]);
    assert!(matches!(
        Graph::build(
            &Vectors::new(&[1.0; 7], 4, Metric::Dot),
            &HnswParams::default()
        ),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        Graph::build(
            &Vectors::new(&one, 4, Metric::Dot),
            &HnswParams {
                m: 1,
                ..HnswParams::default()
            }
        ),
        Err(Error::InvalidInput(_))
    ));
}

fn bytes_of(g: &Graph) -> Vec<u8> {
    let mut b = Vec::new();
    g.write_to(&mut b).expect("write");
    b
}

#[test]
fn format_round_trip() {
    let dim = 8;
    let data = clustered(700, dim, 14, true);
    let g = graph_1t(&data, dim, Metric::Dot);
    let vectors = Vectors::new(&data, dim, Metric::Dot);
    let bytes = bytes_of(&g);
    assert_eq!(&bytes[..8], &MAGIC);
    let buf = AlignedBytes::from_slice(&bytes);
    let v = GraphView::from_bytes(buf.as_bytes()).expect("open");
    assert_eq!(v.len(), g.len());
    assert_eq!(v.dim(), dim);
    assert_eq!(v.m(), 16);
    assert_eq!(v.space(), Metric::Dot);
    assert_eq!(v.memory_bytes(), g.view().memory_bytes());
    let mut c1 = SearchContext::default();
    let mut c2 = SearchContext::default();
    for q in data.chunks_exact(dim).take(20) {
        let a = search(&g.view(), &vectors, &Query::new(10, 32), q, &mut c1);
        let b = search(&v, &vectors, &Query::new(10, 32), q, &mut c2);
        assert_eq!(a, b);
    }
    // Sections are 64-byte aligned.
    for i in 0..5 {
        let off = u64::from_le_bytes(bytes[48 + 16 * i..56 + 16 * i].try_into().expect("8"));
        assert_eq!(off % 64, 0);
    }
}

#[test]
fn format_rejects_corruption() {
    let dim = 4;
    let data = clustered(200, dim, 15, false);
    let g = graph_1t(&data, dim, Metric::L2);
    let bytes = bytes_of(&g);
    let open = |b: &[u8]| {
        let buf = AlignedBytes::from_slice(b);
        GraphView::from_bytes(buf.as_bytes()).map(|_| ())
    };
    assert_eq!(open(&bytes), Ok(()));
    let format_err = |b: &[u8]| match open(b) {
        Err(Error::Format(e)) => e,
        other => panic!("expected a format error, got {other:?}"),
    };
    // Bad magic.
    let mut b = bytes.clone();
    b[0] = b'X';
    assert!(matches!(format_err(&b), FormatError::BadMagic { .. }));
    // Future version.
    let mut b = bytes.clone();
    b[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    assert_eq!(
        format_err(&b).to_string(),
        format!(
            "HNSW graph written by a newer eddy: format version {}, this build reads 1..={FORMAT_VERSION}",
            FORMAT_VERSION + 1
        )
    );
    // Header field flipped.
    let mut b = bytes.clone();
    b[20] ^= 1;
    assert!(matches!(
        format_err(&b),
        FormatError::Checksum {
            what: "HNSW graph header",
            ..
        }
    ));
    // Body byte flipped.
    let mut b = bytes.clone();
    let last = b.len() - 5;
    b[last] ^= 0x40;
    assert!(matches!(
        format_err(&b),
        FormatError::Checksum {
            what: "HNSW graph body",
            ..
        }
    ));
    let buf = AlignedBytes::from_slice(&b);
    assert!(GraphView::from_bytes_unverified(buf.as_bytes()).is_ok());
    // Truncated.
    for len in [bytes.len() - 64, 100, 0] {
        assert!(
            matches!(format_err(&bytes[..len]), FormatError::Truncated { .. }),
            "{len}"
        );
    }
    // Misaligned start.
    let mut shifted = vec![0u8];
    shifted.extend_from_slice(&bytes);
    let buf = AlignedBytes::from_slice(&shifted);
    assert_eq!(
        GraphView::from_bytes(&buf.as_bytes()[1..]).map(|_| ()),
        Err(Error::Misaligned)
    );
}

#[test]
fn exact_scan_matches_brute_force() {
    let dim = 8;
    let data = clustered(300, dim, 16, true);
    let rows: Vec<u32> = (0..300u32).filter(|i| i.is_multiple_of(7)).collect();
    let q = &data[..dim];
    let vectors = Vectors::new(&data, dim, Metric::Dot);
    let got = exact_scan(&vectors, q, 5, ScanRows::Listed(&rows));
    let want = brute(&data, dim, Metric::Dot, q, 5, |id| id.is_multiple_of(7));
    assert_eq!(got, want);
}

#[test]
fn sq8_scorer_estimates_the_dot_with_the_decoded_rows() {
    use eddy_quant::sq8::{Sq8Config, Sq8Quantizer};
    let dim = 40;
    let data = clustered(200, dim, 17, true);
    let q = Sq8Quantizer::train(&data, dim, &Sq8Config::default()).expect("train");
    let codes = q.encode_all(&data).expect("encode");
    let view = Sq8View::from_codes(&codes);
    let query = &data[3 * dim..4 * dim];
    let (mut qcode, mut qi7) = (Vec::new(), Vec::new());
    let scorer = crate::sq8::Sq8Scorer::new(&view, Metric::Dot, query, &mut qcode, &mut qi7);
    use crate::scorer::Scorer;
    // The query is kept at 7 bits: error per coordinate ≤ half a step (max|q| / 128).
    let half_step = query.iter().fold(0.0f32, |m, &x| m.max(x.abs())) / 128.0;
    let mut worst = 0.0f32;
    for row in 0..200usize {
        let code = &codes.codes()[row * dim..(row + 1) * dim];
        let decoded: Vec<f32> = code
            .iter()
            .map(|&c| q.lo() + q.delta() * f32::from(c))
            .collect();
        let exact: f32 = query.iter().zip(&decoded).map(|(a, b)| a * b).sum();
        let bound: f32 = decoded.iter().map(|x| x.abs() * half_step).sum::<f32>() + 1e-4;
        let err = (scorer.score_one(row as u32) - exact).abs();
        assert!(err <= bound, "row {row}: error {err} > bound {bound}");
        worst = worst.max(err / bound);
    }
    // The bound is loose, but the estimate must not be trivially exact either
    // (that would mean the query was not quantized).
    assert!(worst > 0.0);
}

#[test]
fn sq8_beam_fidelity_separates_coarse_codes() {
    // Well-spread unit vectors: SQ8 keeps the neighbours.
    let dim = 32;
    let spread = clustered(2000, dim, 20, true);
    let good = sq8_beam_fidelity(&Vectors::new(&spread, dim, Metric::Dot), 7).expect("fidelity");
    assert!(good >= SQ8_BEAM_MIN_FIDELITY, "spread data: {good}");
    // Rows that differ from one centre by far less than one SQ8 step: the codes
    // cannot rank them, so the build must keep its beam on f32.
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let centre: Vec<f32> = (0..dim).map(|_| rng.random_range(-1.0..1.0f32)).collect();
    let tight: Vec<f32> = (0..2000)
        .flat_map(|_| {
            centre
                .iter()
                .map(|&c| c + rng.random_range(-1e-4..1e-4f32))
                .collect::<Vec<_>>()
        })
        .collect();
    let poor = sq8_beam_fidelity(&Vectors::new(&tight, dim, Metric::Dot), 7).expect("fidelity");
    assert!(poor < SQ8_BEAM_MIN_FIDELITY, "tight data: {poor}");
    assert!((0.0..=1.0).contains(&poor) && (0.0..=1.0).contains(&good));
}
