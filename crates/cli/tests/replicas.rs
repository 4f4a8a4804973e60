//! Every service in two replicas on one Redis Cluster and one Postgres: stacks A and B, each
//! triggers → sessions → MCP gateway → router → edge wired to its own replicas, every pair
//! sharing its stores (one Postgres schema per service, one key prefix on the three-primary
//! cluster). A conversation whose turns alternate between the two edges keeps its role, its
//! history, the routing cache, a user's correction, its MCP context and its rate limit; and one
//! replica of each service stopped gracefully under load (the shutdown a SIGTERM starts in the
//! binaries, started here through each server's shutdown signal, in process) finishes or cuts
//! its in-flight calls with a clear status, while new calls go to the other replica and the
//! records it held are in Postgres once it has stopped. The LLM vendor is the test kit's
//! scripted HTTP server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use reqwest::Client;
use serde_json::{Value, json};
use switchyard_cli::{DevPorts, Stack, stack::Serving};
use switchyard_edge::auth::KeyStore;
use switchyard_kit::{Secret, TenantId, UserId};
use switchyard_llm::{ModelRef, ProviderArgs};
use switchyard_mcp_gateway::Gateway;
use switchyard_router::route::USE_MCP_AGENT;
use switchyard_testkit::{
    ClusterKeyPrefix, Schema, Served, Shutdown, database_url, eventually,
    llm::{Recorded, Reply, ScriptedLlm},
    peer_tool,
    process::refused_by_a_stopping_server,
    redis_cluster_url, wait_serving,
};

/// Requests a second each credential may make, and its burst, on every edge.
const RATE: u32 = 5;
const BURST: u32 = 30;

/// Where the pair keeps its state: a Postgres schema per service and one key prefix on the
/// cluster, shared by both replicas of every service.
struct Stores {
    triggers: Schema,
    sessions: Schema,
    gateway: Schema,
    router: Schema,
    edge: Schema,
    keys: ClusterKeyPrefix,
}

impl Stores {
    fn new() -> Self {
        Self {
            triggers: Schema::new("rpl_triggers"),
            sessions: Schema::new("replicas_sessions"),
            gateway: Schema::new("replicas_gateway"),
            router: Schema::new("replicas_router"),
            edge: Schema::new("replicas_edge"),
            keys: ClusterKeyPrefix::new("replicas"),
        }
    }
}

/// One replica of every service, each served on its own task.
struct Replica {
    triggers: Served,
    sessions: Served,
    gateway: Served,
    router: Served,
    edge: Served,
}

/// How a test tunes both replicas beyond the shared wiring.
#[derive(Clone, Copy)]
struct Tuning {
    /// Every service's shutdown grace (the edge's `SHUTDOWN_GRACE` and each gRPC service's).
    shutdown_grace: Duration,
    /// The routers load MiniLM, which users' corrections need.
    fast_router: bool,
}

impl Default for Tuning {
    fn default() -> Self {
        Self { shutdown_grace: Duration::from_secs(75), fast_router: true }
    }
}

