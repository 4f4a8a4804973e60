//! The fast path: MiniLM embeddings of the message for the fast router (the route when the
//! routing call is late or failing, or when the model is local) and for the routing cache.
//!
//! The embedder is loaded and the fast router trained on a blocking thread after start, so the
//! router serves at once; until it is ready (or when the model folder is missing) turns use
//! the routing call alone and say so in the logs.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Instant,
};

use arc_swap::ArcSwapOption;
use switchyard_fastroute::{Decision, Exemplars, FastRouter};
use switchyard_models::Embedder;

/// The embedder and the fast router, once loaded.
#[derive(Default)]
pub struct FastPath {
    router: ArcSwapOption<FastRouter>,
}

impl FastPath {
    /// A fast path that never loads (no model folder, or turned off).
    pub fn disabled() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Starts loading the embedder from `dir` and training the fast router on its builtin
    /// exemplars, on a blocking thread; returns at once.
    pub fn load_in_background(dir: PathBuf) -> Arc<Self> {
        let path = Arc::new(Self::default());
        let slot = path.clone();
        tokio::task::spawn_blocking(move || match build(&dir) {
            Ok(router) => slot.router.store(Some(Arc::new(router))),
            Err(err) => tracing::warn!(
                model_dir = %dir.display(),
                error = %err,
                "the fast router is off: routing timeouts and failures cannot fall back, and the routing cache \
                 matches exact messages only"
            ),
        });
        path
    }

    /// Loads synchronously (tests, and callers already on a blocking thread).
    pub fn load(dir: &Path) -> anyhow::Result<Arc<Self>> {
        let path = Self::default();
        path.router.store(Some(Arc::new(build(dir)?)));
        Ok(Arc::new(path))
    }

    pub fn router(&self) -> Option<Arc<FastRouter>> {
        self.router.load_full()
    }

    pub fn is_ready(&self) -> bool {
        self.router.load().is_some()
    }

    /// The message's unit-length embedding, computed on the blocking pool; `None` while the
    /// model is not loaded or when embedding fails (logged).
    pub async fn embed(&self, text: &str) -> Option<Vec<f32>> {
        let router = self.router()?;
        let text = text.trim().to_owned();
        let embedded = tokio::task::spawn_blocking(move || router.embedder().embed(&[text.as_str()])).await;
        match embedded {
            Ok(Ok(mut vectors)) => vectors.pop(),
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "embedding the message failed");
                None
            }
            Err(err) => {
                tracing::warn!(error = %err, "the embedding task failed");
                None
            }
        }
    }

    /// The fast router's decision for `message` (embedded as `vector` when the caller has it),
    /// with the last user turn for short follow-ups; on the blocking pool.
    pub async fn decide(&self, message: &str, vector: Option<Vec<f32>>, last_turn: Option<String>) -> Option<Decision> {
        let router = self.router()?;
        let message = message.trim().to_owned();
        let decided = tokio::task::spawn_blocking(move || match (vector, last_turn) {
            // A message that stands alone is decided from its vector; a possible follow-up
            // may need the last turn embedded too, which `decide` does.
            (Some(vector), None) => Ok(router.decide_vector(&message, &vector)),
            (_, last_turn) => router.decide(&message, last_turn.as_deref()),
        })
        .await;
        match decided {
            Ok(Ok(decision)) => Some(decision),
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "the fast router failed");
                None
            }
            Err(err) => {
                tracing::warn!(error = %err, "the fast router task failed");
                None
            }
        }
    }
}

fn build(dir: &Path) -> anyhow::Result<FastRouter> {
    let started = Instant::now();
    let embedder = Arc::new(Embedder::load(dir)?);
    let router = FastRouter::new(embedder, Exemplars::builtin()?)?;
    tracing::info!(
        model_dir = %dir.display(),
        exemplars = router.exemplars().len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "fast router ready"
    );
    Ok(router)
}
