//! The exact and code scans (`exact.rs`): top-k bookkeeping, block and
//! listed scans against brute force, and the SQ8 and sign-bit scans against
//! the exact scan.

use eddy_model::Metric;

use crate::exact::*;
use crate::scorer::{F32Scorer, Scorer};
use crate::Vectors;

fn data(rows: usize, dim: usize) -> Vec<f32> {
    (0..rows * dim)
        .map(|i| ((i * 37 % 101) as f32) / 50.0 - 1.0)
        .collect()
}

fn brute(v: &Vectors<'_>, q: &[f32], k: usize, ok: impl Fn(u32) -> bool) -> Vec<(u32, f32)> {
    let scorer = F32Scorer::new(v, q);
    let mut all: Vec<(u32, f32)> = (0..v.rows() as u32)
        .filter(|&r| ok(r))
        .map(|r| (r, scorer.score_one(r)))
        .collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    all.truncate(k);
    all
}

#[test]
fn topk_keeps_the_highest() {
    let mut top = TopK::new(3);
    for (row, score) in [(0, -5.0), (1, -1.0), (2, -3.0), (3, -0.5), (4, -9.0)] {
        top.push(row, score);
    }
    let rows: Vec<u32> = top.into_sorted().iter().map(|n| n.0).collect();
    assert_eq!(rows, vec![3, 1, 2]);
}

#[test]
fn block_and_listed_scans_match_brute_force() {
    let dim = 5;
    let d = data(200, dim);
    let query: Vec<f32> = (0..dim).map(|i| i as f32 / 3.0).collect();
    let even: Vec<u32> = (0..200).filter(|r| r % 2 == 0).collect();
    for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
        let v = Vectors::new(&d, dim, metric);
        let want = brute(&v, &query, 7, |r| r % 2 == 0);
        let all = exact_scan(&v, &query, 7, ScanRows::All(&|r| r % 2 == 0));
        let listed = exact_scan(&v, &query, 7, ScanRows::Listed(&even));
        assert_eq!(all.len(), 7);
        assert_eq!(listed.iter().map(|h| h.0).collect::<Vec<_>>(), {
            want.iter().map(|h| h.0).collect::<Vec<_>>()
        });
        for ((a, l), w) in all.iter().zip(&listed).zip(&want) {
            let tol = 1e-4 * w.1.abs().max(1.0);
            assert!((a.1 - w.1).abs() <= tol, "{metric}: block {a:?} vs {w:?}");
            assert!((l.1 - w.1).abs() <= tol, "{metric}: listed {l:?} vs {w:?}");
        }
    }
}

/// A xorshift64 stream from `seed`: test data that is the same every run.
fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

/// With a shortlist as long as the rows, the coarse pass drops nothing
/// and the answer is the fine codes' scan; with a short one, the answer
/// still holds accepted rows only, with exact scores.
#[test]
fn a_shortlist_of_every_row_answers_as_the_fine_scan() {
    let (dim, rows) = (32, 500);
    let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
    let d: Vec<f32> = (0..rows * dim)
        .map(|_| (next() % 10_007) as f32 / 5_000.0 - 1.0)
        .collect();
    let query: Vec<f32> = d[7 * dim..8 * dim].iter().map(|x| x * 0.9 + 0.01).collect();
    let v = Vectors::new(&d, dim, Metric::L2);
    let sq8 = sq8_codes(&d, &d, dim, Metric::L2);
    let bits = sign_bits(&d, &d, dim);
    let odd = |r: u32| r % 2 == 1;
    let want = quantized_scan(&sq8, &v, &query, 5, 40, &odd);
    assert_eq!(
        shortlisted_scan(&bits, &sq8, &v, &query, 5, rows, 40, &odd),
        want
    );
    let short = shortlisted_scan(&bits, &sq8, &v, &query, 5, 60, 40, &odd);
    assert_eq!(short.len(), 5);
    let exact = F32Scorer::new(&v, &query);
    for (row, score) in short {
        assert!(odd(row));
        assert!((score - exact.score_one(row)).abs() <= 1e-4 * score.abs().max(1.0));
    }
}

