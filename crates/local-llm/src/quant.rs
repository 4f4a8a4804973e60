//! Quantized weight matrices and the dot products the forward pass spends its time in.
//!
//! Weights stay in the GGUF file's own formats, unpacked into arrays that the kernels can read
//! without conversion: Q4_1 (4-bit values with a scale and a minimum per 32 weights) for the
//! attention and feed-forward matrices, Q8_0 (8-bit values with a scale per 32) for the
//! embedding, which is also the output head. Keeping Q4_1 instead of widening it to Q8_0 means
//! fewer bytes per token (decoding reads every weight once per token, so memory bandwidth is
//! the ceiling) and no rounding: the products are those of the file's weights.
//!
//! Activations are quantized to 8 bits per 32 values (like llama.cpp's Q8_1: a scale, and
//! the block's scaled sum, which folds Q4_1's minimum into one multiply per block), so a
//! block's dot product is 32 integer multiply-adds. On x86-64 with AVX2 and FMA (detected at
//! run time through `pulp`, which wraps the intrinsics safely), one block is a handful of
//! instructions; elsewhere a scalar loop gives the same result.

use pulp::x86::V3;
use std::sync::OnceLock;

/// Values per quantization block (both formats).
pub const BLOCK: usize = 32;

/// The AVX2/FMA token when the CPU has both (checked once).
pub fn avx2() -> Option<V3> {
    static TOKEN: OnceLock<Option<V3>> = OnceLock::new();
    *TOKEN.get_or_init(V3::try_new)
}

/// Runs `f` compiled for AVX2/FMA when the CPU has them: code inlined into `f` (the
/// `#[inline(always)]` helpers below) is then auto-vectorized for 256-bit registers.
#[inline(always)]
pub fn vectorized<R>(f: impl FnOnce() -> R) -> R {
    match avx2() {
        Some(simd) => simd.vectorize(f),
        None => f(),
    }
}

/// A row-major matrix of Q4_1 weights: `rows` × `cols`, `cols` a multiple of [`BLOCK`].
#[derive(Debug, Clone)]
pub struct Q4Matrix {
    pub rows: usize,
    pub cols: usize,
    /// Per block: byte `j` holds value `j` (low nibble) and value `j + 16` (high nibble).
    qs: Vec<[u8; 16]>,
    /// Per block: weight = scale × q + min.
    scales: Vec<f32>,
    mins: Vec<f32>,
}

/// A row-major matrix of Q8_0 weights.
#[derive(Debug, Clone)]
pub struct Q8Matrix {
    pub rows: usize,
    pub cols: usize,
    qs: Vec<[i8; BLOCK]>,
    scales: Vec<f32>,
}

/// One activation vector quantized to 8 bits per block.
#[derive(Debug, Clone, Default)]
pub struct QVector {
    qs: Vec<[i8; BLOCK]>,
    scales: Vec<f32>,
    /// Per block: scale × (sum of the quantized values), for Q4_1's minimum term.
    sums: Vec<f32>,
}

/// Half precision to single (the GGUF blocks store their scales as f16); only used at load.
pub fn f16_to_f32(bits: u16) -> f32 {
    let sign = u32::from(bits >> 15) << 31;
    let exponent = u32::from((bits >> 10) & 0x1f);
    let mantissa = u32::from(bits & 0x3ff);
    let magnitude = match (exponent, mantissa) {
        (0, 0) => 0,
        // Subnormal: value = mantissa × 2^-24, exact in f32.
        (0, m) => {
            let value = m as f32 * f32::powi(2.0, -24);
            return if sign != 0 { -value } else { value };
        }
        (0x1f, m) => 0x7f80_0000 | (m << 13),
        (e, m) => ((e + 127 - 15) << 23) | (m << 13),
    };
    f32::from_bits(sign | magnitude)
}

fn half_at(bytes: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([bytes[at], bytes[at + 1]]))
}

