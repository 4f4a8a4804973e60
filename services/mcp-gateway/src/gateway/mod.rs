//! The gateway itself, whatever the front (MCP over HTTP or stdio, or gRPC): set a session's
//! context and list the tools relevant to it here; calling a tool is in `call`, keeping the
//! catalog current in `publish`, and the work that runs beside requests in `upkeep`.

mod call;
mod embed;
mod publish;
mod upkeep;

use std::{path::PathBuf, sync::Arc, time::Duration};

use arc_swap::ArcSwap;
use chrono::Utc;
use switchyard_kit::records::{RecordBuffer, RecordBufferConfig};
use switchyard_models::{Embedder, recent::RecentQueries};
use switchyard_retrieval::QueryAdapter;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use call::CallOutcome;
pub use embed::EmbeddingCounts;

use crate::{
    audit::{AuditQuery, AuditRecord, AuditSettings},
    catalog::{Catalog, CatalogTool, EmbeddingCache, History, Ranked},
    domain::{SessionContext, Stats, UsageRecord},
    embedding_cache::EmbeddingFile,
    error::GatewayError,
    metrics::Metrics,
    policy::{AccessCache, AccessMap, Policies, Subject},
    store::{ContextStore, SessionKey, UsageStore},
    upstream::{ServerStatus, Upstreams},
};

/// Limits and choices of the gateway's behaviour.
#[derive(Debug, Clone)]
pub struct Settings {
    pub top_k: usize,
    pub prefix_tools: bool,
    pub max_query_bytes: usize,
    pub max_argument_bytes: usize,
    pub call_timeout: Duration,
    pub history_limit: usize,
    pub history_refresh: Duration,
    pub record_buffer: usize,
    pub tool_mode: crate::config::ToolMode,
    pub recent_contexts: usize,
    /// The embedding cache file (`--embedding-cache`), if any.
    pub embedding_cache: Option<PathBuf>,
    /// Maps contexts before the semantic signal (`--base-adapter`).
    pub base_adapter: Option<Arc<QueryAdapter>>,
    /// The servers file's policies at start (reloaded with [`Gateway::set_policies`]).
    pub policies: Policies,
    /// What the audit trail keeps of arguments.
    pub audit: AuditSettings,
    /// How long audit records are kept.
    pub audit_retention: Duration,
    /// How long the usage record is kept (`None`: for ever).
    pub usage_retention: Option<Duration>,
}

/// A ranked tool, ready to show.
#[derive(Debug, Clone)]
pub struct ShownTool {
    pub tool: Arc<CatalogTool>,
    /// Where its rank came from (none when every tool is listed unranked).
    pub score: Option<Ranked>,
}

#[derive(Debug, Clone)]
pub struct ToolList {
    pub tools: Vec<ShownTool>,
    /// False when the session has no context and every tool is listed.
    pub filtered: bool,
    pub total: usize,
}

pub struct Gateway {
    upstreams: Arc<Upstreams>,
    catalog: ArcSwap<Catalog>,
    contexts: Arc<dyn ContextStore>,
    usage: Arc<dyn UsageStore>,
    embedder: Option<Arc<Embedder>>,
    embeddings: Arc<EmbeddingCache>,
    /// Embeddings of recently set contexts, by their text.
    recent_contexts: RecentQueries,
    /// Read on the first fill; see `embed`.
    embedding_file: tokio::sync::OnceCell<Option<Arc<EmbeddingFile>>>,
    fill_lock: tokio::sync::Mutex<()>,
    embedding_counts: embed::Counts,
    history: ArcSwap<History>,
    settings: Settings,
    records: Arc<RecordBuffer<UsageRecord>>,
    /// Ticks when the catalog changes (MCP clients are told their tool list changed).
    catalog_changed: broadcast::Sender<()>,
    /// The contexts set on this replica, by key (stateless listeners keyed by the same handle
    /// or caller are told their tool list changed).
    contexts_changed: broadcast::Sender<SessionKey>,
    rebuild: watch::Sender<u64>,
    metrics: Metrics,
    policies: ArcSwap<Policies>,
    access: AccessCache,
}

impl Gateway {
    /// Starts the gateway's background work (catalog upkeep, record writing, history
    /// reloads), all of which stops with `shutdown`.
    pub fn start(
        upstreams: Arc<Upstreams>,
        contexts: Arc<dyn ContextStore>,
        usage: Arc<dyn UsageStore>,
        embedder: Option<Arc<Embedder>>,
        settings: Settings,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let records = RecordBuffer::start(
            Arc::new(upkeep::UsageSink(usage.clone())),
            RecordBufferConfig {
                name: "usage records",
                capacity: settings.record_buffer.max(1),
                ..RecordBufferConfig::default()
            },
        );
        let (catalog_changed, _) = broadcast::channel(16);
        let (contexts_changed, _) = broadcast::channel(256);
        let (rebuild, _) = watch::channel(0);
        let settings_policies = settings.policies.clone();
        let gateway = Arc::new(Self {
            upstreams,
            catalog: ArcSwap::from_pointee(Catalog::empty()),
            contexts,
            usage,
            embedder,
            embeddings: Arc::new(EmbeddingCache::default()),
            recent_contexts: RecentQueries::new(settings.recent_contexts),
            embedding_file: tokio::sync::OnceCell::new(),
            fill_lock: tokio::sync::Mutex::new(()),
            embedding_counts: embed::Counts::default(),
            history: ArcSwap::from_pointee(History::default()),
            settings,
            records,
            catalog_changed,
            contexts_changed,
            rebuild,
            metrics: Metrics::new(),
            policies: ArcSwap::from_pointee(settings_policies),
            access: AccessCache::default(),
        });
        upkeep::spawn(&gateway, shutdown);
        gateway
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.load_full()
    }

