//! What every service's stores share: one error type, the Redis connection and bounded calls,
//! the key-prefix rule, and one set of store flags (`--database-url`, `--redis-url`, schema,
//! key prefix, `--in-memory`) with the same precedence in every service.
//!
//! Each service keeps its own store traits and implementations; this is only the plumbing.

use std::{future::Future, time::Duration};

use redis::{
    Cmd, Pipeline, RedisFuture, RedisResult, Value,
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
    cluster::ClusterClient,
    cluster_async::ClusterConnection,
};

use crate::{postgres::SchemaPoolError, secret::Secret};

/// A store failed. Services map it to `UNAVAILABLE` (or `INTERNAL` for corrupt data and bad
/// configuration) in their own error enums.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migrating the schema: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("stored data is unreadable: {0}")]
    Corrupt(String),
    #[error("invalid store configuration: {0}")]
    Config(String),
    #[error("store operation timed out")]
    Timeout,
}

impl StoreError {
    /// Whether the store refused a write for what it holds — a row that will never be
    /// written, however often it is retried — rather than for being unreachable, slow or
    /// overloaded (which retrying cures). The one place this is decided, for the record
    /// buffer's set-aside rule and for mapping a refused synchronous write to a caller's error.
    ///
    /// Refused: Postgres SQLSTATE class 22 (data exception: `22021` a NUL or a byte not in
    /// the encoding, `22P05` jsonb's `\u0000`, `22003` out of range…), 23 (integrity
    /// constraint) and 54 (program limit: a value too large to index); a value the driver
    /// could not encode; [`StoreError::Corrupt`], which on a write means a value the record
    /// cannot represent. Everything else — connection loss, pool and statement timeouts,
    /// `08`, `40` (serialization, deadlock), `53` (resources), `57` (shutdown, cancel), `42`
    /// (a schema not yet migrated) — is worth retrying.
    pub fn is_refused_content(&self) -> bool {
        match self {
            Self::Database(sqlx::Error::Database(err)) => {
                err.code().is_some_and(|code| matches!(code.get(..2), Some("22" | "23" | "54")))
            }
            Self::Database(sqlx::Error::Encode(_)) | Self::Corrupt(_) => true,
            _ => false,
        }
    }
}

impl From<SchemaPoolError> for StoreError {
    fn from(err: SchemaPoolError) -> Self {
        match err {
            SchemaPoolError::InvalidSchema(_) => Self::Config(err.to_string()),
            SchemaPoolError::Database(err) => Self::Database(err),
        }
    }
}

/// How long connecting to Redis may take before startup fails with a clear error.
pub const REDIS_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one Redis command may take before the call fails (and the request with it).
pub const REDIS_COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// A Redis key prefix: 1 to 64 characters of `[A-Za-z0-9_.:-]`, so several deployments (or
/// tests) can share one Redis without their keys meeting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPrefix(String);

impl KeyPrefix {
    pub const MAX_LEN: usize = 64;

