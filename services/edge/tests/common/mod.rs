//! The edge's test setup: the real triggers, sessions, router (analytics in a fresh Postgres
//! schema) and, when a test needs it, the MCP gateway with server-everything, all on loopback;
//! a scripted LLM vendor (a real HTTP server speaking OpenAI's wire format) behind the router;
//! and the edge in front, open or with API keys in a fresh Postgres schema and JWTs.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::{net::SocketAddr, sync::Arc, time::Duration};

use reqwest::{Client, Response};
use serde_json::Value;
use switchyard_cli::{
    DevPorts,
    stack::{Serving, Stack as Services},
};
use switchyard_edge::{
    EdgeConfig,
    auth::{Authenticator, JwtConfig, JwtVerifier, KeyStore},
};
use switchyard_kit::{Secret, TenantId, UserId};
use switchyard_llm::{ModelRef, ProviderArgs};
use switchyard_mcp_gateway::GatewayConfig;
use switchyard_router::{RouterConfig, RouterServer, Stores, analytics::PostgresAnalytics, fast::FastPath};
pub use switchyard_testkit::{ClosedPort, closed_port, wait_serving};
use switchyard_testkit::{Schema, Served, Shutdown, database_url, eventually, llm::ScriptedLlm, peer_tool};

pub const JWT_SECRET: &str = "edge-test-shared-secret-7c1e";

pub fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// How the edge authenticates.
#[derive(Default)]
pub enum Auth {
    #[default]
    Open,
    /// API keys in a fresh Postgres schema, HS256 tokens with [`JWT_SECRET`] and, when given,
    /// RS256 tokens from a JWKS file.
    Closed { jwks_file: Option<std::path::PathBuf> },
    /// API keys from this store only, no tokens (for a key table behind a proxy the test cuts).
    Keys(Arc<KeyStore>),
}

pub struct Options {
    pub gateway: bool,
    /// Sessions keep their record in a fresh Postgres schema (see [`Stack::sessions_schema`])
    /// and live state in Redis under a fresh prefix, instead of in memory.
    pub durable_sessions: bool,
    /// The Redis durable sessions use, when not `REDIS_URL`'s (a proxy the test cuts).
    pub sessions_redis_url: Option<String>,
    pub auth: Auth,
    pub configure: Box<dyn FnOnce(&mut EdgeConfig) + Send>,
    pub configure_router: Box<dyn FnOnce(&mut RouterConfig) + Send>,
    /// With [`Options::gateway`]: changes to the gateway's config (a servers file, say).
    pub configure_gateway: Box<dyn FnOnce(&mut GatewayConfig) + Send>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            gateway: false,
            durable_sessions: false,
            sessions_redis_url: None,
            auth: Auth::Open,
            configure: Box::new(|_| {}),
            configure_router: Box::new(|_| {}),
            configure_gateway: Box::new(|_| {}),
        }
    }
}

pub struct Stack {
    pub llm: ScriptedLlm,
    pub edge: Served,
    pub router: Served,
    pub sessions: Served,
    pub triggers: Served,
    pub gateway: Option<Served>,
    pub keys: Option<Arc<KeyStore>>,
    pub http: Client,
    /// The sessions' Postgres schema, with [`Options::durable_sessions`].
    pub sessions_schema: Option<String>,
    /// The router's analytics schema.
    pub analytics_schema: String,
    schemas: Vec<Schema>,
    _redis_prefix: Option<switchyard_testkit::KeyPrefix>,
    /// Holds the absent gateway's port closed for the stack's lifetime.
    _down: Option<ClosedPort>,
}

