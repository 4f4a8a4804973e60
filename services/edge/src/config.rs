//! The edge's configuration: flags with environment fallbacks.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::Args;
use switchyard_kit::{
    Secret,
    config::{flag_defaults, parse_duration},
    http_server::HttpLimits,
};

use crate::{auth::JwtConfig, clients::UpstreamUrls};

/// Requests a second each credential may make, unless configured (`EDGE_RATE_LIMIT`).
pub const DEFAULT_RATE_LIMIT: u32 = 20;
/// Requests a credential may make at once above its rate, unless configured (`EDGE_RATE_BURST`).
pub const DEFAULT_RATE_BURST: u32 = 40;

#[derive(Debug, Clone, Args)]
pub struct EdgeConfig {
    /// Address the HTTP server listens on.
    #[arg(long, env = "EDGE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// gRPC URL of the router.
    #[arg(long, env = "ROUTER_URL", default_value = "http://127.0.0.1:50053")]
    pub router_url: String,

    /// gRPC URL of the sessions service (sessions and roles).
    #[arg(long, env = "SESSIONS_URL", default_value = "http://127.0.0.1:50052")]
    pub sessions_url: String,

    /// gRPC URL of the MCP gateway.
    #[arg(long, env = "MCP_GATEWAY_URL", default_value = "http://127.0.0.1:50054")]
    pub mcp_gateway_url: String,

    /// gRPC URL of the triggers service.
    #[arg(long, env = "TRIGGERS_URL", default_value = "http://127.0.0.1:50051")]
    pub triggers_url: String,

    /// Serve requests that carry no credential, as the default tenant, and let them manage
    /// roles. For `switchyard dev` and local trials only; logged loudly at start.
    #[arg(long, env = "EDGE_OPEN", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub open: bool,

    /// Postgres holding the API keys (`switchyard keys create` writes there); API keys are
    /// off without it.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<Secret>,

    /// Postgres schema of the key table.
    #[arg(long, env = "EDGE_DB_SCHEMA", default_value = "edge")]
    pub db_schema: String,

    /// How long a key check is remembered (a revoked key keeps working this long at most).
    #[arg(long, env = "EDGE_KEY_CACHE_TTL", default_value = "30s", value_parser = parse_duration)]
    pub key_cache_ttl: Duration,

    /// While Postgres cannot be reached, keys it accepted within this long are still served
    /// from their last good check (unknown keys get 503); once it answers again every key is
    /// checked afresh. 0 serves none.
    #[arg(long, env = "EDGE_KEY_MAX_STALENESS", default_value = "15m", value_parser = parse_duration)]
    pub key_max_staleness: Duration,

    /// Shared secret for HS256 tokens.
    #[arg(long, env = "EDGE_JWT_HS256_SECRET", hide_env_values = true)]
    pub jwt_hs256_secret: Option<Secret>,

    /// JWKS file with the public keys for RS256 tokens (re-read when it changes).
    #[arg(long, env = "EDGE_JWT_JWKS_FILE")]
    pub jwt_jwks_file: Option<PathBuf>,

    /// Required `iss` of tokens.
    #[arg(long, env = "EDGE_JWT_ISSUER")]
    pub jwt_issuer: Option<String>,

    /// Required `aud` of tokens.
    #[arg(long, env = "EDGE_JWT_AUDIENCE")]
    pub jwt_audience: Option<String>,

    /// The token claim naming the caller's tenant.
    #[arg(long, env = "EDGE_JWT_TENANT_CLAIM", default_value = "tenant")]
    pub jwt_tenant_claim: String,

    /// Requests a second each credential may make (0: no limit).
    #[arg(long, env = "EDGE_RATE_LIMIT", default_value_t = DEFAULT_RATE_LIMIT)]
    pub rate_limit: u32,

    /// Requests a credential may make at once above its rate.
    #[arg(long, env = "EDGE_RATE_BURST", default_value_t = DEFAULT_RATE_BURST)]
    pub rate_burst: u32,

    /// Largest request body, in bytes (413 above it).
    #[arg(long, env = "EDGE_MAX_BODY_BYTES", default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Deadline of one unary call through the edge (streams are bounded by the router's own
    /// turn limits instead).
    #[arg(long, env = "EDGE_REQUEST_TIMEOUT", default_value = "120s", value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// Largest gRPC message sent to or accepted from the services, in bytes.
    #[arg(long, env = "MAX_MESSAGE_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub max_message_bytes: usize,

    /// Origins browsers may call the API from (comma-separated, `*` for any); no CORS
    /// headers when empty.
    #[arg(long, env = "EDGE_CORS_ORIGINS", value_delimiter = ',')]
    pub cors_origins: Vec<String>,

