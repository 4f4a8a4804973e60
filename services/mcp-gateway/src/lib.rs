//! The MCP gateway (docs/requirements.md#mcp-set-context): many MCP servers as one, a `set_context` tool,
//! and `tools/list` narrowed to the tools relevant to the context a session set — ranked by
//! words, meaning (MiniLM) and what sessions with similar contexts actually called.
//!
//! Parts: [`gateway`] is the core (contexts and tool lists; the call path, catalog upkeep and
//! background loops in its submodules), [`catalog`] ranks tools, [`upstream`] runs the
//! downstream servers (one file per transport), [`domain`] holds what the core and [`store`]
//! share, [`error`] its error type. Fronts: [`mcp`] (MCP over streamable HTTP at `/mcp`, or
//! stdio, one file per job; [`auth`] checks the caller's credential and [`guard`] the HTTP
//! requests' origin and body first) and
//! [`grpc`] (the internal `switchyard.mcp.v1.McpGatewayService`) adapt the core and do every
//! protocol conversion. This file only wires them: stores, models, the core, the servers.
//!
//! Replicas: every piece of session state — the context, the list last shown, and the MCP
//! transport's own session (its `initialize` parameters) — lives in Redis, so a client's
//! requests may land on any replica; no sticky routing is needed.

pub mod audit;
pub mod auth;
pub mod catalog;
pub mod config;
pub mod domain;
pub mod embedding_cache;
pub mod error;
pub mod gateway;
pub mod grpc;
pub mod guard;
pub mod mcp;
pub mod metrics;
pub mod naming;
pub mod policy;
mod policy_reload;
pub mod scope;
pub mod store;
pub mod upstream;

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use switchyard_kit::{GrpcServer, store::StorePlan};
use switchyard_models::Embedder;
use switchyard_proto::mcp::v1::mcp_gateway_service_server::McpGatewayServiceServer;
use switchyard_retrieval::QueryAdapter;
use tokio_util::sync::CancellationToken;

pub use config::GatewayConfig;
pub use error::GatewayError;
pub use gateway::Gateway;

use crate::{
    gateway::Settings,
    store::{
        ContextStore, UsageStore,
        memory::{MemoryContextStore, MemoryUsageStore},
        postgres::PostgresUsageStore,
        redis::RedisContextStore,
    },
    upstream::Upstreams,
};

/// The two stores the gateway runs on.
pub struct Stores {
    pub contexts: Arc<dyn ContextStore>,
    pub usage: Arc<dyn UsageStore>,
}

impl Stores {
    pub fn in_memory() -> Self {
        Self { contexts: Arc::new(MemoryContextStore::default()), usage: Arc::new(MemoryUsageStore::default()) }
    }

    /// Redis and Postgres as configured, or memory with `--in-memory`.
    pub async fn open(config: &GatewayConfig) -> anyhow::Result<Self> {
        let args = config.stores.store_args();
        let (database_url, redis_url) = match args.plan("mcp-gateway", true).map_err(anyhow::Error::msg)? {
            StorePlan::InMemory => return Ok(Self::in_memory()),
            StorePlan::Durable { database_url, redis_url } => (database_url, redis_url.context("redis url")?),
        };
        let contexts = RedisContextStore::connect(&redis_url, &args.redis_prefix, config.context_ttl)
            .await
            .with_context(|| format!("opening Redis at {}", redis_url.url_without_credentials()))?;
        let usage = PostgresUsageStore::connect(database_url.expose(), &args.db_schema)
            .await
            .with_context(|| format!("opening Postgres at {}", database_url.url_without_credentials()))?;
        Ok(Self { contexts: Arc::new(contexts), usage: Arc::new(usage) })
    }
}

/// Loads the embedding model unless disabled; a missing model is a warning (ranking falls
/// back to words and usage), a broken one an error.
pub fn load_embedder(config: &GatewayConfig) -> anyhow::Result<Option<Arc<Embedder>>> {
    if config.no_embeddings {
        return Ok(None);
    }
    if !config.model_dir.join("model.safetensors").is_file() {
        tracing::warn!(
            model_dir = %config.model_dir.display(),
            "no embedding model (run scripts/fetch-models.sh); ranking tools by words and usage only"
        );
        return Ok(None);
    }
    let embedder = Embedder::load(&config.model_dir)
        .with_context(|| format!("loading the embedding model from {}", config.model_dir.display()))?;
    Ok(Some(Arc::new(embedder)))
}

