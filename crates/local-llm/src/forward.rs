//! The llama forward pass over one conversation, with its key/value cache.
//!
//! Written out rather than built from tensor operations: a decoding step of this model is
//! about 150 small matrix-vector products and a few hundred element-wise steps, and with a
//! tensor library each step allocates and dispatches (candle's `quantized_llama` spends more
//! time there than in arithmetic). Here every buffer is allocated once per session and
//! reused, Q/K/V and gate/up are each one product over a stacked matrix, and the cache grows
//! in place (no concatenation).
//!
//! Several tokens (a prompt) go through each weight matrix together, so a weight row is read
//! from memory once for all of them: prefill is compute-bound, decoding bandwidth-bound.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use rayon::prelude::*;

use crate::{
    quant::{self, QVector},
    weights::{Matrix, Weights},
};

/// Tokens per forward call when a long prompt is split (bounds the scratch buffers).
const CHUNK: usize = 64;

/// Which positions' logits a forward call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    /// Only the last token's (generation).
    Last,
    /// Every token's, in order (scoring a continuation).
    All,
}

/// One conversation's state: the cache of keys and values, and scratch space.
pub struct Session<'w> {
    weights: &'w Weights,
    /// Per layer: keys and values of every cached position, `kv_dim` each.
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    len: usize,
    max_len: usize,
    pool: Option<Arc<rayon::ThreadPool>>,
    /// With a shared pool: the number of sessions running; the pool is used only while
    /// this one is alone.
    busy: Option<Arc<AtomicUsize>>,
    scratch: Scratch,
}

#[derive(Default)]
struct Scratch {
    x: Vec<f32>,
    normed: Vec<f32>,
    qkv: Vec<f32>,
    attention: Vec<f32>,
    projected: Vec<f32>,
    gate_up: Vec<f32>,
    hidden: Vec<f32>,
    scores: Vec<f32>,
    quantized: Vec<QVector>,
    transposed: Vec<f32>,
    rope: Vec<(f32, f32)>,
}

impl<'w> Session<'w> {
    /// A session holding at most `max_len` tokens, computing on `threads` threads (1: the
    /// calling thread only).
    pub fn new(weights: &'w Weights, max_len: usize, threads: usize) -> Self {
        let layers = weights.config.layers;
        let pool = (threads > 1).then(|| thread_pool(threads)).flatten();
        Self {
            weights,
            keys: vec![Vec::new(); layers],
            values: vec![Vec::new(); layers],
            len: 0,
            max_len: max_len.min(weights.config.context),
            pool,
            busy: None,
            scratch: Scratch::default(),
        }
    }

    /// A session that computes on `pool` while `busy` (the count of running sessions that
    /// share it, kept by the caller) is at most 1, and on the calling thread otherwise: one
    /// generation alone gets every core, concurrent ones one core each.
    pub fn adaptive(
        weights: &'w Weights,
        max_len: usize,
        pool: Arc<rayon::ThreadPool>,
        busy: Arc<AtomicUsize>,
    ) -> Self {
        Self { pool: Some(pool), busy: Some(busy), ..Self::new(weights, max_len, 1) }
    }

    /// Tokens in the cache.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Forgets every position from `len` on (to score alternatives from a shared prefix).
    pub fn truncate(&mut self, len: usize) {
        if len < self.len {
            let kv_dim = self.weights.config.kv_dim();
            for (keys, values) in self.keys.iter_mut().zip(&mut self.values) {
                keys.truncate(len * kv_dim);
                values.truncate(len * kv_dim);
            }
            self.len = len;
        }
    }

    /// Runs `tokens` after the cached ones; returns their logits (`vocab` per position).
    pub fn forward(&mut self, tokens: &[u32], logits: Logits) -> Result<Vec<f32>, String> {
        if self.len + tokens.len() > self.max_len {
            return Err(format!("context full: {} + {} tokens exceed {}", self.len, tokens.len(), self.max_len));
        }
        if let Some(bad) = tokens.iter().find(|t| **t as usize >= self.weights.config.vocab) {
            return Err(format!("token id {bad} is outside the vocabulary"));
        }
        let mut out = Vec::new();
        let chunks = tokens.chunks(CHUNK).count();
        for (i, chunk) in tokens.chunks(CHUNK).enumerate() {
            // Earlier chunks of a `Last` call only fill the cache.
            let wanted = match logits {
                Logits::All => Some(Logits::All),
                Logits::Last => (i + 1 == chunks).then_some(Logits::Last),
            };
            self.step(chunk, wanted, &mut out);
        }
        Ok(out)
    }

