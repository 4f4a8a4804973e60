//! The router's configuration: flags with environment fallbacks, keeping the requirements' names
//! (`UNIFIED_CHAT_*`, docs/requirements.md#router-configuration) where they give them.

use std::{net::SocketAddr, time::Duration};

use clap::Args;
use switchyard_kit::{
    ServerArgs,
    config::{flag_defaults, parse_duration},
    records::RecordBufferConfig,
};
use switchyard_llm::{CircuitSettings, ModelRef, ProviderArgs};

use crate::limits::Limits;

switchyard_kit::store_args! {
    /// The router's store flags: Postgres for routing analytics (and Redis for the shared
    /// routing cache).
    pub struct RouterStoreArgs {
        db_schema: env "ROUTER_DB_SCHEMA", default "router";
        redis_prefix: env "ROUTER_REDIS_PREFIX", default "sy";
        in_memory: env "ROUTER_IN_MEMORY";
    }
}

#[derive(Debug, Clone, Args)]
// A turn may run several model calls and tools: a longer default deadline than the other
// services' 30 s.
#[command(mut_arg("request_timeout", |arg| arg.default_value("300s")))]
pub struct RouterConfig {
    /// Address the gRPC server listens on.
    #[arg(long, env = "ROUTER_LISTEN", default_value = "0.0.0.0:50053")]
    pub listen: SocketAddr,

    /// gRPC URL of the sessions service.
    #[arg(long, env = "SESSIONS_URL", default_value = "http://127.0.0.1:50052")]
    pub sessions_url: String,

    /// gRPC URL of the MCP gateway.
    #[arg(long, env = "MCP_GATEWAY_URL", default_value = "http://127.0.0.1:50054")]
    pub mcp_gateway_url: String,

    #[command(flatten)]
    pub stores: RouterStoreArgs,

    /// LLM vendors: base URLs, keys, timeouts, retries.
    #[command(flatten)]
    pub providers: ProviderArgs,

    /// The model that routes and answers (`openai/<model>`, `anthropic/<model>`).
    #[arg(long, env = "UNIFIED_CHAT_DEFAULT_MODEL", default_value = "openai/gpt-4o-mini")]
    pub default_model: ModelRef,

    /// Models tried in order when the model of a call fails (comma-separated).
    #[arg(long, env = "UNIFIED_CHAT_FALLBACK_MODELS", value_delimiter = ',')]
    pub fallback_models: Vec<ModelRef>,

    /// Calls in a row failing by a provider's fault (5xx, timeouts, connection failures, 429
    /// after its retries) that open its circuit: calls then skip it at once (0: no circuit).
    #[arg(long, env = "ROUTER_CIRCUIT_FAILURES", default_value_t = 5)]
    pub circuit_failures: u32,

    /// How long an open circuit stays open before one probe call is let through.
    #[arg(long, env = "ROUTER_CIRCUIT_COOLDOWN", default_value = "30s", value_parser = parse_duration)]
    pub circuit_cooldown: Duration,

    /// With Redis (REDIS_URL), how often each replica reads the circuits the other replicas
    /// published (one GET per provider): a provider another replica found sick is skipped
    /// within this time, and only one replica probes it after the cooldown. 0s: circuits are
    /// per replica.
    #[arg(long, env = "ROUTER_CIRCUIT_SYNC_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub circuit_sync_interval: Duration,

    /// How long the routing call has to decide (its first text, or a routing tool call) before
    /// the fast router decides instead (0: wait for the model however long it takes).
    #[arg(long, env = "UNIFIED_CHAT_ROUTING_TIMEOUT_MS", default_value_t = 500)]
    pub routing_timeout_ms: u64,

    /// Cache routing decisions (by exact message in Redis, by similar message in process) and
    /// learn from users' route corrections. Keeps each turn's message with its decision.
    #[arg(long, env = "UNIFIED_CHAT_CACHE_ROUTING", default_value_t = false, action = clap::ArgAction::Set)]
    pub cache_routing: bool,

    /// Cosine similarity from which a cached decision or a correction applies to a message.
    #[arg(long, env = "ROUTER_CACHE_SIMILARITY", default_value_t = 0.92)]
    pub cache_similarity: f32,

    /// How long a cached decision lives in Redis.
    #[arg(long, env = "ROUTER_CACHE_TTL", default_value = "24h", value_parser = parse_duration)]
    pub cache_ttl: Duration,

    /// Decisions each tenant keeps in process for similarity lookups.
    #[arg(long, env = "ROUTER_CACHE_ENTRIES", default_value_t = 1024)]
    pub cache_entries: usize,

