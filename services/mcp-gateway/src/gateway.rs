//! The gateway itself, whatever the front (MCP over HTTP or stdio, or gRPC): set a session's
//! context, list the tools relevant to it, call a tool on its server and record the call.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use arc_swap::ArcSwap;
use chrono::Utc;
use rmcp::{
    model::{
        CallToolRequest, CallToolRequestParams, CallToolResponse, CancelledNotificationParam, ClientRequest,
        JsonObject, ProgressToken, ServerResult,
    },
    service::{Peer, PeerRequestOptions, RoleServer},
};
use switchyard_kit::{ErrorCode, ServiceError};
use switchyard_models::Embedder;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::{
    catalog::{Catalog, CatalogTool, EmbeddingCache, History, Ranked},
    metrics::Metrics,
    store::{ContextStore, Counters, SessionContext, SessionKey, ShownMatch, StoreError, UsageRecord, UsageStore},
    upstream::{ServerStatus, Upstreams},
};

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("{field}: {reason}")]
    InvalidArgument { field: String, reason: String },
    #[error("unknown tool `{0}`")]
    UnknownTool(String),
    /// The tool's server cannot take calls right now.
    #[error("{0}")]
    ServerUnavailable(String),
    #[error("tool `{tool}` on server `{server}` did not answer within {after:?}")]
    Timeout { tool: String, server: String, after: Duration },
    /// The downstream server answered the call with a protocol error; passed back as is.
    #[error("{0}")]
    Downstream(rmcp::ErrorData),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Internal(String),
}

impl GatewayError {
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::InvalidArgument { field: field.into(), reason: reason.into() }
    }
}

impl ServiceError for GatewayError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::InvalidArgument { .. } => ErrorCode::InvalidArgument,
            Self::UnknownTool(_) => ErrorCode::NotFound,
            Self::ServerUnavailable(_) | Self::Store(_) => ErrorCode::Unavailable,
            Self::Timeout { .. } => ErrorCode::DeadlineExceeded,
            Self::Downstream(err) if err.code == rmcp::model::ErrorCode::INVALID_PARAMS => ErrorCode::InvalidArgument,
            Self::Downstream(err) if err.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND => ErrorCode::NotFound,
            Self::Downstream(_) | Self::Internal(_) => ErrorCode::Internal,
        }
    }

    fn field(&self) -> Option<&str> {
        match self {
            Self::InvalidArgument { field, .. } => Some(field),
            Self::UnknownTool(_) => Some("name"),
            _ => None,
        }
    }
}

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

#[derive(Debug)]
pub struct CallOutcome {
    pub response: CallToolResponse,
    pub server: String,
    pub duration: Duration,
}

/// The spec's verification figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    pub counters: Counters,
    pub records_dropped: u64,
}

impl Stats {
    pub fn set_context_session_share(&self) -> f64 {
        ratio(self.counters.sessions_with_context, self.counters.sessions)
    }

    pub fn filtered_hit_rate(&self) -> f64 {
        ratio(self.counters.filtered_hits, self.counters.calls_after_filtered_list)
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 / whole as f64 }
}

pub struct Gateway {
    upstreams: Arc<Upstreams>,
    catalog: ArcSwap<Catalog>,
    contexts: Arc<dyn ContextStore>,
    usage: Arc<dyn UsageStore>,
    embedder: Option<Arc<Embedder>>,
    embeddings: Arc<EmbeddingCache>,
    history: ArcSwap<History>,
    settings: Settings,
    records: mpsc::Sender<UsageRecord>,
    records_dropped: AtomicU64,
    /// Ticks when the catalog changes (MCP clients are told their tool list changed).
    catalog_changed: broadcast::Sender<()>,
    rebuild: watch::Sender<u64>,
    metrics: Metrics,
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
        let (records, records_rx) = mpsc::channel(settings.record_buffer.max(1));
        let (catalog_changed, _) = broadcast::channel(16);
        let (rebuild, _) = watch::channel(0);
        let gateway = Arc::new(Self {
            upstreams,
            catalog: ArcSwap::from_pointee(Catalog::empty()),
            contexts,
            usage,
            embedder,
            embeddings: Arc::new(EmbeddingCache::default()),
            history: ArcSwap::from_pointee(History::default()),
            settings,
            records,
            records_dropped: AtomicU64::new(0),
            catalog_changed,
            rebuild,
            metrics: Metrics::new(),
        });
        tokio::spawn(write_records(gateway.usage.clone(), records_rx, shutdown.clone()));
        tokio::spawn(maintain_catalog(gateway.clone(), shutdown.clone()));
        tokio::spawn(reload_history(gateway.clone(), shutdown.clone()));
        tokio::spawn(refresh_metrics(gateway.clone(), shutdown));
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

