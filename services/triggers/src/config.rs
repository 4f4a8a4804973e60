//! The triggers service's configuration: flags with environment fallbacks.

use std::{net::SocketAddr, time::Duration};

use clap::Args;
use switchyard_kit::{ServerArgs, config::parse_duration};

use crate::{domain::Limits, matcher::Scoring, registry::RegistryConfig};

switchyard_kit::store_args! {
    /// The registry's store flags: Postgres holds the registry; `--in-memory` keeps it in memory
    /// only (and wins over `DATABASE_URL`, as in every service).
    pub struct TriggersStoreArgs {
        db_schema: env "TRIGGERS_DB_SCHEMA", default "triggers";
        in_memory: env "TRIGGERS_IN_MEMORY";
    }
}

#[derive(Debug, Clone, Args)]
pub struct TriggersConfig {
    /// Address the gRPC server listens on.
    #[arg(long, env = "TRIGGERS_LISTEN", default_value = "0.0.0.0:50051")]
    pub listen: SocketAddr,

    /// Where the registry lives: Postgres, or memory with --in-memory.
    #[command(flatten)]
    pub stores: TriggersStoreArgs,

    /// Keep the current role when its score is at least this share of the top score.
    #[arg(long, env = "TRIGGERS_HYSTERESIS_RATIO", default_value_t = 0.8)]
    pub hysteresis_ratio: f64,

    /// Points added for each kind of trigger (keyword, phrase, regex) matched beyond the first.
    #[arg(long, env = "TRIGGERS_DIVERSITY_BONUS", default_value_t = 2)]
    pub diversity_bonus: u32,

    /// Longest query accepted, in bytes.
    #[arg(long, env = "TRIGGERS_MAX_QUERY_BYTES", default_value_t = 16 * 1024)]
    pub max_query_bytes: usize,

    /// Most custom triggers per role.
    #[arg(long, env = "TRIGGERS_MAX_CUSTOM_TRIGGERS", default_value_t = 1000)]
    pub max_custom_triggers: usize,

    /// Longest trigger pattern, in bytes.
    #[arg(long, env = "TRIGGERS_MAX_PATTERN_BYTES", default_value_t = 512)]
    pub max_pattern_bytes: usize,

    /// Largest compiled size of one regex trigger, in bytes.
    #[arg(long, env = "TRIGGERS_MAX_REGEX_BYTES", default_value_t = 256 * 1024)]
    pub max_regex_bytes: usize,

    /// Most distinct triggers across all roles.
    #[arg(long, env = "TRIGGERS_MAX_REGISTRY_TRIGGERS", default_value_t = 200_000)]
    pub max_registry_triggers: usize,

    /// How often to check the registry version for changes by other replicas (a backstop for
    /// LISTEN/NOTIFY), and to retry a failed rebuild.
    #[arg(long, env = "TRIGGERS_SYNC_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub sync_interval: Duration,

    #[command(flatten)]
    pub server: ServerArgs,
}

impl TriggersConfig {
    /// Defaults for tests and `switchyard dev`: in memory, on `listen`.
    pub fn in_memory(listen: SocketAddr) -> Self {
        Self {
            listen,
            stores: TriggersStoreArgs::in_memory(),
            hysteresis_ratio: 0.8,
            diversity_bonus: 2,
            max_query_bytes: 16 * 1024,
            max_custom_triggers: 1000,
            max_pattern_bytes: 512,
            max_regex_bytes: 256 * 1024,
            max_registry_triggers: 200_000,
            sync_interval: Duration::from_secs(1),
            server: ServerArgs::default(),
        }
    }

    pub fn registry_config(&self) -> Result<RegistryConfig, String> {
        if !(0.0..=1.0).contains(&self.hysteresis_ratio) {
            return Err(format!("--hysteresis-ratio must be between 0 and 1, got {}", self.hysteresis_ratio));
        }
        Ok(RegistryConfig {
            limits: Limits {
                max_query_bytes: self.max_query_bytes,
                max_custom_triggers: self.max_custom_triggers,
                max_pattern_bytes: self.max_pattern_bytes,
                max_regex_bytes: self.max_regex_bytes,
                max_registry_triggers: self.max_registry_triggers,
            },
            scoring: Scoring { diversity_bonus_per_kind: self.diversity_bonus },
            hysteresis_ratio: self.hysteresis_ratio,
        })
    }
}
