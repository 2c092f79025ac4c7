//! SQ8: scalar quantization to u8 with one global range learned from quantiles.
//!
//! `x ≈ lo + Δ·c` with `c ∈ 0..=255`. For inner product,
//! `q·x ≈ Δ²·(c_q·c_x) + lo·Δ·Σc_x + lo·Δ·Σc_q + d·lo²`: the integer dot runs on
//! the u8 kernel and `lo·Δ·Σc_x` is the per-vector correction term stored with
//! the code. For L2 the offset cancels: `‖q−x‖² ≈ Δ²·‖c_q−c_x‖²`.

use eddy_kernels::Kernels;
use eddy_model::Metric;
use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::{check_query, rows_of, CodeScorer, Error, Result};

/// Training parameters for [`Sq8Quantizer`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sq8Config {
    /// Central fraction of all coordinate values the range covers (0.5..=1.0).
    pub quantile: f32,
    /// Metric the approximate scores estimate.
    pub metric: Metric,
    /// Maximum training rows sampled.
    pub max_train_rows: usize,
    /// Seed for the row sample.
    pub seed: u64,
}

impl Default for Sq8Config {
    fn default() -> Self {
        Self {
            quantile: 0.99,
            metric: Metric::Dot,
            max_train_rows: 20_000,
            seed: 42,
        }
    }
}

/// Trained SQ8 parameters: one offset and step for every coordinate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sq8Quantizer {
    dim: usize,
    lo: f32,
    delta: f32,
    metric: Metric,
}

impl Sq8Quantizer {
    /// Learn the range from the `quantile` central values of a row sample of `data`.
    ///
    /// # Errors
    /// On a ragged or empty matrix, non-finite values or a quantile outside 0.5..=1.
    pub fn train(data: &[f32], dim: usize, config: &Sq8Config) -> Result<Self> {
        let rows = rows_of(data, dim)?;
        if rows == 0 {
            return Err(Error::TooFewVectors { need: 1, got: 0 });
        }
        if !(0.5..=1.0).contains(&config.quantile) {
            return Err(Error::InvalidParam {
                name: "quantile",
                reason: "must be within 0.5..=1.0",
            });
        }
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        let take = rows.min(config.max_train_rows.max(1));
        let mut values: Vec<f32> = sample(&mut rng, rows, take)
            .into_iter()
            .flat_map(|r| data[r * dim..(r + 1) * dim].iter().copied())
            .collect();
        let n = values.len();
        let tail = (1.0 - config.quantile) / 2.0;
        let lo_rank = ((n as f32 * tail) as usize).min(n - 1);
        let hi_rank = ((n as f32 * (1.0 - tail)) as usize).clamp(lo_rank, n - 1);
        let lo = *values.select_nth_unstable_by(lo_rank, f32::total_cmp).1;
        let hi = *values.select_nth_unstable_by(hi_rank, f32::total_cmp).1;
        let delta = if hi > lo { (hi - lo) / 255.0 } else { 1.0 };
        Ok(Self {
            dim,
            lo,
            delta,
            metric: config.metric,
        })
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Lower end of the range (the value of code 0).
    pub fn lo(&self) -> f32 {
        self.lo
    }

    /// Step between adjacent codes.
    pub fn delta(&self) -> f32 {
        self.delta
    }

    /// Encode `v` into `code` and return its correction term `lo·Δ·Σc`.
    ///
    /// # Errors
    /// On wrong lengths or non-finite values.
    pub fn encode_into(&self, v: &[f32], code: &mut [u8]) -> Result<f32> {
        check_query(v, self.dim)?;
        if code.len() != self.dim {
            return Err(Error::DimMismatch {
                expected: self.dim,
                got: code.len(),
            });
        }
        let inv = 1.0 / self.delta;
        let mut sum = 0u32;
        for (c, &x) in code.iter_mut().zip(v) {
            *c = round_to_code((x - self.lo) * inv);
            sum += u32::from(*c);
        }
        Ok(self.lo * self.delta * sum as f32)
    }

    /// Encode every row of `data`.
    ///
    /// # Errors
    /// On a ragged matrix or non-finite values.
    pub fn encode_all(&self, data: &[f32]) -> Result<Sq8Codes> {
        let rows = rows_of(data, self.dim)?;
        let mut codes = vec![0u8; rows * self.dim];
        let mut corrections = Vec::with_capacity(rows);
        for (v, code) in data
            .chunks_exact(self.dim)
            .zip(codes.chunks_exact_mut(self.dim))
        {
            corrections.push(self.encode_into(v, code)?);
        }
        Ok(Sq8Codes {
            quantizer: *self,
            codes,
            corrections,
        })
    }
}

/// `y` rounded half away from zero and clamped to a code, as
/// `y.round().clamp(0.0, 255.0) as u8`, without `f32::round`: it is a libm
/// call that kept the encoding loop scalar (`roundf` ~0.6 % of eddy-query's
/// CPU beside a writer, inside the tail's write lock). Clamped first, `y`
/// lies in [0, 255], where rounding is the truncation plus one for a
/// fraction of at least a half, and that fraction is exact.
#[inline(always)]
fn round_to_code(y: f32) -> u8 {
    let y = y.clamp(0.0, 255.0);
    let whole = y as i32;
    (whole + i32::from(y - whole as f32 >= 0.5)) as u8
}

/// SQ8 codes of a collection with their correction terms.
#[derive(Debug, Clone)]
pub struct Sq8Codes {
    quantizer: Sq8Quantizer,
    codes: Vec<u8>,
    corrections: Vec<f32>,
}

/// A query encoded for SQ8 scoring.
#[derive(Debug, Clone)]
pub struct Sq8Query {
    code: Vec<u8>,
    offset: f32,
}

impl Sq8Codes {
    /// An empty set that rows are appended to one at a time ([`Sq8Codes::push`]),
    /// for a buffer that grows while it is searched.
    pub fn empty(quantizer: Sq8Quantizer) -> Self {
        Self {
            quantizer,
            codes: Vec::new(),
            corrections: Vec::new(),
        }
    }

