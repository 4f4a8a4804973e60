//! The router (docs/requirements.md#unified-chat-the-router): the one chat endpoint. The LLM is the
//! router — one call with the two routing tools decides whether a message is answered
//! directly, handed to the MCP agent, or answered by several experts plus a synthesis — on a
//! session whose expert role the sessions service switches as the conversation moves.
//!
//! `turn::Router` runs a turn; `grpc` adapts it to `switchyard.router.v1`; `analytics` records
//! every decision and computes the figures of GetRoutingStats.

pub mod analytics;
pub mod budget;
pub mod cache;
pub mod clients;
pub mod config;
pub mod conversations;
pub mod cost;
pub mod error;
pub mod events;
pub mod fast;
pub mod grpc;
pub mod limits;
pub mod llm_chain;
pub mod metrics;
pub mod outcome;
pub mod request;
pub mod route;
pub mod turn;

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use switchyard_kit::{GrpcServer, records::RecordBuffer, store::StorePlan};
use switchyard_llm::{CircuitSync, Providers};
use switchyard_proto::router::v1::router_service_server::RouterServiceServer;

pub use config::RouterConfig;
pub use turn::Router;

use crate::{
    analytics::{AnalyticsStore, DecisionSink, MemoryAnalytics, PostgresAnalytics, Recorder},
    budget::{Budgets, PostgresBudgetBook, RedisSpendCounters},
    cache::{Learning, RoutingCache},
    clients::{GatewayClient, SessionsClient},
    conversations::ConversationKeys,
    cost::Prices,
    fast::FastPath,
    llm_chain::LlmChain,
    metrics::Metrics,
};

/// How often old analytics rows are pruned.
/// The health name of the fast router: SERVING once it is loaded (never with
/// `--no-fast-router`). The router's own readiness does not wait for it.
pub const FAST_ROUTER_HEALTH: &str = "switchyard.router.v1.RouterService.fast";

const PRUNE_INTERVAL: Duration = Duration::from_secs(3600);

/// The analytics store and, with the routing cache on, the cache: Postgres (and Redis) as
/// configured, or memory with `--in-memory`.
pub struct Stores {
    pub analytics: Arc<dyn AnalyticsStore>,
    pub cache: Option<Arc<RoutingCache>>,
}

/// Postgres as configured, or memory with `--in-memory`.
pub async fn open_store(config: &RouterConfig) -> anyhow::Result<Arc<dyn AnalyticsStore>> {
    Ok(open_stores(config).await?.analytics)
}

pub async fn open_stores(config: &RouterConfig) -> anyhow::Result<Stores> {
    let args = config.stores.store_args();
    let settings = config.cache_settings();
    match args.plan("router", config.cache_routing).map_err(anyhow::Error::msg)? {
        StorePlan::InMemory => Ok(Stores {
            analytics: Arc::new(MemoryAnalytics::default()),
            cache: config.cache_routing.then(|| Arc::new(RoutingCache::memory(settings))),
        }),
        StorePlan::Durable { database_url, redis_url } => {
            let analytics = Arc::new(
                PostgresAnalytics::connect(database_url.expose(), &args.db_schema)
                    .await
                    .with_context(|| format!("opening Postgres at {}", database_url.url_without_credentials()))?,
            );
            let cache = match redis_url {
                Some(url) if config.cache_routing => {
                    let conn = switchyard_kit::store::RedisConnection::connect(&url)
                        .await
                        .with_context(|| format!("opening Redis at {}", url.url_without_credentials()))?;
                    let prefix = switchyard_kit::store::KeyPrefix::parse(&args.redis_prefix)?;
                    Some(Arc::new(RoutingCache::redis(settings, conn, prefix)))
                }
                _ => None,
            };
            Ok(Stores { analytics, cache })
        }
    }
}