    pub fn parse(prefix: &str) -> Result<Self, StoreError> {
        let valid = !prefix.is_empty()
            && prefix.len() <= Self::MAX_LEN
            && prefix.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'));
        if valid {
            Ok(Self(prefix.to_owned()))
        } else {
            Err(StoreError::Config(format!(
                "redis key prefix `{prefix}` must be 1 to {} characters of [A-Za-z0-9_.:-]",
                Self::MAX_LEN
            )))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for KeyPrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The scheme of a Redis Cluster URL: `redis+cluster://HOST:PORT[,HOST:PORT…]` (a contract).
pub const REDIS_CLUSTER_SCHEME: &str = "redis+cluster://";

/// What `REDIS_URL` names: one Redis (`redis://`, `redis+unix://`, `unix://`, parsed further by
/// the client) or the seed nodes of a Redis Cluster. `rediss://` (TLS) is refused at start: the
/// build carries no TLS for Redis, and the client would only fail at the first connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    Single,
    /// `HOST:PORT` of each seed node, in the URL's order; the client learns the rest.
    Cluster(Vec<String>),
}

impl RedisTarget {
    /// Reads a `REDIS_URL`. The cluster form is exactly `redis+cluster://HOST:PORT[,HOST:PORT…]`
    /// (no user, password, path or query); anything else that is not a single-node scheme is
    /// refused with an error naming `REDIS_URL` and the forms it takes.
    pub fn parse(url: &Secret) -> Result<Self, StoreError> {
        let raw = url.expose();
        if let Some(nodes) = raw.strip_prefix(REDIS_CLUSTER_SCHEME) {
            return nodes.split(',').map(cluster_node).collect::<Result<Vec<_>, _>>().map(Self::Cluster);
        }
        if raw.starts_with("rediss://") {
            return Err(StoreError::Config(format!(
                "REDIS_URL `{}`: TLS to Redis (rediss://) is not built in; use redis://HOST:PORT (a \
                 private network or a TLS sidecar) or {REDIS_CLUSTER_SCHEME}HOST:PORT[,HOST:PORT...]",
                url.url_without_credentials()
            )));
        }
        let single = ["redis://", "redis+unix://", "unix://"];
        if single.iter().any(|scheme| raw.starts_with(scheme)) {
            return Ok(Self::Single);
        }
        Err(StoreError::Config(format!(
            "REDIS_URL `{}` is not a Redis URL: use redis://HOST:PORT or \
             {REDIS_CLUSTER_SCHEME}HOST:PORT[,HOST:PORT...]",
            url.url_without_credentials()
        )))
    }
}

/// One `HOST:PORT` of a cluster URL (an IPv6 host in brackets), checked.
fn cluster_node(node: &str) -> Result<String, StoreError> {
    // Whatever precedes an `@` may be a password: never echoed.
    let shown = node.rsplit_once('@').map_or(node, |(_, host)| host);
    let bad = |why: &str| {
        StoreError::Config(format!(
            "REDIS_URL: cluster node `{shown}` {why}; the form is {REDIS_CLUSTER_SCHEME}HOST:PORT[,HOST:PORT...]"
        ))
    };
    if node.contains(['@', '/', '?', '#', ' ']) {
        return Err(bad("may not hold a user, password, path or query"));
    }
    let (host, port) = node.rsplit_once(':').ok_or_else(|| bad("has no port"))?;
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => !host.is_empty() && !host.contains([':', '[', ']']),
    };
    if !host_ok {
        return Err(bad("has no valid host"));
    }
    match port.parse::<u16>() {
        Ok(port) if port > 0 => Ok(node.to_owned()),
        _ => Err(bad("has no valid port (1-65535)")),
    }
}

/// One Redis connection for every store, single node or cluster as `REDIS_URL` says. Cheap to
/// clone (both kinds multiplex one set of connections), and a [`ConnectionLike`], so stores run
/// their commands and scripts on it unchanged. On a cluster, the client follows `MOVED` and
/// `ASK` and reconnects by itself; a multi-key command or script must keep its keys in one
/// slot (hash tags), which is the store's business.
#[derive(Clone)]
pub enum RedisConnection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Single(_) => "RedisConnection::Single",
            Self::Cluster(_) => "RedisConnection::Cluster",
        })
    }
}

impl RedisConnection {
    /// Connects as the URL says: [`connect_redis`] for one Redis; for a cluster, the `redis`
    /// crate's cluster client, which reads the slot map from the seed nodes (startup fails
    /// within [`REDIS_CONNECT_TIMEOUT`] if none answers), with [`REDIS_COMMAND_TIMEOUT`] on
    /// each command.
    pub async fn connect(url: &Secret) -> Result<Self, StoreError> {
        match RedisTarget::parse(url)? {
            RedisTarget::Single => connect_redis(url).await.map(Self::Single),
            RedisTarget::Cluster(nodes) => {
                let client = ClusterClient::builder(nodes.iter().map(|node| format!("redis://{node}")))
                    .connection_timeout(REDIS_COMMAND_TIMEOUT)
                    .response_timeout(REDIS_COMMAND_TIMEOUT)
                    .build()
                    .map_err(|err| StoreError::Config(format!("REDIS_URL {}: {err}", url.expose())))?;
                bounded(REDIS_CONNECT_TIMEOUT, client.get_async_connection()).await.map(Self::Cluster)
            }
        }
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(conn) => conn.req_packed_command(cmd),
            Self::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Self::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(conn) => conn.get_db(),
            Self::Cluster(conn) => conn.get_db(),
        }
    }
}

