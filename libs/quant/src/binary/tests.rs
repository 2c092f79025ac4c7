//! Binary codes: plane layouts and sizes per encoding, asymmetric scores
//! ranking a row first for itself, rows pushed one by one encoded as a
//! whole matrix is, and Hamming distances as negated symmetric scores.

use super::*;

fn data(dim: usize, rows: usize) -> Vec<f32> {
    (0..dim * rows)
        .map(|i| (((i * 7919) % 997) as f32 / 498.5) - 1.0)
        .collect()
}

#[test]
fn layouts_and_sizes() {
    let d = data(100, 20);
    for (enc, words, bytes) in [
        (BinaryEncoding::OneBit, 2, 13),
        (BinaryEncoding::OneAndHalfBits, 3, 13 + 7),
        (BinaryEncoding::TwoBits, 4, 26),
    ] {
        let cfg = BinaryConfig {
            encoding: enc,
            query: QueryEncoding::Symmetric,
            ..BinaryConfig::default()
        };
        let q = BinaryQuantizer::train(&d, 100, &cfg).expect("train");
        assert_eq!(q.words_per_vector(), words);
        let codes = q.encode_all(&d).expect("encode");
        assert_eq!(codes.bytes_per_vector(), bytes);
        // A row is closest to itself under symmetric scoring.
        let p = codes.prepare(&d[500..600]).expect("prepare");
        assert_eq!(codes.score(&p, 5), 0.0);
    }
}

#[test]
fn asymmetric_prefers_the_row_itself() {
    let d = data(64, 30);
    for enc in [
        BinaryEncoding::OneBit,
        BinaryEncoding::OneAndHalfBits,
        BinaryEncoding::TwoBits,
    ] {
        let cfg = BinaryConfig {
            encoding: enc,
            query: QueryEncoding::Scalar8,
            ..BinaryConfig::default()
        };
        let q = BinaryQuantizer::train(&d, 64, &cfg).expect("train");
        let codes = q.encode_all(&d).expect("encode");
        let p = codes.prepare(&d[7 * 64..8 * 64]).expect("prepare");
        let mut s = vec![0.0; 30];
        codes.score_all(&p, &mut s);
        assert_eq!(crate::top_k(&s, 1)[0].0, 7, "{enc:?}");
    }
}

#[test]
fn pushed_rows_encode_like_encode_all() {
    let dim = 70;
    let data: Vec<f32> = (0..dim * 20)
        .map(|i| ((i * 13 % 29) as f32 / 14.0) - 1.0)
        .collect();
    for encoding in [BinaryEncoding::OneBit, BinaryEncoding::TwoBits] {
        let config = BinaryConfig {
            encoding,
            ..BinaryConfig::default()
        };
        let q = BinaryQuantizer::train(&data, dim, &config).expect("train");
        let all = q.encode_all(&data).expect("encode");
        let mut grown = BinaryCodes::empty(q);
        for v in data.chunks_exact(dim) {
            grown.push(v).expect("push");
        }
        assert!(grown.push(&[f32::NAN; 70]).is_err());
        assert!(grown.push(&[0.0; 3]).is_err());
        assert_eq!(grown.len(), all.len());
        assert_eq!(grown.codes(), all.codes());
        assert_eq!(grown.popcounts, all.popcounts);
    }
}

/// `hamming_all` gives every row's distance, as a symmetric query's
/// scores (their negation) do.
#[test]
fn hamming_all_is_the_symmetric_score_negated() {
    let dim = 130;
    let rows = 1_100; // more than one 1,024-row chunk
    let data: Vec<f32> = (0..dim * rows)
        .map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0)
        .collect();
    let config = BinaryConfig {
        query: QueryEncoding::Symmetric,
        ..BinaryConfig::default()
    };
    let codes = BinaryQuantizer::train(&data, dim, &config)
        .and_then(|q| q.encode_all(&data))
        .expect("codes");
    let query = &data[5 * dim..6 * dim];
    let Ok(BinaryQuery::Symmetric(code)) = codes.prepare(query) else {
        panic!("a symmetric query");
    };
    let mut distances = vec![0u32; rows];
    codes.hamming_all(&code, &mut distances);
    let mut scores = vec![0f32; rows];
    codes.score_all(&BinaryQuery::Symmetric(code), &mut scores);
    assert_eq!(distances[5], 0);
    for (d, s) in distances.iter().zip(&scores) {
        assert_eq!(-(*d as f32), *s);
    }
}

/// The word-at-a-time sign bits are the signs of the centred, scaled
/// values bit for bit (dimensions not a multiple of 64, values on the
/// centre, tiny and huge offsets), and the plane popcounts count them.
#[test]
fn one_bit_words_are_the_signs_of_the_centred_values() {
    for dim in [1, 63, 64, 65, 130, 384] {
        let d = data(dim, 40);
        let q = BinaryQuantizer::train(&d, dim, &BinaryConfig::default()).expect("train");
        let mut rows: Vec<Vec<f32>> = d.chunks(dim).map(<[f32]>::to_vec).collect();
        rows.push(q.mean.clone());
        rows.push(q.mean.iter().map(|m| m + 1e-30).collect());
        rows.push(q.mean.iter().map(|m| m - 1e30).collect());
        for v in &rows {
            let mut code = vec![0u64; q.words_per_vector()];
            let popcounts = q.encode_into(v, &mut code).expect("encode");
            for (i, ((x, m), s)) in v.iter().zip(&q.mean).zip(&q.inv_std).enumerate() {
                let bit = code[i / 64] >> (i % 64) & 1 == 1;
                assert_eq!(bit, (x - m) * s > 0.0, "dim {dim}, value {i}");
            }
            let set: u32 = code.iter().map(|w| w.count_ones()).sum();
            assert_eq!(popcounts, vec![set as u16]);
        }
    }
}
