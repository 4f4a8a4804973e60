//! The gateway's configuration: flags with environment fallbacks.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::Args;
use switchyard_kit::{
    ServerArgs,
    config::{flag_defaults, parse_duration},
    http_server::HttpLimits,
};

use crate::upstream::{
    Backoff, UpstreamSpec,
    config::{self, ConfigError},
};

switchyard_kit::store_args! {
    /// The gateway's store flags.
    pub struct GatewayStoreArgs {
        db_schema: env "MCP_GATEWAY_DB_SCHEMA", default "mcp_gateway";
        redis_prefix: env "MCP_GATEWAY_REDIS_PREFIX", default "sy";
        in_memory: env "MCP_GATEWAY_IN_MEMORY";
    }
}

#[derive(Debug, Clone, Args)]
pub struct GatewayConfig {
    /// Address the internal gRPC API (switchyard.mcp.v1) listens on.
    #[arg(long, env = "MCP_GATEWAY_LISTEN", default_value = "0.0.0.0:50054")]
    pub listen: SocketAddr,

    /// Address the MCP streamable HTTP endpoint (`/mcp`) listens on.
    #[arg(long, env = "MCP_GATEWAY_MCP_LISTEN", default_value = "0.0.0.0:8081")]
    pub mcp_listen: SocketAddr,

    /// Longest an MCP client may take to send a request's head (request line and headers),
    /// from its first byte; a new connection must send one within this of being accepted.
    /// Slower connections are closed. 0 turns it off.
    #[arg(long, env = "MCP_GATEWAY_MCP_HEADER_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub mcp_header_timeout: Duration,

    /// How long a keep-alive connection to the MCP endpoint may wait for its next request
    /// before it is closed (an open event stream is a request in progress: never cut by it).
    /// 0 turns it off.
    #[arg(long, env = "MCP_GATEWAY_MCP_IDLE_TIMEOUT", default_value = "75s", value_parser = parse_duration)]
    pub mcp_idle_timeout: Duration,

    /// Connections to the MCP endpoint open at once. Past it a new connection takes the place
    /// of the one idle longest (no request in progress); it waits only while every connection
    /// has a request in progress (an open event stream is one).
    #[arg(long, env = "MCP_GATEWAY_MCP_MAX_CONNECTIONS", default_value_t = 4096, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub mcp_max_connections: usize,

    /// Serve MCP over stdin/stdout instead of HTTP and gRPC (for desktop MCP clients that
    /// launch the gateway themselves). Logs go to stderr.
    #[arg(long, env = "MCP_GATEWAY_STDIO")]
    pub stdio: bool,

    /// Downstream servers file (TOML, or JSON in the `mcpServers` shape); see
    /// deploy/mcp-gateway/servers.example.toml.
    #[arg(long = "config", env = "MCP_GATEWAY_CONFIG")]
    pub config_file: Option<PathBuf>,

    /// How often the servers file is checked for changes to its `[[policies]]`, which apply
    /// at once (a file that no longer validates is logged and the last good policies kept;
    /// changes to `servers` need a restart). 0 turns it off.
    #[arg(long, env = "MCP_GATEWAY_CONFIG_RELOAD", default_value = "2s", value_parser = parse_duration)]
    pub config_reload: Duration,

    /// A downstream server: `NAME=COMMAND [ARGS…]` (stdio) or `NAME=http(s)://…` (streamable
    /// HTTP). Repeatable; joins the config file's servers.
    #[arg(long = "server", value_name = "NAME=COMMAND|URL")]
    pub servers: Vec<String>,

    /// Tools shown for a context (set_context comes on top).
    #[arg(long, env = "MCP_GATEWAY_TOP_K", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub top_k: u32,

    /// What `tools/list` shows. `filtered`: `set_context` and the tools relevant to the
    /// session's context, re-listed as it changes (for clients that re-list on
    /// `notifications/tools/list_changed`). `search`: a fixed surface of `set_context`,
    /// `find_tools` (the best tools for a query, with schemas and scores) and `call_tool`
    /// (any tool by name), for clients that read the list once.
    #[arg(long, env = "MCP_GATEWAY_TOOL_MODE", value_enum, default_value_t = ToolMode::Filtered)]
    pub tool_mode: ToolMode,

    /// Name tools `<server>__<tool>`. When off, tools keep their own names and only a
    /// collision gets the prefix.
    #[arg(long, env = "MCP_GATEWAY_PREFIX_TOOLS", default_value_t = true, action = clap::ArgAction::Set)]
    pub prefix_tools: bool,

    /// Host headers the MCP endpoint accepts (DNS-rebinding protection), e.g. the Service's
    /// DNS name. Repeatable or comma-separated; `*` accepts any host.
    #[arg(long = "allowed-host", env = "MCP_GATEWAY_ALLOWED_HOSTS", value_delimiter = ',', default_values_t = ["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()])]
    pub allowed_hosts: Vec<String>,