    /// Tenants whose decisions are kept in process (least recently used out first).
    #[arg(long, env = "ROUTER_CACHE_TENANTS", default_value_t = 1024)]
    pub cache_tenants: usize,

    /// How often each replica loads the corrections other replicas stored.
    #[arg(long, env = "ROUTER_CORRECTIONS_REFRESH", default_value = "5s", value_parser = parse_duration)]
    pub corrections_refresh: Duration,

    /// The MiniLM folder for the fast router and the routing cache (scripts/fetch-models.sh).
    /// Without it, routing waits for the model and the cache matches exact messages only.
    #[arg(long, env = "SWITCHYARD_MODEL_DIR", default_value = "models/all-MiniLM-L6-v2")]
    pub model_dir: std::path::PathBuf,

    /// The local chat model's folder (`model.gguf`; scripts/fetch-models.sh), loaded when the
    /// default or a fallback model is `local/smollm2-135m-instruct`. Default: the repository's
    /// models/ (or `$SWITCHYARD_MODELS_DIR`).
    #[arg(long, env = "SWITCHYARD_LOCAL_MODEL_DIR")]
    pub local_model_dir: Option<std::path::PathBuf>,

    /// Run without the fast router even when the model folder is present.
    #[arg(long, env = "ROUTER_NO_FAST_ROUTER")]
    pub no_fast_router: bool,

    /// The price table every model call is costed by (TOML: a table per model with
    /// `input_per_mtok`, `output_per_mtok`, `cached_input_per_mtok` in USD per million tokens).
    /// Default: the shipped table (services/router/model-prices.toml).
    #[arg(long, env = "ROUTER_MODEL_PRICES")]
    pub model_prices: Option<std::path::PathBuf>,

    /// Record every turn's routing decision in Postgres (the analytics behind GetRoutingStats).
    #[arg(long, env = "UNIFIED_CHAT_LOG_ROUTING_DECISIONS", default_value_t = true, action = clap::ArgAction::Set)]
    pub log_routing_decisions: bool,

    /// Longest chat message accepted, in bytes (the gRPC message limit is --max-message-bytes).
    #[arg(long = "max-chat-message-bytes", env = "ROUTER_MAX_MESSAGE_BYTES", default_value_t = 32 * 1024)]
    pub max_chat_message_bytes: usize,

    /// Most history messages a request may carry.
    #[arg(long, env = "ROUTER_MAX_HISTORY", default_value_t = 100)]
    pub max_history: usize,

    /// Recent turns of the conversation quoted to the routing and answering calls.
    #[arg(long, env = "ROUTER_CONTEXT_TURNS", default_value_t = 8)]
    pub context_turns: usize,

    /// Largest `max_tokens` the router asks a model for; a request's larger one is lowered to it.
    #[arg(long, env = "ROUTER_MAX_TOKENS_LIMIT", default_value_t = 16_384)]
    pub max_tokens_limit: u32,

    /// Model ↔ tool round trips the MCP agent may make before it must answer.
    #[arg(long, env = "ROUTER_MAX_TOOL_STEPS", default_value_t = 6)]
    pub max_tool_steps: usize,

    /// Tools the MCP agent is shown (the gateway's top-k for the context).
    #[arg(long, env = "ROUTER_AGENT_TOOLS", default_value_t = 8)]
    pub agent_tools: u32,

    /// Tools the MCP agent shows a local model (fewer: a small model chooses better among the
    /// gateway's best few, and a shorter prompt is read sooner).
    #[arg(long, env = "ROUTER_LOCAL_AGENT_TOOLS", default_value_t = 3)]
    pub local_agent_tools: u32,

    /// Tenants whose client-tools turns also get the MCP gateway's context-filtered tools
    /// beside the caller's, run by the router itself (comma-separated tenant ids, `*` for all;
    /// none by default).
    #[arg(long, env = "ROUTER_GATEWAY_TOOLS_TENANTS", value_delimiter = ',')]
    pub gateway_tools_tenants: Vec<String>,

    /// Longest one MCP tool call may take.
    #[arg(long, env = "ROUTER_TOOL_CALL_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub tool_call_timeout: Duration,

    /// Most experts one multi-agent turn consults.
    #[arg(long, env = "ROUTER_MAX_EXPERTS", default_value_t = 4)]
    pub max_experts: usize,

    /// Experts consulted at once (the rest wait for a slot).
    #[arg(long, env = "ROUTER_EXPERT_CONCURRENCY", default_value_t = 4)]
    pub expert_concurrency: usize,