impl Q4Matrix {
    /// From GGUF Q4_1 bytes (20 per block: f16 scale, f16 min, 16 bytes of nibbles).
    pub fn from_gguf(rows: usize, cols: usize, bytes: &[u8]) -> Result<Self, String> {
        const SIZE: usize = 20;
        let blocks = rows * cols / BLOCK;
        if !cols.is_multiple_of(BLOCK) || bytes.len() != blocks * SIZE {
            return Err(format!("Q4_1 {rows}×{cols}: {} bytes, expected {}", bytes.len(), blocks * SIZE));
        }
        let mut matrix = Self {
            rows,
            cols,
            qs: Vec::with_capacity(blocks),
            scales: Vec::with_capacity(blocks),
            mins: Vec::with_capacity(blocks),
        };
        for block in bytes.chunks_exact(SIZE) {
            matrix.scales.push(half_at(block, 0));
            matrix.mins.push(half_at(block, 2));
            let mut qs = [0u8; 16];
            qs.copy_from_slice(&block[4..]);
            matrix.qs.push(qs);
        }
        Ok(matrix)
    }

    /// The weights of the whole matrix as f32 (tests and reference paths).
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.rows * self.cols);
        for ((qs, scale), min) in self.qs.iter().zip(&self.scales).zip(&self.mins) {
            let mut block = [0f32; BLOCK];
            for (j, byte) in qs.iter().enumerate() {
                block[j] = f32::from(byte & 0x0f) * scale + min;
                block[j + 16] = f32::from(byte >> 4) * scale + min;
            }
            out.extend_from_slice(&block);
        }
        out
    }

    /// Stacks matrices with the same column count (Q, K and V; gate and up), so one pass
    /// over the input computes all of them.
    pub fn stack(parts: &[Self]) -> Self {
        let cols = parts[0].cols;
        let mut stacked = Self { rows: 0, cols, qs: Vec::new(), scales: Vec::new(), mins: Vec::new() };
        for part in parts {
            assert_eq!(part.cols, cols, "stacked matrices share their column count");
            stacked.rows += part.rows;
            stacked.qs.extend_from_slice(&part.qs);
            stacked.scales.extend_from_slice(&part.scales);
            stacked.mins.extend_from_slice(&part.mins);
        }
        stacked
    }

    /// Bytes read per use of the whole matrix, as stored here.
    pub fn bytes(&self) -> usize {
        self.qs.len() * (16 + 4 + 4)
    }

    /// Dot products of rows `rows` with each input; `out[r * inputs.len() + t]` is row
    /// `rows.start + r` times input `t`. Each row is read once for all inputs.
    pub fn dot_rows(&self, rows: std::ops::Range<usize>, inputs: &[QVector], out: &mut [f32]) {
        let per_row = self.cols / BLOCK;
        let n = inputs.len();
        match avx2() {
            Some(simd) => simd.vectorize(Q4Rows { simd, m: self, rows, inputs, out }),
            None => {
                for (r, row) in rows.enumerate() {
                    let range = row * per_row..(row + 1) * per_row;
                    for (t, input) in inputs.iter().enumerate() {
                        let (qs, scales, mins) =
                            (&self.qs[range.clone()], &self.scales[range.clone()], &self.mins[range.clone()]);
                        out[r * n + t] = q4_dot_scalar(qs, scales, mins, input);
                    }
                }
            }
        }
    }
}

impl Q8Matrix {
    /// From GGUF Q8_0 bytes (34 per block: f16 scale, 32 signed bytes).
    pub fn from_gguf(rows: usize, cols: usize, bytes: &[u8]) -> Result<Self, String> {
        const SIZE: usize = 34;
        let blocks = rows * cols / BLOCK;
        if !cols.is_multiple_of(BLOCK) || bytes.len() != blocks * SIZE {
            return Err(format!("Q8_0 {rows}×{cols}: {} bytes, expected {}", bytes.len(), blocks * SIZE));
        }
        let mut matrix = Self { rows, cols, qs: Vec::with_capacity(blocks), scales: Vec::with_capacity(blocks) };
        for block in bytes.chunks_exact(SIZE) {
            matrix.scales.push(half_at(block, 0));
            let mut qs = [0i8; BLOCK];
            for (q, byte) in qs.iter_mut().zip(&block[2..]) {
                *q = i8::from_ne_bytes([*byte]);
            }
            matrix.qs.push(qs);
        }
        Ok(matrix)
    }

