//! Sealed-segment search through the index file: graph walks (f32 and SQ8)
//! agree with exact search, filters and deletes restrict results without
//! losing recall, and a damaged index file is refused.

use std::collections::{BTreeMap, HashSet};

use eddy_filter::Filter;
use eddy_model::{FieldType, IdType, Metric, PointId};
use eddy_segment::{
    bit_scan_pays, build_index, check_index, code_scan_pays, search_sealed, train_scan_codes,
    Growing, IndexFile, IndexParams, LazySignBits, Quantization, Residency, RowMask, SealedQuery,
    Segment,
};
use rand::{Rng, SeedableRng};

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

/// The refused rows of a segment of `rows` rows (those `accept` turns
/// away) as one bit per row, and how many there are.
fn refused_bits(rows: usize, accept: impl Fn(u32) -> bool) -> (Vec<u64>, usize) {
    let mut bits = vec![0u64; rows.div_ceil(64)];
    let mut count = 0;
    for row in (0..rows as u32).filter(|&r| !accept(r)) {
        bits[row as usize / 64] |= 1 << (row % 64);
        count += 1;
    }
    (bits, count)
}

/// [`search_sealed`] of a graph segment (no scan codes) as the tests of
/// refused rows call it.
fn search_graph(
    (seg, index): (&Segment, &IndexFile),
    sign_bits: Option<&eddy_quant::binary::BinaryCodes>,
    mask: RowMask<'_>,
    query: &[f32],
    q: &SealedQuery<'_>,
    accept: &dyn Fn(u32) -> bool,
) -> Vec<eddy_segment::Neighbor> {
    search_sealed(seg, Some(index), None, sign_bits, mask, query, q, accept)
}

/// The served SQ8 search of the tests of refused rows: top 10 at ef 16
/// (a beam of 40 with the rescored candidates).
fn sq8_at_ef16() -> SealedQuery<'static> {
    SealedQuery {
        k: 10,
        ef: 16,
        quantization: Quantization::Sq8,
        ..SealedQuery::default()
    }
}

/// A graph segment whose rows are mostly refused (deleted, and shadowed by
/// the tail) is searched by a scan of its accepted rows' SQ8 codes: the
/// exact top 10 of those rows, scores exact. Without the refused rows'
/// bits it is walked.
#[test]
fn a_mostly_refused_graph_segment_scans_its_accepted_rows() {
    let dir = tempfile::tempdir().expect("tmp");
    let (seg, index) = fixture(dir.path());
    // 90 % deleted; of the rest, one in nine is shadowed by the tail.
    let accept = |row: u32| row.is_multiple_of(10) && !row.is_multiple_of(90);
    let (bits, masked) = refused_bits(ROWS, accept);
    let mask = RowMask {
        refused: Some(&bits),
        masked,
    };
    assert_eq!(mask.accepted_rows(ROWS).len(), ROWS - masked);
    let q = sq8_at_ef16();
    assert!(code_scan_pays(ROWS - masked, ROWS - masked, ROWS, 40));
    let exact_q = SealedQuery { exact: true, ..q };
    for query in queries() {
        let truth = search_graph((&seg, &index), None, mask, &query, &exact_q, &accept);
        assert_eq!(truth.len(), 10);
        let scanned = search_graph((&seg, &index), None, mask, &query, &q, &accept);
        assert_exact(&scanned, &truth, "the accepted rows' codes");
        let unmasked = RowMask::default();
        let walked = search_graph((&seg, &index), None, unmasked, &query, &q, &accept);
        assert!(walked.iter().all(|n| accept(n.row)));
    }
    // Wholly refused: skipped, `accept` never asked.
    let none = RowMask {
        refused: None,
        masked: ROWS,
    };
    let asked = std::cell::Cell::new(0usize);
    let refuse = |_: u32| {
        asked.set(asked.get() + 1);
        false
    };
    for query in queries().iter().take(5) {
        assert!(search_graph((&seg, &index), None, none, query, &q, &refuse).is_empty());
    }
    assert_eq!(asked.get(), 0);
}