    /// Browser origins the MCP endpoint accepts besides loopback pages (`http(s)://localhost`,
    /// `127.0.0.1`, `[::1]`, any port): `scheme://host[:port]`, `:*` for any port (DNS-rebinding
    /// protection). A request with another `Origin` is refused with 403; requests without one
    /// (non-browser clients) pass. Repeatable or comma-separated; `*` accepts any origin.
    #[arg(
        long = "allowed-origin",
        alias = "allowed-origins",
        env = "MCP_GATEWAY_ALLOWED_ORIGINS",
        value_delimiter = ',',
        value_parser = crate::guard::parse_allowed_origin
    )]
    pub allowed_origins: Vec<String>,

    /// Redis for session contexts and MCP session state, Postgres for the record of
    /// set_context and tool calls; or memory with --in-memory.
    #[command(flatten)]
    pub stores: GatewayStoreArgs,

    /// How long an idle session's context is kept.
    #[arg(long, env = "MCP_GATEWAY_CONTEXT_TTL", default_value = "24h", value_parser = parse_duration)]
    pub context_ttl: Duration,

    /// A sentence-transformers BERT folder for the semantic signal (scripts/fetch-models.sh
    /// puts all-MiniLM-L6-v2 in models/). Without it, ranking uses words and usage only.
    #[arg(long, env = "SWITCHYARD_MODEL_DIR", default_value = "models/all-MiniLM-L6-v2")]
    pub model_dir: PathBuf,

    /// Keep the tools' embeddings in this file between starts, so a restart embeds only tools
    /// it has not seen (keyed by a digest of the model's files and the exact tool text; a
    /// missing, corrupt or other-model file is ignored and rewritten). Off by default.
    #[arg(long, env = "MCP_GATEWAY_EMBEDDING_CACHE", value_name = "PATH")]
    pub embedding_cache: Option<PathBuf>,

    /// The query adapter applied to a context's embedding before the semantic signal:
    /// `shipped` (learned from the public MetaTool requests for all-MiniLM-L6-v2; skipped with
    /// a warning for another model), `none`, or the PATH of an adapter file that
    /// `switchyard-tool-eval --save-base-adapter` wrote from your own (request, tool) pairs.
    #[arg(long, env = "MCP_GATEWAY_BASE_ADAPTER", default_value = "shipped", value_name = "SOURCE")]
    pub base_adapter: String,

    /// Rank without the embedding model even if it is present.
    #[arg(long, env = "MCP_GATEWAY_NO_EMBEDDINGS")]
    pub no_embeddings: bool,

    /// Recent contexts whose embeddings are kept, so a context set again (the same request
    /// retried, an agent re-sending it every turn) skips the model; 0 turns this off.
    #[arg(long, env = "MCP_GATEWAY_RECENT_CONTEXTS", default_value_t = 1024)]
    pub recent_contexts: usize,

    /// Past (context, tool) pairs the usage prior learns from.
    #[arg(long, env = "MCP_GATEWAY_HISTORY_LIMIT", default_value_t = 20_000)]
    pub history_limit: usize,

    /// How often the usage history is reloaded from Postgres (other replicas' calls too).
    #[arg(long, env = "MCP_GATEWAY_HISTORY_REFRESH", default_value = "60s", value_parser = parse_duration)]
    pub history_refresh: Duration,

    /// Longest set_context query (and intent), in bytes.
    #[arg(long, env = "MCP_GATEWAY_MAX_QUERY_BYTES", default_value_t = 8 * 1024)]
    pub max_query_bytes: usize,

    /// Largest tool-call arguments object (serialised JSON), in bytes.
    #[arg(long, env = "MCP_GATEWAY_MAX_ARGUMENT_BYTES", default_value_t = 1024 * 1024)]
    pub max_argument_bytes: usize,

    /// How long a downstream tool call may take.
    #[arg(long, env = "MCP_GATEWAY_CALL_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub call_timeout: Duration,

    /// First reconnection delay after a server fails (doubles up to --reconnect-max).
    #[arg(long, env = "MCP_GATEWAY_RECONNECT_INITIAL", default_value = "500ms", value_parser = parse_duration)]
    pub reconnect_initial: Duration,

    #[arg(long, env = "MCP_GATEWAY_RECONNECT_MAX", default_value = "30s", value_parser = parse_duration)]
    pub reconnect_max: Duration,

    /// Records held while Postgres is unreachable; beyond, records are dropped (counted and
    /// logged).
    #[arg(long, env = "MCP_GATEWAY_RECORD_BUFFER", default_value_t = 10_000)]
    pub record_buffer: usize,

    /// On shutdown, how long writing the records still held may take before the process exits
    /// (what is left is logged as lost).
    #[arg(long, env = "MCP_GATEWAY_RECORD_DRAIN_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub record_drain_timeout: Duration,

    /// Keep each audited tool call's arguments (JSON, with the --audit-redact fields
    /// replaced) beside their SHA-256 digest and size. Off: digest and size only.
    #[arg(long, env = "MCP_GATEWAY_AUDIT_ARGUMENTS")]
    pub audit_arguments: bool,

    /// Argument fields whose values are replaced by "[redacted]" when arguments are kept (at
    /// any depth, names compared without case). Comma-separated or repeatable.
    #[arg(
        long = "audit-redact",
        env = "MCP_GATEWAY_AUDIT_REDACT",
        value_delimiter = ',',
        default_values_t = ["password".to_owned(), "secret".to_owned(), "token".to_owned(), "api_key".to_owned(), "authorization".to_owned()]
    )]
    pub audit_redact: Vec<String>,

    /// How long audit records are kept; older ones are pruned hourly.
    #[arg(long, env = "MCP_GATEWAY_AUDIT_RETENTION", default_value = "2160h", value_parser = parse_duration)]
    pub audit_retention: Duration,

    /// How long the usage record (every set_context and tool call, which the usage prior
    /// learns from) is kept in Postgres; every hour the whole months before the month the cut
    /// falls in are dropped (so up to a month more is kept). Unset: kept for ever.
    #[arg(long, env = "MCP_GATEWAY_USAGE_RETENTION", value_parser = parse_duration)]
    pub usage_retention: Option<Duration>,

    /// Who may use the MCP endpoint: `--auth open|keys|oauth` and the `--oauth-*` settings.
    #[command(flatten)]
    pub auth: crate::auth::AuthArgs,

    #[command(flatten)]
    pub server: ServerArgs,
}