/// The base query adapter `--base-adapter` names, for the embedder's model (none without an
/// embedder). The shipped adapter only fits the model it was learned for: with another one
/// it is skipped with a warning. An adapter file the operator named must load.
pub fn load_base_adapter(
    config: &GatewayConfig,
    embedder: Option<&Embedder>,
) -> anyhow::Result<Option<Arc<QueryAdapter>>> {
    let Some(embedder) = embedder.filter(|_| config.base_adapter != "none") else { return Ok(None) };
    let model = embedder.model_digest();
    let adapter = if config.base_adapter == "shipped" {
        match model.map_err(anyhow::Error::from).and_then(|model| Ok(QueryAdapter::shipped(&model)?)) {
            Ok(adapter) => adapter,
            Err(err) => {
                tracing::warn!(error = %err, model_dir = %config.model_dir.display(), "no base query adapter");
                return Ok(None);
            }
        }
    } else {
        let path = std::path::Path::new(&config.base_adapter);
        let model =
            model.with_context(|| format!("digesting the embedding model in {}", config.model_dir.display()))?;
        let bytes = std::fs::read(path).with_context(|| format!("reading --base-adapter {}", path.display()))?;
        QueryAdapter::from_bytes(&bytes, &model).with_context(|| format!("--base-adapter {}", path.display()))?
    };
    let learned = adapter.provenance();
    tracing::info!(
        source = %config.base_adapter,
        pairs = learned.pairs,
        tools = learned.tools,
        "base query adapter loaded"
    );
    Ok(Some(Arc::new(adapter)))
}

fn settings(config: &GatewayConfig, base_adapter: Option<Arc<QueryAdapter>>, policies: policy::Policies) -> Settings {
    Settings {
        top_k: config.top_k as usize,
        prefix_tools: config.prefix_tools,
        max_query_bytes: config.max_query_bytes,
        max_argument_bytes: config.max_argument_bytes,
        call_timeout: config.call_timeout,
        history_limit: config.history_limit,
        history_refresh: config.history_refresh,
        record_buffer: config.record_buffer,
        tool_mode: config.tool_mode,
        recent_contexts: config.recent_contexts,
        embedding_cache: config.embedding_cache.clone(),
        base_adapter,
        policies,
        audit: audit::AuditSettings::new(config.audit_arguments, &config.audit_redact),
        audit_retention: config.audit_retention,
        usage_retention: config.usage_retention,
    }
}

/// Starts the gateway core: upstream supervisors and background upkeep.
pub fn start_gateway(
    config: &GatewayConfig,
    stores: Stores,
    embedder: Option<Arc<Embedder>>,
    shutdown: CancellationToken,
) -> anyhow::Result<Arc<Gateway>> {
    let specs = config.upstreams().context("downstream MCP servers")?;
    let policies = config.policies().context("policies")?;
    if !policies.is_empty() {
        tracing::info!(policies = policies.policies.len(), "tool policies loaded");
    }
    let upstreams = Upstreams::start(specs, config.backoff(), shutdown.clone());
    let base_adapter = load_base_adapter(config, embedder.as_deref())?;
    let gateway = Gateway::start(
        upstreams,
        stores.contexts,
        stores.usage,
        embedder,
        settings(config, base_adapter, policies),
        shutdown.clone(),
    );
    if let Some(path) = config.config_file.clone()
        && !config.config_reload.is_zero()
    {
        tokio::spawn(policy_reload::watch(gateway.clone(), path, config.config_reload, shutdown));
    }
    Ok(gateway)
}

/// A gateway bound to its ports (gRPC and MCP HTTP), ready to serve.
pub struct GatewayServer {
    grpc: GrpcServer,
    mcp_listener: tokio::net::TcpListener,
    mcp: axum::Router,
    mcp_limits: switchyard_kit::http_server::HttpLimits,
    gateway: Arc<Gateway>,
    stop: CancellationToken,
    drain_timeout: Duration,
}

