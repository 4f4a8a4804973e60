//! The `switchyard-sessions` binary on SIGTERM: records still held in its buffer (here the
//! coalesced turn counts, which the background writer would only write an hour later) are in
//! Postgres once the process has exited.

mod common;

use std::{process::Stdio, time::Duration};

use switchyard_proto::sessions::v1::{
    CreateSessionRequest, ProcessQueryRequest, session_service_client::SessionServiceClient,
};
use switchyard_testkit::{KeyPrefix, Schema, database_url, eventually, free_port, redis_url};

#[tokio::test]
async fn records_held_at_sigterm_are_in_postgres_after_exit() {
    let triggers = common::start_triggers().await;
    let (schema, prefix) = (Schema::new("s"), KeyPrefix::new("sy"));
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard-sessions"))
        .args(["--listen", &addr, "--triggers-url", &triggers.url()])
        .args(["--database-url", &database_url(), "--redis-url", &redis_url()])
        .args(["--db-schema", schema.name(), "--redis-prefix", prefix.as_str()])
        // Turn counts wait in the buffer: only the drain at shutdown can write them in time.
        .args(["--record-flush-interval", "1h"])
        .env_remove("SESSIONS_IN_MEMORY")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start switchyard-sessions");

    let url = format!("http://{addr}");
    let channel = eventually(Duration::from_secs(60), "switchyard-sessions listening", || {
        // A process that exited (bad flags, no Postgres) fails the test at once, not at the deadline.
        if let Ok(Some(status)) = child.try_wait() {
            panic!("switchyard-sessions exited before serving: {status}");
        }
        let endpoint = tonic::transport::Endpoint::from_shared(url.clone()).expect("url");
        async move { endpoint.connect().await }
    })
    .await;
    let mut sessions = SessionServiceClient::new(channel);
    let create = CreateSessionRequest {
        session_id: "drain-1".into(),
        initial_role_id: "tech-expert".into(),
        ..Default::default()
    };
    // The roles register with the triggers service in the background; retry until they have.
    eventually(Duration::from_secs(30), "session created", || {
        let (mut sessions, create) = (sessions.clone(), create.clone());
        async move { sessions.create_session(create).await }
    })
    .await;
    for _ in 0..3 {
        let query = ProcessQueryRequest {
            session_id: "drain-1".into(),
            query: "How do I profile a slow Rust service?".into(),
            ..Default::default()
        };
        sessions.process_query(query).await.expect("process query");
    }

    let pid = child.id().expect("pid");
    let status = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().expect("kill");
    assert!(status.success(), "SIGTERM sent");
    let exit = tokio::time::timeout(Duration::from_secs(60), child.wait()).await.expect("exits").expect("status");
    assert!(exit.success(), "clean exit after SIGTERM: {exit:?}");

    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&database_url()).await.expect("postgres");
    let turns: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT turn_count FROM \"{schema}\".sessions WHERE session_id = 'drain-1'"
    )))
    .fetch_one(&mut conn)
    .await
    .expect("the session's record");
    assert_eq!(turns, 3, "the turn counts held at SIGTERM were written before exit");
    drop(conn);
    triggers.stop().await;
}
