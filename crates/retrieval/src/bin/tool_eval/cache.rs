//! An embedding cache for the eval, so sweeping weights does not re-run the model over 16,000
//! texts each time. The file is the models crate's embedding cache file (the gateway's
//! `--embedding-cache` uses it too): keyed by a digest of the model's files and the exact text;
//! a file made with another model, or unreadable, is ignored and rewritten.

use std::{collections::HashMap, path::PathBuf};

use anyhow::Context;
use sha2::{Digest, Sha256};
use switchyard_models::{
    Embedder,
    cache_file::{self, CacheFileError, ModelDigest},
};

/// Texts embedded per model call (the embedder groups them by length within a call).
const BATCH: usize = 256;

pub struct EmbeddingCache {
    path: Option<PathBuf>,
    model: ModelDigest,
    /// Read on first use, when the model's dimensions are known.
    vectors: Option<HashMap<String, Vec<f32>>>,
    dimensions: usize,
    dirty: bool,
}

/// Identifies what makes a cached vector: the model folder's files (config, tokenizer,
/// weights) and the kernels a text embedded alone runs on (`int8/avx2`, ...), which change its
/// vector slightly.
pub fn fingerprint(model_dir: &std::path::Path, single_text_kernels: &str) -> anyhow::Result<ModelDigest> {
    let files =
        ModelDigest::of_dir(model_dir).with_context(|| format!("digesting the model in {}", model_dir.display()))?;
    let mut hasher = Sha256::new();
    hasher.update(files.as_bytes());
    hasher.update(single_text_kernels.as_bytes());
    Ok(ModelDigest::from_bytes(hasher.finalize().into()))
}

impl EmbeddingCache {
    /// Opens the cache at `path` (none: an in-memory cache that is never saved).
    pub fn open(path: Option<PathBuf>, model: ModelDigest) -> Self {
        Self { path, model, vectors: None, dimensions: 0, dirty: false }
    }

    fn loaded(&mut self, dimensions: usize) -> &mut HashMap<String, Vec<f32>> {
        let (path, model) = (&self.path, &self.model);
        self.dimensions = dimensions;
        self.vectors.get_or_insert_with(|| {
            let Some(path) = path else { return HashMap::new() };
            match cache_file::read(path, model, dimensions) {
                Ok(entries) => entries.into_iter().collect(),
                Err(CacheFileError::Missing) => HashMap::new(),
                Err(err) => {
                    eprintln!("ignoring the embedding cache {}: {err}", path.display());
                    HashMap::new()
                }
            }
        })
    }

    /// Embeddings of `texts`, in order, running the model only on texts not seen before.
    pub fn embed(&mut self, embedder: &Embedder, texts: &[&str]) -> anyhow::Result<Vec<Vec<f32>>> {
        let vectors = self.loaded(embedder.dimensions());
        let mut missing: Vec<&str> = texts.iter().copied().filter(|t| !vectors.contains_key(*t)).collect();
        missing.sort_unstable();
        missing.dedup();
        for chunk in missing.chunks(BATCH) {
            for (text, vector) in chunk.iter().zip(embedder.embed(chunk)?) {
                vectors.insert((*text).to_owned(), vector);
            }
        }
        let result = texts.iter().map(|t| vectors[*t].clone()).collect();
        self.dirty |= !missing.is_empty();
        Ok(result)
    }

    /// Embeddings of `texts` each embedded alone, as the gateway embeds a query (the
    /// embedder's single-text path), running the model only on texts not seen before.
    pub fn embed_alone(&mut self, embedder: &Embedder, texts: &[&str]) -> anyhow::Result<Vec<Vec<f32>>> {
        let vectors = self.loaded(embedder.dimensions());
        let mut learned = false;
        for text in texts {
            if !vectors.contains_key(*text) {
                let vector = embedder.embed(&[text])?.pop().context("no embedding")?;
                vectors.insert((*text).to_owned(), vector);
                learned = true;
            }
        }
        let result = texts.iter().map(|t| vectors[*t].clone()).collect();
        self.dirty |= learned;
        Ok(result)
    }

    /// Writes the cache back if it learned anything (atomically: see the models crate's
    /// `cache_file`).
    pub fn save(&self) -> anyhow::Result<()> {
        let (Some(path), Some(vectors)) = (&self.path, &self.vectors) else { return Ok(()) };
        if !self.dirty {
            return Ok(());
        }
        let entries = vectors.iter().map(|(text, vector)| (text.as_str(), vector.as_slice()));
        cache_file::write(path, &self.model, self.dimensions, entries)
            .with_context(|| format!("writing the embedding cache {}", path.display()))
    }
}
