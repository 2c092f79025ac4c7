//! Builds that start from an earlier graph (a merge of a segment whose rows
//! mostly survive): recall as a fresh build's, links kept where nothing was
//! lost, and priors that do not fit are ignored.

use eddy_model::Metric;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::*;

const DIM: usize = 16;

/// An earlier set of rows with its graph, then the rows that survive a
/// `deleted` share of deletes followed by `added` new rows, and the row map.
struct Merge {
    earlier: Graph,
    data: Vec<f32>,
    rows: Vec<Option<u32>>,
}

fn merge(n: usize, deleted: f64, added: usize, seed: u64) -> Merge {
    let old = clustered(n, DIM, seed, true);
    let earlier = graph_1t(&old, DIM, Metric::Dot);
    let mut rng = ChaCha8Rng::seed_from_u64(seed + 100);
    let mut data = Vec::new();
    let mut rows = Vec::with_capacity(n);
    for v in old.chunks_exact(DIM) {
        if rng.random::<f64>() < deleted {
            rows.push(None);
        } else {
            rows.push(Some((data.len() / DIM) as u32));
            data.extend_from_slice(v);
        }
    }
    data.extend(clustered(added, DIM, seed + 1, true));
    Merge {
        earlier,
        data,
        rows,
    }
}

/// 60 queries drawn like the first `n` rows of seed `seed` (the same
/// clusters), none of them a row.
fn queries(n: usize, seed: u64) -> Vec<f32> {
    clustered(n + 60, DIM, seed, true).split_off(n * DIM)
}

fn from_prior(m: &Merge, params: &HnswParams) -> Graph {
    let prior = Prior {
        view: m.earlier.view(),
        rows: &m.rows,
    };
    one_thread(|| {
        Graph::build_from_prior(
            &Vectors::new(&m.data, DIM, Metric::Dot),
            params,
            &BuildOptions::default(),
            None,
            &prior,
        )
    })
    .expect("build")
}

#[test]
fn a_build_from_a_prior_finds_what_a_fresh_build_finds() {
    for (deleted, added) in [(0.5, 1000), (0.9, 300), (0.1, 0)] {
        let m = merge(3000, deleted, added, 11);
        let queries = queries(3000, 11);
        let g = from_prior(&m, &HnswParams::default());
        let fresh = graph_1t(&m.data, DIM, Metric::Dot);
        assert_eq!(g.len(), m.data.len() / DIM);
        assert_eq!(unreachable_count(&g.view()), 0, "deleted {deleted}");
        for ef in [16, 64] {
            let r = mean_recall(&g.view(), &m.data, &queries, DIM, Metric::Dot, ef);
            let f = mean_recall(&fresh.view(), &m.data, &queries, DIM, Metric::Dot, ef);
            assert!(
                r >= f - 0.02,
                "deleted {deleted}, ef {ef}: from the prior {r}, fresh {f}"
            );
            if ef == 64 {
                assert!(r > 0.95, "deleted {deleted}: recall {r}");
            }
        }
    }
}

/// The links among surviving rows are reused, not found again: of the
/// earlier level-0 links between survivors, most are in the graph built
/// from the prior, far more than a fresh build finds again.
#[test]
fn the_links_among_survivors_are_kept() {
    // The earlier graph drew other levels and searched a narrower beam,
    // so a fresh build links differently.
    let mut m = merge(2000, 0.2, 200, 21);
    let other = HnswParams {
        ef_construction: 12,
        seed: 7,
        ..HnswParams::default()
    };
    let old = clustered(2000, DIM, 21, true);
    m.earlier =
        one_thread(|| Graph::build(&Vectors::new(&old, DIM, Metric::Dot), &other)).expect("build");
    let share = |g: &Graph| {
        let (earlier, view) = (m.earlier.view(), g.view());
        let (mut found, mut total) = (0usize, 0usize);
        for (o, new) in m.rows.iter().enumerate() {
            let Some(r) = *new else { continue };
            let now = view.neighbors(r);
            for x in earlier
                .neighbors(o as u32)
                .iter()
                .filter_map(|&x| m.rows[x as usize])
            {
                total += 1;
                found += usize::from(now.contains(&x));
            }
        }
        found as f64 / total as f64
    };
    let kept = share(&from_prior(&m, &HnswParams::default()));
    let again = share(&graph_1t(&m.data, DIM, Metric::Dot));
    assert!(
        kept > 0.8 && kept > again + 0.2,
        "kept {kept}, a fresh build {again}"
    );
}

/// A prior built with another `M`, or whose rows all went, leaves the
/// build as a fresh one (one thread: the same graph).
#[test]
fn a_prior_that_does_not_fit_is_ignored() {
    let m = merge(1200, 0.3, 100, 31);
    let fresh = graph_1t(&m.data, DIM, Metric::Dot);
    let other_m = HnswParams {
        m: 8,
        ..HnswParams::default()
    };
    let earlier_m8 = one_thread(|| {
        Graph::build(
            &Vectors::new(&clustered(1200, DIM, 31, true), DIM, Metric::Dot),
            &other_m,
        )
    })
    .expect("build");
    let ignored = Merge {
        earlier: earlier_m8,
        data: m.data.clone(),
        rows: m.rows.clone(),
    };
    assert_eq!(from_prior(&ignored, &HnswParams::default()), fresh);
    let none_left = Merge {
        earlier: m.earlier.clone(),
        data: m.data.clone(),
        rows: vec![None; m.rows.len()],
    };
    assert_eq!(from_prior(&none_left, &HnswParams::default()), fresh);
}
