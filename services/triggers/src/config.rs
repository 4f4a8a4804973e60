//! The triggers service's configuration: flags with environment fallbacks.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::Args;
use switchyard_kit::{
    ServerArgs,
    config::{flag_defaults, parse_duration},
};

use crate::{blend, blend::SemanticScoring, domain::Limits, matcher::Scoring, registry::RegistryConfig};

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

    /// Most example questions a role may register for the semantic signal.
    #[arg(long, env = "TRIGGERS_MAX_ROLE_EXAMPLES", default_value_t = 50)]
    pub max_role_examples: usize,

    /// Longest role description or example question, in bytes.
    #[arg(long, env = "TRIGGERS_MAX_EXAMPLE_BYTES", default_value_t = 1024)]
    pub max_example_bytes: usize,

    /// The MiniLM folder for the semantic signal (scripts/fetch-models.sh). Loaded in the
    /// background after start; without it, decisions use the triggers alone.
    #[arg(long, env = "SWITCHYARD_MODEL_DIR", default_value = "models/all-MiniLM-L6-v2")]
    pub model_dir: PathBuf,

    /// Where the domain exemplars' embeddings are kept between starts, so a restart reads them
    /// instead of embedding hundreds of texts again (seconds of CPU). Default:
    /// `triggers-exemplars.embed` in `$SWITCHYARD_CACHE_DIR`, else `$XDG_CACHE_HOME/switchyard`,
    /// else `~/.cache/switchyard`; `none` keeps nothing. A file of another model, or one that
    /// cannot be read, is ignored and rewritten.
    #[arg(long, env = "TRIGGERS_EMBEDDING_CACHE")]
    pub embedding_cache: Option<PathBuf>,

    /// Run without the semantic signal even when the model folder is present.
    #[arg(long, env = "TRIGGERS_NO_SEMANTIC")]
    pub no_semantic: bool,

    /// Most trigger points the semantic signal adds to a role; a trigger lead larger than this
    /// is a clear decision that the semantic signal neither computes nor overturns.
    #[arg(long, env = "TRIGGERS_SEMANTIC_WEIGHT", default_value_t = 4.0)]
    pub semantic_weight: f64,

    /// Similarity to a role's exemplars at or below which the role gets no semantic points.
    #[arg(long, env = "TRIGGERS_SEMANTIC_FLOOR", default_value_t = blend::DEFAULT_FLOOR)]
    pub semantic_floor: f32,

    /// Similarity at or above which a role gets the full semantic weight.
    #[arg(long, env = "TRIGGERS_SEMANTIC_CEILING", default_value_t = 0.5)]
    pub semantic_ceiling: f32,

    /// How far a role's similarity must exceed that of the everyday questions of no domain
    /// (exemplars/general.toml) for the role to get semantic points.
    #[arg(long, env = "TRIGGERS_SEMANTIC_MARGIN", default_value_t = blend::DEFAULT_MARGIN)]
    pub semantic_margin: f32,

    /// How many of a role's closest exemplars are averaged into its similarity.
    #[arg(long, env = "TRIGGERS_SEMANTIC_NEAREST", default_value_t = blend::DEFAULT_NEAREST)]
    pub semantic_nearest: usize,

    /// Recent queries whose embeddings are kept in memory (0: none).
    #[arg(long, env = "TRIGGERS_RECENT_QUERIES", default_value_t = 4096)]
    pub recent_queries: usize,

    /// How often to check the registry version for changes by other replicas (a backstop for
    /// LISTEN/NOTIFY), and to retry a failed rebuild.
    #[arg(long, env = "TRIGGERS_SYNC_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub sync_interval: Duration,

    #[command(flatten)]
    pub server: ServerArgs,
}

impl TriggersConfig {
    /// Every flag at its default, whatever the environment holds.
    pub fn defaults() -> Self {
        flag_defaults()
    }

    /// The defaults, in memory, on `listen` (tests and `switchyard dev`).
    pub fn in_memory(listen: SocketAddr) -> Self {
        Self { listen, stores: TriggersStoreArgs::in_memory(), ..Self::defaults() }
    }

    /// The exemplar embeddings' file, as `--embedding-cache` says; `None` to keep none.
    pub fn embedding_cache_path(&self) -> Option<PathBuf> {
        match &self.embedding_cache {
            Some(path) if path.as_os_str() == "none" => None,
            Some(path) => Some(path.clone()),
            None => switchyard_models::cache_file::default_dir().map(|dir| dir.join("triggers-exemplars.embed")),
        }
    }

    /// The size limits, unchecked (any value is a valid limit).
    pub fn limits(&self) -> Limits {
        Limits {
            max_query_bytes: self.max_query_bytes,
            max_custom_triggers: self.max_custom_triggers,
            max_pattern_bytes: self.max_pattern_bytes,
            max_regex_bytes: self.max_regex_bytes,
            max_registry_triggers: self.max_registry_triggers,
            max_role_examples: self.max_role_examples,
            max_example_bytes: self.max_example_bytes,
        }
    }

    /// The semantic signal's settings, unchecked (see [`TriggersConfig::registry_config`]).
    pub fn semantic_scoring(&self) -> SemanticScoring {
        SemanticScoring {
            weight: self.semantic_weight,
            floor: self.semantic_floor,
            ceiling: self.semantic_ceiling,
            margin: self.semantic_margin,
            nearest: self.semantic_nearest,
        }
    }

    pub fn registry_config(&self) -> Result<RegistryConfig, String> {
        if !(0.0..=1.0).contains(&self.hysteresis_ratio) {
            return Err(format!("--hysteresis-ratio must be between 0 and 1, got {}", self.hysteresis_ratio));
        }
        if !(self.semantic_weight.is_finite() && self.semantic_weight >= 0.0) {
            return Err(format!("--semantic-weight must be a number of points ≥ 0, got {}", self.semantic_weight));
        }
        let scale_is_sound = (-1.0..1.0).contains(&self.semantic_floor)
            && self.semantic_floor < self.semantic_ceiling
            && self.semantic_ceiling <= 1.0;
        if !scale_is_sound {
            return Err(format!(
                "--semantic-floor and --semantic-ceiling must satisfy -1 ≤ floor < ceiling ≤ 1, got {} and {}",
                self.semantic_floor, self.semantic_ceiling
            ));
        }
        if !(-2.0..=2.0).contains(&self.semantic_margin) {
            return Err(format!("--semantic-margin must be between -2 and 2, got {}", self.semantic_margin));
        }
        if self.semantic_nearest == 0 {
            return Err("--semantic-nearest must be at least 1".into());
        }
        Ok(RegistryConfig {
            limits: self.limits(),
            scoring: Scoring { diversity_bonus_per_kind: self.diversity_bonus },
            hysteresis_ratio: self.hysteresis_ratio,
            semantic: self.semantic_scoring(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_memory_is_the_flag_defaults_but_for_the_store_and_address() {
        let listen: SocketAddr = "127.0.0.1:1".parse().expect("addr");
        let mut expected = TriggersConfig::defaults();
        expected.listen = listen;
        expected.stores = TriggersStoreArgs::in_memory();
        assert_eq!(format!("{:?}", TriggersConfig::in_memory(listen)), format!("{expected:?}"));
        assert!(TriggersConfig::in_memory(listen).stores.in_memory);
        assert_eq!(expected.hysteresis_ratio, 0.8, "the documented default hysteresis");
        assert!(expected.registry_config().is_ok(), "the defaults are a valid configuration");
    }
}