    /// Ticks whenever the tool catalog changes.
    pub fn subscribe_catalog(&self) -> broadcast::Receiver<()> {
        self.catalog_changed.subscribe()
    }

    /// Stores a session's context (spec `set_context(query, intent)`) and returns it with the
    /// tools now shown for it.
    pub async fn set_context(
        &self,
        key: &SessionKey,
        query: &str,
        intent: Option<&str>,
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
        let text = crate::store::context_text(query, intent);
        let embedding = self.embed(&text).await?;
        let now = Utc::now();
        let context = self.contexts.set_context(key, query, intent, embedding.as_deref(), now).await?;
        self.metrics.set_context();
        self.record(UsageRecord::SetContext {
            key: key.clone(),
            query: query.to_owned(),
            intent: intent.map(str::to_owned),
            at: now,
        });
        let tools = self.filtered(key, &context, None).await?;
        Ok((context, tools))
    }

    fn check_length(&self, field: &str, value: &str) -> Result<(), GatewayError> {
        let max = self.settings.max_query_bytes;
        if value.len() > max {
            return Err(GatewayError::invalid(field, format!("is {} bytes, over the limit of {max}", value.len())));
        }
        Ok(())
    }

    /// The context's embedding, when the model is loaded.
    async fn embed(&self, text: &str) -> Result<Option<Vec<f32>>, GatewayError> {
        let Some(embedder) = self.embedder.clone() else { return Ok(None) };
        let text = text.to_owned();
        let vectors = tokio::task::spawn_blocking(move || embedder.embed(&[text.as_str()]))
            .await
            .map_err(|err| GatewayError::Internal(format!("embedding task: {err}")))?
            .map_err(|err| GatewayError::Internal(format!("embedding the context: {err}")))?;
        Ok(vectors.into_iter().next())
    }

    /// The session's context, if it set one.
    pub async fn context(&self, key: &SessionKey) -> Result<Option<SessionContext>, GatewayError> {
        Ok(self.contexts.get(key).await?)
    }

    /// The tools for a session: the top `limit` (or top-k) for its context, or every tool
    /// when it has none (spec: "falls back to showing all tools").
    pub async fn list_tools(&self, key: Option<&SessionKey>, limit: Option<usize>) -> Result<ToolList, GatewayError> {
        let context = match key {
            Some(key) => self.contexts.get(key).await?,
            None => None,
        };
        match (key, context) {
            (Some(key), Some(context)) if context.current_query.is_some() => self.filtered(key, &context, limit).await,
            (key, _) => {
                if let Some(key) = key {
                    self.contexts.touch(key).await?;
                }
                let catalog = self.catalog();
                let tools: Vec<ShownTool> =
                    catalog.tools().iter().map(|tool| ShownTool { tool: tool.clone(), score: None }).collect();
                let total = tools.len();
                let tools = match limit {
                    Some(limit) => tools.into_iter().take(limit).collect(),
                    None => tools,
                };
                Ok(ToolList { tools, filtered: false, total })
            }
        }
    }

    async fn filtered(
        &self,
        key: &SessionKey,
        context: &SessionContext,
        limit: Option<usize>,
    ) -> Result<ToolList, GatewayError> {
        let catalog = self.catalog();
        let text = context.text().unwrap_or_default();
        let ranked: Vec<Ranked> =
            catalog.rank(&text, context.embedding.as_deref(), limit.unwrap_or(self.settings.top_k));
        let tools: Vec<ShownTool> =
            ranked.iter().map(|r| ShownTool { tool: catalog.tool(r.index).clone(), score: Some(*r) }).collect();
        let names: Vec<String> = tools.iter().map(|t| t.tool.name.clone()).collect();
        self.contexts.record_shown(key, &names).await?;
        Ok(ToolList { tools, filtered: true, total: catalog.len() })
    }

