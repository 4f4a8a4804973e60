//! Shared test setup: the real Redis (REDIS_URL) and Postgres (DATABASE_URL) with a fresh key
//! prefix or schema per test, the real MCP peers installed by scripts/install-tools.sh, and
//! gateways on loopback. Tests fail, never skip, when something they need is missing.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Arc, OnceLock},
    time::Duration,
};

use rmcp::{
    RoleClient, ServiceExt,
    model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion},
    service::RunningService,
    transport::{StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig},
};
use switchyard_mcp_gateway::{
    GatewayConfig, GatewayServer, Stores,
    store::{postgres::PostgresUsageStore, redis::RedisContextStore},
};
use switchyard_models::Embedder;

pub fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

pub fn root() -> PathBuf {
    Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned()))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// A launcher from `.tools/bin` (scripts/install-tools.sh installs them); missing is a failure.
pub fn tool(name: &str) -> String {
    let path = root().join(".tools/bin").join(name);
    assert!(path.exists(), "{} is missing: run scripts/install-tools.sh", path.display());
    path.display().to_string()
}

/// The MiniLM model (scripts/fetch-models.sh), loaded once per test binary.
pub fn embedder() -> Arc<Embedder> {
    static MODEL: OnceLock<Arc<Embedder>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let dir = root().join("models/all-MiniLM-L6-v2");
            Arc::new(Embedder::load(&dir).unwrap_or_else(|err| panic!("{err} (run scripts/fetch-models.sh)")))
        })
        .clone()
}

pub fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A gateway config on free loopback ports with these `--server` values.
pub fn config(servers: &[String]) -> GatewayConfig {
    let mut config = GatewayConfig::in_memory(loopback(), loopback(), servers.to_vec());
    config.reconnect_initial = Duration::from_millis(100);
    config.reconnect_max = Duration::from_secs(1);
    config
}

/// Redis and Postgres stores under a fresh prefix and schema.
pub async fn shared_stores(prefix: &str, schema: &str) -> Stores {
    let contexts = RedisContextStore::connect(&redis_url().into(), prefix, Duration::from_secs(600))
        .await
        .unwrap_or_else(|err| panic!("redis at {} (set REDIS_URL): {err}", redis_url()));
    let usage = PostgresUsageStore::connect(&database_url(), schema)
        .await
        .unwrap_or_else(|err| panic!("postgres at {} (set DATABASE_URL): {err}", database_url()));
    Stores { contexts: Arc::new(contexts), usage: Arc::new(usage) }
}

pub async fn drop_schema(schema: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&database_url()).await.expect("connect to postgres");
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE")))
        .execute(&mut conn)
        .await
        .expect("drop test schema");
}

pub async fn delete_redis_keys(prefix: &str) {
    let client = redis::Client::open(redis_url()).expect("redis url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("connect to redis");
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{prefix}:*")).query_async(&mut conn).await.expect("KEYS");
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await.expect("DEL");
    }
}

/// A running gateway: its server task stops when this is dropped.
pub struct Running {
    pub grpc: SocketAddr,
    pub mcp: SocketAddr,
    pub gateway: Arc<switchyard_mcp_gateway::Gateway>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Running {
    pub fn mcp_url(&self) -> String {
        format!("http://{}/mcp", self.mcp)
    }

    /// Stops the gateway and waits for it (its stdio servers are stopped with it).
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("gateway task").expect("gateway served");
        }
    }

    /// Waits until every server is ready and the catalog has `tools` tools (and is embedded
    /// when the gateway has the model).
    pub async fn ready(&self, tools: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let catalog = self.gateway.catalog();
            let servers = self.gateway.servers();
            let all_ready = servers.iter().all(|s| s.state == switchyard_mcp_gateway::upstream::ServerState::Ready);
            if all_ready && catalog.len() >= tools && (catalog.embedded || !self.gateway.has_embedder()) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "gateway not ready: servers {servers:?}, {} tools (wanted {tools})",
                catalog.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

pub async fn start(config: &GatewayConfig, stores: Stores, embedder: Option<Arc<Embedder>>) -> Running {
    let server = GatewayServer::bind_with(config, stores, embedder).await.expect("gateway binds");
    let (grpc, mcp, gateway) = (server.local_addr(), server.mcp_addr(), server.gateway());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(async move {
        let _ = stopped.await;
    }));
    Running { grpc, mcp, gateway, stop: Some(stop), task: Some(task) }
}

pub type Client = RunningService<RoleClient, ClientConfig>;

/// An MCP client of the gateway over streamable HTTP (rmcp), with the initialize handshake.
pub async fn mcp_client(url: &str) -> Client {
    let transport =
        StreamableHttpClientTransport::from_config(StreamableHttpClientTransportConfig::with_uri(url.to_owned()));
    ClientConfig::new(ClientCapabilities::default(), Implementation::new("gateway-test", "0"))
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
        .serve(transport)
        .await
        .unwrap_or_else(|err| panic!("MCP client to {url}: {err}"))
}

/// A free loopback port (for peers that take a port rather than binding port 0).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A session of `tenant` (both valid, or the test is wrong).
pub fn session_key(tenant: &str, id: &str) -> switchyard_mcp_gateway::store::SessionKey {
    let tenant = switchyard_kit::TenantId::parse(tenant).expect("tenant");
    switchyard_mcp_gateway::store::SessionKey::new(tenant, switchyard_kit::SessionId::parse(id).expect("session id"))
}
