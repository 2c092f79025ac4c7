//! Scalar reference kernels: the parity baseline every SIMD backend is tested against.
//!
//! These functions are always compiled, take no `unsafe`, and define the exact
//! semantics of every kernel. They do not check lengths beyond what `zip` does;
//! the dispatched entry points in the crate root check lengths and panic.

/// Inner product (reference).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Squared Euclidean distance (reference).
pub fn l2sq(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            let d = x - y;
            d * d
        })
        .sum()
}

/// Inner product of `query` with every `query.len()`-long row of `block` into `out`.
pub fn dot_block(query: &[f32], block: &[f32], out: &mut [f32]) {
    for (row, o) in block.chunks_exact(query.len().max(1)).zip(out) {
        *o = dot(query, row);
    }
}

/// Squared L2 of `query` to every row of `block` into `out`.
pub fn l2sq_block(query: &[f32], block: &[f32], out: &mut [f32]) {
    for (row, o) in block.chunks_exact(query.len().max(1)).zip(out) {
        *o = l2sq(query, row);
    }
}

/// Inner product of `query` with the rows `ids` of the row-major matrix `data`.
///
/// # Panics
/// If an id is out of range.
pub fn dot_ids(query: &[f32], data: &[f32], ids: &[u32], out: &mut [f32]) {
    let dim = query.len();
    for (&id, o) in ids.iter().zip(out) {
        let start = id as usize * dim;
        *o = dot(query, &data[start..start + dim]);
    }
}

/// Squared L2 of `query` to the rows `ids` of the row-major matrix `data`.
///
/// # Panics
/// If an id is out of range.
pub fn l2sq_ids(query: &[f32], data: &[f32], ids: &[u32], out: &mut [f32]) {
    let dim = query.len();
    for (&id, o) in ids.iter().zip(out) {
        let start = id as usize * dim;
        *o = l2sq(query, &data[start..start + dim]);
    }
}

/// Inner product of two u8 code vectors (SQ8), exact, wrapping modulo 2^32.
pub fn dot_u8(a: &[u8], b: &[u8]) -> u32 {
    a.iter().zip(b).fold(0u32, |acc, (&x, &y)| {
        acc.wrapping_add(u32::from(x) * u32::from(y))
    })
}

/// Squared L2 distance of two u8 code vectors, exact, wrapping modulo 2^32.
pub fn l2sq_u8(a: &[u8], b: &[u8]) -> u32 {
    a.iter().zip(b).fold(0u32, |acc, (&x, &y)| {
        let d = u32::from(x.abs_diff(y));
        acc.wrapping_add(d * d)
    })
}

/// Inner product of two i8 code vectors, exact, wrapping modulo 2^32.
pub fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).fold(0i32, |acc, (&x, &y)| {
        acc.wrapping_add(i32::from(x) * i32::from(y))
    })
}

/// Inner product of u8 codes with a 7-bit signed query (see [`crate::QueryI7`]), exact.
pub fn dot_u8_i7(codes: &[u8], query: &[i8]) -> i32 {
    codes.iter().zip(query).fold(0i32, |acc, (&c, &q)| {
        acc.wrapping_add(i32::from(c) * i32::from(q))
    })
}

/// `out[r] = dot_u8(query, row r of block)` for a contiguous block of `query.len()`-byte rows.
pub fn dot_u8_block(query: &[u8], block: &[u8], out: &mut [u32]) {
    for (row, o) in block.chunks_exact(query.len().max(1)).zip(out) {
        *o = dot_u8(query, row);
    }
}

/// `out[r] = l2sq_u8(query, row r of block)`.
pub fn l2sq_u8_block(query: &[u8], block: &[u8], out: &mut [u32]) {
    for (row, o) in block.chunks_exact(query.len().max(1)).zip(out) {
        *o = l2sq_u8(query, row);
    }
}

/// `out[r] = hamming(query, row r of block)` for rows of `query.len()` words.
pub fn hamming_block(query: &[u64], block: &[u64], out: &mut [u32]) {
    for (row, o) in block.chunks_exact(query.len().max(1)).zip(out) {
        *o = hamming(query, row);
    }
}

/// Positions of the values of `values` at most `limit`, in order, into the
/// front of `out`; returns how many. Every position is written and the
/// count advanced by whether its value is within, so no branch depends on
/// the values; `out` past the count is overwritten with unspecified values.
///
/// # Panics
/// If `out` is shorter than `values`.
pub fn positions_at_most(values: &[u32], limit: u32, out: &mut [u32]) -> usize {
    positions_at_most_from(values, 0, limit, out)
}

/// [`positions_at_most`] of `values[from..]`, positions counted from the
/// start of `values` (the SIMD kernels' tails).
///
/// # Panics
/// If `out` is shorter than `values.len() - from`.
pub fn positions_at_most_from(values: &[u32], from: usize, limit: u32, out: &mut [u32]) -> usize {
    let rest = values.get(from..).unwrap_or_default();
    assert!(out.len() >= rest.len(), "positions_at_most: out too short");
    let mut n = 0;
    for (i, &v) in rest.iter().enumerate() {
        // `n <= i < rest.len() <= out.len()`.
        out[n] = (from + i) as u32;
        n += usize::from(v <= limit);
    }
    n
}

/// Hamming distance of two bit vectors: popcount(a XOR b).
pub fn hamming(a: &[u64], b: &[u64]) -> u32 {
    a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
}

