//! The BERT encoder for one short text, on plain buffers: `(tokens, features)` activations in
//! a `Vec<f32>`, the dense layers on our kernels, the rest (layer norms, attention, GELU) in a
//! few loops.
//!
//! Why not candle's BERT for one text: a short query has few token rows, so a forward pass is
//! bound by reading the dense weights, not by arithmetic. candle's `Linear` computes `x · Wᵀ`,
//! for which the matrix library (gemm) first repacks all of `W` (44 % of a query's pass under
//! `perf`); our kernels ([`crate::kernels`]) read each weight row once, in place, against all
//! of the text's tokens, at run time the best of AVX2 or plain code, in f32 or int8
//! ([`DenseKernels`]). And with the dense layers that fast, candle's per-operation cost
//! became the larger half of the pass (`perf`, int8: the dense kernels 45 %, candle's
//! element-wise maps, strided copies and `erf` most of the rest), so the small operations run
//! here as loops over the few kilobytes of a query's activations. The arithmetic is the same
//! BERT as `candle_transformers::models::bert` (the tests compare the two).

use std::collections::HashMap;

use candle_core::{Result, Tensor};

use crate::kernels::{self, Int8Rows, Int8Tokens, Simd};
use crate::split;

/// How a single text's dense layers are computed. Batches always run candle's BERT in f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenseKernels {
    /// candle's matrix product on the weights as loaded (the encoder before its own kernels;
    /// kept to compare against).
    Candle,
    /// Our f32 kernels (a copy of the dense weights, 42 MB for MiniLM).
    F32(Simd),
    /// Our int8 kernels: weights quantised at load (10.6 MB for MiniLM), activations per token
    /// at each layer. Embeddings differ slightly from f32 (cosine ≥ 0.988 on the tests' texts).
    Int8(Simd),
}

impl DenseKernels {
    /// `SWITCHYARD_ENCODER` (`int8`, `f32` or `candle`; default `int8`) at the level
    /// [`Simd::detect`] finds (capped by `SWITCHYARD_SIMD`).
    pub fn from_env() -> Self {
        let simd = Simd::detect();
        match std::env::var("SWITCHYARD_ENCODER").as_deref() {
            Ok("candle") => Self::Candle,
            Ok("f32") => Self::F32(simd),
            _ => Self::Int8(simd),
        }
    }

    /// `int8/avx2`, `f32/scalar`, `candle`: for benchmarks and logs.
    pub fn name(self) -> String {
        match self {
            Self::Candle => "candle".to_owned(),
            Self::F32(simd) => format!("f32/{}", simd.available().name()),
            Self::Int8(simd) => format!("int8/{}", simd.available().name()),
        }
    }
}

enum Weights {
    Candle(Tensor),
    F32(Vec<f32>),
    Int8(Int8Rows),
}

/// A dense layer: `weight` is `(out, in)` as stored.
struct Dense {
    weight: Weights,
    bias: Vec<f32>,
    columns: usize,
    simd: Simd,
}

impl Dense {
    fn load(tensors: &HashMap<String, Tensor>, prefix: &str) -> Result<(Tensor, Tensor)> {
        Ok((get(tensors, &format!("{prefix}.weight"))?, get(tensors, &format!("{prefix}.bias"))?))
    }

    /// The layer with its weights in the form `kernels` computes with.
    fn new((weight, bias): (Tensor, Tensor), kernels: DenseKernels) -> Result<Self> {
        let (_, columns) = weight.dims2()?;
        let bias = bias.to_vec1::<f32>()?;
        let (weight, simd) = match kernels {
            DenseKernels::Candle => (Weights::Candle(weight), Simd::Scalar),
            DenseKernels::F32(simd) => (Weights::F32(weight.flatten_all()?.to_vec1()?), simd),
            DenseKernels::Int8(simd) => {
                (Weights::Int8(Int8Rows::quantise(&weight.flatten_all()?.to_vec1::<f32>()?, columns)), simd)
            }
        };
        Ok(Self { weight, bias, columns, simd })
    }

    /// Query, key and value as one `(3h, h)` layer: one matrix product instead of three.
    fn fused(parts: &[(Tensor, Tensor)], kernels: DenseKernels) -> Result<Self> {
        let weights: Vec<&Tensor> = parts.iter().map(|p| &p.0).collect();
        let biases: Vec<&Tensor> = parts.iter().map(|p| &p.1).collect();
        Self::new((Tensor::cat(&weights, 0)?, Tensor::cat(&biases, 0)?), kernels)
    }