    /// Encodes `v` as the next row (values outside the trained range clamp).
    ///
    /// # Errors
    /// On a wrong length or non-finite values; nothing is appended then.
    pub fn push(&mut self, v: &[f32]) -> Result<()> {
        let start = self.codes.len();
        self.codes.resize(start + self.quantizer.dim, 0);
        match self.quantizer.encode_into(v, &mut self.codes[start..]) {
            Ok(correction) => {
                self.corrections.push(correction);
                Ok(())
            }
            Err(e) => {
                self.codes.truncate(start);
                Err(e)
            }
        }
    }

    /// The quantizer that produced the codes.
    pub fn quantizer(&self) -> &Sq8Quantizer {
        &self.quantizer
    }

    /// Row-major codes, `dim` bytes per row.
    pub fn codes(&self) -> &[u8] {
        &self.codes
    }

    /// Per-row correction terms.
    pub fn corrections(&self) -> &[f32] {
        &self.corrections
    }
}

impl CodeScorer for Sq8Codes {
    type Query = Sq8Query;

    fn dim(&self) -> usize {
        self.quantizer.dim
    }

    fn len(&self) -> usize {
        self.corrections.len()
    }

    fn bytes_per_vector(&self) -> usize {
        self.quantizer.dim + 4
    }

    fn prepare(&self, query: &[f32]) -> Result<Sq8Query> {
        let q = &self.quantizer;
        let mut code = vec![0u8; q.dim];
        let corr = q.encode_into(query, &mut code)?;
        let offset = corr + q.dim as f32 * q.lo * q.lo;
        Ok(Sq8Query { code, offset })
    }

    fn prefetch(&self, row: usize) {
        let dim = self.quantizer.dim;
        if let Some(code) = self.codes.get(row * dim..(row + 1) * dim) {
            eddy_kernels::prefetch(code);
        }
        if let Some(c) = self.corrections.get(row..=row) {
            eddy_kernels::prefetch(c);
        }
    }

    fn score(&self, query: &Sq8Query, row: usize) -> f32 {
        let dim = self.quantizer.dim;
        let code = &self.codes[row * dim..(row + 1) * dim];
        let d2 = self.quantizer.delta * self.quantizer.delta;
        match self.quantizer.metric {
            Metric::Cosine | Metric::Dot => {
                d2 * Kernels::get().dot_u8(&query.code, code) as f32
                    + self.corrections[row]
                    + query.offset
            }
            Metric::L2 => -d2 * Kernels::get().l2sq_u8(&query.code, code) as f32,
        }
    }

