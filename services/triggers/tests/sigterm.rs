//! A real SIGTERM to the `switchyard-triggers` process under load: callers registering roles
//! and detecting triggers on one connection. Every call sent before the signal is answered,
//! later ones are refused as a stopping server refuses, new connections are refused once the
//! signal is taken, the process exits 0 within its grace, and every registration it
//! acknowledged is in Postgres after.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{collections::BTreeSet, net::SocketAddr, time::Duration};

use switchyard_proto::triggers::v1::{
    DetectTriggersRequest, ListDomainsRequest, RegisterRoleTriggersRequest,
    trigger_service_client::TriggerServiceClient,
};
use switchyard_testkit::{
    Schema, database_url, free_port,
    process::{ServiceProcess, UnaryLoad, assert_answered_or_refused},
};
use tonic::{Code, transport::Channel};

const BINARY: &str = env!("CARGO_BIN_EXE_switchyard-triggers");
const GRACE: Duration = Duration::from_secs(3);
const CALLERS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_under_load_answers_the_calls_sent_refuses_new_ones_and_keeps_every_registration() {
    let schema = Schema::new("triggers_sigterm");
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut command = tokio::process::Command::new(BINARY);
    command
        .args(["--listen", &addr.to_string(), "--no-semantic"])
        .args(["--database-url", &database_url(), "--db-schema", schema.name()])
        .args(["--shutdown-grace", &format!("{}s", GRACE.as_secs())])
        .env_remove("TRIGGERS_IN_MEMORY");
    let mut triggers = ServiceProcess::spawn(command, "switchyard-triggers", addr);
    triggers.wait_grpc_serving("switchyard.triggers.v1.TriggerService").await;

    // Each caller registers a role of its own, then detects the triggers of a query, in turn.
    let channel = Channel::from_shared(triggers.url()).unwrap().connect().await.expect("reachable");
    let client = TriggerServiceClient::new(channel);
    let load = UnaryLoad::start(CALLERS, move |caller, n| {
        let mut client = client.clone();
        async move {
            if n % 2 == 0 {
                let request = RegisterRoleTriggersRequest {
                    role_id: format!("sigterm-{caller}-{n}"),
                    domains: vec!["finance".into()],
                    ..Default::default()
                };
                client.register_role_triggers(request).await?;
            } else {
                let request = DetectTriggersRequest { query: "Should I refinance my mortgage?".into() };
                let detected = client.detect_triggers(request).await?.into_inner();
                assert!(!detected.matches.is_empty(), "the registered roles match: {detected:?}");
            }
            Ok(())
        }
    });
    load.under_way(CALLERS * 4).await;

    let signaled = triggers.sigterm();
    triggers.refuses_new_connections(Duration::from_secs(2)).await;
    let fresh = match Channel::from_shared(triggers.url()).unwrap().connect().await {
        Ok(channel) => TriggerServiceClient::new(channel).list_domains(ListDomainsRequest::default()).await.map(drop),
        Err(err) => Err(tonic::Status::unavailable(err.to_string())),
    };
    assert_eq!(fresh.expect_err("a new call after the SIGTERM").code(), Code::Unavailable);
    let exit = triggers.exits(GRACE + Duration::from_secs(2)).await;
    let stopped_after = signaled.elapsed();
    assert!(exit.success(), "exit 0 after SIGTERM: {exit:?}");
    let calls = load.finish().await;
    let answered = assert_answered_or_refused("triggers", &calls, signaled);
    eprintln!("{answered} calls answered; the process exited {stopped_after:?} after SIGTERM");

    // Every registration acknowledged is in Postgres.
    let acknowledged: BTreeSet<String> = calls
        .iter()
        .filter(|call| call.result.is_ok() && call.number % 2 == 0)
        .map(|call| format!("sigterm-{}-{}", call.caller, call.number))
        .collect();
    let pool = sqlx::PgPool::connect(&database_url()).await.expect("postgres");
    let stored: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT role_id FROM \"{}\".role_triggers WHERE role_id LIKE 'sigterm-%'",
        schema.name()
    )))
    .fetch_all(&pool)
    .await
    .expect("registrations");
    assert_eq!(stored.into_iter().collect::<BTreeSet<_>>(), acknowledged, "every registration acknowledged is kept");
    pool.close().await;
}
