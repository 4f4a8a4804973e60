//! A real SIGTERM to the `switchyard-router` process under load (triggers and sessions in
//! process, decisions in a Postgres schema of the test's own, a 3 s `--shutdown-grace`): unary
//! turns and a stream in flight finish; a stream longer than the grace ends UNAVAILABLE
//! "shutting down" at its end; a unary turn whose vendor answers after the grace ends with a
//! clear status, not a hang; new connections are refused once the signal is taken; every
//! turn's decision, held in the record buffer (flushed hourly here, so only the drain at exit
//! can write it), is in Postgres once the process has exited 0 within the grace and drain.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    time::{Duration, Instant},
};

use switchyard_cli::{DevPorts, Stack, stack::Serving};
use switchyard_kit::Secret;
use switchyard_proto::router::v1::{
    ChatRequest, ChatStreamRequest, chat_stream_response::Event, router_service_client::RouterServiceClient,
};
use switchyard_testkit::{
    KeyPrefix, Schema, Served, Shutdown, closed_port, database_url, eventually, free_port,
    llm::{Recorded, Reply, ScriptedLlm},
    process::{ServiceProcess, UnaryLoad, assert_answered_or_refused},
    redis_url, wait_serving,
};
use tonic::{Code, transport::Channel};

const BINARY: &str = env!("CARGO_BIN_EXE_switchyard-router");
const GRACE: Duration = Duration::from_secs(3);
/// The router's own drain deadline for its records, after the grace.
const DRAIN: Duration = Duration::from_secs(5);

/// Answers by the question's kind: `quick:` at once, `slow:` after 1 s (well inside the
/// grace), `story:` streamed over about 1 s, `long-story:` streamed over 10 s and `hang:` after
/// 30 s (both past the grace).
fn vendor(request: &Recorded) -> Reply {
    let asked = request.last_user_text().unwrap_or_default();
    let answer = format!("answer to: {asked}");
    match asked.split_once(':').map(|(kind, _)| kind) {
        Some("slow") => Reply::text(answer).delay(Duration::from_secs(1)),
        Some("story") => Reply::text(answer.repeat(8)).chunk_size(16).chunk_delay(Duration::from_millis(50)),
        Some("long-story") => Reply::text(answer.repeat(8)).chunk_size(2).chunk_delay(Duration::from_millis(100)),
        Some("hang") => Reply::text(answer).delay(Duration::from_secs(30)),
        _ => Reply::text(answer),
    }
}

async fn channel(url: &str) -> Channel {
    Channel::from_shared(url.to_owned()).expect("url").connect().await.expect("reachable")
}

/// How a stream ended: the decision id from its route event, whether it completed, and the
/// status it ended with, if any.
async fn stream_turn(url: String, question: &str) -> (String, bool, String, Option<tonic::Status>) {
    let mut client = RouterServiceClient::new(channel(&url).await);
    let request = ChatStreamRequest { message: question.to_owned(), ..Default::default() };
    let mut stream = client.chat_stream(request).await.expect("the stream opens").into_inner();
    let (mut id, mut completed, mut text) = (String::new(), false, String::new());
    loop {
        match stream.message().await {
            Ok(Some(item)) => match item.event {
                Some(Event::Route(route)) => id = route.id,
                Some(Event::Delta(delta)) => text.push_str(&delta.content),
                Some(Event::Completed(_)) => completed = true,
                _ => {}
            },
            Ok(None) => return (id, completed, text, None),
            Err(status) => return (id, completed, text, Some(status)),
        }
    }
}

