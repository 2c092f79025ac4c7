//! Crate-level tests: every quantizer finds the true neighbours on seeded,
//! clustered synthetic data once rescored, and rejects bad input.

use eddy_model::Metric;
use eddy_quant::binary::{BinaryConfig, BinaryEncoding, BinaryQuantizer, QueryEncoding};
use eddy_quant::pq::{PqConfig, PqQuantizer};
use eddy_quant::rabitq::{RabitqConfig, RabitqQuantizer};
use eddy_quant::sq8::{Sq8Config, Sq8Quantizer};
use eddy_quant::{exact_score, search_with_rescore, top_k, CodeScorer, Error};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const DIM: usize = 64;
const ROWS: usize = 2000;
const K: usize = 10;

/// Clustered unit vectors (like embeddings) and queries near them.
fn dataset(seed: u64) -> (Vec<f32>, Vec<Vec<f32>>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let centres: Vec<Vec<f32>> = (0..20)
        .map(|_| (0..DIM).map(|_| rng.random_range(-1.0f32..1.0)).collect())
        .collect();
    let point = |rng: &mut ChaCha8Rng| {
        let c = &centres[rng.random_range(0..centres.len())];
        let mut v: Vec<f32> = c
            .iter()
            .map(|x| x + rng.random_range(-0.6f32..0.6))
            .collect();
        eddy_kernels::normalize(&mut v);
        v
    };
    let data = (0..ROWS).flat_map(|_| point(&mut rng)).collect();
    let queries = (0..20).map(|_| point(&mut rng)).collect();
    (data, queries)
}

fn exact(data: &[f32], q: &[f32], metric: Metric) -> Vec<u32> {
    let scores: Vec<f32> = data
        .chunks_exact(DIM)
        .map(|r| exact_score(metric, q, r))
        .collect();
    top_k(&scores, K).into_iter().map(|(i, _)| i).collect()
}

fn recall<C: CodeScorer>(
    codes: &C,
    data: &[f32],
    queries: &[Vec<f32>],
    metric: Metric,
    os: f32,
) -> f64 {
    let mut hits = 0;
    for q in queries {
        let truth = exact(data, q, metric);
        let got = search_with_rescore(codes, data, metric, q, K, os).expect("search");
        assert_eq!(got.len(), K);
        hits += got.iter().filter(|(i, _)| truth.contains(i)).count();
    }
    hits as f64 / (queries.len() * K) as f64
}

#[test]
fn sq8_recall_with_rescore() {
    let (data, queries) = dataset(1);
    for metric in [Metric::Dot, Metric::L2] {
        let cfg = Sq8Config {
            metric,
            ..Sq8Config::default()
        };
        let codes = Sq8Quantizer::train(&data, DIM, &cfg)
            .and_then(|q| q.encode_all(&data))
            .expect("sq8");
        let r = recall(&codes, &data, &queries, metric, 4.0);
        assert!(r >= 0.98, "sq8 {metric:?} recall {r}");
    }
}

#[test]
fn binary_recall_with_rescore() {
    let (data, queries) = dataset(2);
    for encoding in [
        BinaryEncoding::OneBit,
        BinaryEncoding::OneAndHalfBits,
        BinaryEncoding::TwoBits,
    ] {
        for query in [
            QueryEncoding::Symmetric,
            QueryEncoding::Scalar4,
            QueryEncoding::Scalar8,
        ] {
            let cfg = BinaryConfig {
                encoding,
                query,
                ..BinaryConfig::default()
            };
            let codes = BinaryQuantizer::train(&data, DIM, &cfg)
                .and_then(|q| q.encode_all(&data))
                .expect("binary");
            let r = recall(&codes, &data, &queries, Metric::Dot, 10.0);
            assert!(r >= 0.85, "{encoding:?}/{query:?} recall {r}");
        }
    }
}

#[test]
fn pq_and_rabitq_recall_with_rescore() {
    let (data, queries) = dataset(3);
    // Small training run: k-means is slow in unoptimised test builds.
    let cfg = PqConfig {
        m: 8,
        iterations: 3,
        max_train_rows: 600,
        ..PqConfig::default()
    };
    let pq = PqQuantizer::train(&data, DIM, &cfg)
        .and_then(|q| q.encode_all(&data))
        .expect("pq");
    let r = recall(&pq, &data, &queries, Metric::Dot, 8.0);
    assert!(r >= 0.9, "pq recall {r}");
    for metric in [Metric::Dot, Metric::L2] {
        let cfg = RabitqConfig {
            metric,
            ..RabitqConfig::default()
        };
        let rq = RabitqQuantizer::train(&data, DIM, &cfg)
            .and_then(|q| q.encode_all(&data))
            .expect("rabitq");
        let r = recall(&rq, &data, &queries, metric, 4.0);
        assert!(r >= 0.95, "rabitq {metric:?} recall {r}");
    }
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let (data, queries) = dataset(4);
    let codes = Sq8Quantizer::train(&data, DIM, &Sq8Config::default())
        .and_then(|q| q.encode_all(&data))
        .expect("sq8");
    let q = &queries[0];
    assert_eq!(
        search_with_rescore(&codes, &data, Metric::Dot, &q[..3], K, 2.0).err(),
        Some(Error::DimMismatch {
            expected: DIM,
            got: 3
        })
    );
    let mut nan = q.clone();
    nan[0] = f32::NAN;
    assert_eq!(
        search_with_rescore(&codes, &data, Metric::Dot, &nan, K, 2.0).err(),
        Some(Error::NonFinite)
    );
    assert!(search_with_rescore(&codes, &data, Metric::Dot, q, K, -1.0).is_err());
    assert!(search_with_rescore(&codes, &data[..DIM], Metric::Dot, q, K, 2.0).is_err());
    // Codes only (oversampling 0) and k larger than the collection.
    assert_eq!(
        search_with_rescore(&codes, &data, Metric::Dot, q, K, 0.0)
            .expect("codes only")
            .len(),
        K
    );
    assert_eq!(
        search_with_rescore(&codes, &data, Metric::Dot, q, ROWS + 5, 1.0)
            .expect("all")
            .len(),
        ROWS
    );
}