    /// Calls a tool by its gateway name — listed or not (clients call tools by name) — and
    /// records the call with the session's current context.
    pub async fn call_tool(
        &self,
        key: Option<&SessionKey>,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<CallOutcome, GatewayError> {
        self.call_tool_with_progress(key, name, arguments, None).await
    }

    /// [`Self::call_tool`], relaying the server's progress notifications to `progress`'s
    /// client under the token it chose.
    pub async fn call_tool_with_progress(
        &self,
        key: Option<&SessionKey>,
        name: &str,
        arguments: Option<JsonObject>,
        progress: Option<(Peer<RoleServer>, ProgressToken)>,
    ) -> Result<CallOutcome, GatewayError> {
        let catalog = self.catalog();
        let tool = catalog.get(name).cloned().ok_or_else(|| GatewayError::UnknownTool(name.to_owned()))?;
        if let Some(arguments) = &arguments {
            let size = serde_json::to_vec(arguments).map(|b| b.len()).unwrap_or(usize::MAX);
            let max = self.settings.max_argument_bytes;
            if size > max {
                return Err(GatewayError::invalid(
                    "arguments",
                    format!("are {size} bytes of JSON, over the limit of {max}"),
                ));
            }
        }
        let upstream = self
            .upstreams
            .get(&tool.server)
            .ok_or_else(|| GatewayError::ServerUnavailable(format!("server `{}` is not configured", tool.server)))?;
        let peer = upstream.peer().map_err(GatewayError::ServerUnavailable)?;
        let mut params = CallToolRequestParams::new(tool.upstream_name.clone());
        params.arguments = arguments;

        let started = Instant::now();
        let sent = peer
            .send_request_with_option(
                ClientRequest::CallToolRequest(CallToolRequest::new(params)),
                PeerRequestOptions::no_options(),
            )
            .await;
        let outcome = match sent {
            Err(err) => Ok(Err(err)),
            Ok(handle) => {
                // The connection numbers the call's progress token itself; relay under that one.
                let _relayed = progress.map(|(client, token)| {
                    self.upstreams.progress().register(&tool.server, &handle.progress_token, client, token)
                });
                let (id, upstream) = (handle.id.clone(), handle.peer.clone());
                let outcome = tokio::time::timeout(self.settings.call_timeout, handle.await_response()).await;
                if outcome.is_err() {
                    // Nobody waits for this call any more: tell the server to stop.
                    let _ = upstream.notify_cancelled(CancelledNotificationParam::new(Some(id), None)).await;
                }
                outcome.map(|response| {
                    response.and_then(|result| match result {
                        ServerResult::CallToolResult(result) => Ok(CallToolResponse::Complete(result)),
                        ServerResult::InputRequiredResult(result) => Ok(CallToolResponse::InputRequired(result)),
                        _ => Err(rmcp::ServiceError::UnexpectedResponse),
                    })
                })
            }
        };
        let duration = started.elapsed();
        let (result, is_error) = match outcome {
            Err(_) => (
                Err(GatewayError::Timeout {
                    tool: name.to_owned(),
                    server: tool.server.clone(),
                    after: self.settings.call_timeout,
                }),
                true,
            ),
            Ok(Err(rmcp::ServiceError::McpError(err))) => (Err(GatewayError::Downstream(err)), true),
            Ok(Err(err)) => {
                (Err(GatewayError::ServerUnavailable(format!("server `{}` failed the call: {err}", tool.server))), true)
            }
            Ok(Ok(response)) => {
                let is_error = matches!(&response, CallToolResponse::Complete(r) if r.is_error == Some(true));
                (Ok(response), is_error)
            }
        };

        self.metrics.tool_call(&tool.server, duration.as_secs_f64() * 1000.0, is_error);
        if let Some(key) = key {
            self.note_call(key, &tool, is_error, duration).await;
        }
        result.map(|response| CallOutcome { response, server: tool.server.clone(), duration })
    }

    /// Counts and records a call. The call already happened: a store failure here is logged,
    /// never returned in place of the tool's result.
    async fn note_call(&self, key: &SessionKey, tool: &CatalogTool, is_error: bool, duration: Duration) {
        let (shown, context) = match self.contexts.record_call(key, &tool.name).await {
            Ok(recorded) => recorded,
            Err(err) => {
                tracing::warn!(error = %err, "counting a tool call");
                (ShownMatch::NoList, SessionContext::default())
            }
        };
        self.record(UsageRecord::ToolCall {
            key: key.clone(),
            tool: tool.name.clone(),
            server: tool.server.clone(),
            upstream_tool: tool.upstream_name.clone(),
            context_query: context.current_query,
            context_intent: context.current_intent,
            context_embedding: context.embedding,
            shown,
            is_error,
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            at: Utc::now(),
        });
    }

    /// Queues a record for Postgres, off the request path; counted and dropped when the
    /// buffer is full (Postgres down for long).
    fn record(&self, record: UsageRecord) {
        if self.records.try_send(record).is_err() {
            let dropped = self.records_dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if dropped.is_power_of_two() {
                tracing::warn!(dropped, "usage record buffer full; records dropped");
            }
        }
    }

    pub fn servers(&self) -> Vec<ServerStatus> {
        self.upstreams.servers().iter().map(|s| s.status()).collect()
    }

    pub async fn stats(&self) -> Result<Stats, GatewayError> {
        Ok(Stats {
            counters: self.contexts.counters().await?,
            records_dropped: self.records_dropped.load(Ordering::Relaxed),
        })
    }

    /// Counts an MCP session when it starts.
    pub async fn session_started(&self, key: &SessionKey) -> Result<(), GatewayError> {
        Ok(self.contexts.touch(key).await?)
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
            let documents = Catalog::documents(&tools);
            if !self.embeddings.covers(&documents) {
                // Publish a lexical catalog at once, so a slow model never delays a server's
                // tools appearing; the embedded one follows.
                self.publish(Catalog::from_tools(tools.clone(), &self.embeddings, &self.history.load(), false));
                let cache = self.embeddings.clone();
                let started = Instant::now();
                match tokio::task::spawn_blocking(move || cache.fill(&embedder, &documents)).await {
                    Ok(Ok(count)) => tracing::info!(count, elapsed = ?started.elapsed(), "embedded new tools"),
                    Ok(Err(err)) => tracing::warn!(error = %err, "embedding tools failed; ranking without embeddings"),
                    Err(err) => tracing::warn!(error = %err, "embedding task failed"),
                }
            }
        }
        self.publish(Catalog::from_tools(tools, &self.embeddings, &self.history.load(), semantic));
    }

