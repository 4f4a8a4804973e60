//! Dot-product kernels for the single-text encoder's dense layers, chosen at run time by what
//! the CPU has.
//!
//! Why our own: the workspace is built for baseline x86-64 (no `target-cpu=native`, one binary
//! for every machine), so the compiler itself never emits AVX2; only a library that dispatches
//! at run time gets it. candle's matrix library does, but spends a short query's pass
//! repacking weights and gains little on AVX2-only CPUs. These kernels read each weight row
//! once, in place, against all of a text's tokens (a dozen rows of activations, which stay in
//! the L1 cache), and come in two precisions:
//!
//! - `f32`: fused multiply-adds over the stored weights;
//! - `int8`: weights quantised once at load, activations per token at each layer, products
//!   summed exactly in `i32`. A quarter of the bytes to read (the six layers' 10.6 M dense
//!   weights are 10.6 MB, which stays in a server's L3 cache between queries, against 42 MB in
//!   f32) and 32 products per instruction sequence instead of 8.
//!
//! Each kernel computes a tile of `R` weight rows × `C` tokens at once, so a loaded weight
//! vector serves `C` tokens and a loaded activation vector `R` rows. [`Simd::Scalar`] is the
//! portable fallback (any architecture, and the reference the SIMD kernels are tested against).
//!
//! The one module of the crate with `unsafe`: vector loads through pointers, and calls into
//! functions compiled for a CPU feature after checking the CPU has it.

#![allow(unsafe_code)]

use std::ops::Range;

/// Weight rows the kernels compute together: a layer split at a multiple of this keeps every
/// tile whole.
pub const ROW_TILE: usize = 4;

/// The vector instructions a kernel may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Simd {
    /// Plain Rust: whatever the compiler's baseline target gives.
    Scalar,
    /// x86-64 AVX2 and FMA (Intel since Haswell, AMD since Zen). AVX-512 machines use these
    /// too: an AVX-512 variant was not written, as no machine to measure it on was at hand.
    Avx2,
}

impl Simd {
    /// The best level this CPU has, capped by `SWITCHYARD_SIMD` (`scalar` or `avx2`) so a
    /// lower level can be measured on a machine that has a higher one. A level the CPU lacks
    /// is never chosen, whatever the variable says.
    pub fn detect() -> Self {
        let cap = std::env::var("SWITCHYARD_SIMD").ok();
        if cap.as_deref() == Some("scalar") { Self::Scalar } else { Self::best() }
    }

    fn best() -> Self {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            return Self::Avx2;
        }
        Self::Scalar
    }

    /// `self`, or the best available level if the CPU does not have `self`.
    pub fn available(self) -> Self {
        match self {
            Self::Avx2 if Self::best() == Self::Avx2 => Self::Avx2,
            _ => Self::Scalar,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Scalar => "scalar",
            Self::Avx2 => "avx2",
        }
    }
}

/// Weights quantised to `i8`, one scale per output row: `weight[row][i] ≈ values[row][i] ×
/// scales[row]`. Symmetric (no zero point): BERT's weights are centred on zero.
pub struct Int8Rows {
    values: Vec<i8>,
    scales: Vec<f32>,
    columns: usize,
}

/// Activations of one layer input quantised per token (a token's features share one scale,
/// so an outlier feature in one token does not cost the others their resolution). `values`
/// and `magnitudes` (`|values|`) are token-major; the AVX2 kernel needs both (see
/// [`avx2::int8_rows`]).
pub struct Int8Tokens {
    values: Vec<i8>,
    magnitudes: Vec<u8>,
    scales: Vec<f32>,
}

/// Quantises `row` to `[-127, 127]` into `out`, returning the scale. −128 is left out so a
/// value's negation is still an `i8` (the AVX2 kernel negates).
fn quantise_row(row: &[f32], out: &mut [i8]) -> f32 {
    let largest = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let scale = if largest > 0.0 { largest / 127.0 } else { 1.0 };
    let inverse = 1.0 / scale;
    for (q, v) in out.iter_mut().zip(row) {
        *q = (v * inverse).round().clamp(-127.0, 127.0) as i8;
    }
    scale
}