/// Sign bits of the rows `encoded` (of `dim`), trained on `trained`.
fn sign_bits(trained: &[f32], encoded: &[f32], dim: usize) -> eddy_quant::binary::BinaryCodes {
    use eddy_quant::binary::{BinaryConfig, BinaryQuantizer, QueryEncoding};
    let config = BinaryConfig {
        query: QueryEncoding::Symmetric,
        ..BinaryConfig::default()
    };
    BinaryQuantizer::train(trained, dim, &config)
        .and_then(|q| q.encode_all(encoded))
        .expect("bits")
}

/// Three sources scanned jointly, each with codes trained on its own rows:
/// with a shortlist and a rescoring as long as all their rows, the answer
/// is the exact top k of the accepted rows of all three, each hit handed
/// back to its own source with its row there; with a short shortlist,
/// every hit is still an accepted row of its source with its exact score,
/// and together they are k.
#[test]
fn sources_scanned_jointly_answer_as_one_scan_of_all_their_rows() {
    let (dim, k) = (64, 12);
    let sizes = [300usize, 0, 700, 450];
    let mut next = xorshift(0x2545_F491_4F6C_DD1D);
    let data: Vec<Vec<f32>> = sizes
        .iter()
        .map(|&n| {
            (0..n * dim)
                .map(|_| (next() % 10_007) as f32 / 5_000.0 - 1.0)
                .collect()
        })
        .collect();
    let query: Vec<f32> = data[2][5 * dim..6 * dim]
        .iter()
        .map(|x| x * 0.8 + 0.02)
        .collect();
    // The empty source's codes are trained on the first one's rows.
    let codes: Vec<_> = data
        .iter()
        .map(|d| {
            let trained = if d.is_empty() { &data[0] } else { d };
            (
                sign_bits(trained, d, dim),
                sq8_codes(trained, d, dim, Metric::Cosine),
            )
        })
        .collect();
    // Source `s` refuses every row `r` where `r + s` is a multiple of 3.
    let accepts: Vec<Box<dyn Fn(u32) -> bool>> = (0..sizes.len())
        .map(|s| {
            Box::new(move |r: u32| !(r as usize + s).is_multiple_of(3)) as Box<dyn Fn(u32) -> bool>
        })
        .collect();
    let used = [0usize, 1, 2, 3];
    let sources: Vec<ShortlistSource<'_, eddy_quant::sq8::Sq8Codes>> = used
        .iter()
        .map(|&s| ShortlistSource {
            coarse: &codes[s].0,
            fine: &codes[s].1,
            vectors: Vectors::new(&data[s], dim, Metric::Cosine),
            accept: accepts[s].as_ref(),
        })
        .collect();
    let mut want: Vec<(usize, u32, f32)> = Vec::new();
    for (j, &s) in used.iter().enumerate() {
        let v = Vectors::new(&data[s], dim, Metric::Cosine);
        want.extend(
            brute(&v, &query, k, &accepts[s])
                .into_iter()
                .map(|(r, x)| (j, r, x)),
        );
    }
    want.sort_by(|a, b| b.2.total_cmp(&a.2));
    want.truncate(k);
    let all_rows: usize = sizes.iter().sum();
    let got = shortlisted_scan_many(&sources, &query, k, all_rows, all_rows);
    assert_eq!(got.len(), used.len());
    let mut flat: Vec<(usize, u32, f32)> = got
        .iter()
        .enumerate()
        .flat_map(|(j, hits)| hits.iter().map(move |&(r, x)| (j, r, x)))
        .collect();
    flat.sort_by(|a, b| b.2.total_cmp(&a.2));
    let ids = |v: &[(usize, u32, f32)]| v.iter().map(|h| (h.0, h.1)).collect::<Vec<_>>();
    assert_eq!(ids(&flat), ids(&want));
    assert!(got
        .iter()
        .all(|hits| hits.windows(2).all(|w| w[0].1 >= w[1].1)));

    let short = shortlisted_scan_many(&sources, &query, k, 40, 20);
    assert_eq!(short.iter().map(Vec::len).sum::<usize>(), k);
    for (j, hits) in short.iter().enumerate() {
        let s = used[j];
        let exact = F32Scorer::new(&sources[j].vectors, &query);
        for &(row, score) in hits {
            assert!(
                (row as usize) < sizes[s] && accepts[s](row),
                "source {s} row {row}"
            );
            assert!((score - exact.score_one(row)).abs() <= 1e-4);
        }
    }
}