    fn score_all(&self, query: &Sq8Query, out: &mut [f32]) {
        const CHUNK: usize = 1024;
        let k = Kernels::get();
        let dim = self.quantizer.dim;
        let d2 = self.quantizer.delta * self.quantizer.delta;
        let mut raw = [0u32; CHUNK];
        let chunks = self
            .codes
            .chunks(CHUNK * dim)
            .zip(out.chunks_mut(CHUNK))
            .zip(self.corrections.chunks(CHUNK));
        for ((codes, out), corr) in chunks {
            let raw = &mut raw[..out.len()];
            match self.quantizer.metric {
                Metric::Cosine | Metric::Dot => {
                    k.dot_u8_block(&query.code, codes, raw);
                    for ((o, &r), &c) in out.iter_mut().zip(raw.iter()).zip(corr) {
                        *o = d2 * r as f32 + c + query.offset;
                    }
                }
                Metric::L2 => {
                    k.l2sq_u8_block(&query.code, codes, raw);
                    for (o, &r) in out.iter_mut().zip(raw.iter()) {
                        *o = -d2 * r as f32;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The code rounding agrees with `f32::round` then clamping everywhere
    /// it could differ: at every half step of the range and beyond it, one
    /// ulp either side of each, out-of-range and non-finite values, and a
    /// sweep of ordinary values.
    #[test]
    fn code_rounding_matches_rounding_half_away_from_zero() {
        let reference = |y: f32| y.round().clamp(0.0, 255.0) as u8;
        let mut values = vec![
            f32::NEG_INFINITY,
            f32::INFINITY,
            f32::NAN,
            f32::MAX,
            f32::MIN,
            -0.0,
            0.0,
            0.5f32.next_down(),
            1e9,
            -1e9,
        ];
        for half in -20..=530 {
            let y = half as f32 * 0.5;
            values.extend([y.next_down(), y, y.next_up()]);
        }
        values.extend((0..200_000).map(|i| i as f32 * 0.001_37 - 3.0));
        for y in values {
            assert_eq!(round_to_code(y), reference(y), "{y:e}");
        }
    }

    #[test]
    fn scores_track_exact_dot_and_l2() {
        let dim = 16;
        let data: Vec<f32> = (0..dim * 50)
            .map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0)
            .collect();
        for metric in [Metric::Dot, Metric::L2] {
            let cfg = Sq8Config {
                quantile: 1.0,
                metric,
                ..Sq8Config::default()
            };
            let q = Sq8Quantizer::train(&data, dim, &cfg).expect("train");
            let codes = q.encode_all(&data).expect("encode");
            let query = &data[3 * dim..4 * dim];
            let prepared = codes.prepare(query).expect("prepare");
            for row in 0..50 {
                let exact = crate::exact_score(metric, query, &data[row * dim..(row + 1) * dim]);
                let approx = codes.score(&prepared, row);
                assert!(
                    (exact - approx).abs() < 0.01 * exact.abs() + dim as f32 * q.delta(),
                    "{metric:?} row {row}: {exact} vs {approx}"
                );
            }
        }
    }

    #[test]
    fn pushed_rows_encode_like_encode_all() {
        let dim = 8;
        let data: Vec<f32> = (0..dim * 20)
            .map(|i| ((i * 13 % 29) as f32 / 14.0) - 1.0)
            .collect();
        let q = Sq8Quantizer::train(&data, dim, &Sq8Config::default()).expect("train");
        let all = q.encode_all(&data).expect("encode");
        let mut grown = Sq8Codes::empty(q);
        for v in data.chunks_exact(dim) {
            grown.push(v).expect("push");
        }
        assert!(grown.push(&data[..dim - 1]).is_err(), "wrong length");
        assert!(grown.push(&[f32::NAN; 8]).is_err(), "non-finite");
        assert_eq!(grown.codes(), all.codes());
        assert_eq!(grown.corrections(), all.corrections());
    }

    #[test]
    fn rejects_bad_input() {
        let cfg = Sq8Config::default();
        assert_eq!(
            Sq8Quantizer::train(&[1.0, 2.0, 3.0], 2, &cfg),
            Err(Error::Ragged { len: 3, dim: 2 })
        );
        assert_eq!(
            Sq8Quantizer::train(&[f32::NAN, 1.0], 2, &cfg),
            Err(Error::NonFinite)
        );
        assert!(Sq8Quantizer::train(&[], 2, &cfg).is_err());
        let q = Sq8Quantizer::train(&[0.0, 1.0], 2, &cfg).expect("train");
        let mut code = [0u8; 2];
        assert!(q.encode_into(&[0.0], &mut code).is_err());
    }
}
