//! Sealed-segment search through the index file: graph walks (f32 and SQ8)
//! agree with exact search, filters and deletes restrict results without
//! losing recall, and a damaged index file is refused.

use std::collections::{BTreeMap, HashSet};

use eddy_filter::Filter;
use eddy_model::{FieldType, IdType, Metric, PointId};
use eddy_segment::{
    build_index, check_index, search_sealed, train_scan_codes, Growing, IndexFile, IndexParams,
    Quantization, Residency, RowMask, SealedQuery, Segment,
};
use rand::{Rng, SeedableRng};

mod refused;

const DIM: usize = 16;
const ROWS: usize = 3_000;

fn fields() -> BTreeMap<String, FieldType> {
    BTreeMap::from([
        ("color".to_owned(), FieldType::Keyword),
        ("n".to_owned(), FieldType::Integer),
    ])
}

/// A segment of clustered random unit vectors with a `color` (1 in 50 rows
/// "red") and an integer `n`, plus its index file.
fn fixture(dir: &std::path::Path) -> (Segment, IndexFile) {
    fixture_of(dir, DIM)
}

/// [`fixture`] with rows of `dim` dimensions.
fn fixture_of(dir: &std::path::Path, dim: usize) -> (Segment, IndexFile) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let centers: Vec<Vec<f32>> = (0..20)
        .map(|_| (0..dim).map(|_| rng.random_range(-1.0..1.0)).collect())
        .collect();
    let mut g = Growing::new(dim, Metric::Cosine, IdType::U64);
    for i in 0..ROWS {
        let c = &centers[i % centers.len()];
        let mut v: Vec<f32> = c.iter().map(|x| x + rng.random_range(-0.3..0.3)).collect();
        eddy_event::normalize(&mut v);
        let color = if i % 50 == 0 { "red" } else { "blue" };
        let payload = format!(r#"{{"color":"{color}","n":{i}}}"#);
        g.upsert(PointId::Num(i as u64), &v, payload.as_bytes(), 0, i as i64);
    }
    let seg_path = dir.join("s.seg");
    g.write_segment(&seg_path, &fields()).expect("segment");
    let seg = Segment::open(&seg_path).expect("open segment");
    let idx_path = dir.join("s.idx");
    // One build thread: the graph (and so every figure below) is the same
    // on every run.
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool")
        .install(|| build_index(&seg, &IndexParams::default(), &idx_path))
        .expect("index")
        .expect("big enough for a graph");
    let index = IndexFile::open(&idx_path, seg.rows(), seg.dim()).expect("open index");
    check_index(&seg, &index).expect("index checks");
    (seg, index)
}

fn queries() -> Vec<Vec<f32>> {
    queries_of(DIM)
}

/// 50 random unit queries of `dim` dimensions.
fn queries_of(dim: usize) -> Vec<Vec<f32>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    (0..50)
        .map(|_| {
            let mut v: Vec<f32> = (0..dim).map(|_| rng.random_range(-1.0..1.0)).collect();
            eddy_event::normalize(&mut v);
            v
        })
        .collect()
}

fn recall(
    seg: &Segment,
    index: &IndexFile,
    q: &SealedQuery<'_>,
    accept: &dyn Fn(u32) -> bool,
) -> f64 {
    let exact_q = SealedQuery { exact: true, ..*q };
    let (mut hit, mut total) = (0usize, 0usize);
    for query in queries() {
        let truth: HashSet<u32> = search_sealed(
            seg,
            Some(index),
            None,
            None,
            RowMask::default(),
            &query,
            &exact_q,
            accept,
        )
        .iter()
        .map(|n| n.row)
        .collect();
        let got = search_sealed(
            seg,
            Some(index),
            None,
            None,
            RowMask::default(),
            &query,
            q,
            accept,
        );
        assert!(got.windows(2).all(|w| w[0].score >= w[1].score), "sorted");
        assert!(got.iter().all(|n| accept(n.row)), "accept is honoured");
        hit += got.iter().filter(|n| truth.contains(&n.row)).count();
        total += truth.len();
    }
    hit as f64 / total.max(1) as f64
}

