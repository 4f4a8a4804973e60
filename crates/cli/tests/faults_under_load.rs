//! The whole suite under steady load while a store goes away: Postgres cut for 30 s (every
//! service's Postgres behind one TCP proxy), and a Redis killed and started again empty (a
//! single one, or one primary of a three-primary cluster). Real pieces: triggers, sessions,
//! the MCP gateway, the router and the edge in process on loopback, the real Postgres and
//! Redis (a redis-server or a cluster of the test's own for the restarts), an HTTP MCP
//! server behind the gateway; the only fake is the scripted LLM vendor.
//!
//! The Postgres cut is the suite's one slow test (about 40 s): a 30 s outage is what it is
//! about.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::BTreeMap,
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use switchyard_cli::{DevPorts, Stack, stack::Serving};
use switchyard_edge::auth::KeyStore;
use switchyard_kit::{Secret, TenantId, UserId};
use switchyard_llm::{ModelRef, ProviderArgs};
use switchyard_proto::{
    router::v1::{
        Budget, BudgetPeriod, ChatRequest, ListBudgetsRequest, SetBudgetRequest,
        router_service_client::RouterServiceClient,
    },
    sessions::v1::{
        CreateSessionRequest, GetSessionRequest, MessageRole, session_service_client::SessionServiceClient,
    },
};
use switchyard_testkit::{
    KeyPrefix, Schema, Served, Shutdown, database_url, eventually, free_port,
    llm::{Reply, ScriptedLlm},
    mcp::{FixtureServer, tool},
    postgres::{database_addr, database_url_via},
    proxy::TcpProxy,
    redis::OwnCluster,
    redis_url, wait_serving,
};
use tonic::{Code, transport::Channel};

const TENANT: &str = "acme";
/// Queries the triggers service puts squarely in one domain, so a conversation alternating
/// between them switches roles.
const FINANCE: &str = "Should I refinance my mortgage at a 6% interest rate?";
const TECH: &str = "How do I fix a segfault in my Rust program?";

/// The scripted vendor's answer to a message: tied to it, so a turn answered with another
/// conversation's history or message would show.
fn answer_to(message: &str) -> String {
    format!("Answered: {message}")
}

async fn scripted_vendor() -> ScriptedLlm {
    ScriptedLlm::start(|request| Reply::text(answer_to(&request.last_user_text().unwrap_or_default())).usage(20, 6))
        .await
}

fn providers(llm: &ScriptedLlm) -> ProviderArgs {
    ProviderArgs {
        openai_base_url: Some(llm.openai_base_url()),
        openai_api_key: Some(Secret::new("sk-test-faults")),
        max_retries: 1,
        ..ProviderArgs::default()
    }
}

/// Where each service keeps its state: one Postgres URL (direct or through the proxy), one
/// Redis, and a schema and key prefix of its own, dropped with the test.
struct Stores {
    database_url: String,
    redis_url: String,
    triggers: Schema,
    sessions: Schema,
    gateway: Schema,
    router: Schema,
    edge: Schema,
    sessions_keys: KeyPrefix,
    gateway_keys: KeyPrefix,
    router_keys: KeyPrefix,
}

impl Stores {
    fn new(database_url: String, redis_url: String) -> Self {
        Self {
            database_url,
            redis_url,
            triggers: Schema::new("faults_triggers"),
            sessions: Schema::new("faults_sessions"),
            gateway: Schema::new("faults_gateway"),
            router: Schema::new("faults_router"),
            edge: Schema::new("faults_edge"),
            sessions_keys: KeyPrefix::new("faults_sessions"),
            gateway_keys: KeyPrefix::new("faults_gateway"),
            router_keys: KeyPrefix::new("faults_router"),
        }
    }
}

/// The running suite and what the test reads of it.
struct Suite {
    edge: Option<Served>,
    router: Served,
    sessions: Served,
    _gateway: Option<Served>,
    _triggers: Served,
    sessions_records: Arc<switchyard_sessions::recorder::Recorder>,
    router_handle: Arc<switchyard_router::Router>,
    gateway: Arc<switchyard_mcp_gateway::Gateway>,
}

