//! A real SIGTERM to the `switchyard-sessions` process under load: callers switching their
//! sessions' roles back and forth on one connection. Every call sent before the signal is
//! answered, later ones are refused as a stopping server refuses, new connections are refused
//! once the signal is taken, the process exits 0 within its grace and drain, and every switch
//! it acknowledged is in Postgres after (the record buffer flushed hourly here, so only the
//! drain at exit can write what it still holds).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{collections::BTreeMap, net::SocketAddr, time::Duration};

use switchyard_proto::sessions::v1::{
    CreateSessionRequest, GetSessionRequest, SwitchContextRequest, session_service_client::SessionServiceClient,
};
use switchyard_testkit::{
    KeyPrefix, Schema, database_url, eventually, free_port,
    process::{ServiceProcess, UnaryLoad, assert_answered_or_refused},
    redis_url,
};
use tonic::{Code, transport::Channel};

const BINARY: &str = env!("CARGO_BIN_EXE_switchyard-sessions");
const GRACE: Duration = Duration::from_secs(3);
const DRAIN: Duration = Duration::from_secs(5);
const CALLERS: usize = 4;
const ROLES: [&str; 2] = ["finance-expert", "tech-expert"];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_under_load_answers_the_calls_sent_refuses_new_ones_and_drains_the_switches() {
    let triggers = common::start_triggers().await;
    let (schema, prefix) = (Schema::new("sessions_sigterm"), KeyPrefix::new("sessions-sigterm"));
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut command = tokio::process::Command::new(BINARY);
    command
        .args(["--listen", &addr.to_string(), "--triggers-url", &triggers.url()])
        .args(["--database-url", &database_url(), "--redis-url", &redis_url()])
        .args(["--db-schema", schema.name(), "--redis-prefix", prefix.as_str()])
        .args(["--shutdown-grace", &format!("{}s", GRACE.as_secs())])
        .args(["--record-flush-interval", "1h", "--record-drain-timeout", &format!("{}s", DRAIN.as_secs())])
        .env_remove("SESSIONS_IN_MEMORY");
    let mut sessions = ServiceProcess::spawn(command, "switchyard-sessions", addr);
    sessions.wait_grpc_serving("switchyard.sessions.v1.SessionService").await;

    let channel = Channel::from_shared(sessions.url()).unwrap().connect().await.expect("reachable");
    let client = SessionServiceClient::new(channel);
    for caller in 0..CALLERS {
        let create = CreateSessionRequest {
            session_id: format!("sigterm-{caller}"),
            initial_role_id: "general-assistant".into(),
            ..Default::default()
        };
        // The roles register with the triggers service in the background; retry until they have.
        eventually(Duration::from_secs(30), "session created", || {
            let (mut client, create) = (client.clone(), create.clone());
            async move { client.create_session(create).await }
        })
        .await;
    }

    // Each caller switches its session between two experts, one call at a time: every call
    // acknowledged is one switch to record.
    let load = UnaryLoad::start(CALLERS, move |caller, n| {
        let mut client = client.clone();
        async move {
            let request = SwitchContextRequest {
                session_id: format!("sigterm-{caller}"),
                new_role_id: ROLES[n % 2].into(),
                reason: format!("switch {n}"),
            };
            let answer = client.switch_context(request).await?.into_inner();
            assert!(answer.switched && answer.role_id == ROLES[n % 2], "switch {caller}/{n}: {answer:?}");
            Ok(())
        }
    });
    load.under_way(CALLERS * 3).await;

    let signaled = sessions.sigterm();
    sessions.refuses_new_connections(Duration::from_secs(2)).await;
    let fresh = match Channel::from_shared(sessions.url()).unwrap().connect().await {
        Ok(channel) => {
            let request = GetSessionRequest { session_id: "sigterm-0".into(), include_messages: false };
            SessionServiceClient::new(channel).get_session(request).await.map(drop)
        }
        Err(err) => Err(tonic::Status::unavailable(err.to_string())),
    };
    assert_eq!(fresh.expect_err("a new call after the SIGTERM").code(), Code::Unavailable);
    let exit = sessions.exits(GRACE + DRAIN + Duration::from_secs(2)).await;
    let stopped_after = signaled.elapsed();
    assert!(exit.success(), "exit 0 after SIGTERM: {exit:?}");
    let calls = load.finish().await;
    let answered = assert_answered_or_refused("sessions", &calls, signaled);
    assert!(answered >= CALLERS * 2, "the load was under way: {answered} calls answered");
    eprintln!("{answered} switches answered; the process exited {stopped_after:?} after SIGTERM");

    // Every switch acknowledged is in Postgres, per session.
    let mut acknowledged = BTreeMap::new();
    for call in calls.iter().filter(|call| call.result.is_ok()) {
        *acknowledged.entry(format!("sigterm-{}", call.caller)).or_insert(0_i64) += 1;
    }
    let pool = sqlx::PgPool::connect(&database_url()).await.expect("postgres");
    let recorded: Vec<(String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT session_id, count(*) FROM \"{}\".session_switches GROUP BY session_id ORDER BY session_id",
        schema.name()
    )))
    .fetch_all(&pool)
    .await
    .expect("switches");
    assert_eq!(recorded.into_iter().collect::<BTreeMap<_, _>>(), acknowledged, "every switch drained at exit");
    pool.close().await;
    triggers.stop().await;
}