    /// `(tokens, in)` to `(tokens, out)`, on `threads` threads (see [`split`]).
    fn forward(&self, x: &[f32], threads: usize) -> Result<Vec<f32>> {
        let (rows, columns) = (self.bias.len(), self.columns);
        let tokens = x.len() / columns;
        // The kernels write feature-major `(out, tokens)` (each weight row's results
        // together, so two threads can own one half of the rows each); turned back below.
        let mut out = vec![0.0f32; rows * tokens];
        let bias = &self.bias;
        match &self.weight {
            Weights::Candle(weight) => {
                // `W · xᵀ`, the weights used as stored (`x · Wᵀ` would have gemm repack them).
                let x = Tensor::from_slice(x, (tokens, columns), weight.device())?.t()?.contiguous()?;
                out = weight.matmul(&x)?.flatten_all()?.to_vec1::<f32>()?;
                for (row, b) in out.chunks_exact_mut(tokens).zip(bias) {
                    row.iter_mut().for_each(|v| *v += b);
                }
            }
            Weights::F32(weight) => {
                split::rows(threads, rows, tokens, columns, kernels::ROW_TILE, &mut out, |part, out| {
                    let w = &weight[part.start * columns..part.end * columns];
                    kernels::f32_rows(self.simd, w, &bias[part], x, columns, out);
                });
            }
            Weights::Int8(weight) => {
                let x = Int8Tokens::quantise(x, columns);
                split::rows(threads, rows, tokens, columns, kernels::ROW_TILE, &mut out, |part, out| {
                    kernels::int8_rows(self.simd, weight.block(part.clone()), &bias[part], &x, out);
                });
            }
        }
        Ok(transposed(&out, rows, tokens))
    }
}

/// `(rows, columns)` to `(columns, rows)`.
fn transposed(values: &[f32], rows: usize, columns: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; values.len()];
    for (row, values) in values.chunks_exact(columns).enumerate() {
        for (column, value) in values.iter().enumerate() {
            out[column * rows + row] = *value;
        }
    }
    out
}

/// Layer normalization over the features of each token.
struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
    epsilon: f32,
}

impl Norm {
    fn load(tensors: &HashMap<String, Tensor>, prefix: &str, epsilon: f64) -> Result<Self> {
        Ok(Self {
            weight: get(tensors, &format!("{prefix}.weight"))?.to_vec1()?,
            bias: get(tensors, &format!("{prefix}.bias"))?.to_vec1()?,
            epsilon: epsilon as f32,
        })
    }

    /// Normalizes each token of `(tokens, features)` in place.
    fn apply(&self, x: &mut [f32]) {
        let features = self.weight.len();
        for token in x.chunks_exact_mut(features) {
            let mean = token.iter().sum::<f32>() / features as f32;
            let variance = token.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / features as f32;
            let inverse = 1.0 / (variance + self.epsilon).sqrt();
            for ((v, w), b) in token.iter_mut().zip(&self.weight).zip(&self.bias) {
                *v = (*v - mean) * inverse * w + b;
            }
        }
    }
}

struct Layer {
    qkv: Dense,
    attention_out: Dense,
    attention_norm: Norm,
    intermediate: Dense,
    output: Dense,
    output_norm: Norm,
}

pub struct ShortEncoder {
    /// The vocabulary's vectors, kept as candle loaded them (shared with candle's BERT, not
    /// copied): a text's few rows are read out per call.
    words: Tensor,
    positions: Vec<f32>,
    token_type: Vec<f32>,
    embedding_norm: Norm,
    layers: Vec<Layer>,
    heads: usize,
    features: usize,
}

/// The encoder's shape, from the model's `config.json`.
pub struct Shape {
    pub layers: usize,
    pub heads: usize,
    pub epsilon: f64,
}

fn get(tensors: &HashMap<String, Tensor>, name: &str) -> Result<Tensor> {
    // sentence-transformers folders store the encoder bare; Hugging Face BERT ones under `bert.`.
    tensors
        .get(name)
        .or_else(|| tensors.get(&format!("bert.{name}")))
        .cloned()
        .ok_or_else(|| candle_core::Error::CannotFindTensor { path: name.to_owned() })
}