/// SQ8 codes of the rows `encoded` (of `dim`), trained on `trained`.
fn sq8_codes(
    trained: &[f32],
    encoded: &[f32],
    dim: usize,
    metric: Metric,
) -> eddy_quant::sq8::Sq8Codes {
    use eddy_quant::sq8::{Sq8Config, Sq8Quantizer};
    let config = Sq8Config {
        metric,
        ..Sq8Config::default()
    };
    Sq8Quantizer::train(trained, dim, &config)
        .and_then(|q| q.encode_all(encoded))
        .expect("codes")
}

#[test]
fn quantized_scan_finds_the_exact_top_k_and_asks_only_candidates() {
    let dim = 16;
    let d = data(500, dim);
    let query: Vec<f32> = (0..dim).map(|i| (i as f32 / 7.0).sin()).collect();
    for metric in [Metric::Dot, Metric::L2] {
        let v = Vectors::new(&d, dim, metric);
        let codes = sq8_codes(&d, &d, dim, metric);
        let want = exact_scan(&v, &query, 5, ScanRows::All(&|r| !r.is_multiple_of(3)));
        let asked = std::cell::Cell::new(0usize);
        let accept = |r: u32| {
            asked.set(asked.get() + 1);
            !r.is_multiple_of(3)
        };
        let got = quantized_scan(&codes, &v, &query, 5, 50, &accept);
        assert_eq!(got, want, "{metric}: all 500 rows kept 50 deep");
        assert!(
            asked.get() < 500,
            "{metric}: accept asked {} times",
            asked.get()
        );
        // Codes that do not cover the rows: the exact scan answers.
        let short = sq8_codes(&d, &d[..dim * 10], dim, metric);
        assert_eq!(
            quantized_scan(&short, &v, &query, 5, 50, &|r| !r.is_multiple_of(3)),
            want
        );
    }
}

/// The SQ8 code scan reads only the listed rows (or every row), keeps the
/// best accepted ones and reports exact scores: kept deep enough it is the
/// exact scan of the accepted rows; `accept` is asked only about
/// candidates; codes that do not cover the rows fall back to the exact
/// scan.
#[test]
fn the_sq8_code_scan_finds_the_exact_top_k_of_the_scanned_rows() {
    use crate::{scan_sq8_codes, Sq8View};
    let dim = 16;
    let d = data(600, dim);
    let query: Vec<f32> = (0..dim).map(|i| (i as f32 / 5.0).cos()).collect();
    // One row in ten listed (the live rows of a mostly deleted graph).
    let listed: Vec<u32> = (0..600).filter(|r| r % 10 == 4).collect();
    for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
        let v = Vectors::new(&d, dim, metric);
        let codes = sq8_codes(&d, &d, dim, metric);
        let view = Sq8View::from_codes(&codes);
        let accepted = |r: u32| r % 20 != 4;
        let rows: Vec<u32> = listed.iter().copied().filter(|&r| accepted(r)).collect();
        let want = exact_scan(&v, &query, 5, ScanRows::Listed(&rows));
        let asked = std::cell::Cell::new(0usize);
        let accept = |r: u32| {
            asked.set(asked.get() + 1);
            accepted(r)
        };
        let got = scan_sq8_codes(&v, &view, &query, 5, listed.len(), Some(&listed), &accept);
        assert_eq!(got, want, "{metric}: every listed row kept");
        let shallow = scan_sq8_codes(&v, &view, &query, 5, 20, Some(&listed), &accept);
        assert!(shallow.iter().all(|(r, _)| rows.contains(r)), "{metric}");
        for (row, score) in &shallow {
            let exact = exact_scan(&v, &query, 1, ScanRows::Listed(&[*row]));
            assert_eq!(exact, vec![(*row, *score)], "{metric}: scores are exact");
        }
        asked.set(0);
        scan_sq8_codes(&v, &view, &query, 5, 10, Some(&listed), &accept);
        assert!(
            asked.get() < listed.len(),
            "{metric}: accept asked {} times for {} listed rows",
            asked.get(),
            listed.len()
        );
        let short = sq8_codes(&d, &d[..dim * 10], dim, metric);
        let short = Sq8View::from_codes(&short);
        assert_eq!(
            scan_sq8_codes(&v, &short, &query, 5, 10, Some(&listed), &accepted),
            want,
            "{metric}: codes that do not cover the rows"
        );
        // Unlisted: every row scanned, one in twenty accepted (a graph
        // the tail shadows almost whole).
        let sparse = |r: u32| r % 20 == 7;
        let every: Vec<u32> = (0..600).filter(|&r| sparse(r)).collect();
        let want = exact_scan(&v, &query, 5, ScanRows::Listed(&every));
        assert_eq!(
            scan_sq8_codes(&v, &view, &query, 5, every.len(), None, &sparse),
            want,
            "{metric}: every row scanned"
        );
        assert_eq!(
            scan_sq8_codes(&v, &short, &query, 5, 10, None, &sparse),
            want,
            "{metric}: every row, codes that do not cover the rows"
        );
        assert!(scan_sq8_codes(&v, &view, &query, 5, 10, None, &|_| false).is_empty());
    }
}