impl Int8Rows {
    /// Quantises a row-major `(rows, columns)` matrix.
    pub fn quantise(weights: &[f32], columns: usize) -> Self {
        let mut values = vec![0i8; weights.len()];
        let scales = weights
            .chunks_exact(columns)
            .zip(values.chunks_exact_mut(columns))
            .map(|(w, q)| quantise_row(w, q))
            .collect();
        Self { values, scales, columns }
    }

    /// Rows `range` of the matrix, for computing part of a layer's outputs.
    pub fn block(&self, range: Range<usize>) -> Int8Block<'_> {
        let columns = self.columns;
        Int8Block {
            values: &self.values[range.start * columns..range.end * columns],
            scales: &self.scales[range],
            columns,
        }
    }
}

/// Consecutive rows of an [`Int8Rows`]: what the int8 kernels compute with.
#[derive(Clone, Copy)]
pub struct Int8Block<'a> {
    values: &'a [i8],
    scales: &'a [f32],
    columns: usize,
}

impl Int8Block<'_> {
    fn rows(&self) -> usize {
        self.scales.len()
    }
}

impl Int8Tokens {
    /// Quantises token-major activations `(tokens, columns)`.
    pub fn quantise(x: &[f32], columns: usize) -> Self {
        let mut values = vec![0i8; x.len()];
        let scales =
            x.chunks_exact(columns).zip(values.chunks_exact_mut(columns)).map(|(x, q)| quantise_row(x, q)).collect();
        let magnitudes = values.iter().map(|v| v.unsigned_abs()).collect();
        Self { values, magnitudes, scales }
    }
}

/// `out[row × tokens + token] = Σ_i weights[row][i] · x[token][i] + bias[row]`: a dense layer
/// with the output feature-major (`(rows, tokens)`, so a layer's rows split into two contiguous
/// halves, see `split`) and
/// `x` token-major (`(tokens, columns)`, so both operands of a dot product are contiguous).
pub fn f32_rows(simd: Simd, weights: &[f32], bias: &[f32], x: &[f32], columns: usize, out: &mut [f32]) {
    let (rows, tokens) = (bias.len(), x.len() / columns);
    assert!(weights.len() == rows * columns && x.len() == tokens * columns && out.len() == rows * tokens);
    match simd.available() {
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 => {
            // SAFETY: `available` returns `Avx2` only when the CPU reports AVX2 and FMA, the
            // features `f32_rows` is compiled for; the shapes were checked above.
            unsafe { avx2::f32_rows(weights, bias, x, columns, out) }
        }
        _ => scalar::f32_rows(weights, bias, x, columns, out),
    }
}

/// The same dense layer with `i8` weights and activations: integer dot products, scaled back
/// by the row's and the token's scales, plus the bias.
pub fn int8_rows(simd: Simd, weights: Int8Block<'_>, bias: &[f32], x: &Int8Tokens, out: &mut [f32]) {
    let (rows, columns, tokens) = (weights.rows(), weights.columns, x.scales.len());
    assert!(bias.len() == rows && x.values.len() == tokens * columns && out.len() == rows * tokens);
    match simd.available() {
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 => {
            // SAFETY: `available` returns `Avx2` only when the CPU reports AVX2; the shapes
            // were checked above.
            unsafe { avx2::int8_rows(&weights, bias, x, out) }
        }
        _ => scalar::int8_rows(&weights, bias, x, out),
    }
}

mod scalar {
    use super::{Int8Block, Int8Tokens};