/// Connects to one Redis: one plain connection first, so a refused or misconfigured Redis is
/// reported as such at startup (the manager alone keeps retrying until its timeout), then a
/// [`ConnectionManager`] that multiplexes every request and reconnects by itself, with
/// [`REDIS_COMMAND_TIMEOUT`] on each command. A cluster URL is refused here: the stores that
/// take one connect with [`RedisConnection::connect`]; those still on this function have not
/// been made cluster-safe yet.
pub async fn connect_redis(url: &Secret) -> Result<ConnectionManager, StoreError> {
    if let RedisTarget::Cluster(_) = RedisTarget::parse(url)? {
        return Err(StoreError::Config(format!(
            "REDIS_URL {}: this store does not support Redis Cluster yet; give it a single-node redis:// URL",
            url.expose()
        )));
    }
    let client = redis::Client::open(url.expose())
        .map_err(|err| StoreError::Config(format!("redis url {}: {err}", url.url_without_credentials())))?;
    drop(bounded(REDIS_CONNECT_TIMEOUT, client.get_multiplexed_async_connection()).await?);
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(REDIS_COMMAND_TIMEOUT))
        .set_response_timeout(Some(REDIS_COMMAND_TIMEOUT));
    bounded(REDIS_CONNECT_TIMEOUT, ConnectionManager::new_with_config(client, config)).await
}

/// Runs a Redis call within `limit`; a timeout from either the clock or the connection is
/// [`StoreError::Timeout`].
pub async fn bounded<T>(limit: Duration, call: impl Future<Output = RedisResult<T>>) -> Result<T, StoreError> {
    match tokio::time::timeout(limit, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) if err.is_timeout() => Err(StoreError::Timeout),
        Ok(Err(err)) => Err(StoreError::Redis(err)),
        Err(_) => Err(StoreError::Timeout),
    }
}

/// Answers `PING` within the command timeout, for readiness probes (on a cluster, the node of
/// a random slot answers).
pub async fn ping_redis<C: ConnectionLike + Clone + Send>(conn: &C) -> Result<(), StoreError> {
    let mut conn = conn.clone();
    let reply: String = bounded(REDIS_COMMAND_TIMEOUT, redis::cmd("PING").query_async(&mut conn)).await?;
    if reply == "PONG" { Ok(()) } else { Err(StoreError::Corrupt(format!("unexpected PING reply `{reply}`"))) }
}

/// A service's store settings, whatever its flag and environment names (see [`store_args!`]).
#[derive(Debug, Clone)]
pub struct StoreArgs {
    pub database_url: Option<Secret>,
    pub redis_url: Option<Secret>,
    pub db_schema: String,
    pub redis_prefix: String,
    pub in_memory: bool,
    /// The service's variable for `--in-memory` (`SESSIONS_IN_MEMORY`), named in the errors:
    /// where several services share one environment (`switchyard serve`), there is no flag.
    pub in_memory_env: &'static str,
}

/// Where a service keeps its state, decided once from [`StoreArgs`] by the same rule in every
/// service.
#[derive(Debug, Clone)]
pub enum StorePlan {
    /// Everything in memory (lost on exit).
    InMemory,
    /// Postgres (and Redis, for services that keep live state there).
    Durable { database_url: Secret, redis_url: Option<Secret> },
}

impl StoreArgs {
    /// In memory, for tests and `switchyard dev`.
    pub fn in_memory(db_schema: &str, redis_prefix: &str) -> Self {
        Self {
            database_url: None,
            redis_url: None,
            db_schema: db_schema.to_owned(),
            redis_prefix: redis_prefix.to_owned(),
            in_memory: true,
            in_memory_env: "IN_MEMORY",
        }
    }

    /// The one precedence rule: `--in-memory` wins over `DATABASE_URL`/`REDIS_URL` (which a
    /// shell or test environment may well have set — it is logged, not refused); otherwise each
    /// URL the service needs is required, and the error says which flag and variable to set.
    pub fn plan(&self, service: &str, needs_redis: bool) -> Result<StorePlan, String> {
        if self.in_memory {
            if self.database_url.is_some() || self.redis_url.is_some() {
                tracing::info!(service, "--in-memory given: ignoring DATABASE_URL/REDIS_URL, nothing is persisted");
            }
            return Ok(StorePlan::InMemory);
        }
        let throwaway = format!("pass --in-memory (or {}=true) for throwaway stores", self.in_memory_env);
        let database_url = self
            .database_url
            .clone()
            .ok_or_else(|| format!("{service}: DATABASE_URL (or --database-url) is required; {throwaway}"))?;
        let redis_url = if needs_redis {
            Some(
                self.redis_url
                    .clone()
                    .ok_or_else(|| format!("{service}: REDIS_URL (or --redis-url) is required; {throwaway}"))?,
            )
        } else {
            None
        };
        Ok(StorePlan::Durable { database_url, redis_url })
    }
}

