//! The sessions service's configuration: flags with environment fallbacks.

use std::{net::SocketAddr, time::Duration};

use clap::Args;
use switchyard_kit::{
    ServerArgs,
    config::{flag_defaults, parse_duration},
};

use crate::{domain::SessionLimits, recorder::RecordBufferConfig};

switchyard_kit::store_args! {
    /// The sessions service's store flags.
    pub struct SessionsStoreArgs {
        db_schema: env "SESSIONS_DB_SCHEMA", default "sessions";
        redis_prefix: env "SESSIONS_REDIS_PREFIX", default "sy";
        in_memory: env "SESSIONS_IN_MEMORY";
    }
}

#[derive(Debug, Clone, Args)]
pub struct SessionsConfig {
    /// Address the gRPC server listens on.
    #[arg(long, env = "SESSIONS_LISTEN", default_value = "0.0.0.0:50052")]
    pub listen: SocketAddr,

    /// gRPC URL of the triggers service.
    #[arg(long, env = "TRIGGERS_URL", default_value = "http://127.0.0.1:50051")]
    pub triggers_url: String,

    /// Redis for live sessions, Postgres for roles, session records and switch history; or
    /// memory with --in-memory.
    #[command(flatten)]
    pub stores: SessionsStoreArgs,

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

    /// How often coalesced turn counts are written to Postgres (they are also written on
    /// shutdown).
    #[arg(long, env = "SESSIONS_RECORD_FLUSH_INTERVAL", default_value = "500ms", value_parser = parse_duration)]
    pub record_flush_interval: Duration,

    /// On shutdown, how long writing the records still held may take before the process exits
    /// (what is left is logged as lost).
    #[arg(long, env = "SESSIONS_RECORD_DRAIN_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub record_drain_timeout: Duration,

    /// How long switch history and conversation messages are kept in Postgres; every hour the
    /// whole months before the month the cut falls in are dropped (so up to a month more is
    /// kept). Unset: kept for ever. A live session keeps its recent window in Redis either way.
    #[arg(long, env = "SESSIONS_HISTORY_RETENTION", value_parser = parse_duration)]
    pub history_retention: Option<Duration>,

    /// How often roles are reloaded to pick up other replicas' changes.
    #[arg(long, env = "SESSIONS_ROLE_REFRESH", default_value = "5s", value_parser = parse_duration)]
    pub role_refresh: Duration,

    #[command(flatten)]
    pub server: ServerArgs,
}

impl SessionsConfig {
    /// Every flag at its default, whatever the environment holds.
    pub fn defaults() -> Self {
        flag_defaults()
    }

    /// The defaults, in memory, on `listen`, calling `triggers_url` (tests and `switchyard dev`).
    pub fn in_memory(listen: SocketAddr, triggers_url: &str) -> Self {
        Self {
            listen,
            triggers_url: triggers_url.to_owned(),
            stores: SessionsStoreArgs::in_memory(),
            ..Self::defaults()
        }
    }

    pub fn limits(&self) -> SessionLimits {
        SessionLimits {
            max_query_bytes: self.max_query_bytes,
            message_window: self.message_window,
            default_ttl: self.default_ttl,
            max_ttl: self.max_ttl,
            max_message_bytes: SessionLimits::MAX_MESSAGE_BYTES,
            max_messages_per_append: SessionLimits::MAX_MESSAGES_PER_APPEND,
            max_metadata_entries: SessionLimits::MAX_METADATA_ENTRIES,
        }
    }

    pub fn recorder(&self) -> RecordBufferConfig {
        RecordBufferConfig {
            name: "session records",
            capacity: self.record_buffer,
            write_timeout: self.record_write_timeout,
            flush_interval: self.record_flush_interval,
            ..RecordBufferConfig::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_memory_is_the_flag_defaults_but_for_the_stores_and_addresses() {
        let listen: SocketAddr = "127.0.0.1:1".parse().expect("addr");
        let mut expected = SessionsConfig::defaults();
        expected.listen = listen;
        expected.triggers_url = "http://triggers".to_owned();
        expected.stores = SessionsStoreArgs::in_memory();
        let config = SessionsConfig::in_memory(listen, "http://triggers");
        assert_eq!(format!("{config:?}"), format!("{expected:?}"));
        assert!(config.stores.in_memory);
        assert_eq!(config.limits().max_ttl, std::time::Duration::from_secs(720 * 3600), "--max-ttl's default");
    }
}
