//! Graph segments whose rows a search mostly refuses (deleted, or shadowed
//! by the tail): scanned by their accepted rows' codes, by sign bits first
//! where given, instead of walked, and skipped when wholly refused.

use std::collections::HashSet;

use eddy_segment::{
    bit_scan_pays, code_scan_pays, search_sealed, IndexFile, LazySignBits, Quantization, RowMask,
    SealedQuery, Segment,
};
use rand::{Rng, SeedableRng};

use super::{assert_exact, fixture, fixture_of, queries, rows_of, ROWS};

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