    fn step(&mut self, tokens: &[u32], logits: Option<Logits>, out: &mut Vec<f32>) {
        let w = self.weights;
        let c = &w.config;
        let n = tokens.len();
        let (dim, kv_dim, head_dim) = (c.dim, c.kv_dim(), c.head_dim);
        let qkv_dim = dim + 2 * kv_dim;
        let s = &mut self.scratch;
        s.x.resize(n * dim, 0.0);
        for (t, token) in tokens.iter().enumerate() {
            w.embed.row(*token as usize, &mut s.x[t * dim..(t + 1) * dim]);
        }
        rope_table(&mut s.rope, self.len, n, head_dim, c.rope_base);
        let alone = self.busy.as_ref().is_none_or(|busy| busy.load(Ordering::Relaxed) <= 1);
        let pool = self.pool.as_deref().filter(|_| alone);

        for (l, layer) in w.layers.iter().enumerate() {
            // Attention.
            rms_norm(&s.x, &layer.attn_norm, c.rms_eps, dim, &mut s.normed);
            quantize_rows(&s.normed, dim, &mut s.quantized);
            matmul(pool, &layer.qkv, &s.quantized[..n], &mut s.qkv, &mut s.transposed);
            for t in 0..n {
                let row = &mut s.qkv[t * qkv_dim..(t + 1) * qkv_dim];
                let rope = &s.rope[t * head_dim / 2..(t + 1) * head_dim / 2];
                // Queries and keys are adjacent in the row; both get the same rotation.
                apply_rope(&mut row[..dim + kv_dim], head_dim, rope);
                self.keys[l].extend_from_slice(&row[dim..dim + kv_dim]);
                self.values[l].extend_from_slice(&row[dim + kv_dim..]);
            }
            attention(
                &s.qkv,
                &self.keys[l],
                &self.values[l],
                self.len,
                n,
                c.heads,
                c.kv_heads,
                head_dim,
                &mut s.scores,
                &mut s.attention,
            );
            quantize_rows(&s.attention, dim, &mut s.quantized);
            matmul(pool, &layer.attn_out, &s.quantized[..n], &mut s.projected, &mut s.transposed);
            add(&mut s.x, &s.projected);

            // Feed-forward.
            rms_norm(&s.x, &layer.ffn_norm, c.rms_eps, dim, &mut s.normed);
            quantize_rows(&s.normed, dim, &mut s.quantized);
            matmul(pool, &layer.gate_up, &s.quantized[..n], &mut s.gate_up, &mut s.transposed);
            swiglu(&s.gate_up, c.hidden, &mut s.hidden);
            quantize_rows(&s.hidden, c.hidden, &mut s.quantized);
            matmul(pool, &layer.down, &s.quantized[..n], &mut s.projected, &mut s.transposed);
            add(&mut s.x, &s.projected);
        }
        self.len += n;

        let first = match logits {
            None => return,
            Some(Logits::All) => 0,
            Some(Logits::Last) => n - 1,
        };
        rms_norm(&s.x[first * dim..], &w.out_norm, c.rms_eps, dim, &mut s.normed);
        quantize_rows(&s.normed, dim, &mut s.quantized);
        let mut result = Vec::new();
        let head = w.output.as_ref();
        let inputs = &s.quantized[..n - first];
        match head {
            Some(matrix) => matmul(pool, matrix, inputs, &mut result, &mut s.transposed),
            None => matmul_q8(pool, &w.embed, inputs, &mut result, &mut s.transposed),
        }
        out.extend_from_slice(&result);
    }
}

fn rms_norm(x: &[f32], weight: &[f32], eps: f32, dim: usize, out: &mut Vec<f32>) {
    out.resize(x.len(), 0.0);
    quant::vectorized(|| {
        for (row, normed) in x.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
            let mean_square = quant::dot(row, row) / dim as f32;
            let scale = 1.0 / (mean_square + eps).sqrt();
            for ((o, v), g) in normed.iter_mut().zip(row).zip(weight) {
                *o = v * scale * g;
            }
        }
    });
}

fn quantize_rows(x: &[f32], dim: usize, out: &mut Vec<QVector>) {
    let rows = x.len() / dim;
    if out.len() < rows {
        out.resize_with(rows, QVector::default);
    }
    for (row, q) in x.chunks_exact(dim).zip(out.iter_mut()) {
        q.quantize(row);
    }
}

/// A pool of `threads` threads for the matrix products.
pub fn thread_pool(threads: usize) -> Option<Arc<rayon::ThreadPool>> {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).thread_name(|i| format!("local-llm-{i}")).build();
    pool.ok().map(Arc::new)
}

/// `out` (inputs × rows, row-major per input) = inputs · matrixᵀ, on the pool when there is
/// one. Rows are split among threads; with several inputs each thread writes rows × inputs
/// and the result is transposed back.
fn matmul(
    pool: Option<&rayon::ThreadPool>,
    m: &Matrix,
    inputs: &[QVector],
    out: &mut Vec<f32>,
    scratch: &mut Vec<f32>,
) {
    run_matmul(pool, m.rows(), inputs, out, scratch, |rows, out| m.dot_rows(rows, inputs, out));
}

