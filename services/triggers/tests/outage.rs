//! A Postgres outage, with the real Postgres behind the test kit's cuttable proxy: the service
//! keeps answering from its registry in memory, so it stays SERVING; the store's own health
//! name says what is down, and both come back when Postgres does.

mod common;

use std::time::Duration;

use switchyard_proto::triggers::v1::{DetectTriggersRequest, GetBestRoleRequest, RegisterRoleTriggersRequest};
use switchyard_testkit::{Schema, eventually, postgres, proxy::TcpProxy};
use switchyard_triggers::STORE_HEALTH;
use tonic::transport::Channel;
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};

const SERVICE: &str = "switchyard.triggers.v1.TriggerService";

async fn health(channel: &Channel, service: &str) -> Result<ServingStatus, String> {
    let request = HealthCheckRequest { service: service.into() };
    match HealthClient::new(channel.clone()).check(request).await {
        Ok(response) => Ok(response.into_inner().status()),
        Err(status) => Err(format!("{service}: {status:?}")),
    }
}

async fn wait_for(channel: &Channel, service: &str, wanted: ServingStatus) {
    eventually(Duration::from_secs(20), &format!("{service} {wanted:?}"), || async {
        let status = health(channel, service).await?;
        if status == wanted { Ok(()) } else { Err(format!("{status:?}")) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_outage_leaves_the_service_serving_from_memory() {
    let schema = Schema::new("trig_cut");
    let proxy = TcpProxy::start(postgres::database_addr()).await;
    let mut config = common::postgres_config(&schema);
    config.stores.database_url = Some(postgres::database_url_via(proxy.addr()).into());
    config.no_semantic = true;
    let server = common::spawn(&config).await;
    let channel = tonic::transport::Endpoint::from_shared(server.url()).unwrap().connect().await.unwrap();
    let mut client = common::client(&server).await;
    client
        .register_role_triggers(RegisterRoleTriggersRequest {
            role_id: "finance-expert".into(),
            domains: vec!["finance".into()],
            ..RegisterRoleTriggersRequest::default()
        })
        .await
        .expect("register while Postgres is up");
    wait_for(&channel, SERVICE, ServingStatus::Serving).await;
    wait_for(&channel, STORE_HEALTH, ServingStatus::Serving).await;

    proxy.cut();
    wait_for(&channel, STORE_HEALTH, ServingStatus::NotServing).await;
    assert_eq!(health(&channel, SERVICE).await, Ok(ServingStatus::Serving), "it can still answer");
    let detected = client
        .detect_triggers(DetectTriggersRequest { query: "should I refinance my mortgage".into() })
        .await
        .expect("matching answers during the outage")
        .into_inner();
    assert_eq!(detected.matches.first().map(|m| m.role_id.as_str()), Some("finance-expert"), "{detected:?}");
    let best = client
        .get_best_role(GetBestRoleRequest {
            query: "what interest rate on the loan".into(),
            ..GetBestRoleRequest::default()
        })
        .await
        .expect("best role during the outage")
        .into_inner();
    assert_eq!(best.role_id, "finance-expert");
    // The liveness name and the service stayed up throughout.
    assert_eq!(health(&channel, "").await, Ok(ServingStatus::Serving));
    assert_eq!(health(&channel, SERVICE).await, Ok(ServingStatus::Serving));

    proxy.restore();
    wait_for(&channel, STORE_HEALTH, ServingStatus::Serving).await;
    assert_eq!(health(&channel, SERVICE).await, Ok(ServingStatus::Serving));
    server.stop().await;
}
