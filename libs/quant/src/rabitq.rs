//! Rotated 4-bit quantization with norm correction (RaBitQ / TurboQuant family).
//!
//! Training learns the data mean `μ` and a seeded random orthogonal rotation
//! `R` (Gram–Schmidt on a Gaussian matrix) over the dimension padded to a
//! multiple of 64. A row is centred, rotated and scaled to the unit vector
//! `u = R(x−μ)/r`; `u` is quantized per row to 16 uniform levels on
//! `[−max|uᵢ|, max|uᵢ|]`, giving `û`. The estimator
//! `⟨y, x−μ⟩ ≈ r·⟨Ry, û⟩ / ⟨u, û⟩` corrects the norm and direction error of the
//! code; the query side `Ry` is kept as u8 and scored with the
//! [`eddy_kernels::dot_u8_u4`] kernel. Per row: `D/2` code bytes and four f32
//! correction terms.

use eddy_kernels::Kernels;
use eddy_model::Metric;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{check_query, rows_of, CodeScorer, Error, Result};

/// Training parameters for [`RabitqQuantizer`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RabitqConfig {
    /// Metric the scores estimate.
    pub metric: Metric,
    /// Seed of the rotation.
    pub seed: u64,
}

impl Default for RabitqConfig {
    fn default() -> Self {
        Self {
            metric: Metric::Dot,
            seed: 42,
        }
    }
}

/// Trained rotation and centre.
#[derive(Debug, Clone, PartialEq)]
pub struct RabitqQuantizer {
    dim: usize,
    padded: usize,
    mean: Vec<f32>,
    /// `padded × padded`, row-major, orthonormal rows.
    rotation: Vec<f32>,
    metric: Metric,
}

/// Per-row correction terms: `est = −a·Σq' + q_lo·b + q_step·c·dot`, and `r²`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Factors {
    a: f32,
    b: f32,
    c: f32,
    r2: f32,
}

fn random_rotation(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut gauss = || {
        // Box–Muller.
        let u1: f64 = rng.random_range(f64::EPSILON..1.0);
        let u2: f64 = rng.random();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    };
    let mut m: Vec<f64> = (0..n * n).map(|_| gauss()).collect();
    for i in 0..n {
        for j in 0..i {
            let d: f64 = (0..n).map(|t| m[i * n + t] * m[j * n + t]).sum();
            for t in 0..n {
                m[i * n + t] -= d * m[j * n + t];
            }
        }
        let norm = (0..n)
            .map(|t| m[i * n + t] * m[i * n + t])
            .sum::<f64>()
            .sqrt();
        for t in 0..n {
            m[i * n + t] /= norm;
        }
    }
    m.into_iter().map(|x| x as f32).collect()
}

impl RabitqQuantizer {
    /// Learn the mean of `data` and draw the rotation.
    ///
    /// # Errors
    /// On a ragged or empty matrix or non-finite values.
    pub fn train(data: &[f32], dim: usize, config: &RabitqConfig) -> Result<Self> {
        let rows = rows_of(data, dim)?;
        if rows == 0 {
            return Err(Error::TooFewVectors { need: 1, got: 0 });
        }
        let mut sum = vec![0f64; dim];
        for v in data.chunks_exact(dim) {
            for (s, &x) in sum.iter_mut().zip(v) {
                *s += f64::from(x);
            }
        }
        let mean = sum.iter().map(|s| (s / rows as f64) as f32).collect();
        let padded = dim.next_multiple_of(64);
        let rotation = random_rotation(padded, config.seed);
        Ok(Self {
            dim,
            padded,
            mean,
            rotation,
            metric: config.metric,
        })
    }

    /// `R·pad(v − μ)` if `centre`, else `R·pad(v)`.
    fn rotate(&self, v: &[f32], centre: bool) -> Vec<f32> {
        let mut x = vec![0.0f32; self.padded];
        for (i, (o, &vi)) in x.iter_mut().zip(v).enumerate() {
            *o = if centre { vi - self.mean[i] } else { vi };
        }
        let mut out = vec![0.0f32; self.padded];
        Kernels::get().dot_block(&x, &self.rotation, &mut out);
        out
    }

    /// Encode `v` into `code` (`padded / 2` bytes) and return its correction terms.
    fn encode_into(&self, v: &[f32], code: &mut [u8]) -> Factors {
        code.fill(0);
        let rotated = self.rotate(v, true);
        let r2 = eddy_kernels::dot(&rotated, &rotated);
        let r = r2.sqrt();
        if r == 0.0 {
            return Factors {
                r2,
                ..Factors::default()
            };
        }
        let max = rotated.iter().fold(0.0f32, |m, x| m.max(x.abs())) / r;
        let step = 2.0 * max / 15.0;
        let (mut dot_uu, mut sum_c) = (0.0f32, 0u32);
        for (i, &x) in rotated.iter().enumerate() {
            let u = x / r;
            let c = ((u + max) / step).round().clamp(0.0, 15.0) as u8;
            dot_uu += u * (-max + step * f32::from(c));
            sum_c += u32::from(c);
            let (block, t) = (i / 64, i % 64);
            code[block * 32 + t % 32] |= if t < 32 { c } else { c << 4 };
        }
        let alpha = if dot_uu > 0.0 { r / dot_uu } else { 0.0 };
        Factors {
            a: alpha * max,
            b: alpha * step * sum_c as f32,
            c: alpha * step,
            r2,
        }
    }

