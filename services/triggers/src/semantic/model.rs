//! The MiniLM embedder for the semantic signal, loaded on a blocking thread after start so the
//! service serves at once; while it loads, or when its folder is missing, decisions use the
//! triggers alone and say so (`SemanticState`, readiness detail, logs).

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Instant,
};

use arc_swap::ArcSwapOption;
use switchyard_models::{Embedder, EmbeddingCache, ModelError};

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
    pub fn load_in_background(
        dir: PathBuf,
        recent_queries: usize,
        warm: Vec<String>,
        on_ready: impl FnOnce() + Send + 'static,
    ) -> Arc<Self> {
        let model = Arc::new(Self::with_state(ModelState::Loading, recent_queries));
        let slot = model.clone();
        tokio::task::spawn_blocking(move || {
            if slot.load_from(&dir, &warm).is_ok() {
                on_ready();
            }
        });
        model
    }

    /// Loads synchronously (tests, benches, and callers already on a blocking thread).
    pub fn load(dir: &Path, recent_queries: usize) -> Result<Arc<Self>, ModelError> {
        let model = Self::with_state(ModelState::Loading, recent_queries);
        model.load_from(dir, &[])?;
        Ok(Arc::new(model))
    }

    fn load_from(&self, dir: &Path, warm: &[String]) -> Result<(), ModelError> {
        let started = Instant::now();
        match Embedder::load(dir).and_then(|embedder| self.exemplars.fill(&embedder, warm).map(|_| embedder)) {
            Ok(embedder) => {
                self.embedder.store(Some(Arc::new(embedder)));
                self.set_state(ModelState::Ready);
                tracing::info!(
                    model_dir = %dir.display(),
                    exemplars = warm.len(),
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