/// Every service durable on `stores`, the gateway in front of `mcp_url`, the edge checking
/// API keys in its own schema (remembering a check for one second, so an outage longer than
/// that is served from the last good check).
async fn start_suite(stores: &Stores, llm: &ScriptedLlm, mcp_url: &str, edge: bool) -> Suite {
    let database = Secret::new(stores.database_url.clone());
    let redis = Secret::new(stores.redis_url.clone());
    let (triggers_schema, sessions_schema, gateway_schema, router_schema, edge_schema) = (
        stores.triggers.name().to_owned(),
        stores.sessions.name().to_owned(),
        stores.gateway.name().to_owned(),
        stores.router.name().to_owned(),
        stores.edge.name().to_owned(),
    );
    let (sessions_keys, gateway_keys, router_keys) = (
        stores.sessions_keys.as_str().to_owned(),
        stores.gateway_keys.as_str().to_owned(),
        stores.router_keys.as_str().to_owned(),
    );
    let providers = providers(llm);
    let servers = vec![format!("fx={mcp_url}")];
    let builder = Stack::builder(DevPorts::loopback())
        .triggers({
            let database = database.clone();
            move |config| {
                config.stores.in_memory = false;
                config.stores.database_url = Some(database);
                config.stores.db_schema = triggers_schema;
            }
        })
        .sessions({
            let (database, redis) = (database.clone(), redis.clone());
            move |config| {
                config.stores.in_memory = false;
                config.stores.database_url = Some(database);
                config.stores.redis_url = Some(redis);
                config.stores.db_schema = sessions_schema;
                config.stores.redis_prefix = sessions_keys;
                // The whole conversation in a session read, to compare histories whole.
                config.message_window = 500;
            }
        })
        .gateway({
            let (database, redis) = (database.clone(), redis.clone());
            move |config| {
                config.servers = servers;
                config.stores.in_memory = false;
                config.stores.database_url = Some(database);
                config.stores.redis_url = Some(redis);
                config.stores.db_schema = gateway_schema;
                config.stores.redis_prefix = gateway_keys;
            }
        })
        .router({
            let (database, redis) = (database.clone(), redis.clone());
            move |config| {
                config.providers = providers;
                config.default_model = "openai/gpt-4o-mini".parse::<ModelRef>().unwrap();
                config.no_fast_router = true;
                config.record_flush_interval = Duration::from_millis(50);
                config.stores.in_memory = false;
                config.stores.database_url = Some(database);
                config.stores.redis_url = Some(redis);
                config.stores.db_schema = router_schema;
                config.stores.redis_prefix = router_keys;
            }
        });
    let builder = if edge {
        builder.edge(move |config| {
            config.open = false;
            config.database_url = Some(database);
            config.db_schema = edge_schema;
            config.key_cache_ttl = Duration::from_secs(1);
            // The load is the test's, not a client to be held back.
            config.rate_limit = 0;
        })
    } else {
        builder.without_edge()
    };
    let stack = builder.start().await.expect("the suite starts");
    let sessions_records = stack.sessions.switcher().recorder().clone();
    let router_handle = stack.router.router();
    let Serving { triggers, sessions, gateway, router, edge, .. } = stack.serve_each::<_, Shutdown, _>(Served::spawn);
    let (gateway, gateway_served) = gateway.expect("the gateway runs");
    // Ready once its roles are registered with triggers and the gateway lists the MCP
    // server's tool.
    wait_serving(&sessions.url(), "switchyard.sessions.v1.SessionService").await;
    eventually(Duration::from_secs(30), "the MCP server's tool in the gateway", || async {
        gateway.catalog().tools().iter().any(|tool| tool.name == "fx__lookup")
    })
    .await;
    Suite {
        edge,
        router,
        sessions,
        _gateway: Some(gateway_served),
        _triggers: triggers,
        sessions_records,
        router_handle,
        gateway,
    }
}

