//! Keeping the published tool catalog current: rebuilt from the servers' listings and the
//! usage history, embedded when the model is loaded, and announced when it changed.

use std::sync::Arc;

use tokio::sync::broadcast;

use super::Gateway;
use crate::{
    catalog::{Catalog, History},
    error::GatewayError,
};

impl Gateway {
    /// Ticks whenever the tool catalog changes.
    pub fn subscribe_catalog(&self) -> broadcast::Receiver<()> {
        self.catalog_changed.subscribe()
    }

    /// Reloads the usage history now and rebuilds the catalog with it (also done periodically).
    pub async fn refresh_history(&self) -> Result<usize, GatewayError> {
        let pairs = self.usage.history(self.settings.history_limit).await?;
        let count = pairs.len();
        self.history.store(Arc::new(History { pairs }));
        self.rebuild_catalog().await;
        Ok(count)
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
                self.publish(Catalog::from_tools(tools.clone(), &self.embeddings, &self.history.load(), false));
                self.fill_embeddings(embedder, documents).await;
            }
        }
        self.publish(Catalog::from_tools(tools, &self.embeddings, &self.history.load(), semantic));
    }

    fn publish(&self, catalog: Catalog) {
        let before = self.catalog.load();
        let changed = before.len() != catalog.len()
            || before.tools().iter().zip(catalog.tools()).any(|(a, b)| a.name != b.name || a.tool != b.tool);
        // Info when what clients see changes (tools, or the semantic signal coming on): with
        // a large catalogue this is when start-up is over.
        if changed || before.embedded != catalog.embedded {
            tracing::info!(tools = catalog.len(), embedded = catalog.embedded, "catalog published");
        } else {
            tracing::debug!(?catalog, "catalog published");
        }
        self.catalog.store(Arc::new(catalog));
        if changed {
            let _ = self.catalog_changed.send(());
        }
    }

    /// Asks the upkeep task to rebuild the catalog.
    pub fn request_rebuild(&self) {
        self.rebuild.send_modify(|n| *n += 1);
    }
}
