//! Local models on CPU with candle (no Python at run time).
//!
//! [`Embedder`]: sentence embeddings from a sentence-transformers BERT folder
//! (`model.safetensors`, `tokenizer.json`, `config.json`; `scripts/fetch-models.sh` puts
//! all-MiniLM-L6-v2 in `models/`): mean of the token vectors over the attention mask, scaled to
//! unit length, so a dot product is the cosine similarity.
//!
//! Speed: a single text (a query) runs through [`short`], an encoder on plain buffers whose dense
//! layers run on our own kernels ([`kernels`]: AVX2 or plain code chosen at run time, int8 by
//! default, see [`DenseKernels`]); several texts are grouped by length ([`batch::plan`]) and
//! run through candle's BERT in f32 with as little padding as possible. candle multiplies
//! matrices on the current rayon pool: a query on a one-thread pool of its calling thread,
//! batches on the global one (`RAYON_NUM_THREADS`, default one thread per core). A query's
//! dense layers are split in two halves, the calling thread's and a helper thread's
//! ([`split`], `SWITCHYARD_QUERY_THREADS`).
//!
//! So a text embedded alone (int8) and the same text in a batch (f32) differ slightly (cosine
//! ≥ 0.988): queries are compared with tool texts embedded in batches, which ranks as well as
//! f32 against f32 (BENCHMARKS.md, "Embeddings").

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config, DTYPE};
use tokenizers::{Tokenizer, TruncationParams};

pub mod batch;
mod cache;
pub mod cache_file;
mod kernels;
pub mod priority;
pub mod recent;
mod short;
mod split;

pub use cache::{EmbeddingCache, FillProgress};
pub use kernels::Simd;
pub use short::DenseKernels;

/// Tokens an input is cut to (MiniLM was trained on 256-token inputs).
const MAX_TOKENS: usize = 256;
/// BERT's `[PAD]` id; padded positions are masked out, so its value only has to be valid.
const PAD_ID: u32 = 0;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("model file {path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("inference: {0}")]
    Inference(#[from] candle_core::Error),
}

pub struct Embedder {
    /// candle's BERT, for calls with several texts.
    model: BertModel,
    /// The same weights on our kernels and loops, for a call with one text (see [`short`]).
    short: Option<short::ShortEncoder>,
    kernels: DenseKernels,
    /// Threads a single text's dense layers run on (1 or 2, see [`split`]).
    query_threads: usize,

    tokenizer: Tokenizer,
    device: Device,
    dimensions: usize,
    /// The folder the model was loaded from, and the digest of its files once asked for.
    dir: PathBuf,
    digest: std::sync::OnceLock<cache_file::ModelDigest>,
}

fn file(dir: &Path, name: &str) -> Result<PathBuf, ModelError> {
    let path = dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(ModelError::File { path, reason: "missing (run scripts/fetch-models.sh)".into() })
    }
}

impl Embedder {
    /// Loads a sentence-transformers BERT folder, with the single-text kernels
    /// [`DenseKernels::from_env`] chooses.
    pub fn load(dir: &Path) -> Result<Self, ModelError> {
        Self::load_with(dir, DenseKernels::from_env())
    }

    /// Loads a sentence-transformers BERT folder; single texts run on `kernels`.
    pub fn load_with(dir: &Path, kernels: DenseKernels) -> Result<Self, ModelError> {
        let config_path = file(dir, "config.json")?;
        let config_text = std::fs::read_to_string(&config_path)
            .map_err(|err| ModelError::File { path: config_path.clone(), reason: err.to_string() })?;
        let config: Config = serde_json::from_str(&config_text)
            .map_err(|err| ModelError::File { path: config_path.clone(), reason: err.to_string() })?;
        let settings: serde_json::Value = serde_json::from_str(&config_text)
            .map_err(|err| ModelError::File { path: config_path.clone(), reason: err.to_string() })?;
        let dimensions = settings["hidden_size"].as_u64().unwrap_or(384) as usize;

        let tokenizer_path = file(dir, "tokenizer.json")?;
        let mut tokenizer =
            Tokenizer::from_file(&tokenizer_path).map_err(|err| ModelError::Tokenizer(err.to_string()))?;
        // Padding is done per model call (see `embed`), not by the tokenizer.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: MAX_TOKENS, ..Default::default() }))
            .map_err(|err| ModelError::Tokenizer(err.to_string()))?;

        let weights_path = file(dir, "model.safetensors")?;
        let weights = std::fs::read(&weights_path)
            .map_err(|err| ModelError::File { path: weights_path.clone(), reason: err.to_string() })?;
        let device = Device::Cpu;
        // Buffered, not memory-mapped: mapping is `unsafe`, and 90 MB read once is cheap.
        let tensors = candle_core::safetensors::load_buffer(&weights, &device)?;
        // The short path implements BERT with GELU (erf) only, which MiniLM uses.
        let short = match settings["hidden_act"].as_str() {
            Some("gelu") => Some(short::ShortEncoder::load(
                &tensors,
                &short::Shape {
                    layers: settings["num_hidden_layers"].as_u64().unwrap_or(0) as usize,
                    heads: settings["num_attention_heads"].as_u64().unwrap_or(1) as usize,
                    epsilon: settings["layer_norm_eps"].as_f64().unwrap_or(1e-12),
                },
                kernels,
            )?),
            _ => None,
        };
        // Tensors share their storage with the short path's: the weights are in memory once.
        let model = BertModel::load(VarBuilder::from_tensors(tensors, DTYPE, &device), &config)?;
        Ok(Self {
            model,
            short,
            kernels,
            query_threads: split::threads_from_env(),
            tokenizer,
            device,
            dimensions,
            dir: dir.to_owned(),
            digest: std::sync::OnceLock::new(),
        })
    }