/// With sign bits of its rows (cosine rows of 128 dimensions), a graph
/// segment three quarters refused is scanned by them first: its accepted
/// rows only, scores exact, and the exact top 10 nearly always for queries
/// near the rows (the bits shortlist 400 of the 750 accepted rows).
#[test]
fn a_mostly_refused_graph_segment_with_sign_bits_scans_by_them() {
    let dir = tempfile::tempdir().expect("tmp");
    let (seg, index) = fixture_of(dir.path(), 128);
    let bits = {
        let cell = LazySignBits::default();
        cell.make_now(&seg);
        cell
    };
    let signs = bits.get().expect("cosine rows of 128 dimensions");
    let q = sq8_at_ef16();
    let exact_q = SealedQuery { exact: true, ..q };
    let accept = |row: u32| row % 4 == 1;
    let (refused, masked) = refused_bits(ROWS, accept);
    let mask = RowMask {
        refused: Some(&refused),
        masked,
    };
    assert!(bit_scan_pays(ROWS - masked, ROWS, 40));
    // Queries near the rows, as real ones are (random directions far from
    // every row are ranked poorly by one bit per dimension).
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let near: Vec<Vec<f32>> = (0..50)
        .map(|i| {
            let row = seg.vector(i * 37);
            let mut v: Vec<f32> = row
                .iter()
                .map(|x| x + rng.random_range(-0.1..0.1))
                .collect();
            eddy_event::normalize(&mut v);
            v
        })
        .collect();
    let (mut found, mut wanted) = (0, 0);
    for query in &near {
        let truth = search_graph((&seg, &index), None, mask, query, &exact_q, &accept);
        let got = search_graph((&seg, &index), Some(signs), mask, query, &q, &accept);
        assert_eq!(got.len(), 10);
        for n in &got {
            assert!(accept(n.row), "row {} is refused", n.row);
            let exact = truth.iter().find(|t| t.row == n.row);
            if let Some(t) = exact {
                assert!((t.score - n.score).abs() <= 1e-5, "exact scores");
            }
        }
        let want: HashSet<u32> = rows_of(&truth).into_iter().collect();
        found += got.iter().filter(|n| want.contains(&n.row)).count();
        wanted += want.len();
    }
    assert!(found * 100 >= wanted * 95, "{found} of {wanted}");
}

/// When a scan of codes pays against a walk (the model fitted on
/// debian-minilm in `code_scan_pays`' doc).
#[test]
fn a_code_scan_pays_only_on_mostly_refused_segments() {
    // 61,681 rows, beam 40: the live rows of a 90 % deleted graph are
    // scanned, those of a 75 % deleted one walked.
    assert!(code_scan_pays(6_168, 6_168, 61_681, 40));
    assert!(!code_scan_pays(15_420, 15_420, 61_681, 40));
    // Nothing refused, or an empty segment: always the walk.
    assert!(!code_scan_pays(3_000, 3_000, 3_000, 40));
    assert!(!code_scan_pays(0, 0, 0, 40));
    // Everything deleted: the scan of nothing.
    assert!(code_scan_pays(0, 0, 20_000, 40));
    // A wider beam makes the walk dearer, so the scan pays sooner.
    assert!(!code_scan_pays(15_420, 15_420, 61_681, 16));
    assert!(code_scan_pays(15_420, 15_420, 61_681, 128));
    // Shadowed, not deleted (every row scanned): at 1 % accepted, not at 10 %;
    // wholly shadowed, always.
    assert!(code_scan_pays(61_681, 617, 61_681, 40));
    assert!(!code_scan_pays(61_681, 6_168, 61_681, 40));
    assert!(code_scan_pays(61_681, 0, 61_681, 16));
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