    /// Quantizes f32 weights (formats the kernels do not run directly).
    pub fn from_f32(rows: usize, cols: usize, values: &[f32]) -> Self {
        let vector = QVector::quantized(values);
        Self { rows, cols, qs: vector.qs, scales: vector.scales }
    }

    /// As [`Q4Matrix::stack`].
    pub fn stack(parts: &[Self]) -> Self {
        let cols = parts[0].cols;
        let mut stacked = Self { rows: 0, cols, qs: Vec::new(), scales: Vec::new() };
        for part in parts {
            assert_eq!(part.cols, cols, "stacked matrices share their column count");
            stacked.rows += part.rows;
            stacked.qs.extend_from_slice(&part.qs);
            stacked.scales.extend_from_slice(&part.scales);
        }
        stacked
    }

    /// One row as f32 (the embedding of a token).
    pub fn row(&self, row: usize, out: &mut [f32]) {
        let per_row = self.cols / BLOCK;
        for (b, chunk) in out.chunks_exact_mut(BLOCK).enumerate() {
            let block = row * per_row + b;
            for (value, q) in chunk.iter_mut().zip(&self.qs[block]) {
                *value = f32::from(*q) * self.scales[block];
            }
        }
    }

    pub fn bytes(&self) -> usize {
        self.qs.len() * (BLOCK + 4)
    }

    /// As [`Q4Matrix::dot_rows`].
    pub fn dot_rows(&self, rows: std::ops::Range<usize>, inputs: &[QVector], out: &mut [f32]) {
        let per_row = self.cols / BLOCK;
        let n = inputs.len();
        match avx2() {
            Some(simd) => simd.vectorize(Q8Rows { simd, m: self, rows, inputs, out }),
            None => {
                for (r, row) in rows.enumerate() {
                    let range = row * per_row..(row + 1) * per_row;
                    for (t, input) in inputs.iter().enumerate() {
                        out[r * n + t] = q8_dot_scalar(&self.qs[range.clone()], &self.scales[range.clone()], input);
                    }
                }
            }
        }
    }
}

impl QVector {
    /// Quantizes `values` (length a multiple of [`BLOCK`]) into `self`, reusing its buffers.
    pub fn quantize(&mut self, values: &[f32]) {
        let blocks = values.len() / BLOCK;
        self.qs.resize(blocks, [0; BLOCK]);
        self.scales.resize(blocks, 0.0);
        self.sums.resize(blocks, 0.0);
        vectorized(|| {
            for (b, chunk) in values.chunks_exact(BLOCK).enumerate() {
                let amax = chunk.iter().fold(0f32, |m, v| m.max(v.abs()));
                let scale = amax / 127.0;
                let inverse = if scale > 0.0 { 1.0 / scale } else { 0.0 };
                let mut sum = 0i32;
                for (q, v) in self.qs[b].iter_mut().zip(chunk) {
                    // In range by construction (|v| ≤ amax); `as` saturates anyway.
                    *q = (v * inverse).round() as i8;
                    sum += i32::from(*q);
                }
                self.scales[b] = scale;
                self.sums[b] = scale * sum as f32;
            }
        });
    }

    /// The values the quantized vector stands for.
    pub fn dequantize(&self) -> Vec<f32> {
        self.qs.iter().zip(&self.scales).flat_map(|(qs, scale)| qs.iter().map(move |q| f32::from(*q) * scale)).collect()
    }