/// The listed scan ranked by sign bits first: with a shortlist as long as
/// the listed rows it answers as the SQ8 scan of those rows (the Hamming
/// pass drops nothing); with a short one it still answers listed,
/// accepted rows with exact scores; bits that do not cover the rows fall
/// back to the SQ8 scan of the listed rows.
#[test]
fn the_listed_sign_bit_scan_answers_as_the_sq8_scan_of_the_listed_rows() {
    use crate::{scan_sq8_codes, scan_sq8_shortlisted, Sq8View};
    let (dim, rows) = (128, 1_500);
    let d = data(rows, dim);
    let query: Vec<f32> = (0..dim).map(|i| (i as f32 / 5.0).cos()).collect();
    let v = Vectors::new(&d, dim, Metric::Cosine);
    let codes = sq8_codes(&d, &d, dim, Metric::Cosine);
    let view = Sq8View::from_codes(&codes);
    let bits = sign_bits(&d, &d, dim);
    // One row in three listed (the accepted rows of a mostly refused
    // graph), one listed row in seven refused by `accept` all the same.
    let listed: Vec<u32> = (0..rows as u32).filter(|r| r % 3 == 1).collect();
    let accept = |r: u32| !r.is_multiple_of(7);
    let want = scan_sq8_codes(&v, &view, &query, 5, 40, Some(&listed), &accept);
    let all = listed.len();
    assert_eq!(
        scan_sq8_shortlisted(&v, &view, &bits, &query, 5, all, 40, &listed, &accept),
        want
    );
    let short = scan_sq8_shortlisted(&v, &view, &bits, &query, 5, 60, 40, &listed, &accept);
    assert_eq!(short.len(), 5);
    for (row, score) in short {
        assert!(listed.contains(&row) && accept(row), "row {row}");
        let exact = exact_scan(&v, &query, 1, ScanRows::Listed(&[row]));
        assert_eq!(exact, vec![(row, score)], "scores are exact");
    }
    let few = sign_bits(&d, &d[..dim * 10], dim);
    assert_eq!(
        scan_sq8_shortlisted(&v, &view, &few, &query, 5, 60, 40, &listed, &accept),
        want,
        "bits that do not cover the rows"
    );
}

#[test]
fn scans_of_nothing_are_empty() {
    let d = data(10, 4);
    let v = Vectors::new(&d, 4, Metric::Dot);
    let q = [1.0, 0.0, 0.0, 0.0];
    assert!(exact_scan(&v, &q, 0, ScanRows::All(&|_| true)).is_empty());
    assert!(exact_scan(&v, &q[..3], 3, ScanRows::All(&|_| true)).is_empty());
    assert!(exact_scan(&v, &q, 3, ScanRows::Listed(&[])).is_empty());
    assert!(exact_scan(&v, &q, 3, ScanRows::All(&|_| false)).is_empty());
    assert_eq!(exact_scan(&v, &q, 30, ScanRows::Listed(&[4, 2])).len(), 2);
}

