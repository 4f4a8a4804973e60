//! The sessions service's configuration: flags with environment fallbacks.

use std::{net::SocketAddr, time::Duration};

use clap::Args;
use switchyard_kit::{ServerArgs, config::parse_duration};

use crate::{domain::SessionLimits, recorder::RecorderConfig};

#[derive(Debug, Clone, Args)]
pub struct SessionsConfig {
    /// Address the gRPC server listens on.
    #[arg(long, env = "SESSIONS_LISTEN", default_value = "0.0.0.0:50052")]
    pub listen: SocketAddr,

    /// gRPC URL of the triggers service.
    #[arg(long, env = "TRIGGERS_URL", default_value = "http://127.0.0.1:50051")]
    pub triggers_url: String,

    /// Postgres for roles, session records and switch history. Required unless --in-memory.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Postgres schema of this service's tables (created if missing).
    #[arg(long, env = "SESSIONS_DB_SCHEMA", default_value = "sessions")]
    pub db_schema: String,

    /// Redis for live sessions, e.g. redis://127.0.0.1:6379. Required unless --in-memory.
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<String>,

    /// Prefix of this service's Redis keys.
    #[arg(long, env = "SESSIONS_REDIS_PREFIX", default_value = "sy")]
    pub redis_prefix: String,

    /// Keep everything in memory (lost on exit; for development). Wins over REDIS_URL and
    /// DATABASE_URL, which a shell or test environment may well have set.
    #[arg(long, env = "SESSIONS_IN_MEMORY")]
    pub in_memory: bool,

    /// Recent messages kept with a live session (and quoted in transition contexts).
    #[arg(long, env = "SESSIONS_MESSAGE_WINDOW", default_value_t = 20)]
    pub message_window: usize,

    /// How long an idle live session lives (every use restarts it).
    #[arg(long, env = "SESSIONS_DEFAULT_TTL", default_value = "24h", value_parser = parse_duration)]
    pub default_ttl: Duration,

    /// Longest TTL a caller may ask for.
    #[arg(long, env = "SESSIONS_MAX_TTL", default_value = "720h", value_parser = parse_duration)]
    pub max_ttl: Duration,

    /// Longest query accepted, in bytes.
    #[arg(long, env = "SESSIONS_MAX_QUERY_BYTES", default_value_t = 16 * 1024)]
    pub max_query_bytes: usize,

    /// Records held in memory while Postgres is unreachable; beyond, records are dropped
    /// (counted and logged).
    #[arg(long, env = "SESSIONS_RECORD_BUFFER", default_value_t = 10_000)]
    pub record_buffer: usize,

    /// How long a record write may take before it is buffered instead.
    #[arg(long, env = "SESSIONS_RECORD_WRITE_TIMEOUT", default_value = "500ms", value_parser = parse_duration)]
    pub record_write_timeout: Duration,

    /// How often roles are reloaded to pick up other replicas' changes.
    #[arg(long, env = "SESSIONS_ROLE_REFRESH", default_value = "5s", value_parser = parse_duration)]
    pub role_refresh: Duration,

    #[command(flatten)]
    pub server: ServerArgs,
}

impl SessionsConfig {
    /// Defaults for tests and `switchyard dev`: in memory, on `listen`, calling `triggers_url`.
    pub fn in_memory(listen: SocketAddr, triggers_url: &str) -> Self {
        Self {
            listen,
            triggers_url: triggers_url.to_owned(),
            database_url: None,
            db_schema: "sessions".into(),
            redis_url: None,
            redis_prefix: "sy".into(),
            in_memory: true,
            message_window: 20,
            default_ttl: Duration::from_secs(24 * 3600),
            max_ttl: Duration::from_secs(720 * 3600),
            max_query_bytes: 16 * 1024,
            record_buffer: 10_000,
            record_write_timeout: Duration::from_millis(500),
            role_refresh: Duration::from_secs(5),
            server: ServerArgs::default(),
        }
    }

    pub fn limits(&self) -> SessionLimits {
        SessionLimits {
            max_query_bytes: self.max_query_bytes,
            message_window: self.message_window,
            default_ttl: self.default_ttl,
            max_ttl: self.max_ttl,
            ..SessionLimits::default()
        }
    }

    pub fn recorder(&self) -> RecorderConfig {
        RecorderConfig {
            capacity: self.record_buffer,
            write_timeout: self.record_write_timeout,
            ..RecorderConfig::default()
        }
    }
}