impl Stack {
    pub async fn start(llm: ScriptedLlm, options: Options) -> Self {
        let Options {
            gateway,
            durable_sessions,
            sessions_redis_url,
            auth,
            configure,
            configure_router,
            configure_gateway,
        } = options;
        let (sessions_schema, redis_prefix) = if durable_sessions {
            (Some(Schema::new("edge_sessions_test")), Some(switchyard_testkit::KeyPrefix::new("edge")))
        } else {
            (None, None)
        };
        let durable = sessions_schema.as_ref().zip(redis_prefix.as_ref()).map(|(schema, prefix)| {
            let redis_url = sessions_redis_url.unwrap_or_else(switchyard_testkit::redis_url);
            (schema.name().to_owned(), prefix.as_str().to_owned(), redis_url)
        });
        let down = (!gateway).then(closed_port);
        let builder = match &down {
            Some(port) => Services::builder(DevPorts::loopback()).without_gateway(port.url()),
            None => Services::builder(DevPorts::loopback()).gateway(|config| {
                config.servers = vec![format!("everything={} stdio", peer_tool("mcp-server-everything"))];
                config.model_dir = switchyard_testkit::model_dir();
                configure_gateway(config);
            }),
        };

        let analytics = Schema::new("edge_router_test");
        let analytics_schema = analytics.name().to_owned();
        let mut schemas: Vec<Schema> = vec![analytics];
        let (authenticator, keys, open) = match auth {
            Auth::Open => (Authenticator::new(true, None, None), None, true),
            Auth::Closed { jwks_file } => {
                let schema = Schema::new("edge_keys_test");
                // No remembering: a revoked key fails on the next request.
                let keys = Arc::new(
                    KeyStore::connect(&database_url(), schema.name(), Duration::ZERO).await.expect("key table"),
                );
                schemas.push(schema);
                let jwt = JwtVerifier::new(JwtConfig {
                    hs256_secret: Some(Secret::new(JWT_SECRET)),
                    jwks_file,
                    issuer: None,
                    audience: None,
                    tenant_claim: "tenant".into(),
                })
                .expect("jwt verifier");
                (Authenticator::new(false, Some(keys.clone()), Some(Arc::new(jwt))), Some(keys), false)
            }
            Auth::Keys(keys) => (Authenticator::new(false, Some(keys.clone()), None), Some(keys), false),
        };
        let openai_base_url = llm.openai_base_url();
        let router_schema = analytics_schema.clone();
        let stack = builder
            .sessions(move |config| {
                if let Some((schema, prefix, redis_url)) = durable {
                    let stores = &mut config.stores;
                    stores.in_memory = false;
                    stores.database_url = Some(Secret::new(database_url()));
                    stores.redis_url = Some(Secret::new(redis_url));
                    stores.db_schema = schema;
                    stores.redis_prefix = prefix;
                }
            })
            .router(move |config| {
                config.providers = ProviderArgs {
                    openai_base_url: Some(openai_base_url),
                    openai_api_key: Some(Secret::new("sk-edge-test")),
                    max_retries: 0,
                    ..ProviderArgs::default()
                };
                config.default_model = "openai/gpt-4o-mini".parse::<ModelRef>().expect("model");
                config.no_fast_router = true;
                config.record_flush_interval = Duration::from_millis(50);
                configure_router(config);
            })
            .bind_router(move |config| async move {
                let store = Arc::new(
                    PostgresAnalytics::connect(&database_url(), &router_schema)
                        .await
                        .unwrap_or_else(|err| panic!("postgres at {} (set DATABASE_URL): {err}", database_url())),
                );
                let providers = config.providers.build()?;
                RouterServer::bind_with_parts(
                    &config,
                    Stores { analytics: store, cache: None },
                    providers,
                    FastPath::disabled(),
                )
                .await
            })
            .edge(move |config| {
                config.open = open;
                configure(config);
            })
            .edge_auth(authenticator)
            .start()
            .await
            .expect("the stack starts");

        let Serving { triggers, sessions, gateway, router, edge, .. } =
            stack.serve_each::<_, Shutdown, _>(Served::spawn);
        let edge = edge.expect("the stack has an edge");
        wait_serving(&sessions.url(), "switchyard.sessions.v1.SessionService").await;
        let gateway = match gateway {
            Some((gateway, served)) => {
                eventually(Duration::from_secs(60), "server-everything's tools in the gateway", || async {
                    let names: Vec<String> = gateway.catalog().tools().iter().map(|t| t.name.clone()).collect();
                    if names.iter().any(|n| n.ends_with("get-sum")) { Ok(()) } else { Err(format!("tools: {names:?}")) }
                })
                .await;
                Some(served)
            }
            None => None,
        };
        let http = Client::builder().timeout(Duration::from_secs(60)).build().expect("client");
        let sessions_schema_name = sessions_schema.as_ref().map(|schema| schema.name().to_owned());
        schemas.extend(sessions_schema);
        Self {
            llm,
            edge,
            router,
            sessions,
            triggers,
            gateway,
            keys,
            http,
            sessions_schema: sessions_schema_name,
            analytics_schema,
            schemas,
            _redis_prefix: redis_prefix,
            _down: down,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.edge.url())
    }

    /// A new API key's text.
    pub async fn key(&self, tenant: &str, user: &str, admin: bool) -> String {
        let keys = self.keys.as_ref().expect("a closed edge");
        let tenant = TenantId::parse(tenant).unwrap();
        let user = UserId::parse(user).unwrap();
        keys.create(&tenant, Some(&user), "test", admin).await.expect("key created").secret
    }

    pub async fn get(&self, path: &str, key: Option<&str>) -> Response {
        let mut request = self.http.get(self.url(path));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send().await.expect("edge reachable")
    }

    pub async fn send(&self, method: reqwest::Method, path: &str, key: Option<&str>, body: &Value) -> Response {
        let mut request = self.http.request(method, self.url(path)).json(body);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send().await.expect("edge reachable")
    }

    pub async fn post(&self, path: &str, key: Option<&str>, body: &Value) -> Response {
        self.send(reqwest::Method::POST, path, key, body).await
    }
}

/// Status and JSON body of a response.
pub async fn json(response: Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    let value = serde_json::from_str(&text).unwrap_or_else(|err| panic!("not JSON ({err}): {text}"));
    (status, value)
}

/// The events of an SSE body: (name, JSON data).
pub async fn events(response: Response) -> Vec<(String, Value)> {
    assert_eq!(response.status().as_u16(), 200, "stream status");
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/event-stream"), "content type {content_type}");
    let text = response.text().await.expect("stream body");
    parse_events(&text)
}

pub fn parse_events(text: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut name = "message".to_owned();
        let mut data = String::new();
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event:") {
                name = v.trim().to_owned();
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push_str(v.trim_start());
            }
        }
        if data.is_empty() {
            continue;
        }
        let value =
            if data == "[DONE]" { Value::String(data) } else { serde_json::from_str(&data).expect("event JSON") };
        out.push((name, value));
    }
    out
}

/// Everything logged at `level` and above by every service of this process (each test binary
/// runs in its own process under nextest, so the first caller's level holds).
pub fn captured_logs(level: tracing::Level) -> Arc<std::sync::Mutex<Vec<u8>>> {
    static LOGS: std::sync::OnceLock<Arc<std::sync::Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(std::sync::Mutex::new(Vec::new()));
        let writer = buffer.clone();
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(level)
            .with_writer(move || Capture(writer.clone()))
            .init();
        buffer
    })
    .clone()
}

struct Capture(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