/// Where stateless callers' conversation keys are kept: Redis when one is configured (shared
/// by replicas; `REDIS_URL` may be `redis://…` or `redis+cluster://HOST:PORT[,…]`), memory
/// otherwise.
pub async fn open_conversations(config: &RouterConfig) -> anyhow::Result<Arc<ConversationKeys>> {
    let args = config.stores.store_args();
    match (&args.redis_url, args.in_memory) {
        (Some(url), false) => {
            let conn = switchyard_kit::store::RedisConnection::connect(url)
                .await
                .with_context(|| format!("opening Redis at {}", url.url_without_credentials()))?;
            let prefix = switchyard_kit::store::KeyPrefix::parse(&args.redis_prefix)?;
            Ok(Arc::new(ConversationKeys::redis(config.conversation_ttl, conn, prefix)))
        }
        _ => Ok(Arc::new(ConversationKeys::memory(config.conversation_ttl))),
    }
}

/// Budgets in Postgres with their spend counted in Redis (shared by replicas); in memory with
/// `--in-memory`, or when no Redis is configured (one replica's counters, rebuilt from
/// Postgres on a restart).
pub async fn open_budgets(config: &RouterConfig) -> anyhow::Result<Arc<Budgets>> {
    let args = config.stores.store_args();
    match args.plan("router", false).map_err(anyhow::Error::msg)? {
        StorePlan::InMemory => Ok(Arc::new(Budgets::memory().with_sync(config.budget_sync_interval))),
        StorePlan::Durable { database_url, .. } => {
            let book = Arc::new(
                PostgresBudgetBook::connect(database_url.expose(), &args.db_schema)
                    .await
                    .with_context(|| format!("opening Postgres at {}", database_url.url_without_credentials()))?,
            );
            let counters: Arc<dyn budget::SpendCounters> = match &args.redis_url {
                Some(url) => {
                    let conn = switchyard_kit::store::RedisConnection::connect(url)
                        .await
                        .with_context(|| format!("opening Redis at {}", url.url_without_credentials()))?;
                    let prefix = switchyard_kit::store::KeyPrefix::parse(&args.redis_prefix)?;
                    Arc::new(RedisSpendCounters::new(conn, prefix))
                }
                None => Arc::new(budget::MemorySpendCounters::default()),
            };
            Ok(Arc::new(Budgets::new(book, counters).with_sync(config.budget_sync_interval)))
        }
    }
}

/// The providers' circuits shared by replicas in Redis when one is configured (and
/// `--circuit-sync-interval` is above zero). Redis is not needed to serve: when it cannot be
/// reached at start, circuits are per replica, which is logged.
pub async fn open_circuit_sync(config: &RouterConfig) -> Option<Arc<CircuitSync>> {
    let args = config.stores.store_args();
    let url = args.redis_url.as_ref().filter(|_| !args.in_memory)?;
    if config.circuit_failures == 0 || config.circuit_sync_interval.is_zero() {
        return None;
    }
    let prefix = match switchyard_kit::store::KeyPrefix::parse(&args.redis_prefix) {
        Ok(prefix) => prefix,
        Err(err) => {
            tracing::warn!(error = %err, "provider circuits are per replica: the Redis key prefix is unusable");
            return None;
        }
    };
    match switchyard_kit::store::RedisConnection::connect(url).await {
        Ok(conn) => {
            tracing::info!(interval = ?config.circuit_sync_interval, "provider circuits are shared by replicas in Redis");
            Some(Arc::new(CircuitSync::new(conn, &prefix, config.circuit_sync_interval)))
        }
        Err(err) => {
            tracing::warn!(
                redis = %url.url_without_credentials(),
                error = %err,
                "provider circuits are per replica: Redis cannot be reached at start"
            );
            None
        }
    }
}

/// Checks the settings no flag parser can.
fn check(config: &RouterConfig) -> anyhow::Result<()> {
    let similarity = config.cache_similarity;
    anyhow::ensure!(
        similarity > 0.0 && similarity <= 1.0,
        "ROUTER_CACHE_SIMILARITY must be in (0, 1], got {similarity}"
    );
    anyhow::ensure!(!config.corrections_refresh.is_zero(), "ROUTER_CORRECTIONS_REFRESH must be above zero");
    config.gateway_tools()?;
    Ok(())
}