async fn start_replica(stores: &Stores, llm: &ScriptedLlm, tuning: Tuning) -> Replica {
    let durable = |schema: &Schema| (Some(Secret::new(database_url())), schema.name().to_owned());
    let redis = || Some(Secret::new(redis_cluster_url()));
    let prefix = stores.keys.as_str().to_owned();
    let Tuning { shutdown_grace: grace, fast_router } = tuning;
    let (triggers_db, sessions_db, gateway_db, router_db, edge_db) = (
        durable(&stores.triggers),
        durable(&stores.sessions),
        durable(&stores.gateway),
        durable(&stores.router),
        durable(&stores.edge),
    );
    let (sessions_prefix, gateway_prefix, router_prefix, edge_prefix) =
        (prefix.clone(), prefix.clone(), prefix.clone(), prefix);
    let openai_base_url = llm.openai_base_url();
    let stack = Stack::builder(DevPorts::loopback())
        .triggers(move |config| {
            let stores = &mut config.stores;
            (stores.in_memory, stores.database_url, stores.db_schema) = (false, triggers_db.0, triggers_db.1);
            config.server.shutdown_grace = grace;
        })
        .sessions(move |config| {
            let stores = &mut config.stores;
            (stores.in_memory, stores.database_url, stores.db_schema) = (false, sessions_db.0, sessions_db.1);
            (stores.redis_url, stores.redis_prefix) = (redis(), sessions_prefix);
            // Sessions left behind expire by themselves soon after the test.
            config.default_ttl = Duration::from_secs(600);
            config.record_flush_interval = Duration::from_millis(50);
            config.server.shutdown_grace = grace;
        })
        .gateway(move |config| {
            let stores = &mut config.stores;
            (stores.in_memory, stores.database_url, stores.db_schema) = (false, gateway_db.0, gateway_db.1);
            (stores.redis_url, stores.redis_prefix) = (redis(), gateway_prefix);
            config.servers = vec![format!("everything={} stdio", peer_tool("mcp-server-everything"))];
            // Ranking by words alone: the same order on both replicas, and two cores spared.
            config.no_embeddings = true;
            config.model_dir = switchyard_testkit::model_dir();
            config.server.shutdown_grace = grace;
        })
        .router(move |config| {
            let stores = &mut config.stores;
            (stores.in_memory, stores.database_url, stores.db_schema) = (false, router_db.0, router_db.1);
            (stores.redis_url, stores.redis_prefix) = (redis(), router_prefix);
            config.providers = ProviderArgs {
                openai_base_url: Some(openai_base_url),
                openai_api_key: Some(Secret::new("sk-replicas-test")),
                max_retries: 0,
                ..ProviderArgs::default()
            };
            config.default_model = "openai/gpt-4o-mini".parse::<ModelRef>().expect("model");
            config.cache_routing = true;
            // The fast router embeds messages for the users' corrections; the routing call is
            // waited for, so a busy machine never turns a decision into an uncached fallback.
            config.no_fast_router = !fast_router;
            config.model_dir = switchyard_testkit::model_dir();
            config.routing_timeout_ms = 0;
            config.corrections_refresh = Duration::from_millis(200);
            config.record_flush_interval = Duration::from_millis(50);
            config.server.shutdown_grace = grace;
        })
        .edge(move |config| {
            config.open = false;
            (config.database_url, config.db_schema) = edge_db;
            (config.redis_url, config.redis_prefix) = (redis(), edge_prefix);
            (config.rate_limit, config.rate_burst) = (RATE, BURST);
            config.shutdown_grace = grace;
        })
        .start()
        .await
        .expect("the replica's services start on the shared stores");
    let Serving { triggers, sessions, gateway, router, edge, .. } = stack.serve_each::<_, Shutdown, _>(Served::spawn);
    let (gateway, gateway_served) = gateway.expect("the stack has a gateway");
    wait_serving(&sessions.url(), "switchyard.sessions.v1.SessionService").await;
    wait_for_tools(&gateway).await;
    Replica { triggers, sessions, gateway: gateway_served, router, edge: edge.expect("the stack has an edge") }
}

async fn wait_for_tools(gateway: &Arc<Gateway>) {
    eventually(Duration::from_secs(60), "server-everything's tools in the gateway", || async {
        let names: Vec<String> = gateway.catalog().tools().iter().map(|t| t.name.clone()).collect();
        if names.iter().any(|n| n.ends_with("get-sum")) { Ok(()) } else { Err(format!("tools so far: {names:?}")) }
    })
    .await;
}

/// Two replicas of every service on the same stores, and the scripted vendor behind both routers.
struct Pair {
    a: Replica,
    b: Replica,
    llm: ScriptedLlm,
    http: Client,
    stores: Stores,
}

impl Pair {
    async fn start(llm: ScriptedLlm, tuning: Tuning) -> Self {
        let stores = Stores::new();
        // One after the other: the first runs every service's migrations.
        let a = start_replica(&stores, &llm, tuning).await;
        let b = start_replica(&stores, &llm, tuning).await;
        let http = Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
        Self { a, b, llm, http, stores }
    }

    /// A new API key of `user` in `tenant`, in the key table both edges read.
    async fn key(&self, tenant: &str, user: &str) -> String {
        let keys =
            KeyStore::connect(&database_url(), self.stores.edge.name(), Duration::ZERO).await.expect("key table");
        let (tenant, user) = (TenantId::parse(tenant).unwrap(), UserId::parse(user).unwrap());
        keys.create(&tenant, Some(&user), "replicas", false).await.expect("key created").secret
    }

    async fn post(&self, edge: &Served, path: &str, key: &str, body: &Value) -> (u16, Value) {
        let response = self.http.post(format!("{}{path}", edge.url())).bearer_auth(key).json(body).send().await;
        read_json(response.expect("edge reachable")).await
    }

