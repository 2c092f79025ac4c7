//! Binary quantization: 1-bit, 1.5-bit and 2-bit codes scored with popcounts.
//!
//! Coordinates are centred and scaled per dimension (`z = (x − μ)/σ`, learned
//! from a seeded sample), then encoded as bit planes of `u64` words:
//!
//! - [`BinaryEncoding::OneBit`]: one plane, bit = `z > 0`.
//! - [`BinaryEncoding::TwoBits`]: a thermometer code of three levels
//!   (`z < −t`, middle, `z > t`): plane A = `z > −t`, plane B = `z > t`, so the
//!   Hamming distance of two codes is the level distance.
//! - [`BinaryEncoding::OneAndHalfBits`]: the 2-bit code with plane B OR-ed over
//!   pairs of dimensions (d + d/2 bits).
//!
//! Scoring is symmetric (the query encoded the same way, similarity = −Hamming)
//! or asymmetric ([`QueryEncoding::Scalar4`] / [`QueryEncoding::Scalar8`]): the
//! query's per-plane weights `y` are kept as 4 or 8-bit integers split into bit
//! planes, and `Σ yᵢ·bᵢ ≈ a·popcount(b) + s·Σ_k 2^k·popcount(Y_k AND b)`, with
//! `popcount(b)` stored per row as its correction term.

use eddy_kernels::Kernels;
use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::{check_query, rows_of, CodeScorer, Error, Result};

/// Threshold (in standard deviations) between the three levels of the 2-bit
/// code: ±0.43σ splits a normal distribution into equal thirds.
const LEVEL_THRESHOLD: f32 = 0.43;

/// Bits per dimension of the stored codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryEncoding {
    /// One sign bit per dimension.
    OneBit,
    /// A sign-like bit per dimension plus one shared bit per pair of dimensions.
    OneAndHalfBits,
    /// A two-bit thermometer code per dimension.
    TwoBits,
}

/// How the query is represented when scoring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueryEncoding {
    /// Encoded like the data; similarity is minus the Hamming distance.
    Symmetric,
    /// Query kept as 4-bit integers (asymmetric).
    Scalar4,
    /// Query kept as 8-bit integers (asymmetric).
    Scalar8,
}

/// Training parameters for [`BinaryQuantizer`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BinaryConfig {
    /// Data encoding.
    pub encoding: BinaryEncoding,
    /// Query encoding.
    pub query: QueryEncoding,
    /// Maximum training rows sampled for the per-dimension mean and deviation.
    pub max_train_rows: usize,
    /// Seed for the row sample.
    pub seed: u64,
}

impl Default for BinaryConfig {
    fn default() -> Self {
        Self {
            encoding: BinaryEncoding::OneBit,
            query: QueryEncoding::Scalar4,
            max_train_rows: 20_000,
            seed: 42,
        }
    }
}

/// One bit plane of a code: how many bits and where its words start.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Plane {
    bits: usize,
    words: usize,
    offset: usize,
}

/// Trained binary quantizer: per-dimension centre and scale, plane layout.
#[derive(Debug, Clone, PartialEq)]
pub struct BinaryQuantizer {
    dim: usize,
    config: BinaryConfig,
    mean: Vec<f32>,
    inv_std: Vec<f32>,
    std: Vec<f32>,
    planes: Vec<Plane>,
    words: usize,
}