/// A router bound to its port, ready to serve.
pub struct RouterServer {
    server: GrpcServer,
    router: Arc<Router>,
    drain_timeout: Duration,
}

impl RouterServer {
    /// Binds with the stores and providers the configuration names.
    pub async fn bind(config: &RouterConfig) -> anyhow::Result<Self> {
        check(config)?;
        let stores = open_stores(config).await?;
        let providers = with_local_model(config, config.providers.build()?).await?;
        let fast = fast_path(config);
        let conversations = open_conversations(config).await?;
        let budgets = open_budgets(config).await?;
        Self::bind_with_budgets(config, stores, conversations, budgets, providers, fast).await
    }

    /// Binds with a given analytics store (and an in-process routing cache when the
    /// configuration turns it on), loading the fast router as configured.
    pub async fn bind_with(
        config: &RouterConfig,
        store: Arc<dyn AnalyticsStore>,
        providers: Providers,
    ) -> anyhow::Result<Self> {
        let cache = config.cache_routing.then(|| Arc::new(RoutingCache::memory(config.cache_settings())));
        Self::bind_with_parts(config, Stores { analytics: store, cache }, providers, fast_path(config)).await
    }

    /// Binds with the given parts; conversation keys are kept in memory.
    pub async fn bind_with_parts(
        config: &RouterConfig,
        stores: Stores,
        providers: Providers,
        fast: Arc<FastPath>,
    ) -> anyhow::Result<Self> {
        let conversations = Arc::new(ConversationKeys::memory(config.conversation_ttl));
        Self::bind_with_conversations(config, stores, conversations, providers, fast).await
    }

    /// Binds with the given parts; budgets are kept in memory.
    pub async fn bind_with_conversations(
        config: &RouterConfig,
        stores: Stores,
        conversations: Arc<ConversationKeys>,
        providers: Providers,
        fast: Arc<FastPath>,
    ) -> anyhow::Result<Self> {
        let budgets = Arc::new(Budgets::memory());
        Self::bind_with_budgets(config, stores, conversations, budgets, providers, fast).await
    }