/// Declares a service's store flags as a clap `Args` struct with the service's own environment
/// names and defaults, converting to [`StoreArgs`]. `DATABASE_URL`/`REDIS_URL` are shared by
/// every service; the schema, key prefix and in-memory switch are per service.
///
/// ```ignore
/// switchyard_kit::store_args! {
///     /// Where the sessions service keeps its state.
///     pub struct SessionsStoreArgs {
///         db_schema: env "SESSIONS_DB_SCHEMA", default "sessions";
///         redis_prefix: env "SESSIONS_REDIS_PREFIX", default "sy";
///         in_memory: env "SESSIONS_IN_MEMORY";
///     }
/// }
/// ```
#[macro_export]
macro_rules! store_args {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            db_schema: env $schema_env:literal, default $schema_default:literal;
            $(redis_prefix: env $prefix_env:literal, default $prefix_default:literal;)?
            in_memory: env $memory_env:literal;
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, clap::Args)]
        pub struct $name {
            /// Postgres, e.g. postgres://user@host:5432/db. Required unless --in-memory.
            #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
            pub database_url: Option<$crate::Secret>,

            /// Postgres schema of this service's tables (created if missing).
            #[arg(long, env = $schema_env, default_value = $schema_default)]
            pub db_schema: String,

            $(
            /// Redis, e.g. redis://127.0.0.1:6379. Required unless --in-memory.
            #[arg(long, env = "REDIS_URL", hide_env_values = true)]
            pub redis_url: Option<$crate::Secret>,

            /// Prefix of this service's Redis keys (1 to 64 characters of [A-Za-z0-9_.:-]).
            #[arg(long, env = $prefix_env, default_value = $prefix_default)]
            pub redis_prefix: String,
            )?

            /// Keep everything in memory (lost on exit; for development). Wins over DATABASE_URL
            /// and REDIS_URL, which a shell or test environment may well have set.
            #[arg(long, env = $memory_env)]
            pub in_memory: bool,
        }

        impl $name {
            /// In memory, with the default schema and prefix (tests and `switchyard dev`).
            pub fn in_memory() -> Self {
                Self {
                    database_url: None,
                    db_schema: $schema_default.to_owned(),
                    $(redis_url: None, redis_prefix: $prefix_default.to_owned(),)?
                    in_memory: true,
                }
            }

            /// The settings, whatever they were called on the command line.
            pub fn store_args(&self) -> $crate::store::StoreArgs {
                #[allow(unused_mut)]
                let mut args = $crate::store::StoreArgs {
                    database_url: self.database_url.clone(),
                    redis_url: None,
                    db_schema: self.db_schema.clone(),
                    redis_prefix: String::new(),
                    in_memory: self.in_memory,
                    in_memory_env: $memory_env,
                };
                $(
                let _ = $prefix_default;
                args.redis_url = self.redis_url.clone();
                args.redis_prefix = self.redis_prefix.clone();
                )?
                args
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    crate::store_args! {
        /// A service with live state in Redis.
        pub struct LiveArgs {
            db_schema: env "KIT_TEST_LIVE_SCHEMA", default "live";
            redis_prefix: env "KIT_TEST_LIVE_PREFIX", default "lv";
            in_memory: env "KIT_TEST_LIVE_IN_MEMORY";
        }
    }

    crate::store_args! {
        /// A service with Postgres only.
        pub struct RecordArgs {
            db_schema: env "KIT_TEST_RECORD_SCHEMA", default "records";
            in_memory: env "KIT_TEST_RECORD_IN_MEMORY";
        }
    }

    #[derive(Parser)]
    struct Live {
        #[command(flatten)]
        stores: LiveArgs,
    }

    #[derive(Parser)]
    struct Record {
        #[command(flatten)]
        stores: RecordArgs,
    }

    #[test]
    fn in_memory_wins_over_urls_in_every_service() {
        let live = Live::parse_from(["x", "--database-url", "postgres://a", "--redis-url", "redis://b", "--in-memory"]);
        assert!(matches!(live.stores.store_args().plan("live", true), Ok(StorePlan::InMemory)));
        let record = Record::parse_from(["x", "--database-url", "postgres://a", "--in-memory"]);
        assert!(matches!(record.stores.store_args().plan("records", false), Ok(StorePlan::InMemory)));
    }

    #[test]
    fn in_memory_defaults_keep_the_service_schema_and_prefix() {
        let live = LiveArgs::in_memory().store_args();
        assert_eq!((live.db_schema.as_str(), live.redis_prefix.as_str()), ("live", "lv"));
        assert!(matches!(live.plan("live", true), Ok(StorePlan::InMemory)));
        assert_eq!(RecordArgs::in_memory().store_args().db_schema, "records");
    }

    #[test]
    fn missing_urls_name_the_variable_to_set() {
        // Built directly: DATABASE_URL and REDIS_URL may well be set in the test environment.
        let mut args = StoreArgs::in_memory("live", "lv");
        args.in_memory = false;
        args.database_url = Some(Secret::new("postgres://a"));
        let err = args.plan("live", true).expect_err("redis missing");
        assert!(err.contains("REDIS_URL"), "{err}");
        assert!(matches!(args.plan("records", false), Ok(StorePlan::Durable { redis_url: None, .. })));
        args.database_url = None;
        let err = args.plan("records", false).expect_err("postgres missing");
        assert!(err.contains("DATABASE_URL"), "{err}");

        // The service's own variable for --in-memory, which is all `switchyard serve` reads.
        let mut args = LiveArgs::in_memory().store_args();
        args.in_memory = false;
        let err = args.plan("live", true).expect_err("postgres missing");
        assert!(err.contains("KIT_TEST_LIVE_IN_MEMORY=true"), "{err}");
    }

    #[test]
    fn urls_never_print() {
        let live = Live::parse_from(["x", "--database-url", "postgres://u:pw@a/db", "--redis-url", "redis://:pw@b"]);
        let printed = format!("{:?} {:?}", live.stores, live.stores.store_args());
        assert!(!printed.contains("pw"), "{printed}");
    }

    #[test]
    fn redis_urls_pick_one_redis_or_a_cluster() {
        let target = |url: &str| RedisTarget::parse(&Secret::new(url));
        for single in ["redis://127.0.0.1:6379", "redis://u:pw@h:6380/2", "redis+unix:///run/redis.sock"] {
            assert_eq!(target(single).unwrap(), RedisTarget::Single, "{single}");
        }
        assert_eq!(
            target("redis+cluster://127.0.0.1:7001,127.0.0.1:7002,redis-2.ns:7003").unwrap(),
            RedisTarget::Cluster(vec!["127.0.0.1:7001".into(), "127.0.0.1:7002".into(), "redis-2.ns:7003".into()])
        );
        assert_eq!(target("redis+cluster://[::1]:7001").unwrap(), RedisTarget::Cluster(vec!["[::1]:7001".into()]));
    }

    #[test]
    fn bad_redis_urls_name_redis_url_and_the_forms() {
        let cases = [
            ("rediss://u:pw@h:6380", "TLS to Redis (rediss://) is not built in"),
            ("redis+cluster://", "has no port"),
            ("redis+cluster://127.0.0.1", "has no port"),
            ("redis+cluster://127.0.0.1:7001,", "has no port"),
            ("redis+cluster://127.0.0.1:7001,,127.0.0.1:7002", "has no port"),
            ("redis+cluster://:7001", "no valid host"),
            ("redis+cluster://::1:7001", "no valid host"),
            ("redis+cluster://h:0", "no valid port"),
            ("redis+cluster://h:70000", "no valid port"),
            ("redis+cluster://h:port", "no valid port"),
            ("redis+cluster://u:pw@h:7001", "user, password, path or query"),
            ("redis+cluster://h:7001/0", "user, password, path or query"),
            ("cluster://h:7001", "is not a Redis URL"),
            ("127.0.0.1:6379", "is not a Redis URL"),
        ];
        for (url, why) in cases {
            let err = RedisTarget::parse(&Secret::new(url)).expect_err(url).to_string();
            assert!(err.contains("REDIS_URL") && err.contains(why), "{url}: {err}");
            assert!(err.contains("redis+cluster://HOST:PORT[,HOST:PORT...]"), "{url}: {err}");
            assert!(!err.contains("pw"), "{url}: {err}");
        }
    }

    #[test]
    fn key_prefixes_are_checked() {
        assert!(KeyPrefix::parse("switchyard:live_1.a-b").is_ok());
        assert!(KeyPrefix::parse("").is_err());
        assert!(KeyPrefix::parse("has space").is_err());
        assert!(KeyPrefix::parse(&"p".repeat(65)).is_err());
    }
}
