//! Keeping the published tool catalog current: rebuilt from the servers' listings and the
//! usage history, embedded when the model is loaded, and announced when it changed.

use std::sync::{Arc, LazyLock};

use tokio::sync::broadcast;

use super::Gateway;
use crate::{
    catalog::{Catalog, CatalogTool, History, HistoryBuilder},
    error::GatewayError,
    store::{SessionKey, StoreError},
};

/// One thread, at lowered priority, for every catalog build of the process (builds are
/// rare: start-up, a server's listing changing, the history changing).
static CATALOG_BUILDER: LazyLock<Option<rayon::ThreadPool>> = LazyLock::new(|| {
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .thread_name(|_| "catalog-build".to_owned())
        .start_handler(|_| {
            if !switchyard_models::priority::lower_this_thread() {
                tracing::debug!("catalog builds run at normal priority");
            }
        })
        .build()
        .inspect_err(|err| tracing::warn!(%err, "no catalog-build thread; catalogs build on the blocking pool"))
        .ok()
});

impl Gateway {
    /// Ticks whenever the tool catalog changes.
    pub fn subscribe_catalog(&self) -> broadcast::Receiver<()> {
        self.catalog_changed.subscribe()
    }

    /// Hears the key of every context set on this replica (`set_context`, over MCP or gRPC).
    pub fn subscribe_contexts(&self) -> broadcast::Receiver<SessionKey> {
        self.contexts_changed.subscribe()
    }

    /// Reloads the usage history now and rebuilds the catalog with it (also done periodically;
    /// an unchanged history leaves the catalog as it is, so a quiet gateway does not relearn
    /// its query adapter every refresh).
    pub async fn refresh_history(&self) -> Result<usize, GatewayError> {
        let history = self.load_history().await?;
        let count = history.len();
        if **self.history.load() == history {
            return Ok(count);
        }
        self.history.store(Arc::new(history));
        self.rebuild_catalog().await;
        Ok(count)
    }

    /// The newest `--history-limit` pairs of the usage store, each quantised as it streams in.
    pub(super) async fn load_history(&self) -> Result<History, StoreError> {
        let limit = self.settings.history_limit;
        // Reserved up front (exactly sized when finished), within reason for a large limit.
        let mut history = HistoryBuilder::with_capacity(limit.min(65_536));
        self.usage
            .each_history_pair(limit, &mut |pair| history.push(pair.context, &pair.tool, pair.embedding.as_deref()))
            .await?;
        Ok(history.finish())
    }

    /// Rebuilds the catalog from the current listings, embedding new tools first.
    pub async fn rebuild_catalog(&self) {
        let tools = Catalog::collect(&self.upstreams, self.settings.prefix_tools);
        let semantic = self.embedder.is_some();
        if let Some(embedder) = self.embedder.clone() {
            // The cache file first: after a restart it usually covers every tool.
            self.embedding_file(&embedder).await;
            let documents = Catalog::documents(&tools);
            if !self.embeddings.covers(&documents) {
                // Publish a lexical catalog at once, so a slow model never delays a server's
                // tools appearing; the embedded one follows.
                self.publish(self.build_catalog(tools.clone(), false).await);
                self.fill_embeddings(embedder, documents).await;
            }
        }
        self.publish(self.build_catalog(tools, semantic).await);
    }

    /// Indexes `tools` with the current history. Learning the usage prior from the history
    /// takes seconds of CPU (BENCHMARKS.md), so it runs off the async workers, on one thread
    /// of lowered priority: on busy cores it must not slow the embedding of a set_context.
    async fn build_catalog(&self, tools: Vec<CatalogTool>, semantic: bool) -> Catalog {
        let embeddings = self.embeddings.clone();
        let history = self.history.load_full();
        let base = self.settings.base_adapter.clone();
        tokio::task::spawn_blocking(move || {
            let build = || Catalog::from_tools(tools, &embeddings, &history, semantic, base);
            // The adapter's matrix products run on the current rayon pool: this one.
            match &*CATALOG_BUILDER {
                Some(pool) => pool.install(build),
                None => build(),
            }
        })
        .await
        .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()))
    }

    fn publish(&self, catalog: Catalog) {
        let before = self.catalog.load();
        let changed = before.len() != catalog.len()
            || before.tools().iter().zip(catalog.tools()).any(|(a, b)| a.name != b.name || a.tool != b.tool);
        // Info when what clients see changes (tools, or the semantic signal coming on): with
        // a large catalog this is when start-up is over.
        let learned = before.adapted != catalog.adapted || before.word_features != catalog.word_features;
        if changed || before.embedded != catalog.embedded || learned {
            tracing::info!(
                tools = catalog.len(),
                embedded = catalog.embedded,
                learned_pairs = catalog.learned_pairs,
                adapted = catalog.adapted,
                word_features = catalog.word_features,
                "catalog published"
            );
        } else {
            tracing::debug!(?catalog, "catalog published");
        }
        drop(before);
        self.catalog.store(Arc::new(catalog));
        if changed {
            let _ = self.catalog_changed.send(());
        }
        // The old catalog is gone (or soon, with the last request ranking against it). With
        // a long history its build held the old and the new prior, word index and history at
        // once, and glibc kept that peak resident after the old ones were freed: a gateway
        // whose history grew stayed 6.0 KB more resident per pair without this, 1.8 KB with it
        // (its history and catalog account 1.1 KB; BENCHMARKS.md, "The soak"). A few
        // milliseconds of the allocator's time per catalog, off the async workers.
        tokio::task::spawn_blocking(switchyard_kit::heap::release_free_memory);
    }

    /// Asks the upkeep task to rebuild the catalog.
    pub fn request_rebuild(&self) {
        self.rebuild.send_modify(|n| *n += 1);
    }
}