    async fn get(&self, edge: &Served, path: &str, key: &str) -> (u16, Value) {
        let response = self.http.get(format!("{}{path}", edge.url())).bearer_auth(key).send().await;
        read_json(response.expect("edge reachable")).await
    }

    fn routing_calls(&self) -> usize {
        self.llm.requests().iter().filter(|r| is_routing(r)).count()
    }
}

async fn pool(schema: &Schema) -> sqlx::PgPool {
    switchyard_kit::postgres::connect_in_schema(&database_url(), schema.name(), 2)
        .await
        .unwrap_or_else(|err| panic!("postgres at {} (set DATABASE_URL): {err}", database_url()))
}

async fn read_json(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    let value = serde_json::from_str(&text).unwrap_or_else(|err| panic!("HTTP {status}, not JSON ({err}): {text}"));
    (status, value)
}

/// A routing call: the request that offers the routing tools.
fn is_routing(request: &Recorded) -> bool {
    request.tool_names().iter().any(|name| name == USE_MCP_AGENT)
}

/// Every answer names the question, so each turn's answer is told apart in the history.
fn answer_naming_the_question(request: &Recorded) -> Reply {
    Reply::text(format!("answer to: {}", request.last_user_text().unwrap_or_default()))
}

const TRIP: &str = "Plan a relaxed weekend itinerary for Lisbon";
const WEATHER: &str = "What's the weather in Paris right now?";
const WEATHER_AGAIN: &str = "What is the weather in Paris right now?";