    fn publish(&self, catalog: Catalog) {
        let before = self.catalog.load();
        let changed = before.len() != catalog.len()
            || before.tools().iter().zip(catalog.tools()).any(|(a, b)| a.name != b.name || a.tool != b.tool);
        tracing::debug!(?catalog, "catalog published");
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

async fn maintain_catalog(gateway: Arc<Gateway>, shutdown: CancellationToken) {
    let mut upstream_changes = gateway.upstreams.subscribe();
    let mut requests = gateway.rebuild.subscribe();
    loop {
        gateway.rebuild_catalog().await;
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = upstream_changes.changed() => if changed.is_err() { return },
            changed = requests.changed() => if changed.is_err() { return },
        }
    }
}

/// Keeps the metric gauges' figures fresh (they count every replica, from the shared store).
async fn refresh_metrics(gateway: Arc<Gateway>, shutdown: CancellationToken) {
    loop {
        match gateway.stats().await {
            Ok(stats) => gateway.metrics.update(stats),
            Err(err) => tracing::debug!(error = %err, "refreshing gateway metrics"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(10)) => {}
        }
    }
}

async fn reload_history(gateway: Arc<Gateway>, shutdown: CancellationToken) {
    let mut last = None;
    loop {
        match gateway.usage.history(gateway.settings.history_limit).await {
            Ok(pairs) => {
                let fingerprint = (pairs.len(), pairs.first().map(|p| (p.context.clone(), p.tool.clone())));
                if last.as_ref() != Some(&fingerprint) {
                    gateway.history.store(Arc::new(History { pairs }));
                    gateway.request_rebuild();
                    last = Some(fingerprint);
                }
            }
            Err(err) => tracing::warn!(error = %err, "reloading the usage history"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(gateway.settings.history_refresh) => {}
        }
    }
}

/// Writes queued records in batches; while Postgres is down, holds the batch and retries, so
/// the queue (bounded) absorbs the outage.
async fn write_records(
    usage: Arc<dyn UsageStore>,
    mut queue: mpsc::Receiver<UsageRecord>,
    shutdown: CancellationToken,
) {
    const BATCH: usize = 256;
    let mut batch = Vec::with_capacity(BATCH);
    let mut delay = Duration::from_millis(100);
    loop {
        if batch.is_empty() {
            tokio::select! {
                received = queue.recv_many(&mut batch, BATCH) => if received == 0 { return },
                _ = shutdown.cancelled() => {
                    // Drain what is queued, once, before stopping.
                    while let Ok(record) = queue.try_recv() {
                        batch.push(record);
                    }
                    if !batch.is_empty() && let Err(err) = usage.record(&batch).await {
                        tracing::warn!(error = %err, lost = batch.len(), "records not written at shutdown");
                    }
                    return;
                }
            }
        }
        match usage.record(&batch).await {
            Ok(()) => {
                batch.clear();
                delay = Duration::from_millis(100);
            }
            Err(err) => {
                tracing::warn!(error = %err, held = batch.len(), "writing usage records; will retry");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = shutdown.cancelled() => return,
                }
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}