impl BinaryQuantizer {
    /// Learn per-dimension mean and deviation from a seeded row sample.
    ///
    /// # Errors
    /// On a ragged or empty matrix or non-finite values.
    pub fn train(data: &[f32], dim: usize, config: &BinaryConfig) -> Result<Self> {
        let rows = rows_of(data, dim)?;
        if rows == 0 {
            return Err(Error::TooFewVectors { need: 1, got: 0 });
        }
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        let picked = sample(&mut rng, rows, rows.min(config.max_train_rows.max(1)));
        let mut sum = vec![0f64; dim];
        let mut sq = vec![0f64; dim];
        for r in picked.iter() {
            for (i, &x) in data[r * dim..(r + 1) * dim].iter().enumerate() {
                sum[i] += f64::from(x);
                sq[i] += f64::from(x) * f64::from(x);
            }
        }
        let n = picked.len() as f64;
        let mean: Vec<f32> = sum.iter().map(|s| (s / n) as f32).collect();
        let std: Vec<f32> = sum
            .iter()
            .zip(&sq)
            .map(|(s, q)| ((q / n - (s / n) * (s / n)).max(0.0).sqrt() as f32).max(1e-12))
            .collect();
        let inv_std = std.iter().map(|s| 1.0 / s).collect();
        let plane_bits: &[usize] = match config.encoding {
            BinaryEncoding::OneBit => &[dim],
            BinaryEncoding::OneAndHalfBits => &[dim, dim.div_ceil(2)],
            BinaryEncoding::TwoBits => &[dim, dim],
        };
        let mut planes = Vec::new();
        let mut offset = 0;
        for &bits in plane_bits {
            let words = bits.div_ceil(64);
            planes.push(Plane {
                bits,
                words,
                offset,
            });
            offset += words;
        }
        Ok(Self {
            dim,
            config: *config,
            mean,
            inv_std,
            std,
            planes,
            words: offset,
        })
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// `u64` words per encoded row.
    pub fn words_per_vector(&self) -> usize {
        self.words
    }

    /// Encode `v` into `code` (`words_per_vector()` words); returns the popcount of every plane.
    ///
    /// # Errors
    /// On wrong lengths or non-finite values.
    pub fn encode_into(&self, v: &[f32], code: &mut [u64]) -> Result<Vec<u16>> {
        check_query(v, self.dim)?;
        if code.len() != self.words {
            return Err(Error::DimMismatch {
                expected: self.words,
                got: code.len(),
            });
        }
        self.encode_words(v, code);
        Ok(self
            .planes
            .iter()
            .map(|p| {
                code[p.offset..p.offset + p.words]
                    .iter()
                    .map(|w| w.count_ones())
                    .sum::<u32>() as u16
            })
            .collect())
    }

    /// The code of `v` (checked: `dim` finite values) into `code`
    /// (`words_per_vector()` words).
    ///
    /// One sign bit per dimension is `x > μ` (the sign of `(x − μ)/σ`, as
    /// σ > 0), made a 64-dimension word at a time without a branch or a
    /// multiply: a row's or a query's sign bits cost a few hundred
    /// nanoseconds instead of a few microseconds (2 % of eddy-query's CPU
    /// beside a writer went to the per-dimension loop, by `perf`).
    fn encode_words(&self, v: &[f32], code: &mut [u64]) {
        if self.config.encoding == BinaryEncoding::OneBit {
            for (word, (xs, ms)) in code.iter_mut().zip(v.chunks(64).zip(self.mean.chunks(64))) {
                *word = sign_word(xs, ms);
            }
            return;
        }
        code.fill(0);
        let z = v
            .iter()
            .zip(&self.mean)
            .zip(&self.inv_std)
            .map(|((x, m), s)| (x - m) * s);
        let set = |code: &mut [u64], plane: &Plane, i: usize| {
            code[plane.offset + i / 64] |= 1u64 << (i % 64)
        };
        let pairs = self.config.encoding == BinaryEncoding::OneAndHalfBits;
        for (i, z) in z.enumerate() {
            if z > -LEVEL_THRESHOLD {
                set(code, &self.planes[0], i);
            }
            if z > LEVEL_THRESHOLD {
                set(code, &self.planes[1], if pairs { i / 2 } else { i });
            }
        }
    }

    /// Encode every row of `data`.
    ///
    /// # Errors
    /// On a ragged matrix or non-finite values.
    pub fn encode_all(&self, data: &[f32]) -> Result<BinaryCodes> {
        let rows = rows_of(data, self.dim)?;
        let mut codes = vec![0u64; rows * self.words];
        let mut popcounts = Vec::with_capacity(rows * self.planes.len());
        for (v, code) in data
            .chunks_exact(self.dim)
            .zip(codes.chunks_exact_mut(self.words.max(1)))
        {
            popcounts.extend(self.encode_into(v, code)?);
        }
        Ok(BinaryCodes {
            quantizer: self.clone(),
            codes,
            popcounts,
            rows,
        })
    }

    /// Per-plane query weights `y` (the query scaled by σ, pair-summed for the shared plane).
    fn plane_weights(&self, query: &[f32]) -> Vec<Vec<f32>> {
        let y: Vec<f32> = query.iter().zip(&self.std).map(|(q, s)| q * s).collect();
        match self.config.encoding {
            BinaryEncoding::OneBit => vec![y],
            BinaryEncoding::TwoBits => vec![y.clone(), y],
            BinaryEncoding::OneAndHalfBits => {
                let pairs = y.chunks(2).map(|p| p.iter().sum()).collect();
                vec![y, pairs]
            }
        }
    }
}

/// Bit `j` set where `xs[j] > ms[j]` (up to 64 dimensions), branch-free so
/// the compiler can compare a vector of them at a time.
#[inline]
fn sign_word(xs: &[f32], ms: &[f32]) -> u64 {
    xs.iter()
        .zip(ms)
        .enumerate()
        .fold(0u64, |word, (j, (x, m))| word | (u64::from(x > m) << j))
}

/// Binary codes of a collection with per-row plane popcounts.
#[derive(Debug, Clone)]
pub struct BinaryCodes {
    quantizer: BinaryQuantizer,
    codes: Vec<u64>,
    popcounts: Vec<u16>,
    rows: usize,
}

/// One plane of an asymmetric query: offset, step and the bit planes of the
/// integer weights (`bits × words` words, least significant plane first).
#[derive(Debug, Clone)]
struct QueryPlane {
    offset: f32,
    step: f32,
    bit_planes: Vec<u64>,
}

/// A query prepared for binary scoring.
#[derive(Debug, Clone)]
pub enum BinaryQuery {
    /// The query's own code (symmetric scoring).
    Symmetric(Vec<u64>),
    /// Integer-weight bit planes per code plane (asymmetric scoring).
    Asymmetric(Vec<QueryPlaneWeights>),
}

/// Opaque per-plane query weights of an asymmetric query.
#[derive(Debug, Clone)]
pub struct QueryPlaneWeights(QueryPlane);

impl BinaryCodes {
    /// No rows yet; rows come through [`BinaryCodes::push`] (a buffer that
    /// grows, encoded with a quantizer trained on its first rows).
    pub fn empty(quantizer: BinaryQuantizer) -> Self {
        Self {
            quantizer,
            codes: Vec::new(),
            popcounts: Vec::new(),
            rows: 0,
        }
    }