    pub fn quantized(values: &[f32]) -> Self {
        let mut vector = Self::default();
        vector.quantize(values);
        vector
    }
}

pub(crate) fn q4_dot_scalar(qs: &[[u8; 16]], scales: &[f32], mins: &[f32], x: &QVector) -> f32 {
    let mut total = 0f32;
    for (b, block) in qs.iter().enumerate() {
        let xq = &x.qs[b];
        let mut sum = 0i32;
        for (j, byte) in block.iter().enumerate() {
            sum += i32::from(byte & 0x0f) * i32::from(xq[j]) + i32::from(byte >> 4) * i32::from(xq[j + 16]);
        }
        total += scales[b] * x.scales[b] * sum as f32 + mins[b] * x.sums[b];
    }
    total
}

pub(crate) fn q8_dot_scalar(qs: &[[i8; BLOCK]], scales: &[f32], x: &QVector) -> f32 {
    let mut total = 0f32;
    for (b, block) in qs.iter().enumerate() {
        let sum: i32 = block.iter().zip(&x.qs[b]).map(|(w, v)| i32::from(*w) * i32::from(*v)).sum();
        total += scales[b] * x.scales[b] * sum as f32;
    }
    total
}

// The AVX2 loops are `NullaryFnOnce` structs, not closures: `V3::vectorize` compiles what
// it runs with AVX2 enabled only when it is inlined into it, and a large closure body is
// compiled as a function of its own (without the features, so every intrinsic becomes a
// call, about twenty times slower). A struct's `#[inline(always)] call` is always inlined.

struct Q4Rows<'a> {
    simd: V3,
    m: &'a Q4Matrix,
    rows: std::ops::Range<usize>,
    inputs: &'a [QVector],
    out: &'a mut [f32],
}

impl pulp::NullaryFnOnce for Q4Rows<'_> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        let per_row = self.m.cols / BLOCK;
        let n = self.inputs.len();
        for (r, row) in self.rows.enumerate() {
            let range = row * per_row..(row + 1) * per_row;
            let w = Q4Row {
                qs: &self.m.qs[range.clone()],
                scales: &self.m.scales[range.clone()],
                mins: &self.m.mins[range],
            };
            for (xs, dots) in self.inputs.chunks(GROUP).zip(self.out[r * n..(r + 1) * n].chunks_mut(GROUP)) {
                q4_dots_avx2(self.simd, &w, xs, dots);
            }
        }
    }
}

struct Q8Rows<'a> {
    simd: V3,
    m: &'a Q8Matrix,
    rows: std::ops::Range<usize>,
    inputs: &'a [QVector],
    out: &'a mut [f32],
}

impl pulp::NullaryFnOnce for Q8Rows<'_> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        let per_row = self.m.cols / BLOCK;
        let n = self.inputs.len();
        for (r, row) in self.rows.enumerate() {
            let range = row * per_row..(row + 1) * per_row;
            let (qs, scales) = (&self.m.qs[range.clone()], &self.m.scales[range]);
            for (xs, dots) in self.inputs.chunks(GROUP).zip(self.out[r * n..(r + 1) * n].chunks_mut(GROUP)) {
                q8_dots_avx2(self.simd, qs, scales, xs, dots);
            }
        }
    }
}

/// One Q4_1 row's blocks.
struct Q4Row<'a> {
    qs: &'a [[u8; 16]],
    scales: &'a [f32],
    mins: &'a [f32],
}

/// Inputs handled together by one pass over a weight row: the row's blocks are unpacked once
/// for all of them, and their accumulators are independent (no waiting on one FMA chain).
const GROUP: usize = 4;

/// Q4_1 row · up to [`GROUP`] quantized vectors, into `out`.
#[inline(always)]
fn q4_dots_avx2(simd: V3, w: &Q4Row<'_>, xs: &[QVector], out: &mut [f32]) {
    match xs.len() {
        1 => q4_dots_n::<1>(simd, w, xs, out),
        2 => q4_dots_n::<2>(simd, w, xs, out),
        3 => q4_dots_n::<3>(simd, w, xs, out),
        _ => q4_dots_n::<4>(simd, w, xs, out),
    }
}

