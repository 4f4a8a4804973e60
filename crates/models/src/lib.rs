//! Local models on CPU with candle (no Python at run time).
//!
//! [`Embedder`]: sentence embeddings from a sentence-transformers BERT folder
//! (`model.safetensors`, `tokenizer.json`, `config.json`; `scripts/fetch-models.sh` puts
//! all-MiniLM-L6-v2 in `models/`): mean of the token vectors over the attention mask, scaled to
//! unit length, so a dot product is the cosine similarity.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config, DTYPE};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

/// Tokens an input is cut to (MiniLM was trained on 256-token inputs).
const MAX_TOKENS: usize = 256;

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
    model: BertModel,
    tokenizer: Tokenizer,
    device: Device,
    dimensions: usize,
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
    /// Loads a sentence-transformers BERT folder.
    pub fn load(dir: &Path) -> Result<Self, ModelError> {
        let config_path = file(dir, "config.json")?;
        let config_text = std::fs::read_to_string(&config_path)
            .map_err(|err| ModelError::File { path: config_path.clone(), reason: err.to_string() })?;
        let config: Config = serde_json::from_str(&config_text)
            .map_err(|err| ModelError::File { path: config_path.clone(), reason: err.to_string() })?;
        let dimensions = serde_json::from_str::<serde_json::Value>(&config_text)
            .ok()
            .and_then(|v| v["hidden_size"].as_u64())
            .unwrap_or(384) as usize;

        let tokenizer_path = file(dir, "tokenizer.json")?;
        let mut tokenizer =
            Tokenizer::from_file(&tokenizer_path).map_err(|err| ModelError::Tokenizer(err.to_string()))?;
        tokenizer.with_padding(Some(PaddingParams { strategy: PaddingStrategy::BatchLongest, ..Default::default() }));
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: MAX_TOKENS, ..Default::default() }))
            .map_err(|err| ModelError::Tokenizer(err.to_string()))?;

        let weights_path = file(dir, "model.safetensors")?;
        let weights = std::fs::read(&weights_path)
            .map_err(|err| ModelError::File { path: weights_path.clone(), reason: err.to_string() })?;
        let device = Device::Cpu;
        // Buffered, not memory-mapped: mapping is `unsafe`, and 90 MB read once is cheap.
        let vars = VarBuilder::from_buffered_safetensors(weights, DTYPE, &device)?;
        let model = BertModel::load(vars, &config)?;
        Ok(Self { model, tokenizer, device, dimensions })
    }

    pub fn dimensions(&self) -> usize {
        self.dimensions
    }

    /// Unit-length embeddings of `texts`, in order.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encodings =
            self.tokenizer.encode_batch(texts.to_vec(), true).map_err(|err| ModelError::Tokenizer(err.to_string()))?;
        let length = encodings.first().map_or(0, |e| e.get_ids().len());
        let mut ids = Vec::with_capacity(texts.len() * length);
        let mut mask = Vec::with_capacity(texts.len() * length);
        for encoding in &encodings {
            ids.extend(encoding.get_ids().iter().copied());
            mask.extend(encoding.get_attention_mask().iter().copied());
        }
        let shape = (texts.len(), length);
        let input_ids = Tensor::from_vec(ids, shape, &self.device)?;
        let attention = Tensor::from_vec(mask, shape, &self.device)?;
        let token_types = input_ids.zeros_like()?;
        let hidden = self.model.forward(&input_ids, &token_types, Some(&attention))?;
        // Mean over real tokens only (padding excluded), then unit length.
        let weights = attention.to_dtype(DType::F32)?.unsqueeze(2)?;
        let summed = hidden.broadcast_mul(&weights)?.sum(1)?;
        let counts = weights.sum(1)?.clamp(1e-9, f64::MAX)?;
        let mean = summed.broadcast_div(&counts)?;
        let norms = mean.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
        Ok(mean.broadcast_div(&norms)?.to_vec2::<f32>()?)
    }
}

/// Dot product (the cosine similarity of unit vectors).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
