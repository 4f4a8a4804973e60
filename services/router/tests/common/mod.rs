//! The router's test setup: the real triggers, sessions and (when a test needs it) MCP gateway
//! services on loopback, the router with its analytics in a fresh Postgres schema, and a
//! scripted LLM vendor — a real HTTP server speaking the OpenAI and Anthropic wire formats.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod gateway_calls;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use switchyard_cli::{DevPorts, Stack, stack::Serving};
use switchyard_kit::Secret;
use switchyard_llm::{ModelRef, ProviderArgs};
use switchyard_proto::router::v1::{
    ChatRequest, ChatStreamRequest, ChatStreamResponse, chat_stream_response::Event,
    router_service_client::RouterServiceClient,
};
use switchyard_router::{
    RouterConfig, RouterServer, Stores,
    analytics::PostgresAnalytics,
    budget::{Budgets, PostgresBudgetBook, RedisSpendCounters},
    cache::RoutingCache,
    conversations::ConversationKeys,
    fast::FastPath,
};
pub use switchyard_testkit::{ClosedPort, closed_port, wait_serving};
use switchyard_testkit::{
    Schema, Served, Shutdown, database_url, eventually,
    llm::{Reply, ScriptedLlm},
    peer_tool,
    proxy::{TcpProxy, url_addr},
};
use tonic::{Request, transport::Channel};

/// A key the scripted vendor receives; tests check it never shows in errors.
pub const OPENAI_KEY: &str = "sk-test-openai-4f1d8c";
pub const ANTHROPIC_KEY: &str = "sk-ant-test-93b2e7";

pub fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// What a test wants of the suite.
pub struct Options {
    /// Run the MCP gateway with server-everything (stdio) behind it.
    pub gateway: bool,
    /// With `gateway`: the router reaches it through a hop that counts its calls
    /// ([`Suite::gateway_calls`]).
    pub count_gateway_calls: bool,
    pub default_model: &'static str,
    pub fallback_models: Vec<&'static str>,
    /// Load the fast router (MiniLM from the workspace's models/); off by default, so a slow
    /// scripted routing call waits as the test scripted it.
    pub fast_router: bool,
    /// Turn the routing cache on, with its exact entries in the test Redis under a fresh prefix.
    pub redis_cache: bool,
    /// Keep budgets in the suite's Postgres schema and count their spend in the test Redis
    /// under a fresh prefix (otherwise budgets are in memory).
    pub budgets: bool,
    pub configure: Box<dyn FnOnce(&mut RouterConfig) + Send>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            gateway: false,
            count_gateway_calls: false,
            default_model: "openai/gpt-4o-mini",
            fallback_models: Vec::new(),
            fast_router: false,
            redis_cache: false,
            budgets: false,
            configure: Box::new(|_| {}),
        }
    }
}

pub struct Suite {
    pub llm: ScriptedLlm,
    pub router: Served,
    pub sessions: Served,
    pub gateway: Option<Served>,
    /// The router's calls to the gateway, when the options asked for them to be counted.
    pub gateway_calls: Option<gateway_calls::GatewayCalls>,
    counting_hop: Option<Served>,
    triggers: Served,
    pub schema: Schema,
    /// The router's configuration, for a second replica.
    pub config: RouterConfig,
    redis_cache: Option<switchyard_testkit::KeyPrefix>,
    /// Where the budgets' spend counters are, with `budgets`.
    pub budget_prefix: Option<switchyard_testkit::KeyPrefix>,
    /// Holds the absent gateway's port closed for the stack's lifetime.
    _down: Option<ClosedPort>,
}

impl Suite {
    pub async fn start(llm: ScriptedLlm) -> Self {
        Self::with(llm, Options::default()).await
    }