    /// Encodes `v` as the next row.
    ///
    /// # Errors
    /// On a wrong length or non-finite values; nothing is appended then.
    pub fn push(&mut self, v: &[f32]) -> Result<()> {
        let start = self.codes.len();
        self.codes.resize(start + self.quantizer.words, 0);
        match self.quantizer.encode_into(v, &mut self.codes[start..]) {
            Ok(popcounts) => {
                self.popcounts.extend(popcounts);
                self.rows += 1;
                Ok(())
            }
            Err(e) => {
                self.codes.truncate(start);
                Err(e)
            }
        }
    }

    /// The quantizer that produced the codes.
    pub fn quantizer(&self) -> &BinaryQuantizer {
        &self.quantizer
    }

    /// Row-major codes, `words_per_vector()` words per row.
    pub fn codes(&self) -> &[u64] {
        &self.codes
    }

    /// The Hamming distance of every row's code to `code` (a code of
    /// `words_per_vector()` words, e.g. a symmetric query's) into `out`
    /// (one per row).
    pub fn hamming_all(&self, code: &[u64], out: &mut [u32]) {
        const CHUNK: usize = 1024;
        let words = self.quantizer.words.max(1);
        let k = Kernels::get();
        for (codes, out) in self.codes.chunks(CHUNK * words).zip(out.chunks_mut(CHUNK)) {
            let rows = out.len().min(codes.len() / words);
            k.hamming_block(code, &codes[..rows * words], &mut out[..rows]);
        }
    }
}

fn quantize_plane(y: &[f32], words: usize, bits: u32) -> QueryPlane {
    let lo = y.iter().copied().fold(f32::INFINITY, f32::min);
    let hi = y.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let levels = ((1u32 << bits) - 1) as f32;
    let step = if hi > lo { (hi - lo) / levels } else { 1.0 };
    let mut bit_planes = vec![0u64; words * bits as usize];
    for (i, &v) in y.iter().enumerate() {
        let u = ((v - lo) / step).round().clamp(0.0, levels) as u32;
        for (b, plane) in bit_planes.chunks_exact_mut(words).enumerate() {
            if u >> b & 1 == 1 {
                plane[i / 64] |= 1u64 << (i % 64);
            }
        }
    }
    QueryPlane {
        offset: lo,
        step,
        bit_planes,
    }
}

impl CodeScorer for BinaryCodes {
    type Query = BinaryQuery;