    /// Longest a client may take to send a request's head (request line and headers), from
    /// its first byte; a new connection must send one within this of being accepted. Slower
    /// connections are closed. 0 turns it off.
    #[arg(long, env = "EDGE_HEADER_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub header_timeout: Duration,

    /// How long a keep-alive connection may wait for its next request before it is closed
    /// (a request in progress, a stream included, is never cut by it). 0 turns it off.
    #[arg(long, env = "EDGE_IDLE_TIMEOUT", default_value = "75s", value_parser = parse_duration)]
    pub idle_timeout: Duration,

    /// Connections open at once. Past it a new connection takes the place of the one idle
    /// longest (no request in progress); it waits only while every connection has a request
    /// in progress.
    #[arg(long, env = "EDGE_MAX_CONNECTIONS", default_value_t = 4096, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_connections: usize,

    /// On SIGTERM/SIGINT, how long in-flight requests and streams may take to finish; streams
    /// still open near its end close with one error event. As long as the router's default, so
    /// the edge does not cut a turn the router would finish.
    #[arg(long, env = "SHUTDOWN_GRACE", default_value = "75s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,

    /// How long a `/v1/responses` answer is kept for `previous_response_id` and
    /// `GET /v1/responses/{id}`.
    #[arg(long, env = "EDGE_RESPONSES_TTL", default_value = "1h", value_parser = parse_duration)]
    pub responses_ttl: Duration,

    /// Most `/v1/responses` answers kept at once without Redis (per replica); the oldest go
    /// first.
    #[arg(long, env = "EDGE_RESPONSES_MAX", default_value_t = 10_000)]
    pub responses_max: usize,

    /// Redis for `/v1/responses` answers, shared by every replica; this replica's memory
    /// without it.
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<Secret>,

    /// Prefix of the edge's Redis keys.
    #[arg(long, env = "EDGE_REDIS_PREFIX", default_value = "sy")]
    pub redis_prefix: String,
}

impl EdgeConfig {
    /// Every flag at its default, whatever the environment holds.
    pub fn defaults() -> Self {
        flag_defaults()
    }

    /// An open edge on `listen` in front of the given services, otherwise the defaults (for
    /// `switchyard dev` and tests).
    pub fn open(listen: SocketAddr, urls: &UpstreamUrls) -> Self {
        Self {
            listen,
            router_url: urls.router.clone(),
            sessions_url: urls.sessions.clone(),
            mcp_gateway_url: urls.mcp_gateway.clone(),
            triggers_url: urls.triggers.clone(),
            // One process on one machine (or a test): no credentials to hand out.
            open: true,
            ..Self::defaults()
        }
    }

    /// Calls the services at `urls`.
    pub fn set_upstreams(&mut self, urls: &UpstreamUrls) {
        self.router_url.clone_from(&urls.router);
        self.sessions_url.clone_from(&urls.sessions);
        self.mcp_gateway_url.clone_from(&urls.mcp_gateway);
        self.triggers_url.clone_from(&urls.triggers);
    }

    pub fn urls(&self) -> UpstreamUrls {
        UpstreamUrls {
            router: self.router_url.clone(),
            sessions: self.sessions_url.clone(),
            triggers: self.triggers_url.clone(),
            mcp_gateway: self.mcp_gateway_url.clone(),
        }
    }

    pub fn http_limits(&self) -> HttpLimits {
        HttpLimits {
            header_timeout: self.header_timeout,
            idle_timeout: self.idle_timeout,
            max_connections: self.max_connections,
        }
    }

    pub fn jwt(&self) -> JwtConfig {
        JwtConfig {
            hs256_secret: self.jwt_hs256_secret.clone(),
            jwks_file: self.jwt_jwks_file.clone(),
            issuer: self.jwt_issuer.clone(),
            audience: self.jwt_audience.clone(),
            tenant_claim: self.jwt_tenant_claim.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_is_the_flag_defaults_but_for_the_addresses_and_open() {
        let listen: SocketAddr = "127.0.0.1:1".parse().expect("addr");
        let urls = UpstreamUrls {
            router: "http://r".into(),
            sessions: "http://s".into(),
            triggers: "http://t".into(),
            mcp_gateway: "http://g".into(),
        };
        let mut expected = EdgeConfig::defaults();
        expected.listen = listen;
        expected.router_url = urls.router.clone();
        expected.sessions_url = urls.sessions.clone();
        expected.triggers_url = urls.triggers.clone();
        expected.mcp_gateway_url = urls.mcp_gateway.clone();
        assert!(!expected.open, "closed unless told otherwise");
        expected.open = true;
        let config = EdgeConfig::open(listen, &urls);
        assert_eq!(format!("{config:?}"), format!("{expected:?}"));
        assert!(config.database_url.is_none() && config.redis_url.is_none());
        assert_eq!(config.http_limits().max_connections, HttpLimits::default().max_connections);
    }
}