    pub async fn with(llm: ScriptedLlm, options: Options) -> Self {
        // A gateway that is not running: calls to it fail as a real outage does.
        let down = (!options.gateway).then(closed_port);
        let builder = match &down {
            Some(port) => Stack::builder(DevPorts::loopback()).without_gateway(port.url()),
            None => Stack::builder(DevPorts::loopback()).gateway(|config| {
                config.servers = vec![format!("everything={} stdio", peer_tool("mcp-server-everything"))];
                config.model_dir = switchyard_testkit::model_dir();
            }),
        };
        // The counting hop goes between the router and the gateway as the router is configured.
        let hop = Arc::new(std::sync::Mutex::new(None));
        let hop_slot = hop.clone();
        let count_gateway_calls = options.count_gateway_calls;
        // Its keys are deleted when the suite is dropped.
        let prefix = options.redis_cache.then(|| switchyard_testkit::KeyPrefix::new("router-cache"));
        let cache_prefix = prefix.as_ref().map(|prefix| prefix.as_str().to_owned());
        let (openai_base_url, anthropic_base_url) = (llm.openai_base_url(), llm.anthropic_base_url());
        let budget_prefix = options.budgets.then(|| switchyard_testkit::KeyPrefix::new("router-budget"));
        let budget_counters = budget_prefix.as_ref().map(|prefix| prefix.as_str().to_owned());
        let Options { default_model, fallback_models, fast_router, redis_cache, configure, .. } = options;
        let schema = Schema::new("router_test");
        let schema_name = schema.name().to_owned();
        let stack = builder
            .router(move |config| {
                if count_gateway_calls {
                    let (served, calls) = gateway_calls::serve(&config.mcp_gateway_url);
                    config.mcp_gateway_url = served.url();
                    *hop_slot.lock().unwrap() = Some((served, calls));
                }
                config.providers = ProviderArgs {
                    openai_base_url: Some(openai_base_url),
                    openai_api_key: Some(Secret::new(OPENAI_KEY)),
                    anthropic_base_url: Some(anthropic_base_url),
                    anthropic_api_key: Some(Secret::new(ANTHROPIC_KEY)),
                    max_retries: 1,
                    ..ProviderArgs::default()
                };
                config.default_model = default_model.parse::<ModelRef>().expect("model");
                config.fallback_models = fallback_models.iter().map(|m| m.parse().expect("model")).collect();
                config.record_flush_interval = Duration::from_millis(50);
                config.no_fast_router = !fast_router;
                config.model_dir = switchyard_testkit::model_dir();
                if let Some(prefix) = cache_prefix {
                    config.cache_routing = true;
                    config.stores.redis_prefix = prefix;
                }
                configure(config);
            })
            .bind_router(move |config| async move {
                Ok(Self::bind_replica(&config, &schema_name, redis_cache, budget_counters.as_deref()).await)
            })
            .without_edge()
            .start()
            .await
            .expect("the suite starts");
        let Serving { triggers, sessions, gateway, router, router_config: config, .. } =
            stack.serve_each::<_, Shutdown, _>(Served::spawn);
        // Ready once its roles are registered with triggers (each registration recompiles the
        // matcher; a turn before that would wait behind it).
        wait_serving(&sessions.url(), "switchyard.sessions.v1.SessionService").await;
        let gateway = match gateway {
            Some((gateway, served)) => {
                eventually(Duration::from_secs(60), "server-everything's tools in the gateway", || async {
                    let names: Vec<String> = gateway.catalog().tools().iter().map(|t| t.name.clone()).collect();
                    if names.iter().any(|n| n.ends_with("get-sum"))
                        && (gateway.catalog().embedded || !gateway.has_embedder())
                    {
                        Ok(())
                    } else {
                        Err(format!("tools so far: {names:?}"))
                    }
                })
                .await;
                Some(served)
            }
            None => None,
        };
        let (counting_hop, gateway_calls) = hop.lock().unwrap().take().unzip();
        Self {
            llm,
            router,
            sessions,
            gateway,
            gateway_calls,
            counting_hop,
            triggers,
            schema,
            config,
            redis_cache: prefix,
            budget_prefix,
            _down: down,
        }
    }

    /// A router on `config` with its analytics in `schema` (and, for `redis_cache`, its exact
    /// routing cache in the test Redis), serving, with its fast router loaded when configured.
    async fn replica(config: &RouterConfig, schema: &Schema, redis_cache: bool, budgets: Option<&str>) -> Served {
        let router = Self::bind_replica(config, schema.name(), redis_cache, budgets).await;
        Served::spawn(router.local_addr(), |stop| router.serve(stop))
    }