/// What one conversation's client did and saw.
#[derive(Debug, Default)]
struct Conversation {
    turns: u64,
    switches: u64,
    tool_calls: u64,
    /// Each failed call: when (relative to the cut), what, and the answer.
    failures: Vec<String>,
    slowest: Duration,
}

/// One conversation through the edge, until `stop`: a chat turn alternating between the
/// finance and tech domains (so the role switches), a tool call through the gateway, and every
/// third round an explicit switch to the legal expert.
async fn converse(
    http: reqwest::Client,
    edge: String,
    key: String,
    session: String,
    stop: Arc<AtomicBool>,
    cut: Arc<Mutex<Option<Instant>>>,
) -> Conversation {
    let mut seen = Conversation::default();
    let mut round = 0_u64;
    while !stop.load(Ordering::SeqCst) {
        let query = if round.is_multiple_of(2) { FINANCE } else { TECH };
        let calls: [(&str, String, Value); 3] = [
            ("chat", format!("{edge}/api/v1/chat"), json!({"message": query, "session_id": session})),
            (
                "tool call",
                format!("{edge}/api/mcp/tools/fx__lookup:call"),
                json!({"session_id": session, "arguments": {}}),
            ),
            (
                "switch",
                format!("{edge}/api/context/switch"),
                json!({"session_id": session, "new_role_id": "legal-expert"}),
            ),
        ];
        for (what, url, body) in calls {
            if what == "switch" && round % 3 != 2 {
                continue;
            }
            let asked = Instant::now();
            let answer = http.post(&url).bearer_auth(&key).json(&body).send().await;
            let took = asked.elapsed();
            seen.slowest = seen.slowest.max(took);
            let when = match *cut.lock().unwrap() {
                Some(at) => format!("{:.1}s after the cut", asked.duration_since(at).as_secs_f64()),
                None => "before the cut".to_owned(),
            };
            let (status, body) = match answer {
                Ok(answer) => {
                    let status = answer.status().as_u16();
                    (status, answer.json::<Value>().await.unwrap_or(Value::Null))
                }
                Err(err) => {
                    seen.failures.push(format!("{what} {when}: {err}"));
                    continue;
                }
            };
            if status != 200 {
                seen.failures.push(format!("{what} {when}: {status} {body}"));
                continue;
            }
            match what {
                "chat" => {
                    // A turn answered, but not with its own message's answer, is a failure too.
                    if body["choices"][0]["message"]["content"] != answer_to(query).as_str() {
                        seen.failures.push(format!("{what} {when}: answered {body}"));
                        continue;
                    }
                    seen.turns += 1;
                    seen.switches += u64::from(body["_metadata"]["role_switched"] == true);
                }
                "tool call" => seen.tool_calls += 1,
                _ => seen.switches += u64::from(body["switched"] == true),
            }
        }
        round += 1;
        // A steady pace rather than a flood: the machine is shared.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen
}

async fn count(pool: &sqlx::PgPool, sql: &str, session: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.to_owned()))
        .bind(session)
        .fetch_one(pool)
        .await
        .unwrap_or_else(|err| panic!("{sql}: {err}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_postgres_cut_for_30s_under_load_every_call_is_answered_and_every_record_arrives_after() {
    const CONVERSATIONS: usize = 4;
    const OUTAGE: Duration = Duration::from_secs(30);
    let proxy = TcpProxy::start(database_addr()).await;
    let stores = Stores::new(database_url_via(proxy.addr()), redis_url());
    let llm = scripted_vendor().await;
    let fixture = FixtureServer::start(vec![tool("lookup", "Looks something up.", &[])]).await.unwrap();

    // An API key per conversation's user, made in the edge's table directly.
    let keys_table = KeyStore::connect(&database_url(), stores.edge.name(), Duration::ZERO).await.expect("key table");
    let tenant = TenantId::parse(TENANT).unwrap();
    let mut keys = Vec::new();
    for n in 0..CONVERSATIONS {
        let user = UserId::parse(&format!("user-{n}")).unwrap();
        keys.push(keys_table.create(&tenant, Some(&user), "load", false).await.expect("key").secret);
    }

    let suite = start_suite(&stores, &llm, &fixture.url(), true).await;
    let edge = suite.edge.as_ref().expect("the edge runs").url();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
    let sessions: Vec<String> = (0..CONVERSATIONS).map(|n| format!("load-{n}")).collect();
    for (session, key) in sessions.iter().zip(&keys) {
        let created = http
            .post(format!("{edge}/api/context/sessions"))
            .bearer_auth(key)
            .json(&json!({"session_id": session, "initial_role_id": "general-assistant"}))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 200, "{}", created.text().await.unwrap());
    }

    // A budget for the tenant, so every turn is checked against it and its cost counted.
    let mut router =
        RouterServiceClient::new(Channel::from_shared(suite.router.url()).unwrap().connect().await.unwrap());
    let budget = Budget {
        tenant_id: TENANT.to_owned(),
        limit_usd: 1000.0,
        period: BudgetPeriod::Day as i32,
        ..Budget::default()
    };
    router.set_budget(operator(SetBudgetRequest { budget: Some(budget) })).await.expect("budget set");

    let stop = Arc::new(AtomicBool::new(false));
    let cut_at = Arc::new(Mutex::new(None));
    let clients: Vec<_> = sessions
        .iter()
        .zip(&keys)
        .map(|(session, key)| {
            tokio::spawn(converse(
                http.clone(),
                edge.clone(),
                key.clone(),
                session.clone(),
                stop.clone(),
                cut_at.clone(),
            ))
        })
        .collect();

    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.cut();
    *cut_at.lock().unwrap() = Some(Instant::now());
    tokio::time::sleep(OUTAGE).await;
    let held = (suite.sessions_records.backlog(), suite.gateway.stats().await.unwrap().records_dropped);
    proxy.restore();
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop.store(true, Ordering::SeqCst);
    let mut seen = BTreeMap::new();
    for (session, client) in sessions.iter().zip(clients) {
        seen.insert(session.clone(), client.await.expect("a conversation"));
    }

    // Every call was answered, through the whole outage.
    let failures: Vec<&String> = seen.values().flat_map(|c| &c.failures).collect();
    assert!(failures.is_empty(), "{} calls failed: {failures:#?}", failures.len());
    let slowest = seen.values().map(|c| c.slowest).max().unwrap();
    let turns: u64 = seen.values().map(|c| c.turns).sum();
    let tool_calls: u64 = seen.values().map(|c| c.tool_calls).sum();
    let switches: u64 = seen.values().map(|c| c.switches).sum();
    eprintln!(
        "{turns} chat turns, {tool_calls} tool calls, {switches} switches; slowest call {slowest:?}; \
         session records held at the end of the cut: {}",
        held.0
    );
    assert!(held.0 > 0, "the sessions' records waited out the cut in the buffer");
    assert!(turns >= 40, "a steady load: only {turns} turns");

    // After the restore, every record of the whole run is in Postgres: read directly.
    let pool = sqlx::PgPool::connect(&database_url()).await.unwrap();
    let (s, r, g) = (stores.sessions.name(), stores.router.name(), stores.gateway.name());
    for (session, conversation) in &seen {
        let expected = [
            ("switches", conversation.switches),
            ("messages", 2 * conversation.turns),
            ("turns counted", conversation.turns),
            ("routing decisions", conversation.turns),
            ("tool call records", conversation.tool_calls),
            ("tool call audit records", conversation.tool_calls),
        ];
        let queries = [
            format!("SELECT count(*) FROM \"{s}\".session_switches WHERE tenant_id = 'acme' AND session_id = $1"),
            format!("SELECT count(*) FROM \"{s}\".session_messages WHERE tenant_id = 'acme' AND session_id = $1"),
            format!("SELECT turn_count FROM \"{s}\".sessions WHERE tenant_id = 'acme' AND session_id = $1"),
            format!("SELECT count(*) FROM \"{r}\".routing_decisions WHERE tenant_id = 'acme' AND session_id = $1"),
            format!("SELECT count(*) FROM \"{g}\".tool_calls WHERE tenant = 'acme' AND session_id = $1"),
            format!("SELECT count(*) FROM \"{g}\".tool_call_audit WHERE tenant = 'acme' AND session_id = $1"),
        ];
        eventually(Duration::from_secs(30), &format!("{session}'s records in Postgres"), || async {
            let mut found = Vec::new();
            for sql in &queries {
                found.push(count(&pool, sql, session).await);
            }
            let wanted: Vec<i64> = expected.iter().map(|(_, n)| i64::try_from(*n).unwrap()).collect();
            if found == wanted {
                Ok(())
            } else {
                let names: Vec<&str> = expected.iter().map(|(name, _)| *name).collect();
                Err(format!("{names:?}: found {found:?}, the client saw {wanted:?}"))
            }
        })
        .await;
    }
    // The budget counted every turn's cost, those during the cut too.
    let recorded: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT COALESCE(sum(cost_nanousd), 0)::bigint FROM \"{r}\".routing_decisions WHERE tenant_id = 'acme'"
    )))
    .fetch_one(&pool)
    .await
    .unwrap();
    let listed = router
        .list_budgets(operator(ListBudgetsRequest { tenant_id: TENANT.to_owned() }))
        .await
        .expect("budgets listed")
        .into_inner();
    let spent = listed.budgets.first().expect("the tenant's budget").spent_usd;
    assert!(recorded > 0, "the turns cost something");
    assert!(
        (spent - recorded as f64 / 1e9).abs() < 1e-9,
        "the budget counted ${spent}, the recorded turns cost ${}",
        recorded as f64 / 1e9
    );
    assert_eq!(suite.sessions_records.dropped(), 0, "no session record dropped");
    assert_eq!(suite.gateway.stats().await.unwrap().records_dropped, 0, "no usage record dropped");
    assert_eq!(suite.router_handle.decisions_dropped(), 0, "no routing decision dropped");
    assert!(llm.answered() >= turns, "every turn reached the vendor");
}

