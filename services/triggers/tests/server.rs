//! The service kit's server behaviour, seen through the triggers service: load shedding,
//! deadlines, health that follows readiness, and graceful shutdown.

mod common;

use std::{sync::Arc, time::Duration};

use switchyard_proto::triggers::v1::{DetectTriggersRequest, RegisterRoleTriggersRequest};
use switchyard_testkit::eventually;
use switchyard_triggers::{TriggersConfig, store::MemoryStore};
use tonic::Code;
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};

const SERVICE: &str = "switchyard.triggers.v1.TriggerService";

async fn channel(addr: std::net::SocketAddr) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}")).expect("url").connect().await.expect("connect")
}

fn config() -> TriggersConfig {
    TriggersConfig::in_memory("127.0.0.1:0".parse().expect("addr"))
}

async fn wait_for_status(addr: std::net::SocketAddr, want: ServingStatus) {
    let health = HealthClient::new(channel(addr).await);
    eventually(Duration::from_secs(10), &format!("health {want:?}"), || {
        let mut health = health.clone();
        async move {
            let status = health.check(HealthCheckRequest { service: SERVICE.into() }).await.expect("check");
            let status = status.into_inner().status();
            if status == want { Ok(()) } else { Err(format!("{status:?}")) }
        }
    })
    .await;
}

#[tokio::test]
async fn over_the_concurrency_limit_calls_are_shed_but_health_still_answers() {
    let mut config = config();
    config.server.concurrency_limit = 0;
    let server = common::spawn(&config).await;
    let err = common::client(&server)
        .await
        .detect_triggers(DetectTriggersRequest { query: "hello".into() })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert!(err.message().contains("overloaded"), "{}", err.message());
    wait_for_status(server.addr, ServingStatus::Serving).await;
    server.stop().await;
}

#[tokio::test]
async fn calls_past_the_server_deadline_fail_with_deadline_exceeded() {
    let mut config = config();
    config.server.request_timeout = Duration::ZERO;
    let server = common::spawn(&config).await;
    // Registration rebuilds the matcher on a blocking thread, so it cannot finish at once.
    let err = common::client(&server)
        .await
        .register_role_triggers(RegisterRoleTriggersRequest {
            role_id: "slow".into(),
            domains: vec!["finance".into()],
            ..RegisterRoleTriggersRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    server.stop().await;
}

#[tokio::test]
async fn oversize_messages_are_refused() {
    let mut config = config();
    config.server.max_message_bytes = 1024;
    config.max_query_bytes = 1 << 20;
    let server = common::spawn(&config).await;
    let err = common::client(&server)
        .await
        .detect_triggers(DetectTriggersRequest { query: "x".repeat(4096) })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
    server.stop().await;
}

#[tokio::test]
async fn shutdown_reports_not_serving_then_stops_within_the_grace_period() {
    let mut config = config();
    config.server.shutdown_grace = Duration::from_millis(500);
    let server = common::spawn_with_store(&config, Arc::new(MemoryStore::default())).await;
    wait_for_status(server.addr, ServingStatus::Serving).await;

    // A watcher (an in-flight stream) sees the status flip before the server goes away.
    let mut health = HealthClient::new(channel(server.addr).await);
    let mut watch = health.watch(HealthCheckRequest { service: SERVICE.into() }).await.expect("watch").into_inner();
    let first = watch.message().await.expect("stream").expect("status");
    assert_eq!(first.status(), ServingStatus::Serving);

    let started = std::time::Instant::now();
    let stopping = tokio::spawn(server.stop());
    let next = tokio::time::timeout(Duration::from_secs(2), watch.message()).await.expect("status update in time");
    assert_eq!(next.expect("stream").expect("status").status(), ServingStatus::NotServing);
    stopping.await.expect("stopped");
    assert!(started.elapsed() < Duration::from_secs(3), "drain is bounded by the grace period");
}