    /// A router on `config` with its analytics in `schema` (and, for `redis_cache`, its exact
    /// routing cache in the test Redis), with its fast router loaded when configured, and its
    /// budgets' spend counted in the test Redis under `budgets` when given.
    async fn bind_replica(
        config: &RouterConfig,
        schema: &str,
        redis_cache: bool,
        budgets: Option<&str>,
    ) -> RouterServer {
        let store = Arc::new(
            PostgresAnalytics::connect(&database_url(), schema)
                .await
                .unwrap_or_else(|err| panic!("postgres at {} (set DATABASE_URL): {err}", database_url())),
        );
        let cache = if redis_cache {
            let url = Secret::new(switchyard_testkit::redis_url());
            let conn = switchyard_kit::store::RedisConnection::connect(&url)
                .await
                .unwrap_or_else(|err| panic!("redis at {} (set REDIS_URL): {err}", url.url_without_credentials()));
            let prefix = switchyard_kit::store::KeyPrefix::parse(&config.stores.redis_prefix).expect("prefix");
            Some(Arc::new(RoutingCache::redis(config.cache_settings(), conn, prefix)))
        } else {
            config.cache_routing.then(|| Arc::new(RoutingCache::memory(config.cache_settings())))
        };
        let fast = if config.no_fast_router {
            FastPath::disabled()
        } else {
            // Loaded before serving, so a test's first turn can fall back at once.
            let dir = config.model_dir.clone();
            tokio::task::spawn_blocking(move || FastPath::load(&dir))
                .await
                .expect("loading task")
                .unwrap_or_else(|err| panic!("the fast router needs MiniLM (scripts/fetch-models.sh): {err:#}"))
        };
        let providers = config.providers.build().expect("providers");
        let stores = Stores { analytics: store, cache };
        let Some(budget_prefix) = budgets else {
            return RouterServer::bind_with_parts(config, stores, providers, fast).await.expect("router binds");
        };
        let book = PostgresBudgetBook::connect(&database_url(), schema).await.expect("budgets in postgres");
        let url = Secret::new(switchyard_testkit::redis_url());
        let conn = switchyard_kit::store::RedisConnection::connect(&url)
            .await
            .unwrap_or_else(|err| panic!("redis at {} (set REDIS_URL): {err}", url.url_without_credentials()));
        let prefix = switchyard_kit::store::KeyPrefix::parse(budget_prefix).expect("prefix");
        let budgets = Arc::new(
            Budgets::new(Arc::new(book), Arc::new(RedisSpendCounters::new(conn, prefix)))
                .with_sync(config.budget_sync_interval),
        );
        let conversations = Arc::new(ConversationKeys::memory(config.conversation_ttl));
        RouterServer::bind_with_budgets(config, stores, conversations, budgets, providers, fast)
            .await
            .expect("router binds")
    }

    /// A second router replica sharing this one's Postgres schema (and Redis cache).
    pub async fn second_replica(&self) -> Served {
        self.replica_with(|_| {}).await
    }

    /// A second router replica as [`second_replica`](Self::second_replica), its configuration
    /// changed by `configure` (say, to reach sessions through a proxy).
    pub async fn replica_with(&self, configure: impl FnOnce(&mut RouterConfig)) -> Served {
        let mut config = self.config.clone();
        config.listen = loopback();
        configure(&mut config);
        Self::replica(&config, &self.schema, self.redis_cache.is_some(), self.budget_prefix.as_deref()).await
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(self.router.url()).expect("url").connect().await.expect("router reachable")
    }

    pub async fn client(&self) -> RouterServiceClient<Channel> {
        RouterServiceClient::new(self.channel().await)
    }

    pub async fn sessions_channel(&self) -> Channel {
        Channel::from_shared(self.sessions.url()).expect("url").connect().await.expect("sessions reachable")
    }
}

pub fn chat(message: &str) -> ChatRequest {
    ChatRequest { message: message.to_owned(), ..Default::default() }
}

pub fn stream_request(message: &str) -> ChatStreamRequest {
    ChatStreamRequest { message: message.to_owned(), ..Default::default() }
}