#[test]
fn graph_walks_match_exact_search() {
    let dir = tempfile::tempdir().expect("tmp");
    let (seg, index) = fixture(dir.path());
    let all = |_: u32| true;
    for quantization in [Quantization::None, Quantization::Sq8] {
        let q = SealedQuery {
            k: 10,
            ef: 128,
            quantization,
            ..SealedQuery::default()
        };
        let r = recall(&seg, &index, &q, &all);
        assert!(r >= 0.95, "{quantization:?}: recall@10 {r}");
    }
}

/// The hits of `search`, as rows.
fn rows_of(hits: &[eddy_segment::Neighbor]) -> Vec<u32> {
    hits.iter().map(|n| n.row).collect()
}

/// `got` is `truth`, row for row, with exact scores.
fn assert_exact(got: &[eddy_segment::Neighbor], truth: &[eddy_segment::Neighbor], what: &str) {
    assert_eq!(rows_of(got), rows_of(truth), "{what}: the exact top k");
    for (g, w) in got.iter().zip(truth) {
        assert!((g.score - w.score).abs() <= 1e-5, "{what}: exact scores");
    }
}

/// Files read into huge-page memory answer exactly as their maps do, and
/// their sections keep the alignment the graph and vector views need.
/// A segment without its index file, searched with scan codes: the code
/// scan finds the exact top 10 (scores exact, deletes honoured), and an
/// `exact` or unquantized search still scans f32.
#[test]
fn scan_codes_answer_an_unindexed_segment_like_the_exact_scan() {
    let dir = tempfile::tempdir().expect("tmp");
    let (seg, _) = fixture(dir.path());
    let codes = train_scan_codes(seg.vectors(), seg.dim(), seg.metric()).expect("codes");
    let not_deleted = |row: u32| row % 7 != 3;
    let exact_q = SealedQuery {
        k: 10,
        exact: true,
        ..SealedQuery::default()
    };
    let (mut same, mut total) = (0usize, 0usize);
    for query in queries() {
        let truth = search_sealed(
            &seg,
            None,
            None,
            None,
            RowMask::default(),
            &query,
            &exact_q,
            &not_deleted,
        );
        let scan = |q: &SealedQuery<'_>| {
            let mask = RowMask::default();
            search_sealed(
                &seg,
                None,
                Some(&codes),
                None,
                mask,
                &query,
                q,
                &not_deleted,
            )
        };
        for quantization in [Quantization::Auto, Quantization::Sq8] {
            let q = SealedQuery {
                k: 10,
                quantization,
                ..SealedQuery::default()
            };
            let got = scan(&q);
            assert!(got.windows(2).all(|w| w[0].score >= w[1].score), "sorted");
            assert!(got.iter().all(|n| not_deleted(n.row)), "accept is honoured");
            for n in &got {
                let exact = truth.iter().find(|t| t.row == n.row);
                if let Some(t) = exact {
                    assert_eq!(t.score, n.score, "scores are exact");
                }
            }
            same += got
                .iter()
                .filter(|n| truth.iter().any(|t| t.row == n.row))
                .count();
            total += truth.len();
        }
        for q in [
            exact_q,
            SealedQuery {
                k: 10,
                quantization: Quantization::None,
                ..SealedQuery::default()
            },
        ] {
            let got = scan(&q);
            assert_eq!(got, truth, "f32 scan when codes may not rank rows");
        }
    }
    assert_eq!(same, total, "the code scan found every exact top-10 row");

    // The codes really rank the rows: codes of the rows in reverse order
    // (the same count, so they are taken) lead the scan astray.
    let reversed: Vec<f32> = seg
        .vectors()
        .chunks_exact(seg.dim())
        .rev()
        .flatten()
        .copied()
        .collect();
    let wrong = train_scan_codes(&reversed, seg.dim(), seg.metric()).expect("codes");
    let q = SealedQuery {
        k: 10,
        ..SealedQuery::default()
    };
    let astray = queries().iter().any(|query| {
        search_sealed(
            &seg,
            None,
            Some(&wrong),
            None,
            RowMask::default(),
            query,
            &q,
            &not_deleted,
        ) != search_sealed(
            &seg,
            None,
            None,
            None,
            RowMask::default(),
            query,
            &exact_q,
            &not_deleted,
        )
    });
    assert!(
        astray,
        "a search that ignored the codes would not notice them"
    );
}