    pub async fn bind_with_budgets(
        config: &RouterConfig,
        stores: Stores,
        conversations: Arc<ConversationKeys>,
        budgets: Arc<Budgets>,
        providers: Providers,
        fast: Arc<FastPath>,
    ) -> anyhow::Result<Self> {
        check(config)?;
        let Stores { analytics: store, cache } = stores;
        let prices = Prices::load(config.model_prices.as_deref())?;
        tracing::info!(models = prices.len(), file = ?config.model_prices, "model prices loaded");
        if providers.is_empty() {
            tracing::warn!(
                "no LLM provider configured (OPENAI_API_KEY/OPENAI_BASE_URL, ANTHROPIC_API_KEY/ANTHROPIC_BASE_URL): \
                 chat calls fail with FAILED_PRECONDITION"
            );
        }
        let mut server = GrpcServer::bind(config.listen, config.server.clone()).await?;
        let recorder: Option<Arc<Recorder>> = config
            .log_routing_decisions
            .then(|| RecordBuffer::start(Arc::new(DecisionSink(store.clone())), config.recorder()));
        // Each provider behind its circuit, shared by the replicas through Redis when the
        // configuration names one (unless the caller put the providers behind circuits already).
        let providers = if providers.has_circuits() {
            providers
        } else {
            providers.with_shared_circuits(config.circuit(), open_circuit_sync(config).await)
        };
        let router = Arc::new(Router {
            llm: LlmChain::new(providers.clone()),
            sessions: SessionsClient::new(&config.sessions_url)?,
            gateway: GatewayClient::new(&config.mcp_gateway_url)?,
            limits: config.limits(),
            gateway_tools_tenants: config.gateway_tools()?,
            gateway_reachable: std::sync::atomic::AtomicBool::new(true),
            default_model: config.default_model.clone(),
            fallback_models: config.fallback_models.clone(),
            prices,
            budgets,
            recorder,
            metrics: Metrics::new(),
            fast: fast.clone(),
            learning: cache.as_ref().map(|cache| Learning::new(cache.clone(), store.clone(), fast.clone())),
            cache,
            conversations,
            routing_timeout: (config.routing_timeout_ms > 0).then(|| Duration::from_millis(config.routing_timeout_ms)),
            stopping: server.shutdown_notice(),
            session_writes: Default::default(),
        });
        if let Some(learning) = &router.learning {
            learning.spawn_refresh(config.corrections_refresh);
        }
        spawn_pruning(store.clone(), config.analytics_retention);
        let max = config.server.max_message_bytes;
        server.add_service(
            RouterServiceServer::new(grpc::RouterGrpc::new(router.clone(), store))
                .max_decoding_message_size(max)
                .max_encoding_message_size(max),
        );
        // Ready while a provider is configured: a router without one can answer nothing.
        // Sessions, the gateway and Postgres degrade a turn rather than take the router out
        // of rotation.
        let configured = !providers.is_empty();
        // The fast router is a detail like the triggers' semantic signal: the router serves
        // without it (the routing call decides alone), so it shows as a component. Loading it
        // embeds about a thousand exemplars when their vectors are not cached: seconds of CPU
        // that a benchmark waits out on this component.
        let (health, fast_loaded) = (server.health(), fast.clone());
        server.health().spawn_probe(Duration::from_secs(5), move || {
            let (health, fast) = (health.clone(), fast_loaded.clone());
            async move {
                health.set_component(FAST_ROUTER_HEALTH, fast.is_ready()).await;
                if configured { Ok(()) } else { Err("no LLM provider configured".to_owned()) }
            }
        });
        Ok(Self { server, router, drain_timeout: config.record_drain_timeout })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    pub fn router(&self) -> Arc<Router> {
        self.router.clone()
    }

    /// Serves until `shutdown`, drains in-flight calls (turns still running when the grace
    /// runs out are recorded as interrupted), then writes the decisions still held.
    pub async fn serve(self, shutdown: impl Future<Output = ()> + Send) -> anyhow::Result<()> {
        let served = self.server.serve(shutdown).await;
        self.router.finish_session_writes(self.drain_timeout).await;
        if let Some(recorder) = &self.router.recorder {
            recorder.drain(self.drain_timeout).await;
        }
        served
    }
}

/// `providers` with the local model added when the configuration names it: loaded (on a
/// blocking thread) before the router serves, so a missing file fails the start with what to
/// run.
pub async fn with_local_model(config: &RouterConfig, mut providers: Providers) -> anyhow::Result<Providers> {
    if !config.uses_local_model() {
        return Ok(providers);
    }
    let dir = config.local_model_dir.clone().unwrap_or_else(switchyard_local_llm::default_model_dir);
    let shown = dir.display().to_string();
    let model = tokio::task::spawn_blocking(move || switchyard_local_llm::LocalModel::load(dir))
        .await
        .context("loading the local model")?
        .with_context(|| format!("loading the local model from {shown}"))?;
    tracing::info!(model_dir = %shown, "local model loaded");
    providers.insert(Arc::new(switchyard_local_llm::LocalProvider::new(model)));
    Ok(providers)
}

/// The fast router, loading in the background, unless turned off.
pub fn fast_path(config: &RouterConfig) -> Arc<FastPath> {
    if config.no_fast_router {
        tracing::info!("the fast router is off (--no-fast-router)");
        return FastPath::disabled();
    }
    FastPath::load_in_background(config.model_dir.clone())
}

fn spawn_pruning(store: Arc<dyn AnalyticsStore>, retention: Duration) {
    let Ok(retention) = chrono::Duration::from_std(retention) else { return };
    tokio::spawn(async move {
        let mut every = tokio::time::interval(PRUNE_INTERVAL);
        loop {
            every.tick().await;
            match store.prune(chrono::Utc::now() - retention).await {
                Ok(0) => {}
                Ok(pruned) => tracing::info!(pruned, "pruned routing decisions past the retention"),
                Err(err) => tracing::warn!(error = %err, "pruning routing analytics failed; retrying next hour"),
            }
        }
    });
}