impl GatewayServer {
    pub async fn bind(config: &GatewayConfig) -> anyhow::Result<Self> {
        let stores = Stores::open(config).await?;
        let embedder = load_embedder(config)?;
        Self::bind_with(config, stores, embedder).await
    }

    pub async fn bind_with(
        config: &GatewayConfig,
        stores: Stores,
        embedder: Option<Arc<Embedder>>,
    ) -> anyhow::Result<Self> {
        // A half-configured protected resource is refused before anything starts.
        config.auth.validate().map_err(anyhow::Error::msg).context("--auth")?;
        let stop = CancellationToken::new();
        let gateway = start_gateway(config, stores, embedder, stop.clone())?;

        let mut grpc = GrpcServer::bind(config.listen, config.server.clone()).await?;
        let max = config.server.max_message_bytes;
        grpc.add_service(
            McpGatewayServiceServer::new(grpc::GatewayGrpc::new(gateway.clone()))
                .max_decoding_message_size(max)
                .max_encoding_message_size(max),
        );
        // Ready while contexts can be served. Downstream servers come and go on their own
        // (ListServers shows them); a Postgres outage only delays records.
        let probe = gateway.clone();
        grpc.health().spawn_probe(Duration::from_millis(500), move || {
            let gateway = probe.clone();
            async move { gateway.contexts().ping().await.map_err(|err| err.to_string()) }
        });

        let mcp_listener = tokio::net::TcpListener::bind(config.mcp_listen)
            .await
            .with_context(|| format!("binding the MCP endpoint on {}", config.mcp_listen))?;
        let policy_scopes = config.policies().map(|p| p.scopes()).unwrap_or_default();
        let auth = Arc::new(auth::Authenticator::from_config(config, &policy_scopes).await.context("--auth")?);
        let mcp = mcp::http::router(gateway.clone(), config, auth, stop.child_token());
        Ok(Self {
            grpc,
            mcp_listener,
            mcp,
            mcp_limits: config.mcp_http_limits(),
            gateway,
            stop,
            drain_timeout: config.record_drain_timeout,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.grpc.local_addr()
    }

    pub fn mcp_addr(&self) -> SocketAddr {
        self.mcp_listener.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    pub fn gateway(&self) -> Arc<Gateway> {
        self.gateway.clone()
    }

    /// Serves gRPC and MCP until `shutdown`; then stops the downstream servers.
    pub async fn serve(self, shutdown: impl Future<Output = ()> + Send) -> anyhow::Result<()> {
        let Self { grpc, mcp_listener, mcp, mcp_limits, stop, gateway, drain_timeout } = self;
        let http_stop = stop.clone();
        // Slow and idle clients closed, connections capped (see `switchyard_kit::http_server`).
        let http = tokio::spawn(switchyard_kit::http_server::serve(
            mcp_listener,
            mcp,
            mcp_limits,
            http_stop.cancelled_owned(),
        ));
        let grpc_stop = stop.clone();
        let served = grpc.serve(async move {
            tokio::select! {
                () = shutdown => {}
                () = grpc_stop.cancelled() => {}
            }
        });
        let result = served.await;
        stop.cancel();
        http.await.context("MCP endpoint task")?;
        gateway.drain_records(drain_timeout).await;
        result
    }
}

/// Serves MCP on stdin/stdout until the client disconnects or `shutdown`.
pub async fn serve_stdio(config: &GatewayConfig, shutdown: impl Future<Output = ()> + Send) -> anyhow::Result<()> {
    let stores = Stores::open(config).await?;
    let embedder = load_embedder(config)?;
    let stop = CancellationToken::new();
    let gateway = start_gateway(config, stores, embedder, stop.clone())?;
    // Servers that come up quickly are listed in the first tools/list.
    gateway.upstreams().settled(Duration::from_secs(10)).await;
    gateway.rebuild_catalog().await;
    mcp::stdio::serve(gateway.clone(), shutdown).await?;
    stop.cancel();
    gateway.drain_records(config.record_drain_timeout).await;
    Ok(())
}