/// What `tools/list` shows (see `--tool-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ToolMode {
    #[default]
    Filtered,
    Search,
}

impl GatewayConfig {
    /// Every flag at its default, whatever the environment holds.
    pub fn defaults() -> Self {
        flag_defaults()
    }

    /// The defaults, in memory, gRPC on `listen`, MCP on `mcp_listen`, the given servers
    /// (tests and `switchyard dev`).
    pub fn in_memory(listen: SocketAddr, mcp_listen: SocketAddr, servers: Vec<String>) -> Self {
        Self { listen, mcp_listen, servers, stores: GatewayStoreArgs::in_memory(), ..Self::defaults() }
    }

    /// The configured downstream servers: the file's, then the flags'.
    pub fn upstreams(&self) -> Result<Vec<UpstreamSpec>, ConfigError> {
        let from_file = match &self.config_file {
            Some(path) => config::load_file(path)?,
            None => Vec::new(),
        };
        let from_flags = self.servers.iter().map(|s| config::parse_flag(s)).collect::<Result<Vec<_>, _>>()?;
        config::merge(from_file, from_flags)
    }

    /// The policies of the servers file (none without one).
    pub fn policies(&self) -> Result<crate::policy::Policies, ConfigError> {
        match &self.config_file {
            Some(path) => Ok(config::load_contents(path)?.policies),
            None => Ok(crate::policy::Policies::default()),
        }
    }

    /// The MCP endpoint's limits on slow and idle clients and on connections.
    pub fn mcp_http_limits(&self) -> HttpLimits {
        HttpLimits {
            header_timeout: self.mcp_header_timeout,
            idle_timeout: self.mcp_idle_timeout,
            max_connections: self.mcp_max_connections,
        }
    }

    pub fn backoff(&self) -> Backoff {
        Backoff::new(self.reconnect_initial, self.reconnect_max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_memory_is_the_flag_defaults_but_for_the_stores_addresses_and_servers() {
        let (listen, mcp_listen): (SocketAddr, SocketAddr) =
            ("127.0.0.1:1".parse().expect("addr"), "127.0.0.1:2".parse().expect("addr"));
        let servers = vec!["echo=http://127.0.0.1:3/mcp".to_owned()];
        let mut expected = GatewayConfig::defaults();
        expected.listen = listen;
        expected.mcp_listen = mcp_listen;
        expected.servers = servers.clone();
        expected.stores = GatewayStoreArgs::in_memory();
        let config = GatewayConfig::in_memory(listen, mcp_listen, servers);
        assert_eq!(format!("{config:?}"), format!("{expected:?}"));
        assert!(config.stores.in_memory);
        assert_eq!(config.auth.mode, crate::auth::AuthMode::Open);
        assert_eq!(config.mcp_http_limits().idle_timeout, HttpLimits::default().idle_timeout);
    }
}
