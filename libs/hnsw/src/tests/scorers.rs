//! The exact scan and the SQ8 scorers.

use eddy_model::Metric;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::*;

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

/// `n` rows that differ from one random centre (drawn from `seed`) by far
/// less than one SQ8 step: codes cannot rank them.
fn tight_rows(n: usize, dim: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let centre: Vec<f32> = (0..dim).map(|_| rng.random_range(-1.0..1.0f32)).collect();
    (0..n)
        .flat_map(|_| {
            centre
                .iter()
                .map(|&c| c + rng.random_range(-1e-4..1e-4f32))
                .collect::<Vec<_>>()
        })
        .collect()
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
    let tight = tight_rows(2000, dim, 3);
    let poor = sq8_beam_fidelity(&Vectors::new(&tight, dim, Metric::Dot), 7).expect("fidelity");
    assert!(poor < SQ8_BEAM_MIN_FIDELITY, "tight data: {poor}");
    assert!((0.0..=1.0).contains(&poor) && (0.0..=1.0).contains(&good));
}

/// The beam's fidelity threshold decides between the SQ8 and the f32 beam:
/// a threshold no codes reach builds the f32 beam's graph, and 0 (no check)
/// keeps the SQ8 beam on codes that fail the default threshold.
#[test]
fn the_beam_fidelity_threshold_chooses_the_beam() {
    let dim = 32;
    let tight = tight_rows(600, dim, 5);
    let spread = clustered(600, dim, 6, true);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    let params = crate::HnswParams {
        m: 8,
        ef_construction: 32,
        ..crate::HnswParams::default()
    };
    let build = |data: &[f32], sq8_beam: bool, min: f64| {
        let options = crate::BuildOptions {
            sq8_beam,
            sq8_beam_min_fidelity: min,
            ..crate::BuildOptions::default()
        };
        let vectors = Vectors::new(data, dim, Metric::Dot);
        let graph = pool
            .install(|| crate::Graph::build_with(&vectors, &params, &options))
            .expect("build");
        let mut bytes = Vec::new();
        graph.write_to(&mut bytes).expect("write");
        bytes
    };
    let f32_beam = build(&spread, false, SQ8_BEAM_MIN_FIDELITY);
    assert_eq!(build(&spread, true, 1.5), f32_beam, "no codes reach 1.5");
    assert_ne!(
        build(&spread, true, SQ8_BEAM_MIN_FIDELITY),
        f32_beam,
        "spread data keeps the SQ8 beam"
    );
    let f32_beam = build(&tight, false, SQ8_BEAM_MIN_FIDELITY);
    assert_eq!(
        build(&tight, true, SQ8_BEAM_MIN_FIDELITY),
        f32_beam,
        "tight data fails the check"
    );
    assert_ne!(
        build(&tight, true, 0.0),
        f32_beam,
        "unchecked codes are used"
    );
}

/// The query weights' rounding is `round_ties_even` over their whole range
/// (and past it), ties included.
#[test]
fn small_values_round_to_nearest_ties_to_even() {
    let mut x = -200.0f32;
    while x <= 200.0 {
        assert_eq!(crate::sq8::round_small(x), x.round_ties_even(), "{x}");
        x += 0.125;
    }
    for x in [
        0.49999997f32,
        -0.49999997,
        1e-30,
        -1e-30,
        126.5,
        -127.5,
        63.999996,
    ] {
        assert_eq!(crate::sq8::round_small(x), x.round_ties_even(), "{x}");
    }
}