    pub fn f32_rows(weights: &[f32], bias: &[f32], x: &[f32], columns: usize, out: &mut [f32]) {
        let tokens = x.len() / columns;
        for ((w, b), out) in weights.chunks_exact(columns).zip(bias).zip(out.chunks_exact_mut(tokens)) {
            for (x, out) in x.chunks_exact(columns).zip(out) {
                *out = dot(w, x) + b;
            }
        }
    }

    /// Eight running sums, so the compiler can use whatever vector lanes the baseline has.
    fn dot(a: &[f32], b: &[f32]) -> f32 {
        let mut sums = [0.0f32; 8];
        let (a_chunks, b_chunks) = (a.chunks_exact(8), b.chunks_exact(8));
        let tail: f32 = a_chunks.remainder().iter().zip(b_chunks.remainder()).map(|(x, y)| x * y).sum();
        for (x, y) in a_chunks.zip(b_chunks) {
            for ((sum, x), y) in sums.iter_mut().zip(x).zip(y) {
                *sum += x * y;
            }
        }
        sums.iter().sum::<f32>() + tail
    }

    pub fn int8_rows(weights: &Int8Block<'_>, bias: &[f32], x: &Int8Tokens, out: &mut [f32]) {
        let (columns, tokens) = (weights.columns, x.scales.len());
        let rows = weights.values.chunks_exact(columns).zip(weights.scales).zip(bias);
        for (((w, w_scale), b), out) in rows.zip(out.chunks_exact_mut(tokens)) {
            for ((q, x_scale), out) in x.values.chunks_exact(columns).zip(&x.scales).zip(out) {
                let sum: i32 = w.iter().zip(q).map(|(&w, &q)| i32::from(w) * i32::from(q)).sum();
                *out = sum as f32 * (w_scale * x_scale) + b;
            }
        }
    }
}

