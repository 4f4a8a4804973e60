//! Embeddings of texts that are embedded once and looked up many times (tool descriptions,
//! exemplar questions), kept by text across index rebuilds, so a change embeds only what is
//! new.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
};

use crate::{Embedder, ModelError};

/// Texts embedded per forward pass when filling: the lock is released between passes, so
/// readers never wait for more than one.
const FILL_BATCH: usize = 32;

/// How far a fill got: `embedded` of the `missing` texts it found uncached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FillProgress {
    pub embedded: usize,
    pub missing: usize,
}

/// Embeddings by text.
#[derive(Default)]
pub struct EmbeddingCache {
    vectors: Mutex<HashMap<String, Arc<Vec<f32>>>>,
}

impl EmbeddingCache {
    fn vectors(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Vec<f32>>>> {
        // Entries are inserted whole, so a poisoned lock still holds a consistent map.
        self.vectors.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn get(&self, text: &str) -> Option<Arc<Vec<f32>>> {
        self.vectors().get(text).cloned()
    }

    /// Keeps a vector computed elsewhere (by the same model) for `text`.
    pub fn insert(&self, text: &str, vector: Vec<f32>) {
        self.vectors().insert(text.to_owned(), Arc::new(vector));
    }

    /// Whether every text has its embedding.
    pub fn covers(&self, texts: &[String]) -> bool {
        let cached = self.vectors();
        texts.iter().all(|t| cached.contains_key(t))
    }

    /// Embeds the texts not yet cached (blocking: run off the async threads); returns how many
    /// were embedded.
    pub fn fill(&self, embedder: &Embedder, texts: &[String]) -> Result<usize, ModelError> {
        self.fill_with_progress(embedder, texts, |_| {})
    }

    /// [`fill`](Self::fill), calling `progress` after each forward pass with how far it got
    /// (large catalogs take minutes; their owner logs and saves as it goes).
    pub fn fill_with_progress(
        &self,
        embedder: &Embedder,
        texts: &[String],
        mut progress: impl FnMut(FillProgress),
    ) -> Result<usize, ModelError> {
        let missing: Vec<&str> = {
            let cached = self.vectors();
            let mut seen = HashSet::new();
            texts.iter().filter(|t| !cached.contains_key(*t) && seen.insert(t.as_str())).map(String::as_str).collect()
        };
        let mut done = 0;
        for chunk in missing.chunks(FILL_BATCH) {
            let vectors = embedder.embed(chunk)?;
            {
                let mut cached = self.vectors();
                for (text, vector) in chunk.iter().zip(vectors) {
                    cached.insert((*text).to_owned(), Arc::new(vector));
                }
            }
            done += chunk.len();
            progress(FillProgress { embedded: done, missing: missing.len() });
        }
        Ok(missing.len())
    }

    /// Forgets every text but `keep` (texts no index uses any more).
    pub fn retain(&self, keep: &HashSet<&str>) {
        self.vectors().retain(|text, _| keep.contains(text.as_str()));
    }

    pub fn len(&self) -> usize {
        self.vectors().len()
    }

    pub fn is_empty(&self) -> bool {
        self.vectors().is_empty()
    }
}