fn matmul_q8(
    pool: Option<&rayon::ThreadPool>,
    m: &quant::Q8Matrix,
    inputs: &[QVector],
    out: &mut Vec<f32>,
    scratch: &mut Vec<f32>,
) {
    run_matmul(pool, m.rows, inputs, out, scratch, |rows, out| m.dot_rows(rows, inputs, out));
}

fn run_matmul(
    pool: Option<&rayon::ThreadPool>,
    rows: usize,
    inputs: &[QVector],
    out: &mut Vec<f32>,
    scratch: &mut Vec<f32>,
    dot_rows: impl Fn(std::ops::Range<usize>, &mut [f32]) + Sync,
) {
    let n = inputs.len();
    let target = if n == 1 { &mut *out } else { &mut *scratch };
    target.clear();
    target.resize(rows * n, 0.0);
    match pool {
        None => dot_rows(0..rows, target),
        Some(pool) => {
            // A few chunks per thread balance uneven progress; each is still thousands of
            // multiply-adds, so the dispatch cost stays small.
            let chunk_rows = rows.div_ceil(pool.current_num_threads() * 4).max(16);
            pool.install(|| {
                target.par_chunks_mut(chunk_rows * n).enumerate().for_each(|(i, part)| {
                    let start = i * chunk_rows;
                    dot_rows(start..start + part.len() / n, part);
                });
            });
        }
    }
    if n > 1 {
        out.clear();
        out.resize(rows * n, 0.0);
        for (r, row) in scratch.chunks_exact(n).enumerate() {
            for (t, v) in row.iter().enumerate() {
                out[t * rows + r] = *v;
            }
        }
    }
}

/// cos/sin per rotated pair for `n` positions from `start`.
fn rope_table(table: &mut Vec<(f32, f32)>, start: usize, n: usize, head_dim: usize, base: f32) {
    table.clear();
    for pos in start..start + n {
        for i in 0..head_dim / 2 {
            let frequency = base.powf(-2.0 * i as f32 / head_dim as f32);
            let angle = pos as f32 * frequency;
            table.push((angle.cos(), angle.sin()));
        }
    }
}

/// Rotates each head's consecutive pairs (GGUF llama weights are laid out for this
/// "interleaved" rotary embedding).
fn apply_rope(x: &mut [f32], head_dim: usize, table: &[(f32, f32)]) {
    for head in x.chunks_exact_mut(head_dim) {
        for (pair, (cos, sin)) in head.chunks_exact_mut(2).zip(table) {
            let (a, b) = (pair[0], pair[1]);
            pair[0] = a * cos - b * sin;
            pair[1] = a * sin + b * cos;
        }
    }
}

/// Causal attention for `n` new tokens after `past` cached ones (keys and values already
/// hold all `past + n`). Query head `h` reads key/value head `h / (heads / kv_heads)`.
#[allow(clippy::too_many_arguments)]
fn attention(
    qkv: &[f32],
    keys: &[f32],
    values: &[f32],
    past: usize,
    n: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    scores: &mut Vec<f32>,
    out: &mut Vec<f32>,
) {
    let dim = heads * head_dim;
    let kv_dim = kv_heads * head_dim;
    let qkv_dim = dim + 2 * kv_dim;
    let group = heads / kv_heads;
    let scale = 1.0 / (head_dim as f32).sqrt();
    out.clear();
    out.resize(n * dim, 0.0);
    quant::vectorized(|| {
        for t in 0..n {
            let visible = past + t + 1;
            for h in 0..heads {
                let query = &qkv[t * qkv_dim + h * head_dim..t * qkv_dim + (h + 1) * head_dim];
                let kv_offset = (h / group) * head_dim;
                scores.clear();
                let mut max = f32::NEG_INFINITY;
                for pos in 0..visible {
                    let key = &keys[pos * kv_dim + kv_offset..pos * kv_dim + kv_offset + head_dim];
                    let score = quant::dot(query, key) * scale;
                    max = max.max(score);
                    scores.push(score);
                }
                let mut total = 0.0;
                for score in scores.iter_mut() {
                    *score = (*score - max).exp();
                    total += *score;
                }
                let head_out = &mut out[t * dim + h * head_dim..t * dim + (h + 1) * head_dim];
                for (pos, weight) in scores.iter().enumerate() {
                    let value = &values[pos * kv_dim + kv_offset..pos * kv_dim + kv_offset + head_dim];
                    quant::add_scaled(head_out, weight / total, value);
                }
            }
        }
    });
}

fn add(x: &mut [f32], delta: &[f32]) {
    quant::vectorized(|| {
        for (a, b) in x.iter_mut().zip(delta) {
            *a += b;
        }
    });
}

/// silu(gate) × up, per token (`gate_up` rows hold gate then up).
fn swiglu(gate_up: &[f32], hidden: usize, out: &mut Vec<f32>) {
    out.clear();
    for row in gate_up.chunks_exact(2 * hidden) {
        let (gate, up) = row.split_at(hidden);
        out.extend(gate.iter().zip(up).map(|(g, u)| g / (1.0 + (-g).exp()) * u));
    }
}