    pub fn dimensions(&self) -> usize {
        self.dimensions
    }

    /// The digest of this model's files ([`cache_file::ModelDigest::of_dir`] of the folder it
    /// was loaded from), read once and kept: what keys on the model (the embedding cache file,
    /// a base query adapter) shares one pass over its 90 MB, and names the model that really
    /// embeds rather than whatever folder a configuration names. Blocking on first use.
    pub fn model_digest(&self) -> std::io::Result<cache_file::ModelDigest> {
        if let Some(digest) = self.digest.get() {
            return Ok(*digest);
        }
        let digest = cache_file::ModelDigest::of_dir(&self.dir)?;
        Ok(*self.digest.get_or_init(|| digest))
    }

    /// What a single text's dense layers run on.
    pub fn kernels(&self) -> DenseKernels {
        self.kernels
    }

    /// Runs a single text's dense layers on `threads` threads: 1, or 2 (the calling thread and
    /// a helper shared by the process). The default is `SWITCHYARD_QUERY_THREADS`, else 2 on a
    /// machine with two or more cores. Embeddings are the same either way.
    pub fn with_query_threads(mut self, threads: usize) -> Self {
        self.query_threads = threads.clamp(1, 2);
        self
    }

    pub fn query_threads(&self) -> usize {
        self.query_threads
    }

    /// Unit-length embeddings of `texts`, in order. Texts are tokenized one by one (no
    /// padding) and run in calls of similar length ([`batch::plan`]), so a short query never
    /// pays for a long neighbour's padding.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        let encodings = texts
            .iter()
            .map(|text| self.tokenizer.encode_fast(*text, true))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| ModelError::Tokenizer(err.to_string()))?;
        let ids: Vec<&[u32]> = encodings.iter().map(|e| e.get_ids()).collect();
        let lengths: Vec<usize> = ids.iter().map(|ids| ids.len()).collect();
        let mut out = vec![Vec::new(); texts.len()];
        for call in batch::plan(&lengths) {
            let group: Vec<&[u32]> = call.iter().map(|&index| ids[index]).collect();
            for (index, vector) in call.into_iter().zip(self.forward(&group)?) {
                out[index] = vector;
            }
        }
        Ok(out)
    }

    /// One forward pass over token ids, padded to the longest; unit-length mean-pooled rows.
    fn forward(&self, ids: &[&[u32]]) -> Result<Vec<Vec<f32>>, ModelError> {
        if let (Some(short), [single]) = (&self.short, ids) {
            let threads = self.query_threads;
            let mut pooled = match self.kernels {
                DenseKernels::Candle => single_threaded(|| short.mean_pooled(single, threads))?,
                // Our kernels never call candle's matrix product: no pool to hand over to.
                _ => short.mean_pooled(single, threads)?,
            };
            let norm = pooled.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
            pooled.iter_mut().for_each(|v| *v /= norm);
            return Ok(vec![pooled]);
        }
        let length = ids.iter().map(|ids| ids.len()).max().unwrap_or(0).max(1);
        let shape = (ids.len(), length);
        let mut flat = vec![PAD_ID; ids.len() * length];
        for (row, ids) in flat.chunks_mut(length).zip(ids) {
            row[..ids.len()].copy_from_slice(ids);
        }
        let input_ids = Tensor::from_vec(flat, shape, &self.device)?;
        let token_types = Tensor::zeros(shape, DType::U32, &self.device)?;
        let padded = ids.iter().any(|ids| ids.len() < length);
        let pooled = if padded {
            let mask: Vec<u32> =
                ids.iter().flat_map(|ids| (0..length).map(move |at| u32::from(at < ids.len()))).collect();
            let attention = Tensor::from_vec(mask, shape, &self.device)?;
            let hidden = self.model.forward(&input_ids, &token_types, Some(&attention))?;
            // Mean over real tokens only (padding excluded).
            let weights = attention.to_dtype(DType::F32)?.unsqueeze(2)?;
            let summed = hidden.broadcast_mul(&weights)?.sum(1)?;
            summed.broadcast_div(&weights.sum(1)?.clamp(1.0, f64::MAX)?)?
        } else {
            // Nothing padded: every position is a real token, so the model needs no mask and
            // the mean is a plain one.
            self.model.forward(&input_ids, &token_types, None)?.mean(1)?
        };
        let norms = pooled.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
        Ok(pooled.broadcast_div(&norms)?.to_vec2::<f32>()?)
    }
}