/// Waits until the router at `addr` reports its fast router loaded (its health component).
async fn fast_router_ready(addr: std::net::SocketAddr) {
    use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};
    eventually(Duration::from_secs(180), "the fast router loads", || async move {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|err| err.to_string())?
            .connect()
            .await
            .map_err(|err| err.to_string())?;
        let request = HealthCheckRequest { service: switchyard_router::FAST_ROUTER_HEALTH.into() };
        let status =
            HealthClient::new(channel).check(request).await.map_err(|err| err.to_string())?.into_inner().status();
        if status == ServingStatus::Serving { Ok(()) } else { Err(format!("{status:?}")) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_conversation_alternating_between_two_replicas_keeps_role_history_cache_corrections_context_and_limit() {
    let pair = Pair::start(ScriptedLlm::start(answer_naming_the_question).await, Tuning::default()).await;
    let (a, b) = (&pair.a.edge, &pair.b.edge);
    let ann = pair.key("acme", "ann").await;

    // Turn 1 on A: a new session, routed by the model.
    let (status, first) = pair.post(a, "/api/v1/chat", &ann, &json!({"message": TRIP})).await;
    assert_eq!(status, 200, "{first}");
    let session = first["session_id"].as_str().expect("a session").to_owned();
    assert_eq!(first["_metadata"]["cache_hit"], false, "{first}");
    assert_eq!(pair.routing_calls(), 1);

    // A role switch made through A is the session's role on B.
    let switch = json!({"session_id": session, "new_role_id": "finance-expert", "reason": "the user asked"});
    let (status, switched) = pair.post(a, "/api/context/switch", &ann, &switch).await;
    assert_eq!(status, 200, "{switched}");
    let (status, seen) = pair.get(b, &format!("/api/context/sessions/{session}"), &ann).await;
    assert_eq!((status, &seen["session"]["role_id"]), (200, &json!("finance-expert")), "{seen}");

    // Turn 2 on B: the same question is answered in that role, routed from the cache A filled.
    let (status, second) = pair.post(b, "/api/v1/chat", &ann, &json!({"message": TRIP, "session_id": session})).await;
    assert_eq!(status, 200, "{second}");
    let meta = &second["_metadata"];
    assert_eq!(meta["role_id"], "finance-expert", "{second}");
    assert_eq!(meta["cache_hit"], true, "{second}");
    assert!(
        meta["reasoning"].as_str().unwrap_or_default().starts_with("cached decision for the same message"),
        "{meta}"
    );
    assert_eq!(pair.routing_calls(), 1, "B made no routing call of its own");

    // Turn 3 on A: a new question; the model saw the turns both replicas answered.
    let (status, third) = pair.post(a, "/api/v1/chat", &ann, &json!({"message": WEATHER, "session_id": session})).await;
    assert_eq!(status, 200, "{third}");
    assert_eq!(
        (&third["_metadata"]["route_type"], &third["_metadata"]["cache_hit"]),
        (&json!("direct"), &json!(false))
    );
    let routing =
        pair.llm.requests().into_iter().find(|r| is_routing(r) && r.last_user_text().as_deref() == Some(WEATHER));
    let routing = routing.expect("turn 3's routing call");
    let earlier: Vec<&str> = routing.messages().iter().filter_map(|m| m["content"].as_str()).collect();
    let trips = earlier.iter().filter(|content| **content == TRIP).count();
    assert_eq!(trips, 2, "turn 1 (A) and turn 2 (B) are in the conversation A sends: {earlier:?}");

    // The user corrects turn 3 through B; A learns it from Postgres and routes a similar
    // question of hers by it (polled in sessions of their own, so this one's history stays).
    let feedback = json!({
        "response_id": third["id"], "helpful": false, "expected_route": "ROUTE_TYPE_MCP_AGENT", "comment": "look it up"
    });
    // The feedback names a decision A writes to Postgres off the request path (within its
    // record flush interval): until then B does not know the answer and says 404.
    eventually(Duration::from_secs(10), "B takes feedback on A's answer", || async {
        let (status, body) = pair.post(b, "/api/v1/chat/feedback", &ann, &feedback).await;
        if status == 200 { Ok(()) } else { Err(format!("HTTP {status}: {body}")) }
    })
    .await;
    // Corrections are matched by meaning, with the fast router's embedder: wait for A's to be
    // loaded (on a machine without its exemplar vector cache yet, under a whole suite's load,
    // that takes a minute or so), without polling chats that would spend the key's rate limit.
    fast_router_ready(pair.a.router.addr).await;
    eventually(Duration::from_secs(30), "A applies the correction made through B", || async {
        let (status, reply) = pair.post(a, "/api/v1/chat", &ann, &json!({"message": WEATHER_AGAIN})).await;
        let meta = &reply["_metadata"];
        let learned = meta["reasoning"].as_str().unwrap_or_default().starts_with("learned from your correction");
        if status == 200 && meta["route_type"] == "mcp_agent" && meta["cache_hit"] == true && learned {
            Ok(())
        } else {
            Err(format!("HTTP {status}: {reply}"))
        }
    })
    .await;
    let (status, fourth) =
        pair.post(a, "/api/v1/chat", &ann, &json!({"message": WEATHER_AGAIN, "session_id": session})).await;
    assert_eq!(status, 200, "{fourth}");
    assert_eq!(fourth["_metadata"]["route_type"], "mcp_agent", "{fourth}");

    // The MCP context set through A's gateway ranks the tools B's gateway lists.
    let context = json!({"session_id": session, "query": "add two numbers together", "limit": 3});
    let (status, set) = pair.post(a, "/api/mcp/context", &ann, &context).await;
    assert_eq!(status, 200, "{set}");
    let names = |tools: &Value| -> Vec<String> {
        tools.as_array().unwrap().iter().map(|t| t["tool"]["name"].as_str().unwrap().to_owned()).collect()
    };
    let ranked_on_a = names(&set["tools"]);
    assert!(ranked_on_a.iter().any(|n| n.ends_with("get-sum")), "{set}");
    let (status, listed) = pair.get(b, &format!("/api/mcp/tools?session_id={session}&limit=3"), &ann).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["filtered"], true, "B filters by the context A stored: {listed}");
    assert_eq!(names(&listed["tools"]), ranked_on_a, "{listed}");
    let (_, unset) = pair.get(b, "/api/mcp/tools?session_id=no-context-here&limit=3", &ann).await;
    assert_ne!(unset["filtered"], true, "a session without a context is not filtered: {unset}");

    // The whole conversation, read through B: four turns, each question and answer in order.
    let (status, got) = pair.get(b, &format!("/api/context/sessions/{session}?include_messages=true"), &ann).await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["session"]["turn_count"], 4, "{got}");
    let messages: Vec<&str> =
        got["recent_messages"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap()).collect();
    let trip_answer = format!("answer to: {TRIP}");
    let weather_answer = format!("answer to: {WEATHER}");
    assert_eq!(messages.len(), 8, "{messages:?}");
    assert_eq!(
        messages[..7],
        [TRIP, trip_answer.as_str(), TRIP, trip_answer.as_str(), WEATHER, weather_answer.as_str(), WEATHER_AGAIN],
        "{messages:?}"
    );
    let (status, history) = pair.get(a, &format!("/api/context/sessions/{session}/history"), &ann).await;
    assert_eq!(status, 200, "{history}");
    let events = history["events"].as_array().unwrap();
    assert!(events.iter().any(|e| e["to_role_id"] == "finance-expert"), "{history}");
    // Both sessions replicas' record buffers wrote their turns' messages.
    let pool = pool(&pair.stores.sessions).await;
    eventually(Duration::from_secs(20), "the eight messages in Postgres", || async {
        let count: i64 = sqlx::query_scalar("SELECT count(*) FROM session_messages WHERE session_id = $1")
            .bind(&session)
            .fetch_one(&pool)
            .await
            .map_err(|err| err.to_string())?;
        if count == 8 { Ok(()) } else { Err(format!("{count} messages")) }
    })
    .await;

    // One credential's rate limit holds across both edges: together they let it through at
    // the limit once, not once each.
    let bob = pair.key("acme", "bob").await;
    let started = Instant::now();
    let mut answers = BTreeMap::<u16, usize>::new();
    for i in 0..(3 * BURST) {
        let edge = if i % 2 == 0 { a } else { b };
        let response = pair.http.get(format!("{}/v1/models", edge.url())).bearer_auth(&bob).send().await.unwrap();
        *answers.entry(response.status().as_u16()).or_default() += 1;
    }
    let elapsed = started.elapsed();
    let allowed = answers.get(&200).copied().unwrap_or_default();
    let refilled = (f64::from(RATE) * elapsed.as_secs_f64()).ceil() as usize;
    assert_eq!(answers.keys().copied().collect::<Vec<_>>(), [200, 429], "{answers:?}");
    assert!(
        (BURST as usize..=BURST as usize + refilled + 1).contains(&allowed),
        "{allowed} let through in {elapsed:?}: the combined limit is a burst of {BURST} and {RATE}/s ({answers:?})"
    );
}

