//! The MiniLM embedder for the semantic signal, loaded on a blocking thread after start so the
//! service serves at once; while it loads, or when its folder is missing, decisions use the
//! triggers alone and say so (`SemanticState`, readiness detail, logs).

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Instant,
};

use arc_swap::ArcSwapOption;
use switchyard_models::{
    Embedder, EmbeddingCache, ModelError,
    cache_file::{self, CacheFileError, ModelDigest},
};

use super::RecentQueries;
use crate::text::normalize;

/// Where the embedder is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelState {
    /// No model folder configured (`--no-semantic`).
    Off,
    Loading,
    Ready,
    /// The folder is missing or the model failed to load: the reason.
    Unavailable(String),
}

impl ModelState {
    /// For readiness detail and logs.
    pub fn describe(&self) -> String {
        match self {
            Self::Off => "semantic signal off (--no-semantic): decisions use triggers only".into(),
            Self::Loading => "semantic signal loading: decisions use triggers only until it is ready".into(),
            Self::Ready => "semantic signal ready".into(),
            Self::Unavailable(reason) => format!("semantic signal unavailable ({reason}): decisions use triggers only"),
        }
    }
}

pub struct SemanticModel {
    embedder: ArcSwapOption<Embedder>,
    state: Mutex<ModelState>,
    /// Exemplar texts' vectors, kept across registry versions.
    exemplars: EmbeddingCache,
    recent: RecentQueries,
}

impl SemanticModel {
    fn with_state(state: ModelState, recent_queries: usize) -> Self {
        Self {
            embedder: ArcSwapOption::empty(),
            state: Mutex::new(state),
            exemplars: EmbeddingCache::default(),
            recent: RecentQueries::new(recent_queries),
        }
    }

    /// A semantic signal that never loads.
    pub fn off() -> Arc<Self> {
        Arc::new(Self::with_state(ModelState::Off, 0))
    }

    /// Starts loading the model from `dir` on a blocking thread and returns at once;
    /// `on_ready` runs (on that thread) once it is loaded, so the caller can index exemplars.
    ///
    /// `warm` (the domain packs' exemplars, the bulk of any index) is embedded before the model
    /// counts as loaded. Until then registry rebuilds see no embedder and compile the triggers
    /// alone in milliseconds; otherwise the first rebuild would embed hundreds of texts while
    /// holding the rebuild lock, and every role registration would wait behind it (seconds on a
    /// busy machine: long enough for a caller's deadline to expire).
    ///
    /// `kept` is the file the exemplars' vectors are kept in between starts (see
    /// [`KeptExemplars`]): read before embedding, so only texts it lacks are embedded, and
    /// rewritten when any were.
    pub fn load_in_background(
        dir: PathBuf,
        recent_queries: usize,
        warm: Vec<String>,
        kept: Option<PathBuf>,
        on_ready: impl FnOnce() + Send + 'static,
    ) -> Arc<Self> {
        let model = Arc::new(Self::with_state(ModelState::Loading, recent_queries));
        let slot = model.clone();
        tokio::task::spawn_blocking(move || {
            if slot.load_from(&dir, &warm, kept.as_deref()).is_ok() {
                on_ready();
            }
        });
        model
    }

    /// Loads synchronously (tests, benches, and callers already on a blocking thread).
    pub fn load(dir: &Path, recent_queries: usize) -> Result<Arc<Self>, ModelError> {
        let model = Self::with_state(ModelState::Loading, recent_queries);
        model.load_from(dir, &[], None)?;
        Ok(Arc::new(model))
    }

    fn load_from(&self, dir: &Path, warm: &[String], kept: Option<&Path>) -> Result<(), ModelError> {
        let started = Instant::now();
        let loaded = Embedder::load(dir).and_then(|embedder| {
            let kept = kept.and_then(|path| KeptExemplars::open(path, dir, embedder.dimensions()));
            let read = kept.as_ref().map_or(0, |file| file.read_into(&self.exemplars));
            let embedded = self.exemplars.fill(&embedder, warm)?;
            if embedded > 0
                && let Some(file) = &kept
            {
                file.write(&self.exemplars, warm);
            }
            Ok((embedder, read, embedded))
        });
        match loaded {
            Ok((embedder, read, embedded)) => {
                self.embedder.store(Some(Arc::new(embedder)));
                self.set_state(ModelState::Ready);
                tracing::info!(
                    model_dir = %dir.display(),
                    exemplars = warm.len(),
                    read_from_file = read,
                    embedded,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "semantic signal model loaded and the domain exemplars embedded"
                );
                Ok(())
            }
            Err(err) => {
                let state = ModelState::Unavailable(format!("{}: {err}", dir.display()));
                tracing::warn!(model_dir = %dir.display(), error = %err, "{}", state.describe());
                self.set_state(state);
                Err(err)
            }
        }
    }