    /// Encode every row of `data`.
    ///
    /// # Errors
    /// On a ragged matrix or non-finite values.
    pub fn encode_all(&self, data: &[f32]) -> Result<RabitqCodes> {
        let rows = rows_of(data, self.dim)?;
        let bytes = self.padded / 2;
        let mut codes = vec![0u8; rows * bytes];
        let factors = data
            .chunks_exact(self.dim)
            .zip(codes.chunks_exact_mut(bytes))
            .map(|(v, code)| self.encode_into(v, code))
            .collect();
        Ok(RabitqCodes {
            quantizer: self.clone(),
            codes,
            factors,
        })
    }
}

/// Rotated 4-bit codes of a collection with their correction terms.
#[derive(Debug, Clone)]
pub struct RabitqCodes {
    quantizer: RabitqQuantizer,
    codes: Vec<u8>,
    factors: Vec<Factors>,
}

/// A query rotated and quantized to u8 for [`RabitqCodes`].
#[derive(Debug, Clone)]
pub struct RabitqQuery {
    levels: Vec<u8>,
    lo: f32,
    step: f32,
    sum: f32,
    constant: f32,
}

impl CodeScorer for RabitqCodes {
    type Query = RabitqQuery;

    fn dim(&self) -> usize {
        self.quantizer.dim
    }

    fn len(&self) -> usize {
        self.factors.len()
    }

    fn bytes_per_vector(&self) -> usize {
        self.quantizer.padded / 2 + 16
    }

    fn prepare(&self, query: &[f32]) -> Result<RabitqQuery> {
        let q = &self.quantizer;
        check_query(query, q.dim)?;
        let centre = q.metric == Metric::L2;
        let rotated = q.rotate(query, centre);
        let constant = match q.metric {
            Metric::Cosine | Metric::Dot => eddy_kernels::dot(query, &q.mean),
            Metric::L2 => eddy_kernels::l2sq(query, &q.mean),
        };
        let lo = rotated.iter().copied().fold(f32::INFINITY, f32::min);
        let hi = rotated.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let step = if hi > lo { (hi - lo) / 255.0 } else { 1.0 };
        let levels = rotated
            .iter()
            .map(|&x| ((x - lo) / step).round().clamp(0.0, 255.0) as u8)
            .collect();
        Ok(RabitqQuery {
            levels,
            lo,
            step,
            sum: rotated.iter().sum(),
            constant,
        })
    }

    fn prefetch(&self, row: usize) {
        let bytes = self.quantizer.padded / 2;
        if let Some(code) = self.codes.get(row * bytes..(row + 1) * bytes) {
            eddy_kernels::prefetch(code);
        }
        if let Some(f) = self.factors.get(row..=row) {
            eddy_kernels::prefetch(f);
        }
    }

    fn score(&self, query: &RabitqQuery, row: usize) -> f32 {
        let bytes = self.quantizer.padded / 2;
        let code = &self.codes[row * bytes..(row + 1) * bytes];
        let f = self.factors[row];
        let dot = Kernels::get().dot_u8_u4(&query.levels, code) as f32;
        let est = -f.a * query.sum + query.lo * f.b + query.step * f.c * dot;
        match self.quantizer.metric {
            Metric::Cosine | Metric::Dot => query.constant + est,
            Metric::L2 => -(query.constant + f.r2 - 2.0 * est),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_is_orthonormal() {
        let n = 64;
        let r = random_rotation(n, 3);
        for i in 0..n {
            for j in 0..n {
                let d = eddy_kernels::dot(&r[i * n..(i + 1) * n], &r[j * n..(j + 1) * n]);
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((d - want).abs() < 1e-4, "({i},{j}) = {d}");
            }
        }
    }

    #[test]
    fn estimates_track_exact_scores() {
        let dim = 48;
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let data: Vec<f32> = (0..dim * 40)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        for metric in [Metric::Dot, Metric::L2] {
            let q = RabitqQuantizer::train(&data, dim, &RabitqConfig { metric, seed: 1 })
                .expect("train");
            let codes = q.encode_all(&data).expect("encode");
            assert_eq!(codes.bytes_per_vector(), 32 + 16);
            let query = &data[..dim];
            let p = codes.prepare(query).expect("prepare");
            for row in 0..40 {
                let x = &data[row * dim..(row + 1) * dim];
                let (exact, approx) = (crate::exact_score(metric, query, x), codes.score(&p, row));
                // 4 bits in 64 rotated coordinates: a few percent of |q|·|x|.
                let scale = (eddy_kernels::dot(query, query) * eddy_kernels::dot(x, x)).sqrt();
                assert!(
                    (exact - approx).abs() < 0.12 * scale,
                    "{metric:?} {row}: {exact} vs {approx}"
                );
            }
        }
    }
}
