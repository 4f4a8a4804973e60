//! Shared test setup: the real Redis (REDIS_URL) and Postgres (DATABASE_URL), with a fresh key
//! prefix or schema per test so tests never see each other's data. Tests fail, never skip,
//! when either is unreachable.
#![allow(dead_code)]

pub mod proxy;

pub fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// A unique lowercase name (usable as a Postgres schema or a Redis key prefix).
pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

pub async fn drop_schema(schema: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&database_url()).await.expect("connect to postgres");
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE")))
        .execute(&mut conn)
        .await
        .expect("drop test schema");
}

/// `host:port` of the Postgres in `DATABASE_URL`.
pub fn database_addr() -> std::net::SocketAddr {
    proxy::url_addr(&database_url())
}

/// `DATABASE_URL` pointed at `addr` instead (a proxy in front of the same Postgres).
pub fn database_url_via(addr: std::net::SocketAddr) -> String {
    proxy::url_via(&database_url(), addr)
}

/// Deletes every Redis key under `prefix` (what an eviction or FLUSHDB does to a session).
pub async fn delete_redis_keys(prefix: &str) -> usize {
    let client = redis::Client::open(redis_url()).expect("redis url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("connect to redis");
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{prefix}:*")).query_async(&mut conn).await.expect("KEYS");
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await.expect("DEL");
    }
    keys.len()
}

/// A triggers server and a sessions server on real Redis and Postgres, each on port 0.
pub struct Suite {
    pub triggers: Running,
    pub sessions: Running,
    pub schema: String,
    pub prefix: String,
    pub switcher: std::sync::Arc<switchyard_sessions::ContextSwitcher>,
}

pub struct Running {
    pub addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Running {
    pub fn start<F>(addr: std::net::SocketAddr, serve: impl FnOnce(tokio::sync::oneshot::Receiver<()>) -> F) -> Self
    where
        F: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let (stop, stopped) = tokio::sync::oneshot::channel();
        Self { addr, stop: Some(stop), task: tokio::spawn(serve(stopped)) }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.expect("server task").expect("server ran cleanly");
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn start_triggers() -> Running {
    start_triggers_on("127.0.0.1:0".parse().expect("addr")).await
}

pub async fn start_triggers_on(addr: std::net::SocketAddr) -> Running {
    let config = switchyard_triggers::TriggersConfig::in_memory(addr);
    let server = switchyard_triggers::TriggersServer::bind(&config).await.expect("bind triggers");
    Running::start(server.local_addr(), |stopped| {
        server.serve(async move {
            let _ = stopped.await;
        })
    })
}

/// Sessions config on real Redis and Postgres (a fresh schema and key prefix).
pub fn sessions_config(
    triggers_url: &str,
    database_url: &str,
) -> (switchyard_sessions::SessionsConfig, String, String) {
    let (schema, prefix) = (unique("s"), unique("sy"));
    let mut config = switchyard_sessions::SessionsConfig::in_memory("127.0.0.1:0".parse().expect("addr"), triggers_url);
    config.stores.in_memory = false;
    config.stores.database_url = Some(database_url.into());
    config.stores.redis_url = Some(redis_url().into());
    config.stores.db_schema = schema.clone();
    config.stores.redis_prefix = prefix.clone();
    (config, schema, prefix)
}

pub async fn start_sessions(
    config: &switchyard_sessions::SessionsConfig,
) -> (Running, std::sync::Arc<switchyard_sessions::ContextSwitcher>) {
    let server =
        switchyard_sessions::SessionsServer::bind(config).await.expect("bind sessions (Redis and Postgres reachable?)");
    let switcher = server.switcher();
    (
        Running::start(server.local_addr(), |stopped| {
            server.serve(async move {
                let _ = stopped.await;
            })
        }),
        switcher,
    )
}

impl Suite {
    pub async fn start() -> Self {
        let triggers = start_triggers().await;
        let (config, schema, prefix) = sessions_config(&triggers.url(), &database_url());
        let (sessions, switcher) = start_sessions(&config).await;
        Self { triggers, sessions, schema, prefix, switcher }
    }

    pub async fn channel(&self) -> tonic::transport::Channel {
        tonic::transport::Endpoint::from_shared(self.sessions.url()).expect("url").connect().await.expect("connect")
    }

    pub async fn stop(self) {
        self.sessions.stop().await;
        self.triggers.stop().await;
        drop_schema(&self.schema).await;
        delete_redis_keys(&self.prefix).await;
    }
}
