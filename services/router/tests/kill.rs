//! `kill -9` of a router replica mid-stream: two `switchyard-router` processes share one
//! sessions service (its live sessions on the Redis Cluster, its record in Postgres), the
//! cluster (under one key prefix) and one Postgres schema of analytics. The replica answering a
//! stream is killed outright: its caller's stream ends with an error, never a clean end, and the
//! next message of the session, sent to the other replica, continues the conversation in its
//! role with its history. A killed process records nothing of the turn it was answering (that
//! is what a graceful shutdown adds, `shutdown.rs`): the turn's question, partial answer and
//! decision are lost with it, and the session goes on from the turns before.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{process::Stdio, time::Duration};

use common::{closed_port, wait_serving};
use switchyard_cli::{DevPorts, Stack, stack::Serving};
use switchyard_kit::Secret;
use switchyard_proto::{
    router::v1::{
        ChatRequest, ChatStreamRequest, chat_stream_response::Event, router_service_client::RouterServiceClient,
    },
    sessions::v1::{GetSessionRequest, SwitchContextRequest, session_service_client::SessionServiceClient},
};
use switchyard_testkit::{
    Schema, Served, Shutdown, database_url, eventually, free_port,
    llm::{Recorded, Reply, ScriptedLlm},
    redis_cluster_url, unique,
};
use tonic::{Code, transport::Channel};

const BINARY: &str = env!("CARGO_BIN_EXE_switchyard-router");

const SAVINGS: &str = "How much should I save each month for retirement?";
const STORY: &str = "Tell me a long story about compound interest";
const FOLLOW_UP: &str = "Can you sum up what you told me about saving?";

/// The story streams for far longer than the test waits (a piece every 100 ms); every other
/// question is answered at once, naming it.
fn vendor(request: &Recorded) -> Reply {
    let asked = request.last_user_text().unwrap_or_default();
    if asked == STORY {
        Reply::text("Once upon a time a penny was put aside and it grew. ".repeat(40))
            .chunk_size(8)
            .chunk_delay(Duration::from_millis(100))
    } else {
        Reply::text(format!("answer to: {asked}"))
    }
}

/// A `switchyard-router` process on the shared stores.
struct Replica {
    process: tokio::process::Child,
    url: String,
}

async fn spawn_router(sessions_url: &str, gateway_url: &str, llm: &ScriptedLlm, schema: &str, prefix: &str) -> Replica {
    let port = free_port();
    let process = tokio::process::Command::new(BINARY)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--no-fast-router"])
        .env_remove("ROUTER_IN_MEMORY")
        .env("SESSIONS_URL", sessions_url)
        .env("MCP_GATEWAY_URL", gateway_url)
        .env("DATABASE_URL", database_url())
        .env("ROUTER_DB_SCHEMA", schema)
        .env("REDIS_URL", redis_cluster_url())
        .env("ROUTER_REDIS_PREFIX", prefix)
        .env("OPENAI_BASE_URL", llm.openai_base_url())
        .env("OPENAI_API_KEY", "sk-router-kill-test")
        .env("UNIFIED_CHAT_DEFAULT_MODEL", "openai/gpt-4o-mini")
        .env("UNIFIED_CHAT_ROUTING_TIMEOUT_MS", "0")
        .env("ROUTER_RECORD_FLUSH_INTERVAL", "50ms")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start switchyard-router");
    let url = format!("http://127.0.0.1:{port}");
    wait_serving(&url, "switchyard.router.v1.RouterService").await;
    Replica { process, url }
}

