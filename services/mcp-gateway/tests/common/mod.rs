//! The gateway's own test setup: gateways on loopback over the real Redis and Postgres (a
//! fresh key prefix or schema per test, from the test kit) or in memory, and the MiniLM model.
//! Tests fail, never skip, when something they need is missing.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::{
    net::SocketAddr,
    sync::{Arc, OnceLock},
    time::Duration,
};

use switchyard_mcp_gateway::{
    GatewayConfig, GatewayServer, Stores,
    store::{postgres::PostgresUsageStore, redis::RedisContextStore},
    upstream::ServerState,
};
use switchyard_models::Embedder;
use switchyard_testkit::{database_url, eventually, redis_url};

/// The MiniLM model (scripts/fetch-models.sh), loaded once per test binary.
pub fn embedder() -> Arc<Embedder> {
    static MODEL: OnceLock<Arc<Embedder>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let dir = switchyard_testkit::model_dir();
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
    // The model's files decide which query adapter fits (the shipped one is for this model).
    config.model_dir = switchyard_testkit::model_dir();
    config
}

/// One request as a 2026-07-28 client sends it over HTTP: no session, the protocol in a header
/// and in `_meta` (beside whatever `_meta` `params` carries), the method and what it names (a
/// tool's name, a resource's URI) in the revision's routing headers; for `tenant` and `user`
/// when an API gateway in front named them.
pub async fn stateless_request(
    url: &str,
    tenant: Option<&str>,
    user: Option<&str>,
    method: &str,
    mut params: serde_json::Value,
) -> reqwest::Response {
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = serde_json::json!("2026-07-28");
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = serde_json::json!({});
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut request = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = params.get("name").or_else(|| params.get("uri")).and_then(serde_json::Value::as_str) {
        request = request.header("mcp-name", name);
    }
    if let Some(tenant) = tenant {
        request = request.header("x-tenant-id", tenant);
    }
    if let Some(user) = user {
        request = request.header("x-user-id", user);
    }
    request.json(&body).send().await.unwrap()
}

/// The JSON-RPC response in a stateless request's answer (plain JSON, or the one message with
/// an id in an event stream).
pub async fn stateless_answer(response: reqwest::Response) -> serde_json::Value {
    let status = response.status();
    let text = response.text().await.unwrap();
    if text.trim_start().starts_with('{') {
        serde_json::from_str(&text).unwrap_or_else(|err| panic!("{status} {text}: {err}"))
    } else {
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<serde_json::Value>(data.trim()).ok())
            .find(|m| m.get("id").is_some())
            .unwrap_or_else(|| panic!("{status}: no response in {text}"))
    }
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
        eventually(Duration::from_secs(60), "gateway ready", || async {
            let catalog = self.gateway.catalog();
            let servers = self.gateway.servers();
            let all_ready = servers.iter().all(|s| s.state == ServerState::Ready);
            if all_ready && catalog.len() >= tools && (catalog.embedded || !self.gateway.has_embedder()) {
                Ok(())
            } else {
                Err(format!("servers {servers:?}, {} tools (wanted {tools})", catalog.len()))
            }
        })
        .await;
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

/// A session of `tenant` (both valid, or the test is wrong).
pub fn session_key(tenant: &str, id: &str) -> switchyard_mcp_gateway::store::SessionKey {
    let tenant = switchyard_kit::TenantId::parse(tenant).expect("tenant");
    switchyard_mcp_gateway::store::SessionKey::new(tenant, switchyard_kit::SessionId::parse(id).expect("session id"))
}
