//! The catalog's tool embeddings on disk (`--embedding-cache PATH`), so a restart embeds only
//! tools it has never seen: with 10,000 tools, minutes of model time become a file read.
//!
//! The file is the models crate's [`cache_file`]: keyed by a digest of the model's files and the
//! exact tool document, rewritten whole (temporary file, then rename) after each fill. It is an
//! optimisation only: a missing, unreadable, corrupt or other-model file is logged and the
//! tools are embedded as if it were not there; a failed write is logged and serving goes on.
//!
//! Growth is bounded at each rewrite: the file keeps the current catalog's documents, then the
//! documents of earlier catalogs most recently in use (a server that is down today keeps its
//! vectors for a while) up to [`extra_entries`] of them; older ones are dropped.

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
    sync::Mutex,
};

use switchyard_models::{
    Embedder, EmbeddingCache,
    cache_file::{self, CacheFileError, ModelDigest},
};

/// Documents of earlier catalogs kept beyond the current ones: as many as the catalog has,
/// and at least this many.
const EXTRA_ENTRIES_FLOOR: usize = 1024;

/// How many documents not in the current catalog a rewrite keeps.
pub fn extra_entries(current: usize) -> usize {
    current.max(EXTRA_ENTRIES_FLOOR)
}

/// What a start-up load found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Loaded {
    pub entries: usize,
}

pub struct EmbeddingFile {
    path: PathBuf,
    model: ModelDigest,
    dimensions: usize,
    /// The documents of the file as last read or written, most recently cataloged first: the
    /// order in which a rewrite keeps earlier catalogs' documents.
    order: Mutex<Vec<String>>,
}

impl EmbeddingFile {
    /// The cache file at `path` for `embedder`'s model (blocking the first time the model's
    /// files are digested). `None`, with a warning, when the model's files cannot be read.
    pub fn open(path: &Path, embedder: &Embedder) -> Option<Self> {
        match embedder.model_digest() {
            Ok(model) => Some(Self {
                path: path.to_owned(),
                model,
                dimensions: embedder.dimensions(),
                order: Mutex::new(Vec::new()),
            }),
            Err(err) => {
                tracing::warn!(
                    path = %path.display(), error = %err,
                    "cannot identify the embedding model; the embedding cache file is not used"
                );
                None
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn order(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.order.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads the file into `cache` (blocking). Anything but a readable file of this model is
    /// logged and loads nothing: the tools are embedded again and the file rewritten.
    pub fn load_into(&self, cache: &EmbeddingCache) -> Loaded {
        let entries = match cache_file::read(&self.path, &self.model, self.dimensions) {
            Ok(entries) => entries,
            Err(CacheFileError::Missing) => {
                // The first start with a new file: expected, not a warning.
                tracing::info!(path = %self.path.display(), "no embedding cache file yet; it is written once tools are embedded");
                return Loaded::default();
            }
            Err(err) => {
                tracing::warn!(
                    path = %self.path.display(), error = %err,
                    "ignoring the embedding cache file; tools are embedded again and the file rewritten"
                );
                return Loaded::default();
            }
        };
        let mut order = Vec::with_capacity(entries.len());
        for (text, vector) in entries {
            cache.insert(&text, vector);
            order.push(text);
        }
        let loaded = Loaded { entries: order.len() };
        *self.order() = order;
        loaded
    }

    /// Rewrites the file with the vectors of `current` (the catalog's documents) and those
    /// of earlier catalogs it keeps (blocking). Returns how many entries were written.
    /// (The in-memory cache is left as it is: a catalog being built beside this one may
    /// still need what the file drops.)
    pub fn save(&self, cache: &EmbeddingCache, current: &[String]) -> std::io::Result<usize> {
        let mut order = self.order();
        let kept = compacted(current, &order, |text| cache.get(text).is_some());
        let vectors: Vec<_> = kept.iter().filter_map(|text| cache.get(text).map(|v| (text, v))).collect();
        cache_file::write(
            &self.path,
            &self.model,
            self.dimensions,
            vectors.iter().map(|(text, vector)| (text.as_str(), vector.as_slice())),
        )?;
        let written = vectors.len();
        *order = kept;
        Ok(written)
    }
}

/// The documents a rewrite keeps, in order: `current` ones that have a vector, then those of
/// `previous` (the last file's order) not in `current` that still have one, up to
/// [`extra_entries`]. Each text once.
pub fn compacted(current: &[String], previous: &[String], has_vector: impl Fn(&str) -> bool) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut kept: Vec<String> = current.iter().filter(|t| has_vector(t) && seen.insert(t.as_str())).cloned().collect();
    let extras = previous
        .iter()
        .filter(|t| has_vector(t) && seen.insert(t.as_str()))
        .take(extra_entries(current.len()))
        .cloned()
        .collect::<Vec<_>>();
    kept.extend(extras);
    kept
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn texts(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    #[test]
    fn current_documents_come_first_then_the_most_recent_earlier_ones() {
        let current = vec!["b".to_owned(), "c".to_owned(), "b".to_owned()];
        let previous = vec!["x".to_owned(), "b".to_owned(), "y".to_owned()];
        assert_eq!(compacted(&current, &previous, |_| true), ["b", "c", "x", "y"]);
    }

    #[test]
    fn documents_without_a_vector_are_not_kept() {
        let current = vec!["a".to_owned(), "unembedded".to_owned()];
        let previous = vec!["forgotten".to_owned()];
        let kept = compacted(&current, &previous, |t| t == "a");
        assert_eq!(kept, ["a"]);
    }

    #[test]
    fn earlier_catalogs_are_capped_oldest_dropped() {
        let current = texts("now", 10);
        let previous = texts("old", 5_000);
        let kept = compacted(&current, &previous, |_| true);
        assert_eq!(kept.len(), 10 + EXTRA_ENTRIES_FLOOR);
        assert_eq!(kept[10], "old0", "the most recently used earlier document is kept");
        assert!(!kept.contains(&format!("old{EXTRA_ENTRIES_FLOOR}")), "the oldest are dropped");

        let large = texts("now", 3_000);
        assert_eq!(compacted(&large, &previous, |_| true).len(), 6_000, "as many extras as the catalog has");
    }

    #[test]
    fn repeated_catalog_changes_never_grow_the_file_past_the_bound() {
        let mut order: Vec<String> = Vec::new();
        for generation in 0..20 {
            let current = texts(&format!("g{generation}-"), 100);
            order = compacted(&current, &order, |_| true);
            assert!(order.len() <= 100 + extra_entries(100));
        }
        assert_eq!(order.len(), 100 + EXTRA_ENTRIES_FLOOR);
        assert_eq!(order[0], "g19-0");
    }
}