#[inline(always)]
fn q4_dots_n<const T: usize>(simd: V3, w: &Q4Row<'_>, xs: &[QVector], out: &mut [f32]) {
    use pulp::bytemuck::cast;
    use std::arch::x86_64::{__m128i, __m256, __m256i};
    // Two accumulators per input, for even and odd blocks: with one input, a single chain
    // of dependent FMAs would cost its latency on every block.
    let mut even = [simd.avx._mm256_setzero_ps(); T];
    let mut odd = [simd.avx._mm256_setzero_ps(); T];
    let blocks = w.qs.len().min(w.scales.len());
    let xs: &[QVector; T] = match xs.first_chunk::<T>() {
        Some(xs) => xs,
        None => return,
    };
    if xs.iter().any(|x| x.qs.len() < blocks || x.scales.len() < blocks) {
        return;
    }
    #[inline(always)]
    fn block<const T: usize>(simd: V3, w: &Q4Row<'_>, xs: &[QVector; T], b: usize, acc: &mut [__m256; T]) {
        let low_nibbles = simd.avx._mm256_set1_epi8(0x0f);
        let ones = simd.avx._mm256_set1_epi16(1);
        let packed: __m128i = cast(w.qs[b]);
        let high = simd.sse2._mm_srli_epi16::<4>(packed);
        // Values 0..16 in the low lane, 16..32 in the high one: the order of the inputs.
        let values = simd.avx2._mm256_and_si256(simd.avx._mm256_set_m128i(high, packed), low_nibbles);
        for t in 0..T {
            let activations: __m256i = cast(xs[t].qs[b]);
            // u8 × i8 pairs summed into i16 (at most 2 × 15 × 127: no saturation), then i32.
            let pairs = simd.avx2._mm256_maddubs_epi16(values, activations);
            let sums = simd.avx._mm256_cvtepi32_ps(simd.avx2._mm256_madd_epi16(pairs, ones));
            let scale = simd.avx._mm256_set1_ps(w.scales[b] * xs[t].scales[b]);
            acc[t] = simd.fma._mm256_fmadd_ps(sums, scale, acc[t]);
        }
    }
    let mut b = 0;
    while b + 1 < blocks {
        block(simd, w, xs, b, &mut even);
        block(simd, w, xs, b + 1, &mut odd);
        b += 2;
    }
    if b < blocks {
        block(simd, w, xs, b, &mut even);
    }
    for t in 0..T {
        // The minimums' share: Σ min × (scale × Σ activations), a plain dot over blocks.
        let min_terms = dot(&w.mins[..blocks], &xs[t].sums[..blocks]);
        out[t] = horizontal_sum(simd.avx._mm256_add_ps(even[t], odd[t])) + min_terms;
    }
}

/// Q8_0 row · up to [`GROUP`] quantized vectors, into `out`.
#[inline(always)]
fn q8_dots_avx2(simd: V3, qs: &[[i8; BLOCK]], scales: &[f32], xs: &[QVector], out: &mut [f32]) {
    match xs.len() {
        1 => q8_dots_n::<1>(simd, qs, scales, xs, out),
        2 => q8_dots_n::<2>(simd, qs, scales, xs, out),
        3 => q8_dots_n::<3>(simd, qs, scales, xs, out),
        _ => q8_dots_n::<4>(simd, qs, scales, xs, out),
    }
}