/// The shutdown grace of every service in the shutdown test: quick answers (1 s) finish inside
/// it, slow ones (6 s) are cut at its end.
const GRACE: Duration = Duration::from_secs(3);

/// `quick:` questions stream in about a second, `slow:` ones for six; anything else is answered
/// at once.
fn paced_vendor(request: &Recorded) -> Reply {
    let asked = request.last_user_text().unwrap_or_default();
    let pieces = |count: usize| {
        Reply::text(format!("{asked} ").repeat(count).chars().take(count * 8).collect::<String>())
            .chunk_size(8)
            .chunk_delay(Duration::from_millis(100))
    };
    if asked.starts_with("quick:") {
        pieces(10)
    } else if asked.starts_with("slow:") {
        pieces(60)
    } else {
        Reply::text(format!("answer to: {asked}"))
    }
}

/// Waits until the vendor has been asked each of `questions`: their turns are in flight.
async fn asked(llm: &ScriptedLlm, questions: &[String]) {
    eventually(Duration::from_secs(30), "the turns in flight at the vendor", || async {
        let seen: Vec<String> = llm.requests().iter().filter_map(Recorded::last_user_text).collect();
        let missing: Vec<&String> = questions.iter().filter(|q| !seen.contains(q)).collect();
        if missing.is_empty() { Ok(()) } else { Err(format!("not yet asked: {missing:?}")) }
    })
    .await;
}

/// The events of an SSE body: (name, JSON data).
fn sse_events(text: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let (mut name, mut data) = ("message".to_owned(), String::new());
        for line in block.lines() {
            if let Some(value) = line.strip_prefix("event:") {
                name = value.trim().to_owned();
            } else if let Some(value) = line.strip_prefix("data:") {
                data.push_str(value.trim_start());
            }
        }
        if !data.is_empty() {
            out.push((name, serde_json::from_str(&data).unwrap_or_else(|err| panic!("event data ({err}): {data}"))));
        }
    }
    out
}

async fn channel(url: &str) -> tonic::transport::Channel {
    tonic::transport::Channel::from_shared(url.to_owned()).expect("url").connect().await.expect("reachable")
}

/// A call to a stopped replica: refused with UNAVAILABLE, at once.
fn assert_gone(service: &str, result: Result<(), tonic::Status>) {
    let status = result.expect_err("the stopped replica takes no call");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{service}: {status:?}");
}

