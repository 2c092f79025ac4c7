//! The tail's code scan on real embeddings (the repository's 10k-row
//! sample of debian-minilm): from `SHORTLIST_FROM_ROWS` rows it ranks rows
//! by sign bits first, and still finds what the exact scan finds.

use std::path::PathBuf;

use eddy_model::{IdType, Metric, PointId};
use eddy_segment::{scan_rescore_depth, Growing, SCAN_CODES_FROM_ROWS, SHORTLIST_FROM_ROWS};

const K: usize = 10;

fn sample() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../loadtest/data/debian-minilm-10k")
}

fn normalised(v: &[f32]) -> Vec<f32> {
    let n = v
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt()
        .max(f32::MIN_POSITIVE);
    v.iter().map(|x| x / n).collect()
}

/// 10,000 rows of 384-d sentence embeddings and the sample's 200 queries:
/// the shortlisted scan returns at least 99.5 % of the exact scan's top 10
/// (tie-aware: a hit scoring as high as the exact 10th counts), every hit
/// live and with its exact score.
#[test]
fn the_shortlisted_tail_scan_finds_the_exact_top_ten_on_real_embeddings() {
    let base = eddy_dataset::read_fvecs(&sample().join("base.fvecs"), None).expect("sample base");
    let queries = eddy_dataset::read_fvecs(&sample().join("queries.fvecs"), None).expect("queries");
    let dim = base.row(0).len();
    let mut tail =
        Growing::new(dim, Metric::Cosine, IdType::U64).with_quantized_scan(SCAN_CODES_FROM_ROWS);
    for (i, v) in base.iter().enumerate() {
        tail.upsert(PointId::Num(i as u64), &normalised(v), b"", 0, i as i64);
    }
    // Every tenth point deleted: the scan must skip them.
    for i in (0..base.rows() as u64).step_by(10) {
        tail.delete(PointId::Num(i), 0, (base.rows() as u64 + i) as i64);
    }
    assert!(tail.rows() >= SHORTLIST_FROM_ROWS);
    assert!(
        tail.scan_codes().is_some_and(|c| c.shortlists()),
        "sign bits kept for 384-d cosine"
    );
    let (mut found, mut wanted) = (0usize, 0usize);
    for q in queries.iter().map(normalised) {
        let exact = tail.search(&q, K, &|_| true);
        let got = tail.search_quantized(&q, K, scan_rescore_depth(K), &|_| true);
        assert_eq!(got.len(), K);
        let tenth = exact[K - 1].score;
        for hit in &got {
            let row = tail.row(hit.row);
            assert!(tail.is_live(hit.row), "a deleted row returned");
            let truth = exact.iter().find(|e| e.row == hit.row);
            if let Some(t) = truth {
                assert!(
                    (t.score - hit.score).abs() <= 1e-5,
                    "{:?}: {} vs {}",
                    row.id,
                    t.score,
                    hit.score
                );
            }
            found += usize::from(hit.score >= tenth - 1e-6);
        }
        wanted += K;
    }
    let recall = found as f64 / wanted as f64;
    assert!(
        recall >= 0.995,
        "recall {recall:.4} of the exact scan's top {K}"
    );
}