/// AVX2 + FMA kernels. Loads are unaligned (`loadu`: as fast as aligned ones on these CPUs when
/// the data happens to be aligned, and `Vec` gives no 32-byte alignment).
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::{
        __m256, __m256i, _mm_add_epi32, _mm_add_ps, _mm_cvtsi128_si32, _mm_cvtss_f32, _mm_movehl_ps, _mm_shuffle_epi32,
        _mm_shuffle_ps, _mm256_add_epi32, _mm256_castps256_ps128, _mm256_castsi256_si128, _mm256_extractf128_ps,
        _mm256_extracti128_si256, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_loadu_si256, _mm256_madd_epi16,
        _mm256_maddubs_epi16, _mm256_set1_epi16, _mm256_setzero_ps, _mm256_setzero_si256, _mm256_sign_epi8,
    };

    use super::{Int8Block, Int8Tokens};

    /// Weight rows per tile.
    const ROWS: usize = super::ROW_TILE;
    /// Tokens per tile: 4 × 2 accumulators plus the loaded vectors fit the 16 registers.
    const TOKENS: usize = 2;
    const F32_LANES: usize = 8;
    const I8_LANES: usize = 32;

    #[target_feature(enable = "avx2,fma")]
    pub fn f32_rows(weights: &[f32], bias: &[f32], x: &[f32], columns: usize, out: &mut [f32]) {
        let (rows, tokens) = (bias.len(), x.len() / columns);
        let mut row = 0;
        while row < rows {
            let height = if row + ROWS <= rows { ROWS } else { 1 };
            let mut token = 0;
            while token < tokens {
                let width = if token + TOKENS <= tokens { TOKENS } else { 1 };
                let w = &weights[row * columns..(row + height) * columns];
                let x = &x[token * columns..(token + width) * columns];
                match (height, width) {
                    (ROWS, TOKENS) => store(f32_tile::<ROWS, TOKENS>(w, x, columns), row, token, tokens, bias, out),
                    (ROWS, _) => store(f32_tile::<ROWS, 1>(w, x, columns), row, token, tokens, bias, out),
                    (_, TOKENS) => store(f32_tile::<1, TOKENS>(w, x, columns), row, token, tokens, bias, out),
                    _ => store(f32_tile::<1, 1>(w, x, columns), row, token, tokens, bias, out),
                }
                token += width;
            }
            row += height;
        }
    }

    fn store<const R: usize, const C: usize>(
        sums: [[f32; C]; R],
        row: usize,
        token: usize,
        tokens: usize,
        bias: &[f32],
        out: &mut [f32],
    ) {
        for (r, sums) in sums.iter().enumerate() {
            for (c, sum) in sums.iter().enumerate() {
                out[(row + r) * tokens + token + c] = sum + bias[row + r];
            }
        }
    }

    /// Dot products of `R` weight rows with `C` token rows (`w` and `x` hold exactly those).
    #[target_feature(enable = "avx2,fma")]
    fn f32_tile<const R: usize, const C: usize>(w: &[f32], x: &[f32], columns: usize) -> [[f32; C]; R] {
        assert!(w.len() == R * columns && x.len() == C * columns);
        let body = columns - columns % F32_LANES;
        let mut sums = [[_mm256_setzero_ps(); C]; R];
        let mut i = 0;
        while i < body {
            let mut xs = [_mm256_setzero_ps(); C];
            for (c, xc) in xs.iter_mut().enumerate() {
                // SAFETY: `i + 8 ≤ body ≤ columns`, so the load reads 8 floats inside row `c`
                // of `x` (`C × columns` long, asserted above).
                *xc = unsafe { _mm256_loadu_ps(x.as_ptr().add(c * columns + i)) };
            }
            for (r, sums) in sums.iter_mut().enumerate() {
                // SAFETY: likewise inside row `r` of `w` (`R × columns` long).
                let wr = unsafe { _mm256_loadu_ps(w.as_ptr().add(r * columns + i)) };
                for (sum, xc) in sums.iter_mut().zip(&xs) {
                    *sum = _mm256_fmadd_ps(wr, *xc, *sum);
                }
            }
            i += F32_LANES;
        }
        let mut out = [[0.0; C]; R];
        for (r, (out, sums)) in out.iter_mut().zip(&sums).enumerate() {
            for (c, (out, sum)) in out.iter_mut().zip(sums).enumerate() {
                let tail: f32 = (body..columns).map(|i| w[r * columns + i] * x[c * columns + i]).sum();
                *out = sum_f32(*sum) + tail;
            }
        }
        out
    }

    #[target_feature(enable = "avx2,fma")]
    fn sum_f32(v: __m256) -> f32 {
        let pairs = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let two = _mm_add_ps(pairs, _mm_movehl_ps(pairs, pairs));
        _mm_cvtss_f32(_mm_add_ps(two, _mm_shuffle_ps::<0b01>(two, two)))
    }

    /// The int8 layer. AVX2 multiplies bytes only as unsigned × signed (`maddubs`: 32 products
    /// `u8 × i8`, adjacent pairs added into 16 `i16`), so each product `w · x` is computed as
    /// `|x| · (w · sign x)`: `magnitudes` is `|x|` (≤ 127), `sign_epi8` moves `x`'s sign onto
    /// `w` (≤ 127 in magnitude: −128 never occurs). A pair then sums to at most
    /// 2 × 127 × 127 = 32,258, which cannot saturate an `i16`; `madd` with ones widens the
    /// pairs to `i32` sums, exact for any row length here.
    #[target_feature(enable = "avx2")]
    pub fn int8_rows(weights: &Int8Block<'_>, bias: &[f32], x: &Int8Tokens, out: &mut [f32]) {
        let (rows, columns, tokens) = (weights.rows(), weights.columns, x.scales.len());
        let mut row = 0;
        while row < rows {
            let height = if row + ROWS <= rows { ROWS } else { 1 };
            let mut token = 0;
            while token < tokens {
                let width = if token + TOKENS <= tokens { TOKENS } else { 1 };
                let w = &weights.values[row * columns..(row + height) * columns];
                let span = token * columns..(token + width) * columns;
                let (q, m) = (&x.values[span.clone()], &x.magnitudes[span]);
                let sums = match (height, width) {
                    (ROWS, TOKENS) => widen(int8_tile::<ROWS, TOKENS>(w, q, m, columns)),
                    (ROWS, _) => widen(int8_tile::<ROWS, 1>(w, q, m, columns)),
                    (_, TOKENS) => widen(int8_tile::<1, TOKENS>(w, q, m, columns)),
                    _ => widen(int8_tile::<1, 1>(w, q, m, columns)),
                };
                for (r, sums) in sums.iter().enumerate().take(height) {
                    let (w_scale, b) = (weights.scales[row + r], bias[row + r]);
                    for (c, &sum) in sums.iter().enumerate().take(width) {
                        out[(row + r) * tokens + token + c] = sum as f32 * (w_scale * x.scales[token + c]) + b;
                    }
                }
                token += width;
            }
            row += height;
        }
    }

    /// A tile's sums in a `ROWS × TOKENS` block (the unused corner is zero), so the four tile
    /// shapes share one store loop.
    fn widen<const R: usize, const C: usize>(sums: [[i32; C]; R]) -> [[i32; TOKENS]; ROWS] {
        let mut wide = [[0; TOKENS]; ROWS];
        for (wide, sums) in wide.iter_mut().zip(&sums) {
            wide[..C].copy_from_slice(sums);
        }
        wide
    }

    #[target_feature(enable = "avx2")]
    fn int8_tile<const R: usize, const C: usize>(w: &[i8], q: &[i8], m: &[u8], columns: usize) -> [[i32; C]; R] {
        assert!(w.len() == R * columns && q.len() == C * columns && m.len() == C * columns);
        let body = columns - columns % I8_LANES;
        let ones = _mm256_set1_epi16(1);
        let mut sums = [[_mm256_setzero_si256(); C]; R];
        let mut i = 0;
        while i < body {
            let (mut qs, mut ms) = ([_mm256_setzero_si256(); C], [_mm256_setzero_si256(); C]);
            for (c, (qc, mc)) in qs.iter_mut().zip(&mut ms).enumerate() {
                // SAFETY: `i + 32 ≤ body ≤ columns`, so each load reads 32 bytes inside row `c`
                // of `q` and of `m` (each `C × columns` long, asserted above).
                unsafe {
                    *qc = _mm256_loadu_si256(q.as_ptr().add(c * columns + i).cast());
                    *mc = _mm256_loadu_si256(m.as_ptr().add(c * columns + i).cast());
                }
            }
            for (r, sums) in sums.iter_mut().enumerate() {
                // SAFETY: likewise inside row `r` of `w` (`R × columns` long).
                let wr = unsafe { _mm256_loadu_si256(w.as_ptr().add(r * columns + i).cast()) };
                for ((sum, qc), mc) in sums.iter_mut().zip(&qs).zip(&ms) {
                    let pairs = _mm256_maddubs_epi16(*mc, _mm256_sign_epi8(wr, *qc));
                    *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(pairs, ones));
                }
            }
            i += I8_LANES;
        }
        let mut out = [[0; C]; R];
        for (r, (out, sums)) in out.iter_mut().zip(&sums).enumerate() {
            for (c, (out, sum)) in out.iter_mut().zip(sums).enumerate() {
                let tail: i32 =
                    (body..columns).map(|i| i32::from(w[r * columns + i]) * i32::from(q[c * columns + i])).sum();
                *out = sum_i32(*sum) + tail;
            }
        }
        out
    }

    #[target_feature(enable = "avx2")]
    fn sum_i32(v: __m256i) -> i32 {
        let fours = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let twos = _mm_add_epi32(fours, _mm_shuffle_epi32::<0b01_00_11_10>(fours));
        _mm_cvtsi128_si32(_mm_add_epi32(twos, _mm_shuffle_epi32::<0b10_11_00_01>(twos)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in [-1, 1) with a few large ones, like activations.
    fn values(count: usize, seed: u32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..count)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                let v = (state % 20_000) as f32 / 10_000.0 - 1.0;
                if i % 97 == 0 { v * 8.0 } else { v }
            })
            .collect()
    }

    fn reference(weights: &[f32], bias: &[f32], x: &[f32], columns: usize) -> Vec<f32> {
        let tokens = x.len() / columns;
        let mut out = vec![0.0; bias.len() * tokens];
        for (row, b) in bias.iter().enumerate() {
            for token in 0..tokens {
                let w = &weights[row * columns..][..columns];
                let x = &x[token * columns..][..columns];
                out[row * tokens + token] =
                    w.iter().zip(x).map(|(w, x)| f64::from(*w) * f64::from(*x)).sum::<f64>() as f32 + b;
            }
        }
        out
    }

    /// Shapes that hit every tile shape and the tails: rows and tokens not multiples of the
    /// tile, columns not multiples of the vector width.
    const SHAPES: [(usize, usize, usize); 4] = [(9, 5, 384), (4, 2, 64), (7, 3, 45), (1, 1, 8)];

    #[test]
    fn f32_kernels_match_a_plain_dot_product() {
        for (rows, tokens, columns) in SHAPES {
            let (weights, x, bias) = (values(rows * columns, 1), values(tokens * columns, 2), values(rows, 3));
            let expected = reference(&weights, &bias, &x, columns);
            for simd in [Simd::Scalar, Simd::detect()] {
                let mut out = vec![0.0; rows * tokens];
                f32_rows(simd, &weights, &bias, &x, columns, &mut out);
                for (got, want) in out.iter().zip(&expected) {
                    assert!((got - want).abs() < 1e-3 * want.abs().max(1.0), "{simd:?} {rows}×{tokens}×{columns}");
                }
            }
        }
    }

    #[test]
    fn int8_kernels_agree_exactly_and_approximate_f32() {
        for (rows, tokens, columns) in SHAPES {
            let (weights, x, bias) = (values(rows * columns, 4), values(tokens * columns, 5), values(rows, 6));
            let expected = reference(&weights, &bias, &x, columns);
            let (quantised, activations) = (Int8Rows::quantise(&weights, columns), Int8Tokens::quantise(&x, columns));
            let mut scalar = vec![0.0; rows * tokens];
            int8_rows(Simd::Scalar, quantised.block(0..rows), &bias, &activations, &mut scalar);
            let mut simd = vec![0.0; rows * tokens];
            int8_rows(Simd::detect(), quantised.block(0..rows), &bias, &activations, &mut simd);
            // Integer sums are exact, so every level gives the same floats.
            assert_eq!(scalar, simd, "{rows}×{tokens}×{columns}");
            // Quantisation error: a few per cent of the sum of the products' magnitudes.
            for (row, token) in (0..rows).flat_map(|r| (0..tokens).map(move |t| (r, t))) {
                let w = &weights[row * columns..][..columns];
                let a = &x[token * columns..][..columns];
                let scale: f32 = w.iter().zip(a).map(|(w, x)| (w * x).abs()).sum();
                let (got, want) = (scalar[row * tokens + token], expected[row * tokens + token]);
                assert!((got - want).abs() <= 0.03 * scale + 1e-4, "{got} vs {want} (scale {scale})");
            }
        }
    }

    #[test]
    fn quantisation_keeps_the_range_symmetric_and_zero_rows_finite() {
        let rows = Int8Rows::quantise(&[0.0, 0.0, -2.0, 0.5], 2);
        assert_eq!(rows.values, [0, 0, -127, 32]);
        assert_eq!(rows.scales, [1.0, 2.0 / 127.0]);
    }
}