    /// Longest one expert may take; a slower expert is left out of the synthesis.
    #[arg(long, env = "ROUTER_EXPERT_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub expert_timeout: Duration,

    /// How long a stateless caller's conversation key keeps naming its session after its last
    /// request (match the sessions' SESSIONS_DEFAULT_TTL).
    #[arg(long, env = "ROUTER_CONVERSATION_TTL", default_value = "24h", value_parser = parse_duration)]
    pub conversation_ttl: Duration,

    /// Routing decisions kept in Postgres; older rows are pruned hourly.
    #[arg(long, env = "ROUTER_ANALYTICS_RETENTION", default_value = "720h", value_parser = parse_duration)]
    pub analytics_retention: Duration,

    /// Decision records held in memory while Postgres is unreachable; beyond, records are
    /// dropped (counted and logged).
    #[arg(long, env = "ROUTER_RECORD_BUFFER", default_value_t = 10_000)]
    pub record_buffer: usize,

    /// How often buffered decision records are written.
    #[arg(long, env = "ROUTER_RECORD_FLUSH_INTERVAL", default_value = "500ms", value_parser = parse_duration)]
    pub record_flush_interval: Duration,

    /// How long the decision writer waits for more decisions to join a batch before it writes.
    /// Under load this turns a transaction per turn or two into a few dozen a second, which is
    /// most of Postgres's work per decision; a decision reaches Postgres this much later.
    /// 0s writes each batch at once.
    #[arg(long, env = "ROUTER_RECORD_LINGER", default_value = "20ms", value_parser = parse_duration)]
    pub record_linger: Duration,

    /// How old a replica's own view of a budget's spend may be when a turn is checked against
    /// it. 0s: exact — every turn reads the shared counters and is charged before it ends (two
    /// Redis round trips on a budgeted tenant's turn). Above zero, a budgeted turn makes no round
    /// trip on its path (its spend is counted in the background), and a replica may miss what
    /// the other replicas spent in the last interval.
    #[arg(long, env = "ROUTER_BUDGET_SYNC_INTERVAL", default_value = "0s", value_parser = parse_duration)]
    pub budget_sync_interval: Duration,

    /// On shutdown, how long writing the records still held may take.
    #[arg(long, env = "ROUTER_RECORD_DRAIN_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub record_drain_timeout: Duration,

    #[command(flatten)]
    pub server: ServerArgs,
}

impl RouterConfig {
    /// Every flag at its default, whatever the environment holds.
    pub fn defaults() -> Self {
        flag_defaults()
    }

    /// The defaults, in memory, on `listen`, calling the given services; no provider until
    /// one is set (tests and `switchyard dev`).
    pub fn in_memory(listen: SocketAddr, sessions_url: &str, mcp_gateway_url: &str) -> Self {
        Self {
            listen,
            sessions_url: sessions_url.to_owned(),
            mcp_gateway_url: mcp_gateway_url.to_owned(),
            stores: RouterStoreArgs::in_memory(),
            ..Self::defaults()
        }
    }

    /// Each provider's circuit breaker, from `--circuit-failures` and `--circuit-cooldown`.
    pub fn circuit(&self) -> CircuitSettings {
        CircuitSettings { failures: self.circuit_failures, cooldown: self.circuit_cooldown }
    }

    pub fn limits(&self) -> Limits {
        Limits {
            max_message_bytes: self.max_chat_message_bytes,
            max_history: self.max_history,
            context_turns: self.context_turns,
            max_tokens: self.max_tokens_limit,
            max_tool_steps: self.max_tool_steps,
            agent_tools: self.agent_tools,
            local_agent_tools: self.local_agent_tools.max(1),
            tool_call_timeout: self.tool_call_timeout,
            max_experts: self.max_experts,
            expert_concurrency: self.expert_concurrency.max(1),
            expert_timeout: self.expert_timeout,
        }
    }