pub fn as_tenant<T>(tenant: &str, message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.metadata_mut().insert("x-tenant-id", tenant.parse().expect("ascii"));
    request
}

/// Every event of a ChatStream call, in order.
pub async fn collect_stream(
    client: &mut RouterServiceClient<Channel>,
    request: ChatStreamRequest,
) -> Vec<switchyard_proto::router::v1::chat_stream_response::Event> {
    let mut stream = client.chat_stream(request).await.expect("chat stream opens").into_inner();
    let mut events = Vec::new();
    while let Some(item) = stream.message().await.expect("stream item") {
        let ChatStreamResponse { event } = item;
        events.push(event.expect("an event"));
    }
    events
}

/// Reading what the router sent the vendor, in either wire format.
pub trait RecordedExt {
    /// The system prompt ("" when none).
    fn system_text(&self) -> String;
    /// The last user message's text ("" when none).
    fn user_text(&self) -> String;
    /// The text of every message, in order (tool results included).
    fn message_texts(&self) -> Vec<String>;
    /// The tool results sent back to the model, in order.
    fn tool_results(&self) -> Vec<String>;
}

fn block_text(content: &serde_json::Value) -> String {
    match content {
        serde_json::Value::String(text) => text.clone(),
        serde_json::Value::Array(blocks) => blocks
            .iter()
            .map(|b| match b.get("type").and_then(|t| t.as_str()) {
                Some("text") => b["text"].as_str().unwrap_or_default().to_owned(),
                Some("tool_result") => block_text(&b["content"]),
                _ => String::new(),
            })
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

impl RecordedExt for switchyard_testkit::llm::Recorded {
    fn system_text(&self) -> String {
        self.system().unwrap_or_default()
    }

    fn user_text(&self) -> String {
        self.last_user_text().unwrap_or_default()
    }

    fn message_texts(&self) -> Vec<String> {
        self.messages().iter().map(|m| block_text(&m["content"])).filter(|t| !t.is_empty()).collect()
    }

    fn tool_results(&self) -> Vec<String> {
        let mut results = Vec::new();
        for message in self.messages() {
            if message["role"] == "tool" {
                results.push(block_text(&message["content"]));
            } else if let serde_json::Value::Array(blocks) = &message["content"] {
                results.extend(blocks.iter().filter(|b| b["type"] == "tool_result").map(|b| block_text(&b["content"])));
            }
        }
        results
    }
}

/// A streamed turn answered in full while sessions is out of reach: a router replica reaches
/// sessions through `proxy`, cut once the route came, so the turn's recording retries. The
/// client still holds `stream` (the vendor's last event comes a chunk after the answer).
pub struct AnsweredWhileCut {
    pub suite: Suite,
    pub proxy: TcpProxy,
    pub router: Served,
    pub session_id: String,
    pub stream: tonic::Streaming<ChatStreamResponse>,
}

pub async fn answer_while_sessions_cut(question: &str, answer: &'static str) -> AnsweredWhileCut {
    let llm =
        ScriptedLlm::start(move |_| Reply::text(answer).chunk_size(6).chunk_delay(Duration::from_millis(50))).await;
    let suite = Suite::start(llm).await;
    let proxy = TcpProxy::start(url_addr(&suite.sessions.url(), 0)).await;
    let router = suite.replica_with(|config| config.sessions_url = format!("http://{}", proxy.addr())).await;
    let channel = Channel::from_shared(router.url()).expect("url").connect().await.expect("router");
    let mut stream =
        RouterServiceClient::new(channel).chat_stream(stream_request(question)).await.expect("opens").into_inner();
    let first = stream.message().await.expect("an event").expect("not the end");
    let Some(Event::Route(route)) = first.event else { panic!("the route first: {first:?}") };
    proxy.cut();
    let mut streamed = String::new();
    while streamed != answer {
        match stream.message().await.expect("an event").and_then(|m| m.event) {
            Some(Event::Delta(delta)) => streamed.push_str(&delta.content),
            other => panic!("the answer's deltas before anything else: {other:?}"),
        }
    }
    AnsweredWhileCut { suite, proxy, router, session_id: route.session_id, stream }
}