    fn dim(&self) -> usize {
        self.quantizer.dim
    }

    fn len(&self) -> usize {
        self.rows
    }

    fn bytes_per_vector(&self) -> usize {
        let q = &self.quantizer;
        let code_bytes: usize = q.planes.iter().map(|p| p.bits.div_ceil(8)).sum();
        match q.config.query {
            QueryEncoding::Symmetric => code_bytes,
            _ => code_bytes + 2 * q.planes.len(),
        }
    }

    fn prepare(&self, query: &[f32]) -> Result<BinaryQuery> {
        let q = &self.quantizer;
        check_query(query, q.dim)?;
        let bits = match q.config.query {
            QueryEncoding::Symmetric => {
                let mut code = vec![0u64; q.words];
                q.encode_words(query, &mut code);
                return Ok(BinaryQuery::Symmetric(code));
            }
            QueryEncoding::Scalar4 => 4,
            QueryEncoding::Scalar8 => 8,
        };
        let planes = q
            .plane_weights(query)
            .iter()
            .zip(&q.planes)
            .map(|(y, p)| QueryPlaneWeights(quantize_plane(y, p.words, bits)))
            .collect();
        Ok(BinaryQuery::Asymmetric(planes))
    }

    fn prefetch(&self, row: usize) {
        let q = &self.quantizer;
        if let Some(code) = self.codes.get(row * q.words..(row + 1) * q.words) {
            eddy_kernels::prefetch(code);
        }
        let planes = q.planes.len();
        if let Some(pc) = self.popcounts.get(row * planes..(row + 1) * planes) {
            eddy_kernels::prefetch(pc);
        }
    }

    fn score(&self, query: &BinaryQuery, row: usize) -> f32 {
        let k = Kernels::get();
        let q = &self.quantizer;
        let code = &self.codes[row * q.words..(row + 1) * q.words];
        match query {
            BinaryQuery::Symmetric(qc) => -(k.hamming(qc, code) as f32),
            BinaryQuery::Asymmetric(planes) => {
                let mut total = 0.0f32;
                for (pi, (p, QueryPlaneWeights(w))) in q.planes.iter().zip(planes).enumerate() {
                    let x = &code[p.offset..p.offset + p.words];
                    let acc = k.and_popcount_weighted(&w.bit_planes, x);
                    let pc = f32::from(self.popcounts[row * q.planes.len() + pi]);
                    total += w.offset * pc + w.step * acc as f32;
                }
                total
            }
        }
    }

    fn score_all(&self, query: &BinaryQuery, out: &mut [f32]) {
        const CHUNK: usize = 1024;
        let k = Kernels::get();
        let q = &self.quantizer;
        match query {
            BinaryQuery::Symmetric(qc) => {
                let mut raw = [0u32; CHUNK];
                for (codes, out) in self
                    .codes
                    .chunks(CHUNK * q.words)
                    .zip(out.chunks_mut(CHUNK))
                {
                    let raw = &mut raw[..out.len()];
                    k.hamming_block(qc, codes, raw);
                    for (o, &r) in out.iter_mut().zip(raw.iter()) {
                        *o = -(r as f32);
                    }
                }
            }
            BinaryQuery::Asymmetric(planes) => {
                let rows = self
                    .codes
                    .chunks_exact(q.words)
                    .zip(self.popcounts.chunks_exact(q.planes.len()))
                    .zip(out.iter_mut());
                for ((code, pcs), o) in rows {
                    let mut total = 0.0f32;
                    for ((p, QueryPlaneWeights(w)), &pc) in q.planes.iter().zip(planes).zip(pcs) {
                        let x = &code[p.offset..p.offset + p.words];
                        let acc = k.and_popcount_weighted(&w.bit_planes, x);
                        total += w.offset * f32::from(pc) + w.step * acc as f32;
                    }
                    *o = total;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