    /// Whether the embedding model is loaded (the semantic signal is on).
    pub fn has_embedder(&self) -> bool {
        self.embedder.is_some()
    }

    pub fn upstreams(&self) -> &Arc<Upstreams> {
        &self.upstreams
    }

    pub fn contexts(&self) -> &Arc<dyn ContextStore> {
        &self.contexts
    }

    pub fn usage(&self) -> &Arc<dyn UsageStore> {
        &self.usage
    }

    /// The policies in force.
    pub fn policies(&self) -> Arc<Policies> {
        self.policies.load_full()
    }

    /// Puts new policies in force (the servers file changed) and tells MCP clients their tool
    /// lists changed.
    pub fn set_policies(&self, policies: Policies) {
        self.policies.store(Arc::new(policies));
        // Nobody listening is fine.
        let _ = self.catalog_changed.send(());
    }

    /// What `subject` may do with each tool of `catalog`, computed once per catalog, policies
    /// and subject.
    pub fn access(&self, catalog: &Arc<Catalog>, subject: &Subject) -> Arc<AccessMap> {
        let policies = self.policies.load();
        if policies.is_empty() {
            return Arc::new(AccessMap::open());
        }
        let catalog_id = Arc::as_ptr(catalog) as usize;
        let policies_id = Arc::as_ptr(&*policies) as usize;
        self.access.get_or_build(catalog_id, policies_id, subject, || {
            AccessMap::build(&policies, subject, catalog.tools().iter().map(|t| (t.server.as_str(), t.name.as_str())))
        })
    }

    /// Stores a session's context (`set_context(query, intent)`,
    /// docs/requirements.md#mcp-set-context) and returns it with the tools now shown for it,
    /// for a caller known only by the session's tenant.
    pub async fn set_context(
        &self,
        key: &SessionKey,
        query: &str,
        intent: Option<&str>,
    ) -> Result<(SessionContext, ToolList), GatewayError> {
        self.set_context_as(&Subject::tenant_of(Some(key)), key, query, intent).await
    }

    /// [`Self::set_context`] for `subject`: the tools shown are those its policies let it see.
    pub async fn set_context_as(
        &self,
        subject: &Subject,
        key: &SessionKey,
        query: &str,
        intent: Option<&str>,
    ) -> Result<(SessionContext, ToolList), GatewayError> {
        self.set_context_limited(subject, key, query, intent, None).await
    }

    /// [`Self::set_context_as`] with the ranked tools cut at `limit` (the configured top-k
    /// when `None`), so a caller with its own top-k needs no `list_tools` after it.
    pub async fn set_context_limited(
        &self,
        subject: &Subject,
        key: &SessionKey,
        query: &str,
        intent: Option<&str>,
        limit: Option<usize>,
    ) -> Result<(SessionContext, ToolList), GatewayError> {
        let query = query.trim();
        if query.is_empty() {
            return Err(GatewayError::invalid("query", "is required and must not be empty"));
        }
        self.check_length("query", query)?;
        let intent = intent.map(str::trim).filter(|i| !i.is_empty());
        if let Some(intent) = intent {
            self.check_length("intent", intent)?;
        }
        let text = crate::domain::context_text(query, intent);
        let embedding = self.embed(&text).await?;
        let now = Utc::now();
        let context = self.contexts.set_context(key, query, intent, embedding.as_deref(), now).await?;
        // Nobody listening is fine.
        let _ = self.contexts_changed.send(key.clone());
        self.metrics.set_context();
        self.record(UsageRecord::SetContext {
            id: Uuid::new_v4(),
            key: key.clone(),
            query: query.to_owned(),
            intent: intent.map(str::to_owned),
            at: now,
        });
        let tools = self.filtered(subject, key, &context, limit).await?;
        Ok((context, tools))
    }

    fn check_length(&self, field: &str, value: &str) -> Result<(), GatewayError> {
        let max = self.settings.max_query_bytes;
        if value.len() > max {
            return Err(GatewayError::invalid(field, format!("is {} bytes, over the limit of {max}", value.len())));
        }
        Ok(())
    }