/// Load on replica A of one gRPC service: `TASKS` callers each call it in a loop until it is
/// gone (the call in flight when it stops must still be answered, and the first that is not
/// must be refused as [`refused_by_a_stopping_server`] says), then make `ON_B` calls on B, which must all succeed. Returns, per
/// caller, the numbers of the calls A answered.
async fn unary_load<F, Fut>(service: &'static str, a: Served, b: &Served, call: F) -> Vec<Vec<usize>>
where
    F: Fn(tonic::transport::Channel, usize, usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), tonic::Status>> + Send,
{
    const TASKS: usize = 4;
    const ON_B: usize = 3;
    let (a_url, b_url) = (a.url(), b.url());
    let mut callers = tokio::task::JoinSet::new();
    let started = Arc::new(tokio::sync::Barrier::new(TASKS + 1));
    for task in 0..TASKS {
        let (call, a_url, b_url, started) = (call.clone(), a_url.clone(), b_url.clone(), started.clone());
        callers.spawn(async move {
            let on_a = channel(&a_url).await;
            let mut answered = Vec::new();
            let mut n = 0;
            let refused = loop {
                let result = tokio::time::timeout(Duration::from_secs(20), call(on_a.clone(), task, n)).await;
                match result.unwrap_or_else(|_| panic!("{service}: a call to the stopping replica hung")) {
                    Ok(()) => answered.push(n),
                    Err(status) => break status,
                }
                if n == 2 {
                    started.wait().await;
                }
                n += 1;
            };
            assert!(refused_by_a_stopping_server(&refused), "{service}: {refused:?}");
            // The caller fails over: every call on B succeeds.
            let on_b = channel(&b_url).await;
            for _ in 0..ON_B {
                n += 1;
                call(on_b.clone(), task, n).await.unwrap_or_else(|status| panic!("{service} B: {status:?}"));
            }
            (task, answered)
        });
    }
    // Every caller has had calls answered: A is under load when it is stopped.
    tokio::time::timeout(Duration::from_secs(30), started.wait())
        .await
        .unwrap_or_else(|_| panic!("{service}: the callers never had three calls answered by A"));
    a.stop().await;
    let mut answered = vec![Vec::new(); TASKS];
    while let Some(done) = callers.join_next().await {
        let (task, calls) = done.expect("caller");
        answered[task] = calls;
    }
    // A new caller of A is refused at once.
    let refused = tonic::transport::Channel::from_shared(a_url).expect("url").connect().await;
    assert!(refused.is_err(), "{service}: the stopped replica still accepts connections");
    answered
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_replica_of_each_service_stopped_under_load_ends_its_calls_cleanly_and_the_other_serves() {
    use switchyard_proto::{
        mcp::v1::{CallToolRequest, mcp_gateway_service_client::McpGatewayServiceClient},
        router::v1::{
            ChatRequest, ChatStreamRequest, chat_stream_response::Event, router_service_client::RouterServiceClient,
        },
        sessions::v1::{
            AppendMessagesRequest, ConversationMessage, CreateSessionRequest, MessageRole,
            session_service_client::SessionServiceClient,
        },
        triggers::v1::{DetectTriggersRequest, trigger_service_client::TriggerServiceClient},
    };
    use tonic::Code;

    let tuning = Tuning { shutdown_grace: GRACE, fast_router: false };
    let pair = Pair::start(ScriptedLlm::start(paced_vendor).await, tuning).await;
    let ann = pair.key("acme", "ann").await;
    let Pair { a, b, llm, http, stores } = pair;
    let Replica { triggers, sessions, gateway, router, edge } = a;

    // edge: SSE streams in flight through A's edge; quick ones finish, slow ones end with one
    // error event at the grace; new requests go to B's edge.
    let mut streams = tokio::task::JoinSet::new();
    let questions: Vec<String> =
        ["quick:edge-1", "quick:edge-2", "slow:edge-1", "slow:edge-2"].map(String::from).into();
    for question in questions.clone() {
        let request = http.post(format!("{}/api/v1/chat/stream", edge.url())).bearer_auth(&ann);
        let request = request.json(&json!({"message": question}));
        streams.spawn(async move {
            let response = request.send().await.expect("the stream opens");
            assert_eq!(response.status().as_u16(), 200, "{question}");
            (question, response.text().await.expect("the stream's body ends"))
        });
    }
    asked(&llm, &questions).await;
    let edge_url = edge.url();
    let stopping = tokio::spawn(edge.stop());
    while let Some(done) = streams.join_next().await {
        let (question, body) = done.expect("stream task");
        let events = sse_events(&body);
        let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
        let errors = names.iter().filter(|name| **name == "error").count();
        if question.starts_with("quick:") {
            assert_eq!((names.last(), errors), (Some(&"completed"), 0), "{question} finishes: {names:?}");
        } else {
            assert_eq!((names.last(), errors), (Some(&"error"), 1), "{question} is cut with one error: {names:?}");
            assert!(!names.contains(&"completed"), "{question}: {names:?}");
            assert_eq!(events.last().unwrap().1["error"]["status"], "UNAVAILABLE", "{question}: {body}");
        }
    }
    stopping.await.expect("edge stop task");
    let stopped = http.get(format!("{}/v1/models", edge_url)).bearer_auth(&ann).send().await;
    assert!(stopped.is_err_and(|err| err.is_connect()), "the stopped edge takes no request");
    let (status, answered) = {
        let response = http.post(format!("{}/api/v1/chat", b.edge.url())).bearer_auth(&ann);
        read_json(response.json(&json!({"message": "after the edge stopped"})).send().await.unwrap()).await
    };
    assert_eq!(status, 200, "{answered}");

    // router: streams and a unary turn in flight on A's router; quick ones finish, slow
    // ones end UNAVAILABLE at the grace; every turn A took is in Postgres once it has stopped,
    // the cut ones marked interrupted; new turns go to B.
    let router_url = router.url();
    let mut turns = tokio::task::JoinSet::new();
    let questions: Vec<String> =
        ["quick:router-1", "quick:router-2", "slow:router-1", "slow:router-2"].map(String::from).into();
    for question in questions.clone() {
        let url = router_url.clone();
        turns.spawn(async move {
            let mut client = RouterServiceClient::new(channel(&url).await);
            let request = ChatStreamRequest { message: question.clone(), ..Default::default() };
            let mut stream = client.chat_stream(request).await.expect("opens").into_inner();
            let (mut id, mut completed) = (String::new(), false);
            let end = loop {
                match stream.message().await {
                    Ok(Some(item)) => match item.event {
                        Some(Event::Route(route)) => id = route.id,
                        Some(Event::Completed(_)) => completed = true,
                        _ => {}
                    },
                    Ok(None) => break None,
                    Err(status) => break Some(status),
                }
            };
            (question, id, completed, end)
        });
    }
    let unary = {
        let url = router_url.clone();
        tokio::spawn(async move {
            let request = ChatRequest { message: "quick:router-unary".into(), ..Default::default() };
            RouterServiceClient::new(channel(&url).await).chat(request).await
        })
    };
    let mut in_flight = questions.clone();
    in_flight.push("quick:router-unary".into());
    asked(&llm, &in_flight).await;
    let stopping = tokio::spawn(router.stop());
    let mut taken = BTreeMap::new();
    while let Some(done) = turns.join_next().await {
        let (question, id, completed, end) = done.expect("turn task");
        assert!(id.starts_with("chat-"), "{question}: the route came first");
        if question.starts_with("quick:") {
            assert!(completed && end.is_none(), "{question} finishes: {end:?}");
        } else {
            let status = end.unwrap_or_else(|| panic!("{question}: a cut stream must not end cleanly"));
            assert!(!completed, "{question}");
            assert_eq!(status.code(), Code::Unavailable, "{question}: {status:?}");
            assert!(status.message().contains("shutting down"), "{status:?}");
        }
        taken.insert(id, question.starts_with("slow:"));
    }
    let unary = unary.await.expect("unary task").expect("the unary turn in flight finishes").into_inner();
    taken.insert(unary.id, false);
    stopping.await.expect("router stop task");
    let router_db = pool(&stores.router).await;
    let rows: Vec<(String, bool)> = sqlx::query_as("SELECT id, interrupted FROM routing_decisions WHERE id = ANY($1)")
        .bind(taken.keys().cloned().collect::<Vec<_>>())
        .fetch_all(&router_db)
        .await
        .expect("decisions");
    assert_eq!(rows.into_iter().collect::<BTreeMap<_, _>>(), taken, "every turn A took, drained at its stop");
    assert_gone("router", {
        let request = ChatRequest { message: "to the stopped router".into(), ..Default::default() };
        match tonic::transport::Channel::from_shared(router_url).unwrap().connect().await {
            Ok(on_a) => RouterServiceClient::new(on_a).chat(request).await.map(drop),
            Err(err) => Err(tonic::Status::unavailable(err.to_string())),
        }
    });
    let mut on_b = RouterServiceClient::new(channel(&b.router.url()).await);
    let request = ChatRequest { message: "after the router stopped".into(), ..Default::default() };
    on_b.chat(request).await.expect("B's router answers");

    // gateway: tool calls in a loop on A's gateway, and a two-second tool in flight when it
    // stops, which finishes; each call A answered is in Postgres once it has stopped.
    let long_call = {
        let url = gateway.url();
        tokio::spawn(async move {
            let mut client = McpGatewayServiceClient::new(channel(&url).await);
            let arguments = json!({"duration": 2, "steps": 1});
            let request = CallToolRequest {
                session_id: "stop-long".into(),
                name: "everything__trigger-long-running-operation".into(),
                arguments: Some(switchyard_kit::proto_json::to_struct(arguments.as_object().unwrap())),
            };
            client.call_tool(request).await
        })
    };
    let tool_sessions = |task: usize| format!("stop-gateway-{task}");
    let answered = unary_load("gateway", gateway, &b.gateway, move |channel, task, _| async move {
        let request = CallToolRequest {
            session_id: tool_sessions(task),
            name: "everything__get-sum".into(),
            arguments: Some(switchyard_kit::proto_json::to_struct(json!({"a": 2, "b": 3}).as_object().unwrap())),
        };
        McpGatewayServiceClient::new(channel).call_tool(request).await.map(drop)
    })
    .await;
    let long = long_call.await.expect("long call task").expect("the tool call in flight finishes").into_inner();
    assert!(!long.is_error, "{long:?}");
    let gateway_db = pool(&stores.gateway).await;
    for (task, calls) in answered.iter().enumerate() {
        let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM tool_calls WHERE session_id = $1")
            .bind(format!("stop-gateway-{task}"))
            .fetch_one(&gateway_db)
            .await
            .expect("tool calls");
        // A's answered calls at least (B's three are written on its own flush).
        assert!(recorded >= calls.len() as i64, "caller {task}: {recorded} recorded of {} A answered", calls.len());
    }
    let long_recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM tool_calls WHERE session_id = 'stop-long'")
        .fetch_one(&gateway_db)
        .await
        .expect("tool calls");
    assert_eq!(long_recorded, 1, "the call finished during the grace is recorded");

    // sessions: messages appended in a loop on A's sessions; each one A acknowledged is in
    // Postgres once it has stopped.
    let mut on_b = SessionServiceClient::new(channel(&b.sessions.url()).await);
    for task in 0..4 {
        let request = CreateSessionRequest { session_id: format!("stop-sessions-{task}"), ..Default::default() };
        on_b.create_session(request).await.expect("session");
    }
    let answered = unary_load("sessions", sessions, &b.sessions, |channel, task, n| async move {
        let message = ConversationMessage {
            role: MessageRole::User as i32,
            content: format!("message {n}"),
            ..Default::default()
        };
        let request = AppendMessagesRequest {
            session_id: format!("stop-sessions-{task}"),
            messages: vec![message],
            ..Default::default()
        };
        SessionServiceClient::new(channel).append_messages(request).await.map(drop)
    })
    .await;
    let sessions_db = pool(&stores.sessions).await;
    for (task, calls) in answered.iter().enumerate() {
        let recorded: Vec<String> =
            sqlx::query_scalar("SELECT content FROM session_messages WHERE session_id = $1 ORDER BY seq")
                .bind(format!("stop-sessions-{task}"))
                .fetch_all(&sessions_db)
                .await
                .expect("messages");
        // A's acknowledged messages come first (B's follow, written on its own flush).
        let acknowledged: Vec<String> = calls.iter().map(|n| format!("message {n}")).collect();
        assert!(recorded.len() >= acknowledged.len(), "caller {task}: {recorded:?} of {acknowledged:?}");
        assert_eq!(recorded[..acknowledged.len()], acknowledged, "caller {task}");
    }

    // triggers: detection in a loop on A's triggers, then on B's.
    unary_load("triggers", triggers, &b.triggers, |channel, _, _| async move {
        let request = DetectTriggersRequest { query: "Is this contract clause enforceable?".into() };
        TriggerServiceClient::new(channel).detect_triggers(request).await.map(drop)
    })
    .await;
    drop((b, stores, llm));
}