impl ShortEncoder {
    pub fn load(tensors: &HashMap<String, Tensor>, shape: &Shape, kernels: DenseKernels) -> Result<Self> {
        let epsilon = shape.epsilon;
        let layers = (0..shape.layers)
            .map(|index| {
                let prefix = format!("encoder.layer.{index}");
                let part = |name: &str| Dense::load(tensors, &format!("{prefix}.attention.self.{name}"));
                let dense = |name: &str| Dense::new(Dense::load(tensors, &format!("{prefix}.{name}"))?, kernels);
                Ok(Layer {
                    qkv: Dense::fused(&[part("query")?, part("key")?, part("value")?], kernels)?,
                    attention_out: dense("attention.output.dense")?,
                    attention_norm: Norm::load(tensors, &format!("{prefix}.attention.output.LayerNorm"), epsilon)?,
                    intermediate: dense("intermediate.dense")?,
                    output: dense("output.dense")?,
                    output_norm: Norm::load(tensors, &format!("{prefix}.output.LayerNorm"), epsilon)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let words = get(tensors, "embeddings.word_embeddings.weight")?;
        let (_, features) = words.dims2()?;
        Ok(Self {
            words,
            positions: get(tensors, "embeddings.position_embeddings.weight")?.flatten_all()?.to_vec1()?,
            token_type: get(tensors, "embeddings.token_type_embeddings.weight")?.get(0)?.to_vec1()?,
            embedding_norm: Norm::load(tensors, "embeddings.LayerNorm", epsilon)?,
            layers,
            heads: shape.heads,
            features,
        })
    }

    /// The mean of the final token vectors of one text (no padding, so no mask): `features`
    /// numbers. The dense layers run on `threads` threads (1 or 2, see [`split`]).
    pub fn mean_pooled(&self, ids: &[u32], threads: usize) -> Result<Vec<f32>> {
        let features = self.features;
        let tokens = ids.len();
        if tokens == 0 || tokens * features > self.positions.len() {
            candle_core::bail!("{tokens} tokens: the encoder takes 1 to {}", self.positions.len() / features);
        }
        let rows = Tensor::new(ids, self.words.device())?;
        let mut x = self.words.index_select(&rows, 0)?.flatten_all()?.to_vec1::<f32>()?;
        for (token, vector) in x.chunks_exact_mut(features).enumerate() {
            let position = &self.positions[token * features..(token + 1) * features];
            for ((v, p), t) in vector.iter_mut().zip(position).zip(&self.token_type) {
                *v += p + t;
            }
        }
        self.embedding_norm.apply(&mut x);
        for layer in &self.layers {
            x = self.layer(layer, &x, threads)?;
        }
        let mut mean = vec![0.0f32; features];
        for token in x.chunks_exact(features) {
            mean.iter_mut().zip(token).for_each(|(m, v)| *m += v);
        }
        mean.iter_mut().for_each(|m| *m /= tokens as f32);
        Ok(mean)
    }

    fn layer(&self, layer: &Layer, x: &[f32], threads: usize) -> Result<Vec<f32>> {
        let mut attended = layer.attention_out.forward(&self.attention(&layer.qkv.forward(x, threads)?), threads)?;
        add(&mut attended, x);
        layer.attention_norm.apply(&mut attended);
        let mut inner = layer.intermediate.forward(&attended, threads)?;
        inner.iter_mut().for_each(|v| *v = gelu(*v));
        let mut out = layer.output.forward(&inner, threads)?;
        add(&mut out, &attended);
        layer.output_norm.apply(&mut out);
        Ok(out)
    }

    /// Self-attention over `(tokens, 3 × features)` queries, keys and values: per head, each
    /// token's context is the values weighted by the softmax of its scaled query-key products.
    fn attention(&self, qkv: &[f32]) -> Vec<f32> {
        let features = self.features;
        let (head, width) = (features / self.heads, 3 * features);
        let tokens = qkv.len() / width;
        let scale = 1.0 / (head as f32).sqrt();
        let mut context = vec![0.0f32; tokens * features];
        let mut weights = vec![0.0f32; tokens];
        for h in 0..self.heads {
            let (q_at, k_at, v_at) = (h * head, features + h * head, 2 * features + h * head);
            for i in 0..tokens {
                let query = &qkv[i * width + q_at..][..head];
                for (j, weight) in weights.iter_mut().enumerate() {
                    let key = &qkv[j * width + k_at..][..head];
                    *weight = query.iter().zip(key).map(|(q, k)| q * k).sum::<f32>() * scale;
                }
                let largest = weights.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut total = 0.0;
                for weight in &mut weights {
                    *weight = (*weight - largest).exp();
                    total += *weight;
                }
                let out = &mut context[i * features + h * head..][..head];
                for (j, weight) in weights.iter().enumerate() {
                    let value = &qkv[j * width + v_at..][..head];
                    let share = weight / total;
                    out.iter_mut().zip(value).for_each(|(o, v)| *o += share * v);
                }
            }
        }
        context
    }
}

fn add(total: &mut [f32], other: &[f32]) {
    total.iter_mut().zip(other).for_each(|(t, o)| *t += o);
}

/// GELU with the error function, as BERT defines it: `x · Φ(x) = x/2 · (1 + erf(x/√2))`.
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// The error function to within 1.5 × 10⁻⁷ (Abramowitz and Stegun, 7.1.26), well under the
/// rounding of the f32 activations around it.
fn erf(x: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [0.254_829_6, -0.284_496_74, 1.421_413_8, -1.453_152, 1.061_405_4];
    let z = x.abs();
    let t = 1.0 / (1.0 + P * z);
    let polynomial = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    (1.0 - polynomial * (-z * z).exp()).copysign(x)
}

#[cfg(test)]
mod tests {
    use super::{erf, gelu};

    #[test]
    fn erf_matches_known_values_and_is_odd() {
        for (x, want) in [(0.0, 0.0), (0.5, 0.520_499_9), (1.0, 0.842_700_8), (2.0, 0.995_322_3), (4.0, 1.0)] {
            assert!((erf(x) - want).abs() < 5e-7, "erf({x}) = {} not {want}", erf(x));
            assert!((erf(-x) + want).abs() < 5e-7, "erf(-{x})");
        }
        assert!((gelu(1.0) - 0.841_344_7).abs() < 1e-6 && gelu(-10.0).abs() < 1e-6);
    }
}