#[inline(always)]
fn q8_dots_n<const T: usize>(simd: V3, qs: &[[i8; BLOCK]], scales: &[f32], xs: &[QVector], out: &mut [f32]) {
    use pulp::bytemuck::cast;
    use std::arch::x86_64::{__m256, __m256i};
    let mut even = [simd.avx._mm256_setzero_ps(); T];
    let mut odd = [simd.avx._mm256_setzero_ps(); T];
    let blocks = qs.len().min(scales.len());
    let xs: &[QVector; T] = match xs.first_chunk::<T>() {
        Some(xs) => xs,
        None => return,
    };
    if xs.iter().any(|x| x.qs.len() < blocks || x.scales.len() < blocks) {
        return;
    }
    #[inline(always)]
    fn block<const T: usize>(
        simd: V3,
        qs: &[[i8; BLOCK]],
        scales: &[f32],
        xs: &[QVector; T],
        b: usize,
        acc: &mut [__m256; T],
    ) {
        let ones = simd.avx._mm256_set1_epi16(1);
        let weights: __m256i = cast(qs[b]);
        // maddubs wants one unsigned operand: |w| × (x with w's sign) is w × x. Values are
        // in -127..=127, so the pair sums (≤ 2 × 127 × 127) fit in i16.
        let magnitudes = simd.avx2._mm256_sign_epi8(weights, weights);
        for t in 0..T {
            let activations: __m256i = cast(xs[t].qs[b]);
            let signed = simd.avx2._mm256_sign_epi8(activations, weights);
            let pairs = simd.avx2._mm256_maddubs_epi16(magnitudes, signed);
            let sums = simd.avx._mm256_cvtepi32_ps(simd.avx2._mm256_madd_epi16(pairs, ones));
            let scale = simd.avx._mm256_set1_ps(scales[b] * xs[t].scales[b]);
            acc[t] = simd.fma._mm256_fmadd_ps(sums, scale, acc[t]);
        }
    }
    let mut b = 0;
    while b + 1 < blocks {
        block(simd, qs, scales, xs, b, &mut even);
        block(simd, qs, scales, xs, b + 1, &mut odd);
        b += 2;
    }
    if b < blocks {
        block(simd, qs, scales, xs, b, &mut even);
    }
    for t in 0..T {
        out[t] = horizontal_sum(simd.avx._mm256_add_ps(even[t], odd[t]));
    }
}

#[inline(always)]
fn horizontal_sum(v: std::arch::x86_64::__m256) -> f32 {
    let lanes: [f32; 8] = pulp::bytemuck::cast(v);
    (lanes[0] + lanes[4]) + (lanes[1] + lanes[5]) + (lanes[2] + lanes[6]) + (lanes[3] + lanes[7])
}

/// Dot product of two f32 slices (attention scores), in eight lanes so it vectorizes.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a8, a_rest) = pulp::as_arrays::<8, f32>(a);
    let (b8, b_rest) = pulp::as_arrays::<8, f32>(b);
    for (x, y) in a8.iter().zip(b8) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    let tail: f32 = a_rest.iter().zip(b_rest).map(|(x, y)| x * y).sum();
    lanes.iter().sum::<f32>() + tail
}

