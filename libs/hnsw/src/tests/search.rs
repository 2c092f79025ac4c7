//! Graph search: recall, parallel and deterministic builds, filters, deletes, duplicates, SQ8 traversal, tiny inputs.

use eddy_model::Metric;

use super::*;
use crate::*;

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