async fn asked(llm: &ScriptedLlm, questions: &[&str]) {
    eventually(Duration::from_secs(30), "the turns in flight at the vendor", || async {
        let seen: Vec<String> = llm.requests().iter().filter_map(Recorded::last_user_text).collect();
        let missing: Vec<&&str> = questions.iter().filter(|q| !seen.iter().any(|s| s == **q)).collect();
        if missing.is_empty() { Ok(()) } else { Err(format!("not yet asked: {missing:?}")) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_under_load_finishes_or_cuts_each_call_refuses_new_ones_and_drains_the_decisions() {
    let llm = ScriptedLlm::start(vendor).await;
    let (sessions_schema, router_schema) = (Schema::new("router_sigterm_sessions"), Schema::new("router_sigterm"));
    let (sessions_keys, router_keys) = (KeyPrefix::new("router-sigterm-s"), KeyPrefix::new("router-sigterm-r"));
    let gateway = closed_port();
    let (schema, prefix) = (sessions_schema.name().to_owned(), sessions_keys.as_str().to_owned());
    let stack = Stack::builder(DevPorts::loopback())
        .sessions(move |config| {
            let stores = &mut config.stores;
            (stores.in_memory, stores.database_url, stores.db_schema) =
                (false, Some(Secret::new(database_url())), schema);
            (stores.redis_url, stores.redis_prefix) = (Some(Secret::new(redis_url())), prefix);
        })
        .without_gateway(gateway.url())
        .without_edge()
        .start()
        .await
        .expect("triggers and sessions start");
    let Serving { sessions, triggers: _triggers, router: _unused, .. } =
        stack.serve_each::<_, Shutdown, _>(Served::spawn);
    wait_serving(&sessions.url(), "switchyard.sessions.v1.SessionService").await;

    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut command = tokio::process::Command::new(BINARY);
    command
        .args(["--listen", &addr.to_string(), "--no-fast-router"])
        .args(["--shutdown-grace", &format!("{}s", GRACE.as_secs())])
        .env_remove("ROUTER_IN_MEMORY")
        .env("SESSIONS_URL", sessions.url())
        .env("MCP_GATEWAY_URL", gateway.url())
        .env("DATABASE_URL", database_url())
        .env("ROUTER_DB_SCHEMA", router_schema.name())
        .env("REDIS_URL", redis_url())
        .env("ROUTER_REDIS_PREFIX", router_keys.as_str())
        .env("OPENAI_BASE_URL", llm.openai_base_url())
        .env("OPENAI_API_KEY", "sk-router-sigterm-test")
        .env("UNIFIED_CHAT_DEFAULT_MODEL", "openai/gpt-4o-mini")
        .env("UNIFIED_CHAT_ROUTING_TIMEOUT_MS", "0")
        // Decisions wait in the buffer: only the drain at exit can write them in time.
        .env("ROUTER_RECORD_FLUSH_INTERVAL", "1h")
        .env("ROUTER_RECORD_DRAIN_TIMEOUT", format!("{}s", DRAIN.as_secs()));
    let mut router = ServiceProcess::spawn(command, "switchyard-router", addr);
    router.wait_grpc_serving("switchyard.router.v1.RouterService").await;
    let url = router.url();

    // Steady quick turns from three callers on one connection, until the router refuses them.
    let shared = channel(&url).await;
    let load = UnaryLoad::start(3, move |caller, n| {
        let mut client = RouterServiceClient::new(shared.clone());
        async move {
            let question = format!("quick:load-{caller}-{n}");
            let answer = client.chat(ChatRequest { message: question.clone(), ..Default::default() }).await?;
            let content = answer.into_inner().message.map(|m| m.content).unwrap_or_default();
            assert_eq!(content, format!("answer to: {question}"), "a turn answered with its own answer");
            Ok(())
        }
    });
    // Turns in flight at the signal: unary ones the vendor answers within and past the grace,
    // a stream within it and one past it.
    let unary = |question: &'static str| {
        let url = url.clone();
        tokio::spawn(async move {
            let mut client = RouterServiceClient::new(channel(&url).await);
            let started = Instant::now();
            let result = client.chat(ChatRequest { message: question.into(), ..Default::default() }).await;
            (result.map(tonic::Response::into_inner), started.elapsed())
        })
    };
    let (slow_a, slow_b, hang) = (unary("slow:a"), unary("slow:b"), unary("hang:past the grace"));
    let story = tokio::spawn(stream_turn(url.clone(), "story:short"));
    let long_story = tokio::spawn(stream_turn(url.clone(), "long-story:past the grace"));
    asked(&llm, &["slow:a", "slow:b", "hang:past the grace", "story:short", "long-story:past the grace"]).await;

    let signaled = router.sigterm();
    router.refuses_new_connections(Duration::from_secs(2)).await;
    let fresh = match Channel::from_shared(url.clone()).unwrap().connect().await {
        Ok(channel) => RouterServiceClient::new(channel).chat(ChatRequest::default()).await.map(drop),
        Err(err) => Err(tonic::Status::unavailable(err.to_string())),
    };
    assert_eq!(fresh.expect_err("a new call after the SIGTERM").code(), Code::Unavailable);

    let mut decisions = BTreeMap::new();
    for turn in [slow_a, slow_b] {
        let (answer, took) = turn.await.expect("unary task");
        let answer = answer.expect("a unary turn in flight finishes");
        assert!(answer.message.unwrap().content.starts_with("answer to: slow:"), "answered in full");
        assert!(took < GRACE, "answered within the grace: {took:?}");
        decisions.insert(answer.id, false);
    }
    let (id, completed, text, end) = story.await.expect("story task");
    assert!(completed && end.is_none(), "the stream in flight finishes: {end:?}");
    assert_eq!(text, "answer to: story:short".repeat(8));
    decisions.insert(id, false);
    let (id, completed, _, end) = long_story.await.expect("long story task");
    let status = end.expect("a stream past the grace must not end cleanly");
    assert!(!completed);
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("shutting down"), "{status:?}");
    decisions.insert(id, true);
    let (hung, took) = hang.await.expect("hang task");
    let status = hung.expect_err("a turn whose vendor answers after the grace cannot be answered");
    eprintln!("the unary turn past the grace ended {:?} {:?} after {took:?}", status.code(), status.message());
    assert!(took < GRACE + Duration::from_secs(2), "ended at the grace, not hung: {took:?}");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");

    let exit = router.exits(GRACE + DRAIN + Duration::from_secs(2)).await;
    let stopped_after = signaled.elapsed();
    assert!(exit.success(), "exit 0 after SIGTERM: {exit:?}");
    let calls = load.finish().await;
    let answered = assert_answered_or_refused("router", &calls, signaled);
    assert!(answered >= 3, "the load was under way: {calls:?}");
    eprintln!("{answered} quick turns answered; the process exited {stopped_after:?} after SIGTERM");

    // Every decision the router took is in Postgres: the drain at exit wrote them.
    let pool = sqlx::PgPool::connect(&database_url()).await.expect("postgres");
    // The message text is kept only with the routing cache on (off here), so turns are told
    // apart by the ids the callers saw and by the interrupted flag.
    let rows: Vec<(String, bool)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT id, interrupted FROM \"{}\".routing_decisions",
        router_schema.name()
    )))
    .fetch_all(&pool)
    .await
    .expect("decisions");
    let finished = rows.iter().filter(|(_, interrupted)| !interrupted).count();
    // The quick turns answered, the two slow ones and the short stream.
    assert_eq!(finished, answered + 3, "every turn answered has its decision");
    let cut = rows.iter().filter(|(_, interrupted)| *interrupted).count();
    // The stream and the unary turn past the grace, each recorded as interrupted.
    assert_eq!(cut, 2, "the turns past the grace are recorded, interrupted");
    let by_id: BTreeMap<String, bool> = rows.into_iter().collect();
    for (id, interrupted) in &decisions {
        assert_eq!(by_id.get(id), Some(interrupted), "decision {id} drained at exit (interrupted: {interrupted})");
    }
    pool.close().await;
}