    fn set_state(&self, state: ModelState) {
        *self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = state;
    }

    pub fn state(&self) -> ModelState {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    pub fn embedder(&self) -> Option<Arc<Embedder>> {
        self.embedder.load_full()
    }

    pub fn exemplars(&self) -> &EmbeddingCache {
        &self.exemplars
    }

    pub fn recent_queries(&self) -> &RecentQueries {
        &self.recent
    }

    /// The query's unit vector: from the recent-queries cache, else embedded on the blocking
    /// pool (never on the async threads: an embedding is ~10 ms of CPU). `Ok(None)` when the
    /// model is not loaded; the error says what failed.
    pub async fn embed_query(&self, query: &str) -> Result<Option<Arc<[f32]>>, String> {
        // MiniLM's tokenizer lowercases and splits on white space, so the normalized text
        // embeds the same and makes a better cache key.
        let key = normalize(query);
        if let Some(vector) = self.recent.get(&key) {
            return Ok(Some(vector));
        }
        let Some(embedder) = self.embedder() else { return Ok(None) };
        let text = key.clone();
        let embedded = tokio::task::spawn_blocking(move || embedder.embed(&[text.as_str()]))
            .await
            .map_err(|err| format!("the embedding task failed: {err}"))?
            .map_err(|err| err.to_string())?;
        let vector: Arc<[f32]> = Arc::from(embedded.into_iter().next().unwrap_or_default());
        self.recent.insert(key, vector.clone());
        Ok(Some(vector))
    }
}

/// The domain exemplars' vectors on disk (`--embedding-cache`), in the embedding cache file
/// format the MCP gateway keeps its tools in (`switchyard_models::cache_file`: tied to the
/// model's digest, checksummed, replaced atomically). Every failure only costs the embedding:
/// a file of another model, a corrupt one or a read-only disk is logged and the texts are
/// embedded as if there were none.
pub struct KeptExemplars {
    path: PathBuf,
    model: ModelDigest,
    dimensions: usize,
}

impl KeptExemplars {
    /// `None` (logged) when the model's files cannot be digested.
    pub fn open(path: &Path, model_dir: &Path, dimensions: usize) -> Option<Self> {
        match ModelDigest::of_dir(model_dir) {
            Ok(model) => Some(Self { path: path.to_owned(), model, dimensions }),
            Err(err) => {
                tracing::warn!(path = %path.display(), error = %err, "cannot identify the model; exemplar embeddings are not kept");
                None
            }
        }
    }

    /// Puts the file's vectors into `cache`; how many.
    pub fn read_into(&self, cache: &EmbeddingCache) -> usize {
        match cache_file::read(&self.path, &self.model, self.dimensions) {
            Ok(entries) => {
                let count = entries.len();
                for (text, vector) in entries {
                    cache.insert(&text, vector);
                }
                count
            }
            Err(CacheFileError::Missing) => 0,
            Err(err) => {
                tracing::warn!(path = %self.path.display(), error = %err, "ignoring the kept exemplar embeddings; embedding them again");
                0
            }
        }
    }

    /// Rewrites the file with the vectors of `texts` (each once).
    pub fn write(&self, cache: &EmbeddingCache, texts: &[String]) {
        let mut seen = std::collections::HashSet::new();
        let vectors: Vec<(&str, Arc<Vec<f32>>)> = texts
            .iter()
            .filter(|text| seen.insert(text.as_str()))
            .filter_map(|text| cache.get(text).map(|vector| (text.as_str(), vector)))
            .collect();
        let entries = vectors.iter().map(|(text, vector)| (*text, vector.as_slice()));
        if let Err(err) = cache_file::write(&self.path, &self.model, self.dimensions, entries) {
            tracing::warn!(path = %self.path.display(), error = %err, "could not keep the exemplar embeddings");
        }
    }
}