    /// The context's embedding, when the model is loaded: from the recent contexts, or
    /// computed (off the async workers) and kept there.
    async fn embed(&self, text: &str) -> Result<Option<Vec<f32>>, GatewayError> {
        let Some(embedder) = self.embedder.clone() else { return Ok(None) };
        if let Some(vector) = self.recent_contexts.get(text) {
            return Ok(Some(vector.to_vec()));
        }
        let owned = text.to_owned();
        let vectors = tokio::task::spawn_blocking(move || embedder.embed(&[owned.as_str()]))
            .await
            .map_err(|err| GatewayError::Internal(format!("embedding task: {err}")))?
            .map_err(|err| GatewayError::Internal(format!("embedding the context: {err}")))?;
        let vector = vectors.into_iter().next();
        if let Some(vector) = &vector {
            self.recent_contexts.insert(text.to_owned(), Arc::from(vector.as_slice()));
        }
        Ok(vector)
    }

    /// The session's context, if it set one.
    pub async fn context(&self, key: &SessionKey) -> Result<Option<SessionContext>, GatewayError> {
        Ok(self.contexts.get(key).await?)
    }

    /// The tools for a session: the top `limit` (or top-k) for its context, or every tool
    /// when it has none (the fallback of docs/requirements.md#mcp-filtered-list).
    pub async fn list_tools(&self, key: Option<&SessionKey>, limit: Option<usize>) -> Result<ToolList, GatewayError> {
        self.list_tools_as(&Subject::tenant_of(key), key, limit).await
    }

    /// [`Self::list_tools`] for `subject`: only the tools its policies list, pinned ones
    /// first; the ranking picks among the others.
    pub async fn list_tools_as(
        &self,
        subject: &Subject,
        key: Option<&SessionKey>,
        limit: Option<usize>,
    ) -> Result<ToolList, GatewayError> {
        let context = match key {
            Some(key) => self.contexts.get(key).await?,
            None => None,
        };
        match (key, context) {
            (Some(key), Some(context)) if context.current_query.is_some() => {
                self.filtered(subject, key, &context, limit).await
            }
            (key, _) => {
                if let Some(key) = key {
                    self.contexts.touch(key).await?;
                }
                let catalog = self.catalog();
                let access = self.access(&catalog, subject);
                let pinned = access.pinned.iter().copied();
                let others = (0..catalog.len()).filter(|&i| access.get(i).listed && !access.get(i).pinned);
                let tools: Vec<ShownTool> =
                    pinned.chain(others).map(|i| ShownTool { tool: catalog.tool(i).clone(), score: None }).collect();
                let total = tools.len();
                let tools = match limit {
                    Some(limit) => tools.into_iter().take(limit).collect(),
                    None => tools,
                };
                Ok(ToolList { tools, filtered: false, total })
            }
        }
    }

    /// The caller's pinned tools, then the best of the others it may see (policies apply
    /// before the ranking, so the top-k is made of tools the caller may use).
    async fn filtered(
        &self,
        subject: &Subject,
        key: &SessionKey,
        context: &SessionContext,
        limit: Option<usize>,
    ) -> Result<ToolList, GatewayError> {
        let catalog = self.catalog();
        let access = self.access(&catalog, subject);
        let text = context.text().unwrap_or_default();
        let rankable = access.rankable();
        let ranked: Vec<Ranked> = catalog.rank_among(
            &text,
            context.embedding.as_deref(),
            limit.unwrap_or(self.settings.top_k),
            rankable.as_deref(),
        );
        let pinned = access.pinned.iter().map(|&i| ShownTool { tool: catalog.tool(i).clone(), score: None });
        let tools: Vec<ShownTool> = pinned
            .chain(ranked.iter().map(|r| ShownTool { tool: catalog.tool(r.index).clone(), score: Some(*r) }))
            .collect();
        let names: Vec<String> = tools.iter().map(|t| t.tool.name.clone()).collect();
        self.contexts.record_shown(key, &names).await?;
        Ok(ToolList { tools, filtered: true, total: access.listed_count(catalog.len()) })
    }

    /// The audit trail: tool calls matching `query`, newest first.
    pub async fn audit(&self, query: AuditQuery) -> Result<Vec<AuditRecord>, GatewayError> {
        Ok(self.usage.audit(&query).await?)
    }

    /// Writes the records held now (tests, and anyone who must read what was just done).
    pub async fn flush_records(&self) -> Result<usize, GatewayError> {
        Ok(self.records.flush().await?)
    }

    pub fn servers(&self) -> Vec<ServerStatus> {
        self.upstreams.servers().iter().map(|s| s.status()).collect()
    }

    pub async fn stats(&self) -> Result<Stats, GatewayError> {
        Ok(Stats { counters: self.contexts.counters().await?, records_dropped: self.records.dropped() })
    }

    /// Counts an MCP session when it starts.
    pub async fn session_started(&self, key: &SessionKey) -> Result<(), GatewayError> {
        Ok(self.contexts.touch(key).await?)
    }
}