#[test]
fn resident_copies_answer_like_the_maps() {
    let dir = tempfile::tempdir().expect("tmp");
    let (seg, index) = fixture(dir.path());
    let seg_r = Segment::open_with(&dir.path().join("s.seg"), Residency::HugePages)
        .expect("resident segment");
    let index_r = IndexFile::open_with(
        &dir.path().join("s.idx"),
        seg.rows(),
        seg.dim(),
        Residency::HugePages,
    )
    .expect("resident index");
    check_index(&seg_r, &index_r).expect("resident index checks");
    assert_eq!(seg_r.vectors(), seg.vectors());
    assert_eq!(seg_r.file_len(), seg.file_len());
    assert_eq!(index_r.file_len(), index.file_len());
    assert_eq!(seg_r.vectors().as_ptr() as usize % 64, 0, "vectors aligned");
    let all = |_: u32| true;
    for quantization in [Quantization::None, Quantization::Sq8] {
        let q = SealedQuery {
            k: 10,
            ef: 64,
            quantization,
            ..SealedQuery::default()
        };
        for query in queries() {
            let mapped = search_sealed(
                &seg,
                Some(&index),
                None,
                None,
                RowMask::default(),
                &query,
                &q,
                &all,
            );
            let resident = search_sealed(
                &seg_r,
                Some(&index_r),
                None,
                None,
                RowMask::default(),
                &query,
                &q,
                &all,
            );
            assert_eq!(mapped, resident, "{quantization:?}");
        }
    }
}

#[test]
fn deletes_and_filters_restrict_results_without_losing_recall() {
    let dir = tempfile::tempdir().expect("tmp");
    let (seg, index) = fixture(dir.path());
    // Every third row deleted: the walk still passes through them.
    let not_deleted = |row: u32| !row.is_multiple_of(3);
    let q = SealedQuery {
        k: 10,
        ef: 128,
        ..SealedQuery::default()
    };
    let r = recall(&seg, &index, &q, &not_deleted);
    assert!(r >= 0.95, "with deletes: recall@10 {r}");

    // Selective (2 %): answered exactly from the payload index.
    let red = Filter::parse(
        &serde_json::json!({"must": [{"key": "color", "match": {"value": "red"}}]}),
        &fields(),
    )
    .expect("filter");
    let q_red = SealedQuery {
        filter: Some(&red),
        ..q
    };
    assert_eq!(recall(&seg, &index, &q_red, &not_deleted), 1.0);
    for query in queries().iter().take(5) {
        for n in search_sealed(
            &seg,
            Some(&index),
            None,
            None,
            RowMask::default(),
            query,
            &q_red,
            &not_deleted,
        ) {
            assert_eq!(n.row % 50, 0, "only red rows");
        }
    }

    // Broad (half the rows): walked through the graph, filter-aware.
    let half = Filter::parse(
        &serde_json::json!({"must": [{"key": "n", "range": {"lt": 1500}}]}),
        &fields(),
    )
    .expect("filter");
    let q_half = SealedQuery {
        filter: Some(&half),
        ..q
    };
    let r = recall(&seg, &index, &q_half, &not_deleted);
    assert!(r >= 0.95, "broad filter: recall@10 {r}");
}

#[test]
fn damaged_index_files_are_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let (seg, _) = fixture(dir.path());
    let path = dir.path().join("s.idx");
    let mut bytes = std::fs::read(&path).expect("read");
    let at = bytes.len() / 3;
    bytes[at] ^= 0x10;
    std::fs::write(&path, &bytes).expect("write");
    let err = IndexFile::open(&path, seg.rows(), seg.dim()).expect_err("damaged");
    assert!(err.to_string().contains("checksum"), "{err}");
}