/// A request as the operator makes it (budgets are the operator's to set and read).
fn operator<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert("x-switchyard-admin", "true".parse().unwrap());
    request
}

/// A redis-server of the test's own, without persistence (a restart loses everything), that
/// the test kills and starts again on the same port.
struct OwnRedis {
    port: u16,
    process: Child,
}

impl OwnRedis {
    fn start(port: u16) -> Self {
        let process = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("redis-server (Debian's redis-server package) must be installed: {err}"));
        Self { port, process }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn ready(&self) {
        let url = self.url();
        eventually(Duration::from_secs(10), "the test's redis-server answering", || {
            let url = url.clone();
            async move {
                let client = redis::Client::open(url).map_err(|err| err.to_string())?;
                let mut conn = client.get_multiplexed_async_connection().await.map_err(|err| err.to_string())?;
                redis::cmd("PING").query_async::<String>(&mut conn).await.map_err(|err| err.to_string())
            }
        })
        .await;
    }

    /// SIGKILL: no shutdown, nothing saved.
    fn kill(&mut self) {
        self.process.kill().expect("kill redis-server");
        self.process.wait().expect("redis-server reaped");
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// A gRPC request of the test's tenant, with its deadline.
fn with_tenant<T>(message: T, deadline: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert("x-tenant-id", TENANT.parse().unwrap());
    request.set_timeout(deadline);
    request
}

/// What one conversation's turns during the Redis restart came to.
#[derive(Debug, Default)]
struct Turns {
    /// (message, answer) of each turn answered, in order.
    answered: Vec<(String, String)>,
    /// Each turn sent, in order, and whether it failed UNAVAILABLE.
    sent: Vec<(String, bool)>,
    unavailable: u64,
    /// Anything else: a wrong role or answer, another status code, a call past its deadline.
    wrong: Vec<String>,
}

/// The Redis a restart test kills: a single one, or one primary of a cluster.
enum Restarted {
    Single(OwnRedis),
    Cluster(OwnCluster),
}

impl Restarted {
    fn url(&self) -> String {
        match self {
            Self::Single(redis) => redis.url(),
            Self::Cluster(cluster) => cluster.url(),
        }
    }

    /// Kills the Redis (on a cluster, the primary holding most of the sessions' keys, which
    /// must hold some), waits a little, and starts it again empty; returns once it answers (the
    /// cluster: every slot served again).
    async fn kill_and_restart(&mut self, sessions_keys: &str) {
        match self {
            Self::Single(redis) => {
                redis.kill();
                tokio::time::sleep(Duration::from_secs(2)).await;
                *redis = OwnRedis::start(redis.port);
                redis.ready().await;
            }
            Self::Cluster(cluster) => {
                let held = cluster.keys_per_node(sessions_keys).await;
                let node = (0..held.len()).max_by_key(|node| held[*node]).unwrap();
                assert!(held[node] > 0, "no session keys on any primary: {held:?}");
                eprintln!("session keys per primary {held:?}: killing primary {node}");
                cluster.kill(node);
                tokio::time::sleep(Duration::from_secs(2)).await;
                cluster.restart(node).await;
                let after = cluster.keys_per_node(sessions_keys).await;
                eprintln!("session keys per primary once it rejoined: {after:?}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_restarted_empty_mid_load_costs_no_session_its_role_or_history() {
    let redis = OwnRedis::start(free_port());
    redis.ready().await;
    restarted_mid_load(Restarted::Single(redis)).await;
}

/// The same load on a three-primary Redis Cluster of the test's own (no replicas: the killed
/// primary's slots go unserved, and the cluster refuses every slot while it counts a primary
/// failed, until the node rejoins with its `nodes.conf`, empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_cluster_primary_restarted_empty_mid_load_costs_no_session_its_role_or_history() {
    restarted_mid_load(Restarted::Cluster(OwnCluster::start().await)).await;
}

/// Four conversations through the router while `redis` is killed and started again empty:
/// every turn answered in its role with its own answer or UNAVAILABLE within its deadline,
/// and each session rebuilt from Postgres with its role and exactly the answered turns.
async fn restarted_mid_load(mut redis: Restarted) {
    const CONVERSATIONS: usize = 4;
    const DEADLINE: Duration = Duration::from_secs(10);
    let stores = Stores::new(database_url(), redis.url());
    let llm = scripted_vendor().await;
    let fixture = FixtureServer::start(vec![tool("lookup", "Looks something up.", &[])]).await.unwrap();
    let suite = start_suite(&stores, &llm, &fixture.url(), false).await;
    let channel = |url: String| async move { Channel::from_shared(url).unwrap().connect().await.unwrap() };
    let router = RouterServiceClient::new(channel(suite.router.url()).await);
    let mut sessions = SessionServiceClient::new(channel(suite.sessions.url()).await);

    // Each conversation switches to its role on its first turn (the switch is in Postgres),
    // then stays in that role's domain.
    let mut conversations = Vec::new();
    for n in 0..CONVERSATIONS {
        let session = format!("restart-{n}");
        let (query, role) = if n.is_multiple_of(2) { (FINANCE, "finance-expert") } else { (TECH, "tech-expert") };
        let create = CreateSessionRequest {
            session_id: session.clone(),
            initial_role_id: "general-assistant".into(),
            ..Default::default()
        };
        sessions.create_session(with_tenant(create, DEADLINE)).await.expect("session created");
        conversations.push((session, query, role));
    }

    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = conversations
        .iter()
        .cloned()
        .map(|(session, query, role)| {
            let (mut router, stop) = (router.clone(), stop.clone());
            tokio::spawn(async move {
                let mut turns = Turns::default();
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    let message = format!("{query} (turn {n})");
                    n += 1;
                    let request =
                        ChatRequest { message: message.clone(), session_id: session.clone(), ..Default::default() };
                    let request = with_tenant(request, DEADLINE);
                    let asked = Instant::now();
                    let outcome = tokio::time::timeout(DEADLINE + Duration::from_secs(2), router.chat(request)).await;
                    let took = asked.elapsed();
                    match outcome {
                        Err(_) => turns.wrong.push(format!("{message}: no answer within {took:?}")),
                        Ok(Ok(answer)) => {
                            let answer = answer.into_inner();
                            let content = answer.message.as_ref().map(|m| m.content.clone()).unwrap_or_default();
                            let answered_as = answer.metadata.as_ref().map(|m| m.role_id.clone()).unwrap_or_default();
                            if content != answer_to(&message) || answered_as != role {
                                turns.wrong.push(format!("{message}: answered {content:?} as {answered_as}"));
                            }
                            turns.sent.push((message.clone(), false));
                            turns.answered.push((message, content));
                        }
                        Ok(Err(status)) if status.code() == Code::Unavailable => {
                            turns.unavailable += 1;
                            turns.sent.push((message.clone(), true));
                        }
                        Ok(Err(status)) => turns.wrong.push(format!("{message}: {status:?} after {took:?}")),
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                turns
            })
        })
        .collect();

    tokio::time::sleep(Duration::from_secs(3)).await;
    redis.kill_and_restart(stores.sessions_keys.as_str()).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, Ordering::SeqCst);
    let mut results = Vec::new();
    for client in clients {
        results.push(client.await.expect("a conversation"));
    }

    let wrong: Vec<&String> = results.iter().flat_map(|t| &t.wrong).collect();
    assert!(wrong.is_empty(), "turns answered wrongly, with another code, or past the deadline: {wrong:#?}");
    let unavailable: u64 = results.iter().map(|t| t.unavailable).sum();
    let answered: usize = results.iter().map(|t| t.answered.len()).sum();
    eprintln!("{answered} turns answered, {unavailable} UNAVAILABLE during the restart");

    // Redis lost every session: each is rebuilt from Postgres with its role and its whole
    // conversation, the turns answered and nothing else.
    for ((session, _, role), turns) in conversations.iter().zip(&results) {
        let got = sessions
            .get_session(with_tenant(
                GetSessionRequest { session_id: session.clone(), include_messages: true },
                DEADLINE,
            ))
            .await
            .unwrap_or_else(|status| panic!("{session} after the restart: {status:?}"))
            .into_inner();
        assert_eq!(got.session.as_ref().map(|s| s.role_id.as_str()), Some(*role), "{session} kept its role");
        let history: Vec<(MessageRole, String)> =
            got.recent_messages.iter().map(|m| (m.role(), m.content.clone())).collect();
        // A turn answered UNAVAILABLE may have been recorded before its answer was lost (the
        // append reached sessions, the reply did not): it is there whole or not at all, in its
        // place. Every answered turn is there, in order, and nothing else.
        let mut expected: Vec<(MessageRole, String)> = Vec::new();
        let mut answered = turns.answered.iter();
        for (message, failed) in &turns.sent {
            let pair = if *failed {
                [(MessageRole::User, message.clone()), (MessageRole::Assistant, answer_to(message))]
            } else {
                let (asked, answer) = answered.next().expect("an answered turn");
                [(MessageRole::User, asked.clone()), (MessageRole::Assistant, answer.clone())]
            };
            if *failed && history.get(expected.len()..expected.len() + 2) != Some(&pair[..]) {
                continue;
            }
            expected.extend(pair);
        }
        assert_eq!(history, expected, "{session} kept its whole history");
        assert!(turns.answered.len() >= 10, "{session}: only {} turns answered", turns.answered.len());
    }
}