    /// The tenants whose client-tools turns get the gateway's tools: every item a tenant id
    /// (`[A-Za-z0-9._-]`, 1 to 64) or `*`; an empty setting (or one empty value) turns it off.
    pub fn gateway_tools(&self) -> anyhow::Result<GatewayToolsTenants> {
        let items = &self.gateway_tools_tenants;
        if items.is_empty() || (items.len() == 1 && items[0].trim().is_empty()) {
            return Ok(GatewayToolsTenants::None);
        }
        let mut tenants = std::collections::HashSet::new();
        let mut all = false;
        for (index, item) in items.iter().enumerate() {
            let item = item.trim();
            if item == "*" {
                all = true;
                continue;
            }
            anyhow::ensure!(
                !item.is_empty(),
                "ROUTER_GATEWAY_TOOLS_TENANTS: item {} is empty (a comma-separated list of tenant ids, or `*`)",
                index + 1
            );
            let tenant = switchyard_kit::TenantId::parse(item).map_err(|_| {
                anyhow::anyhow!(
                    "ROUTER_GATEWAY_TOOLS_TENANTS: item {} ({:?}) is not a tenant id: 1 to 64 characters of \
                     [A-Za-z0-9._-], or `*` for all tenants",
                    index + 1,
                    item
                )
            })?;
            tenants.insert(tenant.as_str().to_owned());
        }
        Ok(if all { GatewayToolsTenants::All } else { GatewayToolsTenants::Some(tenants) })
    }

    /// True when a configured model runs in this process.
    pub fn uses_local_model(&self) -> bool {
        std::iter::once(&self.default_model)
            .chain(&self.fallback_models)
            .any(|model| model.provider == crate::turn::LOCAL_PROVIDER)
    }

    pub fn cache_settings(&self) -> crate::cache::CacheSettings {
        crate::cache::CacheSettings {
            similarity: self.cache_similarity,
            ttl: self.cache_ttl,
            entries_per_tenant: self.cache_entries,
            tenants: self.cache_tenants,
            corrections_per_user: crate::cache::CacheSettings::CORRECTIONS_PER_USER,
        }
    }

    pub fn recorder(&self) -> RecordBufferConfig {
        RecordBufferConfig {
            name: "routing decisions",
            capacity: self.record_buffer,
            flush_interval: self.record_flush_interval,
            linger: self.record_linger,
            ..RecordBufferConfig::default()
        }
    }
}

/// The tenants whose client-tools turns get the MCP gateway's tools beside the caller's
/// (`ROUTER_GATEWAY_TOOLS_TENANTS`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum GatewayToolsTenants {
    /// Off (the default): the caller's tools only.
    #[default]
    None,
    /// `*`: every tenant.
    All,
    Some(std::collections::HashSet<String>),
}

impl GatewayToolsTenants {
    pub fn includes(&self, tenant: &str) -> bool {
        match self {
            Self::None => false,
            Self::All => true,
            Self::Some(tenants) => tenants.contains(tenant),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(items: &[&str]) -> anyhow::Result<GatewayToolsTenants> {
        let mut config = RouterConfig::in_memory("127.0.0.1:0".parse().expect("addr"), "http://s", "http://g");
        config.gateway_tools_tenants = items.iter().map(|s| (*s).to_owned()).collect();
        config.gateway_tools()
    }

    #[test]
    fn in_memory_is_the_flag_defaults_but_for_the_stores_and_addresses() {
        let listen: SocketAddr = "127.0.0.1:1".parse().expect("addr");
        let mut expected = RouterConfig::defaults();
        expected.listen = listen;
        expected.sessions_url = "http://s".to_owned();
        expected.mcp_gateway_url = "http://g".to_owned();
        expected.stores = RouterStoreArgs::in_memory();
        let config = RouterConfig::in_memory(listen, "http://s", "http://g");
        assert_eq!(format!("{config:?}"), format!("{expected:?}"));
        assert!(config.stores.in_memory);
        assert!(config.providers.build().expect("providers").is_empty(), "no provider until one is set");
        assert_eq!(config.server.request_timeout, Duration::from_secs(300), "the router's longer deadline");
    }

    #[test]
    fn the_gateway_tools_tenants_are_checked_at_start() {
        assert_eq!(with(&[]).expect("off"), GatewayToolsTenants::None);
        assert_eq!(with(&[""]).expect("off"), GatewayToolsTenants::None);
        assert_eq!(with(&["*"]).expect("all"), GatewayToolsTenants::All);
        let some = with(&["acme", " beta-2 "]).expect("two");
        assert!(some.includes("acme") && some.includes("beta-2") && !some.includes("other"));
        let empty = with(&["acme", "", "b"]).expect_err("empty item").to_string();
        assert!(empty.contains("item 2 is empty"), "{empty}");
        let nul = with(&["ac\0me"]).expect_err("NUL").to_string();
        assert!(nul.contains("item 1") && nul.contains("not a tenant id"), "{nul}");
        assert!(with(&["a b"]).is_err() && with(&[&"x".repeat(65)]).is_err());
    }
}