/// The shortlist's selection: every row it returns is accepted, it holds
/// at least `count` rows where that many are accepted (all of them where
/// fewer are), and it is exactly the accepted rows closer than some
/// distance (no accepted row left out is as close as one taken: ties at
/// the last distance taken are all kept), each row once.
#[test]
fn the_nearest_accepted_rows_are_all_those_below_a_distance() {
    let mut next = xorshift(0x2545_F491_4F6C_DD1D);
    for round in 0..40 {
        let rows = 1 + (next() % 3_000) as usize;
        let max_distance = 8 + (next() % 400) as usize;
        // Narrow spreads (many ties) and wide ones, some past the maximum.
        let spread = 1 + next() % (max_distance as u64 + 4);
        let distances: Vec<u32> = (0..rows).map(|_| (next() % spread) as u32).collect();
        let refuse_every = 1 + (next() % 5) as u32;
        let accept = |r: u32| r % refuse_every != 1 || refuse_every == 1;
        let count = (next() % 600) as usize;
        let taken = nearest_accepted(&distances, max_distance, count, &accept);
        let accepted = (0..rows as u32).filter(|&r| accept(r)).count();
        assert!(taken.iter().all(|&r| accept(r)), "round {round}");
        assert!(taken.len() >= count.min(accepted), "round {round}");
        let mut sorted = taken.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), taken.len(), "round {round}: each row once");
        let cap = |d: u32| d.min(max_distance as u32 + 1);
        let far = taken.iter().map(|&r| cap(distances[r as usize])).max();
        for r in (0..rows as u32).filter(|&r| accept(r)) {
            let d = cap(distances[r as usize]);
            if far.is_some_and(|f| d <= f) {
                assert!(
                    sorted.binary_search(&r).is_ok(),
                    "round {round}: row {r} left out"
                );
            }
        }
    }
}

/// The selection written plainly: buckets from the nearest, as many as
/// hold the rows still wanted, their accepted rows in row order, again
/// while `accept` turns rows away.
fn plain_nearest_accepted(
    distances: &[u32],
    max_distance: usize,
    count: usize,
    accept: &dyn Fn(u32) -> bool,
) -> Vec<u32> {
    let cap = max_distance as u32 + 1;
    let mut histogram = vec![0usize; cap as usize + 1];
    for &d in distances {
        histogram[d.min(cap) as usize] += 1;
    }
    let (mut taken, mut from) = (Vec::new(), 0u32);
    while taken.len() < count && from <= cap {
        let (mut to, mut rows) = (from, 0);
        while to <= cap && rows < count - taken.len() {
            rows += histogram[to as usize];
            to += 1;
        }
        for (row, &d) in distances.iter().enumerate() {
            if (from..to).contains(&d.min(cap)) && accept(row as u32) {
                taken.push(row as u32);
            }
        }
        from = to;
    }
    taken
}

/// On many rows the first stop comes from a sample of the distances; the
/// rows taken, and their order, are those of the plain selection, with
/// Hamming-like distances (most rows near half the bits) and narrow
/// spreads, whatever `accept` turns away.
#[test]
fn the_sampled_selection_takes_what_the_plain_one_does() {
    let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
    for round in 0..24 {
        let rows = 4_096 + (next() % 40_000) as usize;
        let words = 1 + (next() % 6) as usize;
        let max_distance = words * 64;
        let narrow = round % 3 == 2;
        let distances: Vec<u32> = (0..rows)
            .map(|_| {
                if narrow {
                    (next() % 5) as u32
                } else {
                    (0..words).map(|_| next().count_ones()).sum::<u32>() / 2 + (next() % 4) as u32
                }
            })
            .collect();
        let refuse_every = (next() % 4) as u32;
        let accept = |r: u32| refuse_every == 0 || r % (refuse_every + 1) != 1;
        for count in [1, 40, 400, 640, rows / 5] {
            let got = nearest_accepted(&distances, max_distance, count, &accept);
            let want = plain_nearest_accepted(&distances, max_distance, count, &accept);
            assert_eq!(got, want, "round {round} rows {rows} count {count}");
        }
    }
}

/// Every width, fixed or not, gathers the listed rows' words in list
/// order, as copying each row's slice does.
#[test]
fn gathered_codes_are_the_listed_rows_in_order_at_every_width() {
    for words in [1, 2, 3, 4, 6, 8, 12, 16, 24, 25] {
        let rows = 50;
        let all: Vec<u64> = (0..(rows * words) as u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect();
        let ids: Vec<u32> = (0..rows as u32).rev().step_by(3).collect();
        let mut to = vec![0; ids.len() * words];
        gather_codes(&all, &ids, words, &mut to);
        let want: Vec<u64> = ids
            .iter()
            .flat_map(|&r| all[r as usize * words..(r as usize + 1) * words].to_vec())
            .collect();
        assert_eq!(to, want, "{words} words");
    }
}
