//! Product quantization: `m` sub-spaces, 256 centroids each (seeded k-means),
//! one byte per sub-space; queries are scored by per-query lookup tables (ADC)
//! with the batch kernel [`eddy_kernels::pq_adc`].

use eddy_kernels::Kernels;
use eddy_model::Metric;
use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::{check_query, rows_of, CodeScorer, Error, Result};

/// Centroids per sub-space (one byte per code).
pub const CENTROIDS: usize = 256;

/// Training parameters for [`PqQuantizer`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PqConfig {
    /// Number of sub-spaces (bytes per code); must divide the dimension.
    pub m: usize,
    /// Lloyd iterations of k-means.
    pub iterations: usize,
    /// Maximum training rows sampled.
    pub max_train_rows: usize,
    /// Seed for the sample and the initial centroids.
    pub seed: u64,
    /// Metric the lookup tables estimate.
    pub metric: Metric,
}

impl Default for PqConfig {
    fn default() -> Self {
        Self {
            m: 48,
            iterations: 10,
            max_train_rows: 10_000,
            seed: 42,
            metric: Metric::Dot,
        }
    }
}

/// Trained PQ codebooks.
#[derive(Debug, Clone, PartialEq)]
pub struct PqQuantizer {
    dim: usize,
    m: usize,
    sub: usize,
    /// `m` codebooks of `CENTROIDS × sub` values.
    centroids: Vec<f32>,
    metric: Metric,
}

/// Index of the centroid nearest to `v` in a codebook of `CENTROIDS` rows.
fn nearest(k: &Kernels, v: &[f32], book: &[f32], dist: &mut [f32]) -> usize {
    k.l2sq_block(v, book, dist);
    let mut best = 0;
    for (i, &d) in dist.iter().enumerate() {
        if d < dist[best] {
            best = i;
        }
    }
    best
}

impl PqQuantizer {
    /// Train one k-means codebook per sub-space on a seeded row sample.
    ///
    /// # Errors
    /// On a ragged matrix, non-finite values, `m` not dividing the dimension,
    /// or fewer than [`CENTROIDS`] rows.
    pub fn train(data: &[f32], dim: usize, config: &PqConfig) -> Result<Self> {
        let rows = rows_of(data, dim)?;
        if config.m == 0 || !dim.is_multiple_of(config.m) {
            return Err(Error::InvalidParam {
                name: "m",
                reason: "must be positive and divide the dimension",
            });
        }
        if rows < CENTROIDS {
            return Err(Error::TooFewVectors {
                need: CENTROIDS,
                got: rows,
            });
        }
        let (m, sub) = (config.m, dim / config.m);
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        let picked: Vec<usize> = sample(
            &mut rng,
            rows,
            rows.min(config.max_train_rows.max(CENTROIDS)),
        )
        .into_vec();
        let k = Kernels::get();
        let mut centroids = vec![0.0f32; m * CENTROIDS * sub];
        let mut dist = vec![0.0f32; CENTROIDS];
        for j in 0..m {
            let points: Vec<f32> = picked
                .iter()
                .flat_map(|&r| {
                    data[r * dim + j * sub..r * dim + (j + 1) * sub]
                        .iter()
                        .copied()
                })
                .collect();
            let n = picked.len();
            let book = &mut centroids[j * CENTROIDS * sub..(j + 1) * CENTROIDS * sub];
            for (c, p) in sample(&mut rng, n, CENTROIDS).iter().enumerate() {
                book[c * sub..(c + 1) * sub].copy_from_slice(&points[p * sub..(p + 1) * sub]);
            }
            let mut assign = vec![0usize; n];
            for _ in 0..config.iterations {
                for (a, p) in assign.iter_mut().zip(points.chunks_exact(sub)) {
                    *a = nearest(k, p, book, &mut dist);
                }
                let mut sums = vec![0f64; CENTROIDS * sub];
                let mut counts = vec![0usize; CENTROIDS];
                for (&a, p) in assign.iter().zip(points.chunks_exact(sub)) {
                    counts[a] += 1;
                    for (s, &x) in sums[a * sub..(a + 1) * sub].iter_mut().zip(p) {
                        *s += f64::from(x);
                    }
                }
                for c in 0..CENTROIDS {
                    let dst = &mut book[c * sub..(c + 1) * sub];
                    if counts[c] == 0 {
                        // Empty cluster: restart it on a random training point.
                        let p = sample(&mut rng, n, 1).index(0);
                        dst.copy_from_slice(&points[p * sub..(p + 1) * sub]);
                    } else {
                        for (d, s) in dst.iter_mut().zip(&sums[c * sub..(c + 1) * sub]) {
                            *d = (s / counts[c] as f64) as f32;
                        }
                    }
                }
            }
        }
        Ok(Self {
            dim,
            m,
            sub,
            centroids,
            metric: config.metric,
        })
    }

