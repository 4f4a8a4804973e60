//! The BERT encoder for one short text, with its activations stored feature-major: a
//! `(features, tokens)` matrix instead of `(tokens, features)`.
//!
//! Why: a short query has few token rows, so a forward pass is bound by reading the dense
//! weights (42 MB in f32), not by arithmetic. candle's `Linear` computes `x · Wᵀ`, for which
//! the matrix library (gemm) first repacks all of `W` (44 % of a query's forward pass under
//! `perf`). Feature-major, a dense layer is `W · xᵀ` with `W` used as stored, read as a few
//! sequential streams: on 18 weight matrices of 1536 × 384 that do not fit in cache, 12 token
//! rows take 7.1 ms this way against 11.4 ms through `Linear`. The arithmetic is the same BERT
//! as `candle_transformers::models::bert` (the tests compare the two).
//!
//! The dense layers (all but ~5 % of the arithmetic: a 12-token query is ~254 MFLOP in them)
//! run on [`crate::kernels`] by default rather than candle's matrix product: at run time the
//! best of AVX2 or plain code, in f32 or int8 ([`DenseKernels`]). Layer norms, attention,
//! softmax and GELU (erf) stay f32 in candle: they are cheap, and where quantisation would
//! hurt most.

use std::collections::HashMap;

use candle_core::{Result, Tensor};

use crate::kernels::{self, Int8Rows, Int8Tokens, Simd};

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

/// A dense layer: `weight` is `(out, in)` as stored, `bias` a column `(out, 1)`.
struct Dense {
    weight: Weights,
    bias: Tensor,
    /// `bias` as plain numbers, for our kernels.
    bias_values: Vec<f32>,
    columns: usize,
    simd: Simd,
}

impl Dense {
    fn load(tensors: &HashMap<String, Tensor>, prefix: &str) -> Result<(Tensor, Tensor)> {
        Ok((get(tensors, &format!("{prefix}.weight"))?, column(tensors, &format!("{prefix}.bias"))?))
    }

    /// The layer with its weights in the form `kernels` computes with.
    fn new((weight, bias): (Tensor, Tensor), kernels: DenseKernels) -> Result<Self> {
        let (_, columns) = weight.dims2()?;
        let bias_values = bias.flatten_all()?.to_vec1::<f32>()?;
        let (weight, simd) = match kernels {
            DenseKernels::Candle => (Weights::Candle(weight), Simd::Scalar),
            DenseKernels::F32(simd) => (Weights::F32(weight.flatten_all()?.to_vec1()?), simd),
            DenseKernels::Int8(simd) => {
                (Weights::Int8(Int8Rows::quantise(&weight.flatten_all()?.to_vec1::<f32>()?, columns)), simd)
            }
        };
        Ok(Self { weight, bias, bias_values, columns, simd })
    }

    /// Query, key and value as one `(3h, h)` layer: one matrix product instead of three.
    fn fused(parts: &[(Tensor, Tensor)], kernels: DenseKernels) -> Result<Self> {
        let weights: Vec<&Tensor> = parts.iter().map(|p| &p.0).collect();
        let biases: Vec<&Tensor> = parts.iter().map(|p| &p.1).collect();
        Self::new((Tensor::cat(&weights, 0)?, Tensor::cat(&biases, 0)?), kernels)
    }

    /// `(in, tokens)` to `(out, tokens)`.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let rows = self.bias_values.len();
        let (_, tokens) = x.dims2()?;
        // Our kernels read each token's features contiguously: a copy of a few kilobytes.
        let input = |x: &Tensor| x.t()?.contiguous()?.flatten_all()?.to_vec1::<f32>();
        let mut out = vec![0.0f32; rows * tokens];
        match &self.weight {
            Weights::Candle(weight) => return weight.matmul(x)?.broadcast_add(&self.bias),
            Weights::F32(weight) => {
                kernels::f32_rows(self.simd, weight, &self.bias_values, &input(x)?, self.columns, &mut out);
            }
            Weights::Int8(weight) => {
                let tokens = Int8Tokens::quantise(&input(x)?, self.columns);
                kernels::int8_rows(self.simd, weight, &self.bias_values, &tokens, &mut out);
            }
        }
        Tensor::from_vec(out, (rows, tokens), x.device())
    }
}

/// Layer normalisation over the features of each token (each column).
struct Norm {
    weight: Tensor,
    bias: Tensor,
    epsilon: f64,
}

impl Norm {
    fn load(tensors: &HashMap<String, Tensor>, prefix: &str, epsilon: f64) -> Result<Self> {
        Ok(Self {
            weight: column(tensors, &format!("{prefix}.weight"))?,
            bias: column(tensors, &format!("{prefix}.bias"))?,
            epsilon,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let centred = x.broadcast_sub(&x.mean_keepdim(0)?)?;
        let deviation = (centred.sqr()?.mean_keepdim(0)? + self.epsilon)?.sqrt()?;
        centred.broadcast_div(&deviation)?.broadcast_mul(&self.weight)?.broadcast_add(&self.bias)
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
    words: Tensor,
    positions: Tensor,
    token_type: Tensor,
    embedding_norm: Norm,
    layers: Vec<Layer>,
    heads: usize,
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

fn column(tensors: &HashMap<String, Tensor>, name: &str) -> Result<Tensor> {
    get(tensors, name)?.unsqueeze(1)
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
        Ok(Self {
            words: get(tensors, "embeddings.word_embeddings.weight")?,
            positions: get(tensors, "embeddings.position_embeddings.weight")?,
            token_type: get(tensors, "embeddings.token_type_embeddings.weight")?.narrow(0, 0, 1)?,
            embedding_norm: Norm::load(tensors, "embeddings.LayerNorm", epsilon)?,
            layers,
            heads: shape.heads,
        })
    }

    /// The mean of the final token vectors of one text (no padding, so no mask): `(features)`.
    pub fn mean_pooled(&self, ids: &[u32]) -> Result<Tensor> {
        let tokens = ids.len();
        let ids = Tensor::new(ids, self.words.device())?;
        let embedded = self
            .words
            .index_select(&ids, 0)?
            .add(&self.positions.narrow(0, 0, tokens)?)?
            .broadcast_add(&self.token_type)?;
        let mut x = self.embedding_norm.forward(&embedded.t()?.contiguous()?)?;
        for layer in &self.layers {
            x = self.layer(layer, &x)?;
        }
        x.mean(1)
    }

    fn layer(&self, layer: &Layer, x: &Tensor) -> Result<Tensor> {
        let (features, tokens) = x.dims2()?;
        let head = features / self.heads;
        let qkv = layer.qkv.forward(x)?;
        let split = |at: usize| qkv.narrow(0, at * features, features)?.reshape((self.heads, head, tokens));
        let (query, key, value) = (split(0)?, split(1)?, split(2)?);
        // Per head: scores (tokens × tokens) = qᵀ·k, scaled; each query token's row sums to 1.
        let scores = (query.transpose(1, 2)?.matmul(&key)? * (1.0 / (head as f64).sqrt()))?;
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        // Context, feature-major: v · weightsᵀ.
        let context = value.matmul(&weights.transpose(1, 2)?)?.reshape((features, tokens))?;
        let attended = layer.attention_norm.forward(&(layer.attention_out.forward(&context)? + x)?)?;
        let inner = layer.intermediate.forward(&attended)?.gelu_erf()?;
        layer.output_norm.forward(&(layer.output.forward(&inner)? + &attended)?)
    }
}
