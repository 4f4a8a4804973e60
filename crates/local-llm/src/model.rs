//! The loaded model: weights and tokenizer from one GGUF file.

use std::{
    fs::File,
    io::BufReader,
    path::{Path, PathBuf},
    sync::Arc,
    time::Instant,
};

use candle_core::quantized::gguf_file::Content;

use crate::{
    forward::Session,
    tokenizer::ChatTokenizer,
    weights::{Config, Weights},
};

/// The file name inside a model folder.
pub const MODEL_FILE: &str = "model.gguf";

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("local model file {} is missing: run scripts/fetch-models.sh", path.display())]
    Missing { path: PathBuf },
    #[error("local model file {}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
}

/// SmolLM2-135M-Instruct (or another llama GGUF with a byte-level BPE vocabulary), ready to
/// run. Immutable and shared: each generation has its own [`Session`].
pub struct LocalModel {
    weights: Weights,
    tokenizer: ChatTokenizer,
    path: PathBuf,
}

impl std::fmt::Debug for LocalModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalModel").field("path", &self.path).field("config", &self.weights.config).finish()
    }
}

impl LocalModel {
    /// Loads `model.gguf` from a folder, or the given file. Blocking (about a second): from
    /// async code, call it inside `tokio::task::spawn_blocking`.
    pub fn load(path: impl AsRef<Path>) -> Result<Arc<Self>, LoadError> {
        let path = path.as_ref();
        let path = if path.is_dir() || path.extension().is_none() { path.join(MODEL_FILE) } else { path.to_path_buf() };
        if !path.is_file() {
            return Err(LoadError::Missing { path });
        }
        let started = Instant::now();
        let invalid = |reason: String| LoadError::Invalid { path: path.clone(), reason };
        let file = File::open(&path).map_err(|e| invalid(e.to_string()))?;
        let content = Content::read(&mut BufReader::new(file)).map_err(|e| invalid(e.to_string()))?;
        let tokenizer = ChatTokenizer::from_gguf(&content).map_err(invalid)?;
        let weights = Weights::load(&path, &content).map_err(invalid)?;
        if tokenizer.vocab_size() > weights.config.vocab {
            return Err(invalid(format!(
                "tokenizer has {} tokens, the embedding {}",
                tokenizer.vocab_size(),
                weights.config.vocab
            )));
        }
        tracing::info!(path = %path.display(), elapsed_ms = started.elapsed().as_millis() as u64, "local model loaded");
        Ok(Arc::new(Self { weights, tokenizer, path }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn config(&self) -> &Config {
        &self.weights.config
    }

    pub fn tokenizer(&self) -> &ChatTokenizer {
        &self.tokenizer
    }

    /// A fresh conversation state holding up to `max_len` tokens, computing on `threads`
    /// threads.
    pub fn session(&self, max_len: usize, threads: usize) -> Session<'_> {
        Session::new(&self.weights, max_len, threads)
    }

    /// A session that uses `pool` only while it runs alone (see [`Session::adaptive`]).
    pub fn adaptive_session(
        &self,
        max_len: usize,
        pool: std::sync::Arc<rayon::ThreadPool>,
        busy: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    ) -> Session<'_> {
        Session::adaptive(&self.weights, max_len, pool, busy)
    }

    /// Bytes of weights read per decoded token (for the memory-bandwidth bound).
    pub fn bytes_per_token(&self) -> usize {
        self.weights.bytes_per_token()
    }
}
