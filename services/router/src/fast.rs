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
use switchyard_fastroute::{Decision, Exemplars, FastRouter, Tuning};
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

    /// The fast router's decision for `message` from its embedding `vector`, with the last
    /// user turn for short follow-ups; on the blocking pool.
    pub async fn decide(&self, message: &str, vector: Vec<f32>, last_turn: Option<String>) -> Option<Decision> {
        let router = self.router()?;
        let message = message.trim().to_owned();
        let decided =
            tokio::task::spawn_blocking(move || router.decide_embedded(&message, &vector, last_turn.as_deref())).await;
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
    let exemplars = Exemplars::builtin()?;
    let dimensions = embedder.dimensions();
    let cache = VectorCache::new(dir, &exemplars, dimensions);
    let vectors = match cache.as_ref().and_then(VectorCache::read) {
        Some(vectors) => vectors,
        None => {
            let texts: Vec<&str> = exemplars.items().iter().map(|item| item.message.as_str()).collect();
            let vectors: Vec<f32> = embedder.embed(&texts)?.into_iter().flatten().collect();
            if let Some(cache) = &cache {
                cache.write(&vectors);
            }
            vectors
        }
    };
    let router = FastRouter::from_vectors(embedder, exemplars, vectors, Tuning::default())?;
    tracing::info!(
        model_dir = %dir.display(),
        exemplars = router.exemplars().len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "fast router ready"
    );
    Ok(router)
}

/// The exemplars' embeddings on disk, so a restart does not embed them again (about a thousand
/// texts: seconds of CPU). The file is named by a digest of the model's files and the
/// exemplars, so a new model or exemplar set never reads old vectors; it lives in
/// `$SWITCHYARD_CACHE_DIR`, else `$XDG_CACHE_HOME/switchyard`, else `~/.cache/switchyard`. Any
/// failure to read or write it only costs the embedding (a read-only file system, say).
struct VectorCache {
    path: PathBuf,
    len: usize,
}

impl VectorCache {
    fn new(model_dir: &Path, exemplars: &Exemplars, dimensions: usize) -> Option<Self> {
        use sha2::{Digest, Sha256};
        let base = switchyard_models::cache_file::default_dir()?;
        let mut digest = Sha256::new();
        for file in ["config.json", "tokenizer.json", "model.safetensors"] {
            // The weights by size and time (hashing 90 MB would cost what the cache saves).
            let meta = std::fs::metadata(model_dir.join(file)).ok()?;
            digest.update(file.as_bytes());
            digest.update(meta.len().to_le_bytes());
            if file != "model.safetensors" {
                digest.update(std::fs::read(model_dir.join(file)).ok()?);
            }
        }
        for item in exemplars.items() {
            digest.update(item.message.as_bytes());
            digest.update([0]);
        }
        let hex: String = digest.finalize().iter().take(12).map(|b| format!("{b:02x}")).collect();
        Some(Self { path: base.join(format!("fastroute-{hex}.f32")), len: exemplars.len() * dimensions })
    }

    fn read(&self) -> Option<Vec<f32>> {
        let bytes = std::fs::read(&self.path).ok()?;
        if bytes.len() != self.len * 4 {
            return None;
        }
        let vectors: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        vectors.iter().all(|v| v.is_finite()).then_some(vectors)
    }

    fn write(&self, vectors: &[f32]) {
        let bytes: Vec<u8> = vectors.iter().flat_map(|v| v.to_le_bytes()).collect();
        // Written aside and renamed, so a reader never sees half a file.
        let temporary = self.path.with_extension(format!("tmp-{}", std::process::id()));
        let written = self
            .path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&temporary, &bytes))
            .and_then(|()| std::fs::rename(&temporary, &self.path));
        if let Err(err) = written {
            let _ = std::fs::remove_file(&temporary);
            tracing::debug!(path = %self.path.display(), error = %err, "could not keep the exemplar embeddings");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exemplar_vectors_round_trip_and_a_wrong_file_is_ignored() {
        let dir = std::env::temp_dir().join(format!("sy-fastroute-{}", uuid::Uuid::new_v4().simple()));
        let cache = VectorCache { path: dir.join("v.f32"), len: 4 };
        assert_eq!(cache.read(), None, "nothing written yet");
        cache.write(&[0.5, -1.0, 2.0, 0.25]);
        assert_eq!(cache.read(), Some(vec![0.5, -1.0, 2.0, 0.25]));
        // A file of another size (another model's dimensions, a torn write) is not used.
        std::fs::write(&cache.path, [0u8; 12]).expect("write");
        assert_eq!(cache.read(), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_file_is_named_by_the_model_and_the_exemplars() {
        let model = switchyard_testkit::model_dir();
        let builtin = Exemplars::builtin().expect("exemplars");
        let fewer = builtin.without(|item| item.message.starts_with('H')).expect("still every route");
        let a = VectorCache::new(&model, &builtin, 384).expect("a cache place");
        let b = VectorCache::new(&model, &fewer, 384).expect("a cache place");
        assert_ne!(a.path, b.path);
        assert_eq!(a.path, VectorCache::new(&model, &builtin, 384).expect("a cache place").path);
        assert!(VectorCache::new(Path::new("/nonexistent"), &builtin, 384).is_none(), "no model, no cache");
    }
}