async fn connect(url: &str) -> Channel {
    Channel::from_shared(url.to_owned()).expect("url").connect().await.expect("reachable")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_router_killed_mid_stream_ends_the_stream_with_an_error_and_the_other_replica_continues_the_session() {
    let llm = ScriptedLlm::start(vendor).await;
    let (sessions_schema, router_schema) = (Schema::new("router_kill_sessions"), Schema::new("router_kill"));
    // Keys on the cluster expire by themselves (sessions after ten minutes); nothing else is
    // kept there by a router without the routing cache.
    let prefix = unique("router-kill");
    let gateway = closed_port();
    let (schema, sessions_prefix) = (sessions_schema.name().to_owned(), prefix.clone());
    let stack = Stack::builder(DevPorts::loopback())
        .sessions(move |config| {
            let stores = &mut config.stores;
            (stores.in_memory, stores.database_url, stores.db_schema) =
                (false, Some(Secret::new(database_url())), schema);
            (stores.redis_url, stores.redis_prefix) = (Some(Secret::new(redis_cluster_url())), sessions_prefix);
            config.default_ttl = Duration::from_secs(600);
            config.record_flush_interval = Duration::from_millis(50);
        })
        .without_gateway(gateway.url())
        .without_edge()
        .start()
        .await
        .expect("triggers and sessions start");
    let Serving { sessions, triggers: _triggers, router: _unused, .. } =
        stack.serve_each::<_, Shutdown, _>(Served::spawn);
    wait_serving(&sessions.url(), "switchyard.sessions.v1.SessionService").await;
    let first = spawn_router(&sessions.url(), &gateway.url(), &llm, router_schema.name(), &prefix).await;
    let second = spawn_router(&sessions.url(), &gateway.url(), &llm, router_schema.name(), &prefix).await;
    let mut sessions_client = SessionServiceClient::new(connect(&sessions.url()).await);

    // A turn on the first replica, then the session's role set to the finance expert.
    let mut on_first = RouterServiceClient::new(connect(&first.url).await);
    let opened = on_first.chat(ChatRequest { message: SAVINGS.into(), ..Default::default() }).await;
    let opened = opened.expect("the first turn").into_inner();
    let session_id = opened.session_id.clone();
    sessions_client
        .switch_context(SwitchContextRequest {
            session_id: session_id.clone(),
            new_role_id: "finance-expert".into(),
            reason: "the user asked".into(),
        })
        .await
        .expect("switch");

    // The story starts streaming from the first replica, which is then killed.
    let request = ChatStreamRequest { message: STORY.into(), session_id: session_id.clone(), ..Default::default() };
    let mut stream = on_first.chat_stream(request).await.expect("the stream opens").into_inner();
    let mut story = String::new();
    while story.len() < 16 {
        match stream.message().await.expect("stream item").expect("the story goes on").event {
            Some(Event::Route(route)) => assert_eq!(route.session_id, session_id),
            Some(Event::Delta(delta)) => story.push_str(&delta.content),
            other => panic!("unexpected event before the kill: {other:?}"),
        }
    }
    let Replica { mut process, .. } = first;
    process.start_kill().expect("SIGKILL sent");
    let killed = tokio::time::timeout(Duration::from_secs(10), process.wait()).await.expect("it dies").expect("wait");
    assert!(!killed.success(), "killed, not exited: {killed:?}");
    let status = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match stream.message().await {
                Ok(Some(item)) => match item.event {
                    // Pieces already on the wire may still arrive; nothing else.
                    Some(Event::Delta(delta)) => story.push_str(&delta.content),
                    other => panic!("only more of the story may come after the kill: {other:?}"),
                },
                Ok(None) => panic!("the stream of a killed replica ended cleanly, as if the story were whole"),
                Err(status) => break status,
            }
        }
    })
    .await
    .expect("the caller hears of the kill within 10 s, it is not left hanging");
    // The server is gone, so the status is the client library's: tonic says UNAVAILABLE when
    // the connection is refused or reset, and UNKNOWN when it breaks while a body is read,
    // naming the broken connection. Either way an error, never the end of a whole answer.
    let broken = status.code() == Code::Unknown && status.message().contains("error reading a body from connection");
    assert!(status.code() == Code::Unavailable || broken, "{status:?}");

    // The next message goes to the other replica and continues the session.
    let mut on_second = RouterServiceClient::new(connect(&second.url).await);
    let request = ChatRequest { message: FOLLOW_UP.into(), session_id: session_id.clone(), ..Default::default() };
    let followed = on_second.chat(request).await.expect("the other replica answers").into_inner();
    assert_eq!(followed.session_id, session_id);
    let meta = followed.metadata.expect("metadata");
    assert_eq!(meta.role_id, "finance-expert", "the role survives the kill: {meta:?}");
    assert_eq!(followed.message.expect("message").content, format!("answer to: {FOLLOW_UP}"));
    // The model was given the turn before the kill, and nothing of the killed one.
    let asked = llm.requests().into_iter().rev().find(|r| r.last_user_text().as_deref() == Some(FOLLOW_UP));
    let contents: Vec<String> = asked
        .expect("the follow-up's model call")
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect();
    let savings_answer = format!("answer to: {SAVINGS}");
    assert!(contents.contains(&SAVINGS.to_owned()) && contents.contains(&savings_answer), "{contents:?}");
    assert!(!contents.iter().any(|c| c == STORY), "the killed turn was never recorded: {contents:?}");

    let got = sessions_client
        .get_session(GetSessionRequest { session_id: session_id.clone(), include_messages: true })
        .await
        .expect("the session")
        .into_inner();
    let messages: Vec<&str> = got.recent_messages.iter().map(|m| m.content.as_str()).collect();
    let follow_up_answer = format!("answer to: {FOLLOW_UP}");
    assert_eq!(messages, [SAVINGS, savings_answer.as_str(), FOLLOW_UP, follow_up_answer.as_str()]);
    assert_eq!(got.session.expect("session").role_id, "finance-expert");

    // Each replica's decisions reach the shared analytics; the killed turn's died with it.
    let pool = switchyard_kit::postgres::connect_in_schema(&database_url(), router_schema.name(), 1)
        .await
        .unwrap_or_else(|err| panic!("postgres at {} (set DATABASE_URL): {err}", database_url()));
    let ids = eventually(Duration::from_secs(20), "both answered turns' decisions", || async {
        let ids: Vec<String> =
            sqlx::query_scalar("SELECT id FROM routing_decisions WHERE session_id = $1 ORDER BY occurred_at")
                .bind(&session_id)
                .fetch_all(&pool)
                .await
                .map_err(|err| err.to_string())?;
        if ids.len() >= 2 { Ok(ids) } else { Err(format!("{ids:?}")) }
    })
    .await;
    assert_eq!(ids, [opened.id, followed.id]);
    drop(second);
}