/// Popcount of the intersection of two bit vectors: popcount(a AND b).
pub fn and_popcount(a: &[u64], b: &[u64]) -> u32 {
    a.iter().zip(b).map(|(x, y)| (x & y).count_ones()).sum()
}

/// Weighted popcount of bit planes: `Σ_b 2^b · popcount(planes[b] AND code)`.
///
/// `planes` holds `planes.len() / code.len()` bit planes of `code.len()` words
/// each, least significant first (an integer query split into bit planes).
/// Wrapping modulo 2^32.
pub fn and_popcount_weighted(planes: &[u64], code: &[u64]) -> u32 {
    let mut acc = 0u32;
    for (b, plane) in planes.chunks_exact(code.len().max(1)).enumerate() {
        acc = acc.wrapping_add(and_popcount(plane, code) << b);
    }
    acc
}

/// Product-quantization ADC: `out[r] = Σ_j lut[j * 256 + codes[r * m + j]]`.
///
/// `lut` holds `m` tables of 256 f32 (one per sub-space), `codes` holds
/// `out.len()` rows of `m` bytes. The sum runs in four interleaved partial sums
/// (`j mod 4`), combined as `(s0 + s1) + (s2 + s3)`: this breaks the add
/// latency chain, and every backend follows the same order, so results are
/// bit-identical across backends.
#[inline]
pub fn pq_adc(lut: &[f32], codes: &[u8], out: &mut [f32]) {
    let m = lut.len() / 256;
    for (row, o) in codes.chunks_exact(m.max(1)).zip(out) {
        let mut s = [0.0f32; 4];
        let mut quads = row.chunks_exact(4);
        let mut j = 0;
        for q in &mut quads {
            for (l, &c) in q.iter().enumerate() {
                s[l] += lut[(j + l) * 256 + usize::from(c)];
            }
            j += 4;
        }
        for (l, &c) in quads.remainder().iter().enumerate() {
            s[l] += lut[(j + l) * 256 + usize::from(c)];
        }
        *o = (s[0] + s[1]) + (s[2] + s[3]);
    }
}

/// Dot product of a u8 query with packed 4-bit codes. Exact, wrapping modulo 2^32.
///
/// Layout (SIMD friendly): codes come in blocks of 32 bytes covering 64
/// dimensions; byte `t` of block `k` holds dimension `64k + t` in its low
/// nibble and dimension `64k + 32 + t` in its high nibble. `query.len()` must
/// equal `2 * codes.len()` and `codes.len()` must be a multiple of 32.
pub fn dot_u8_u4(query: &[u8], codes: &[u8]) -> u32 {
    let mut acc = 0u32;
    for (q, c) in query.chunks_exact(64).zip(codes.chunks_exact(32)) {
        for t in 0..32 {
            let lo = u32::from(c[t] & 0x0f) * u32::from(q[t]);
            let hi = u32::from(c[t] >> 4) * u32::from(q[32 + t]);
            acc = acc.wrapping_add(lo).wrapping_add(hi);
        }
    }
    acc
}

/// Scale `v` to unit length in place; returns the original norm. Zero vectors stay unchanged.
pub fn normalize(v: &mut [f32]) -> f32 {
    let norm = dot(v, v).sqrt();
    scale_to_unit(v, norm);
    norm
}

/// Divide `v` by `norm` unless `norm` is zero or not finite.
pub(crate) fn scale_to_unit(v: &mut [f32], norm: f32) {
    if norm > 0.0 && norm.is_finite() {
        let inv = 1.0 / norm;
        for x in v.iter_mut() {
            *x *= inv;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_known_values() {
        assert_eq!(dot(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]), 32.0);
        assert_eq!(l2sq(&[1.0, 2.0], &[3.0, 5.0]), 13.0);
        assert_eq!(dot_u8(&[255, 2], &[255, 3]), 65031);
        assert_eq!(l2sq_u8(&[0, 10], &[255, 7]), 65034);
        assert_eq!(dot_i8(&[-128, 3], &[-128, -2]), 16378);
        assert_eq!(hamming(&[0b1011], &[0b0110]), 3);
        assert_eq!(and_popcount(&[0b1011], &[0b0110]), 1);
        let mut q = [0u8; 64];
        q[0] = 2;
        q[32] = 3;
        let mut c = [0u8; 32];
        c[0] = 0x5a;
        assert_eq!(dot_u8_u4(&q, &c), 2 * 0xa + 3 * 0x5);
    }

    #[test]
    fn normalize_keeps_zero() {
        let mut z = [0.0f32; 4];
        assert_eq!(normalize(&mut z), 0.0);
        assert_eq!(z, [0.0; 4]);
        let mut v = [3.0f32, 4.0];
        assert_eq!(normalize(&mut v), 5.0);
        assert!((v[0] - 0.6).abs() < 1e-7 && (v[1] - 0.8).abs() < 1e-7);
    }

    #[test]
    fn pq_adc_sums_table_entries() {
        let mut lut = vec![0.0f32; 512];
        lut[7] = 1.5;
        lut[256 + 9] = 2.0;
        let mut out = [0.0f32; 2];
        pq_adc(&lut, &[7, 9, 0, 0], &mut out);
        assert_eq!(out, [3.5, 0.0]);
    }
}