thread_local! {
    /// A one-thread rayon pool per calling thread, for single texts on candle's matrix product
    /// (`DenseKernels::Candle`, kept to compare against). A query is a chain of small matrix
    /// products; splitting each over two cores through candle costs more in hand-offs than it
    /// gains (criterion, one query: 9.7 ms on one thread against 11.2 ms on two). One pool per
    /// caller, not one for all, so concurrent queries still run side by side; it ends with its
    /// thread. Batches keep the global pool.
    static QUERY_POOL: Option<rayon::ThreadPool> = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .thread_name(|_| "embed-query".to_owned())
        .build()
        .ok();
}

/// Runs `work` with candle's matrix products on one thread (on the global pool if a pool
/// could not be made).
fn single_threaded<R: Send>(work: impl FnOnce() -> R + Send) -> R {
    QUERY_POOL.with(|pool| match pool {
        Some(pool) => pool.install(work),
        None => work(),
    })
}

/// Dot product (the cosine similarity of unit vectors). Eight running sums instead of one let
/// the compiler use SIMD lanes (a single float sum must be added in order, so it cannot); the
/// gateway and the usage prior call this thousands of times per query.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 8;
    let (a_chunks, b_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = a_chunks.remainder().iter().zip(b_chunks.remainder()).map(|(x, y)| x * y).sum();
    let mut sums = [0.0f32; LANES];
    for (x, y) in a_chunks.zip(b_chunks) {
        for ((sum, x), y) in sums.iter_mut().zip(x).zip(y) {
            *sum += x * y;
        }
    }
    sums.iter().sum::<f32>() + tail
}

/// The dot product of `query` with each row of `rows` (row-major, `query.len()` wide): one
/// query's similarity to every stored unit vector at once. Runs on the CPU's best vector
/// instructions, chosen at run time: the workspace is built for baseline x86-64, so
/// [`cosine`]'s loop gets SSE at most, and scoring a query against the triggers' 667 exemplars
/// that way was a tenth of that service's CPU per request (BENCHMARKS.md).
pub fn cosines(rows: &[f32], query: &[f32]) -> Vec<f32> {
    static SIMD: std::sync::OnceLock<Simd> = std::sync::OnceLock::new();
    let columns = query.len();
    if columns == 0 {
        return Vec::new();
    }
    let count = rows.len() / columns;
    let bias = vec![0.0; count];
    let mut out = vec![0.0; count];
    kernels::f32_rows(*SIMD.get_or_init(Simd::detect), &rows[..count * columns], &bias, query, columns, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::{cosine, cosines};

    #[test]
    fn cosines_are_each_rows_dot_product() {
        // Row counts around the kernel's tile of four rows, widths around its eight lanes.
        for (count, width) in [(0, 8), (1, 1), (3, 7), (4, 8), (9, 13), (667, 384)] {
            let query: Vec<f32> = (0..width).map(|i| (i as f32 * 0.37).sin()).collect();
            let rows: Vec<f32> = (0..count * width).map(|i| (i as f32 * 0.11).cos()).collect();
            let all = cosines(&rows, &query);
            assert_eq!(all.len(), count);
            for (row, got) in rows.chunks_exact(width).zip(&all) {
                let want = cosine(row, &query);
                assert!((got - want).abs() <= 1e-4 * want.abs().max(1.0), "{count}×{width}: {got} against {want}");
            }
        }
        assert!(cosines(&[1.0, 2.0], &[]).is_empty(), "no width, no rows");
    }

    #[test]
    fn cosine_is_the_dot_product_at_any_length() {
        for length in [0, 1, 7, 8, 9, 384] {
            let a: Vec<f32> = (0..length).map(|i| i as f32 * 0.5).collect();
            let b: Vec<f32> = (0..length).map(|i| 1.0 - i as f32 * 0.25).collect();
            let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((cosine(&a, &b) - plain).abs() <= 1e-3 * plain.abs().max(1.0), "length {length}");
        }
    }
}