    /// Bytes per code (number of sub-spaces).
    pub fn m(&self) -> usize {
        self.m
    }

    /// Encode `v` into `code` (`m` bytes).
    ///
    /// # Errors
    /// On wrong lengths or non-finite values.
    pub fn encode_into(&self, v: &[f32], code: &mut [u8]) -> Result<()> {
        check_query(v, self.dim)?;
        if code.len() != self.m {
            return Err(Error::DimMismatch {
                expected: self.m,
                got: code.len(),
            });
        }
        let k = Kernels::get();
        let mut dist = vec![0.0f32; CENTROIDS];
        for (j, c) in code.iter_mut().enumerate() {
            let book = &self.centroids[j * CENTROIDS * self.sub..(j + 1) * CENTROIDS * self.sub];
            *c = nearest(k, &v[j * self.sub..(j + 1) * self.sub], book, &mut dist) as u8;
        }
        Ok(())
    }

    /// Encode every row of `data`.
    ///
    /// # Errors
    /// On a ragged matrix or non-finite values.
    pub fn encode_all(&self, data: &[f32]) -> Result<PqCodes> {
        let rows = rows_of(data, self.dim)?;
        let mut codes = vec![0u8; rows * self.m];
        for (v, code) in data
            .chunks_exact(self.dim)
            .zip(codes.chunks_exact_mut(self.m))
        {
            self.encode_into(v, code)?;
        }
        Ok(PqCodes {
            quantizer: self.clone(),
            codes,
            rows,
        })
    }
}

/// PQ codes of a collection.
#[derive(Debug, Clone)]
pub struct PqCodes {
    quantizer: PqQuantizer,
    codes: Vec<u8>,
    rows: usize,
}

impl PqCodes {
    /// Row-major codes, `m` bytes per row.
    pub fn codes(&self) -> &[u8] {
        &self.codes
    }
}

impl CodeScorer for PqCodes {
    /// The lookup table: `m × 256` partial scores.
    type Query = Vec<f32>;

    fn dim(&self) -> usize {
        self.quantizer.dim
    }

    fn len(&self) -> usize {
        self.rows
    }

    fn bytes_per_vector(&self) -> usize {
        self.quantizer.m
    }

    fn prepare(&self, query: &[f32]) -> Result<Vec<f32>> {
        let q = &self.quantizer;
        check_query(query, q.dim)?;
        let k = Kernels::get();
        let mut lut = vec![0.0f32; q.m * CENTROIDS];
        for (j, table) in lut.chunks_exact_mut(CENTROIDS).enumerate() {
            let part = &query[j * q.sub..(j + 1) * q.sub];
            let book = &q.centroids[j * CENTROIDS * q.sub..(j + 1) * CENTROIDS * q.sub];
            match q.metric {
                Metric::Cosine | Metric::Dot => k.dot_block(part, book, table),
                Metric::L2 => {
                    k.l2sq_block(part, book, table);
                    table.iter_mut().for_each(|x| *x = -*x);
                }
            }
        }
        Ok(lut)
    }

    fn prefetch(&self, row: usize) {
        let m = self.quantizer.m;
        if let Some(code) = self.codes.get(row * m..(row + 1) * m) {
            eddy_kernels::prefetch(code);
        }
    }

    fn score(&self, lut: &Vec<f32>, row: usize) -> f32 {
        let m = self.quantizer.m;
        let mut out = [0.0f32];
        Kernels::get().pq_adc(lut, &self.codes[row * m..(row + 1) * m], &mut out);
        out[0]
    }

    fn score_all(&self, lut: &Vec<f32>, out: &mut [f32]) {
        Kernels::get().pq_adc(lut, &self.codes, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trains_encodes_and_scores() {
        let dim = 8;
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let data: Vec<f32> = (0..dim * 600)
            .map(|_| rand::Rng::random_range(&mut rng, -1.0f32..1.0))
            .collect();
        let cfg = PqConfig {
            m: 4,
            iterations: 4,
            ..PqConfig::default()
        };
        let pq = PqQuantizer::train(&data, dim, &cfg).expect("train");
        let codes = pq.encode_all(&data).expect("encode");
        assert_eq!(codes.bytes_per_vector(), 4);
        let lut = codes.prepare(&data[..dim]).expect("prepare");
        let mut all = vec![0.0; codes.len()];
        codes.score_all(&lut, &mut all);
        assert_eq!(all[3], codes.score(&lut, 3));
        let exact = eddy_kernels::dot(&data[..dim], &data[..dim]);
        assert!(
            (all[0] - exact).abs() < 0.35 * exact,
            "{} vs {exact}",
            all[0]
        );
        assert!(PqQuantizer::train(&data, dim, &PqConfig { m: 3, ..cfg }).is_err());
        assert!(PqQuantizer::train(&data[..dim * 10], dim, &cfg).is_err());
    }
}
