//! SQ8 codes held in memory for rows that have no graph yet: the query
//! tail, and a sealed segment waiting for its index file. A search scans the
//! codes (a quarter of the f32 bytes) and rescores the best rows exactly,
//! instead of scanning every row in f32 ([`eddy_hnsw::quantized_scan`]).

use eddy_model::Metric;
use eddy_quant::sq8::{Sq8Codes, Sq8Config, Sq8Quantizer};

/// Rows from which codes are kept: below it an f32 scan costs about as
/// much as scanning codes and rescoring.
pub const SCAN_CODES_FROM_ROWS: usize = 1_024;

/// How many rows ranked by code are rescored exactly for a top `k`: 4k, at
/// least 40 (on 20k rows of real 384-d embeddings 40 gave the exact scan's
/// top 10 for all of 1,000 queries, 20 for 99.94 %;
/// `cargo run --release -p eddy-segment --example tail_scan`).
pub fn scan_rescore_depth(k: usize) -> usize {
    k.saturating_mul(4).max(40)
}

/// An SQ8 quantizer for `metric` whose range is trained on `vectors` (rows
/// of `dim`); `None` when they cannot train one (no rows, non-finite values).
pub fn scan_quantizer(vectors: &[f32], dim: usize, metric: Metric) -> Option<Sq8Quantizer> {
    let config = Sq8Config {
        metric,
        ..Sq8Config::default()
    };
    Sq8Quantizer::train(vectors, dim, &config).ok()
}

/// Codes of every row of `vectors` for a code scan, trained on those rows;
/// `None` below [`SCAN_CODES_FROM_ROWS`] rows or when they cannot be encoded.
pub fn train_scan_codes(vectors: &[f32], dim: usize, metric: Metric) -> Option<Sq8Codes> {
    if dim == 0 || vectors.len() / dim < SCAN_CODES_FROM_ROWS {
        return None;
    }
    scan_quantizer(vectors, dim, metric)?
        .encode_all(vectors)
        .ok()
}

#[cfg(test)]
mod tests {
    use eddy_quant::CodeScorer as _;

    use super::*;

    #[test]
    fn few_rows_keep_no_codes_and_enough_rows_code_every_row() {
        let dim = 8;
        let row = |i: usize| (0..dim).map(move |d| ((i * 7 + d * 3) % 11) as f32 - 5.0);
        let few: Vec<f32> = (0..SCAN_CODES_FROM_ROWS - 1).flat_map(row).collect();
        assert!(train_scan_codes(&few, dim, Metric::L2).is_none());
        let enough: Vec<f32> = (0..SCAN_CODES_FROM_ROWS).flat_map(row).collect();
        let codes = train_scan_codes(&enough, dim, Metric::L2).expect("codes");
        assert_eq!(codes.len(), SCAN_CODES_FROM_ROWS);
        assert_eq!(codes.codes().len(), SCAN_CODES_FROM_ROWS * dim);
    }

    #[test]
    fn the_rescore_depth_is_four_k_and_at_least_forty() {
        assert_eq!(scan_rescore_depth(1), 40);
        assert_eq!(scan_rescore_depth(10), 40);
        assert_eq!(scan_rescore_depth(25), 100);
        assert_eq!(scan_rescore_depth(usize::MAX), usize::MAX);
    }
}
