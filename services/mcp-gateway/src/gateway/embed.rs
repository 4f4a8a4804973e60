//! Embedding the catalog's tools: the embedding cache file is read before the first fill,
//! a large fill logs its progress every few seconds (and saves what it has every minute, so a
//! restart in the middle keeps it), and the file is rewritten after each fill.

use std::{
    collections::HashSet,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use switchyard_models::{Embedder, EmbeddingCache, FillProgress};

use super::Gateway;
use crate::embedding_cache::EmbeddingFile;

/// How often a running fill logs how far it got.
const LOG_EVERY: Duration = Duration::from_secs(5);
/// How often a running fill saves what it has embedded so far.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(60);

/// What the gateway has embedded since it started (tests and benchmarks read it to tell a warm
/// start from a cold one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EmbeddingCounts {
    /// Vectors read from the embedding cache file at start.
    pub loaded_from_file: usize,
    /// Tool documents run through the model.
    pub embedded: u64,
}

#[derive(Default)]
pub(super) struct Counts {
    loaded_from_file: AtomicUsize,
    embedded: AtomicU64,
}

impl Gateway {
    pub fn embedding_counts(&self) -> EmbeddingCounts {
        EmbeddingCounts {
            loaded_from_file: self.embedding_counts.loaded_from_file.load(Ordering::Relaxed),
            embedded: self.embedding_counts.embedded.load(Ordering::Relaxed),
        }
    }

    /// The embedding cache file, read into the in-memory cache on first use (once, whoever
    /// asks first); none without `--embedding-cache`.
    pub(super) async fn embedding_file(&self, embedder: &Arc<Embedder>) -> Option<Arc<EmbeddingFile>> {
        self.embedding_file
            .get_or_init(|| async {
                let path = self.settings.embedding_cache.clone()?;
                let embedder = embedder.clone();
                let cache = self.embeddings.clone();
                let started = Instant::now();
                let opened = tokio::task::spawn_blocking(move || {
                    let file = EmbeddingFile::open(&path, &embedder)?;
                    let loaded = file.load_into(&cache);
                    Some((Arc::new(file), loaded))
                })
                .await;
                let (file, loaded) = match opened {
                    Ok(opened) => opened?,
                    Err(err) => {
                        tracing::warn!(error = %err, "reading the embedding cache file failed; not using it");
                        return None;
                    }
                };
                self.embedding_counts.loaded_from_file.store(loaded.entries, Ordering::Relaxed);
                if loaded.entries > 0 {
                    tracing::info!(
                        path = %file.path().display(), entries = loaded.entries, elapsed = ?started.elapsed(),
                        "tool embeddings loaded from the embedding cache file"
                    );
                }
                Some(file)
            })
            .await
            .clone()
    }

    /// Embeds the documents the cache lacks, logging progress, then saves the cache file.
    /// One fill at a time: rebuilds that overlap wait rather than embed the same tools twice.
    pub(super) async fn fill_embeddings(&self, embedder: Arc<Embedder>, documents: Vec<String>) {
        let _one_fill = self.fill_lock.lock().await;
        let file = self.embedding_file(&embedder).await;
        let cache = self.embeddings.clone();
        let filled = tokio::task::spawn_blocking(move || fill(&cache, &embedder, &documents, file.as_deref())).await;
        match filled {
            Ok(Ok(count)) => {
                self.embedding_counts.embedded.fetch_add(count as u64, Ordering::Relaxed);
                self.metrics.tools_embedded(count as u64);
            }
            Ok(Err(err)) => tracing::warn!(error = %err, "embedding tools failed; ranking without embeddings"),
            Err(err) => tracing::warn!(error = %err, "embedding task failed"),
        }
    }
}

/// The blocking part of a fill: the model over the missing documents, progress in the logs,
/// checkpoints and the final save to `file`.
fn fill(
    cache: &EmbeddingCache,
    embedder: &Embedder,
    documents: &[String],
    file: Option<&EmbeddingFile>,
) -> Result<usize, switchyard_models::ModelError> {
    let distinct = documents.iter().map(String::as_str).collect::<HashSet<_>>().len();
    let mut progress = Progress::new(distinct);
    let count = cache.fill_with_progress(embedder, documents, |step| {
        if progress.step(step)
            && let Some(file) = file
        {
            save(file, cache, documents);
        }
    })?;
    // Nothing embedded: an overlapping rebuild's fill got there first, and has saved.
    if count > 0 {
        progress.finish(count);
        if let Some(file) = file {
            save(file, cache, documents);
        }
    }
    Ok(count)
}

fn save(file: &EmbeddingFile, cache: &EmbeddingCache, documents: &[String]) {
    let started = Instant::now();
    match file.save(cache, documents) {
        Ok(entries) => tracing::info!(
            path = %file.path().display(), entries, elapsed = ?started.elapsed(), "embedding cache file written"
        ),
        Err(err) => tracing::warn!(
            path = %file.path().display(), error = %err,
            "writing the embedding cache file failed; the next start embeds these tools again"
        ),
    }
}

/// A fill's progress for the logs: tools ready of the catalog's, how many came from the
/// cache and how many the model embedded, the model's rate.
struct Progress {
    distinct: usize,
    started: Instant,
    last_log: Instant,
    last_checkpoint: Instant,
}

impl Progress {
    fn new(distinct: usize) -> Self {
        let now = Instant::now();
        Self { distinct, started: now, last_log: now, last_checkpoint: now }
    }

    /// Logs when it is time; returns whether a checkpoint is due.
    fn step(&mut self, step: FillProgress) -> bool {
        let now = Instant::now();
        if now.duration_since(self.last_log) >= LOG_EVERY && step.embedded < step.missing {
            self.last_log = now;
            let rate = step.embedded as f64 / self.started.elapsed().as_secs_f64().max(1e-3);
            let left = (step.missing - step.embedded) as f64 / rate.max(1e-3);
            tracing::info!(
                ready = self.distinct - step.missing + step.embedded,
                total = self.distinct,
                from_cache = self.distinct - step.missing,
                embedded = step.embedded,
                rate = %format!("{rate:.1}/s"),
                left = %format!("{left:.0}s"),
                "embedding tools"
            );
        }
        if now.duration_since(self.last_checkpoint) >= CHECKPOINT_EVERY && step.embedded < step.missing {
            self.last_checkpoint = now;
            return true;
        }
        false
    }

    fn finish(&self, embedded: usize) {
        let elapsed = self.started.elapsed();
        tracing::info!(
            total = self.distinct,
            from_cache = self.distinct - embedded,
            embedded,
            rate = %format!("{:.1}/s", embedded as f64 / elapsed.as_secs_f64().max(1e-3)),
            elapsed = ?elapsed,
            "tool embeddings ready"
        );
    }
}