/// `out += weight × v`, vectorizable.
#[inline(always)]
pub fn add_scaled(out: &mut [f32], weight: f32, v: &[f32]) {
    for (o, x) in out.iter_mut().zip(v) {
        *o += weight * x;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(n: usize, seed: u32) -> Vec<f32> {
        // A small LCG: deterministic inputs without a dependency.
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (state >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn f16_conversion_matches_known_values() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x3555), 0.333_251_95);
        assert_eq!(f16_to_f32(0x0001), 5.960_464_5e-8);
        assert_eq!(f16_to_f32(0x8001), -5.960_464_5e-8);
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert!(f16_to_f32(0x7c00).is_infinite());
    }

    /// A Q4_1 matrix in GGUF bytes with random nibbles, scales and minimums.
    fn q4_bytes(rows: usize, cols: usize) -> Vec<u8> {
        let noise = random(rows * cols, 7);
        let mut bytes = Vec::new();
        for (b, chunk) in noise.chunks(BLOCK).enumerate() {
            bytes.extend_from_slice(&[0x00, 0x20 + (b % 8) as u8]); // scales around 0.0078
            bytes.extend_from_slice(&[0x00, 0xa0]); // min -0.0078
            for j in 0..16 {
                let lo = ((chunk[j] + 1.0) * 7.9) as u8 & 0x0f;
                let hi = ((chunk[j + 16] + 1.0) * 7.9) as u8 & 0x0f;
                bytes.push(lo | (hi << 4));
            }
        }
        bytes
    }

    #[test]
    fn kernels_match_the_dequantized_product() {
        let (rows, cols) = (5, 96);
        let q4 = Q4Matrix::from_gguf(rows, cols, &q4_bytes(rows, cols)).expect("q4");
        let weights = q4.dequantize();
        let input = random(cols, 3);
        let x = QVector::quantized(&input);
        // The kernels are exact for the quantized activations; quantizing them costs at most
        // half a step (amax / 254) per value.
        let seen = x.dequantize();
        for (a, b) in seen.iter().zip(&input) {
            assert!((a - b).abs() <= 1.0 / 254.0 + 1e-6);
        }
        let input = seen;
        let mut out = vec![0f32; rows];
        q4.dot_rows(0..rows, std::slice::from_ref(&x), &mut out);
        for r in 0..rows {
            let exact = dot(&weights[r * cols..(r + 1) * cols], &input);
            let per_row = cols / BLOCK;
            let range = r * per_row..(r + 1) * per_row;
            let scalar = q4_dot_scalar(&q4.qs[range.clone()], &q4.scales[range.clone()], &q4.mins[range], &x);
            assert!((out[r] - scalar).abs() < 1e-4, "simd {} vs scalar {scalar}", out[r]);
            assert!((out[r] - exact).abs() < 1e-5, "quantized {} vs exact {exact}", out[r]);
        }

        let mut q8_bytes = Vec::new();
        let noise = random(rows * cols, 11);
        for chunk in noise.chunks(BLOCK) {
            q8_bytes.extend_from_slice(&[0x00, 0x20]);
            q8_bytes.extend(chunk.iter().map(|v| ((v * 127.0) as i8).to_ne_bytes()[0]));
        }
        let q8 = Q8Matrix::from_gguf(rows, cols, &q8_bytes).expect("q8");
        q8.dot_rows(0..rows, std::slice::from_ref(&x), &mut out);
        let mut row = vec![0f32; cols];
        for (r, got) in out.iter().enumerate() {
            q8.row(r, &mut row);
            let exact = dot(&row, &input);
            let per_row = cols / BLOCK;
            let range = r * per_row..(r + 1) * per_row;
            let scalar = q8_dot_scalar(&q8.qs[range.clone()], &q8.scales[range], &x);
            assert!((got - scalar).abs() < 1e-4, "simd {got} vs scalar {scalar}");
            assert!((got - exact).abs() < 1e-5, "quantized {got} vs exact {exact}");
        }

        // Several inputs at once (the prompt path: groups of four and a remainder) give each
        // input's own products.
        for n in [2usize, 4, 5, 9] {
            let inputs: Vec<QVector> = (0..n).map(|i| QVector::quantized(&random(cols, 100 + i as u32))).collect();
            let mut together = vec![0f32; rows * n];
            q4.dot_rows(0..rows, &inputs, &mut together);
            let mut together8 = vec![0f32; rows * n];
            q8.dot_rows(0..rows, &inputs, &mut together8);
            for (t, input) in inputs.iter().enumerate() {
                let mut alone = vec![0f32; rows];
                q4.dot_rows(0..rows, std::slice::from_ref(input), &mut alone);
                let mut alone8 = vec![0f32; rows];
                q8.dot_rows(0..rows, std::slice::from_ref(input), &mut alone8);
                for r in 0..rows {
                    assert!((together[r * n + t] - alone[r]).abs() < 1e-5);
                    assert!((together8[r * n + t] - alone8[r]).abs() < 1e-5);
                }
            }
        }
    }
}
