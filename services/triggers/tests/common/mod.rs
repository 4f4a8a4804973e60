//! The triggers service's own test setup: the service started on port 0, in memory or on the
//! real Postgres in a schema of the test's own (the test kit's guard).
#![allow(dead_code)]

use std::{sync::Arc, time::Duration};

use switchyard_proto::triggers::v1::trigger_service_client::TriggerServiceClient;
use switchyard_testkit::{Served, database_url};
use switchyard_triggers::{TriggersConfig, TriggersServer, store::TriggerStore};
use tonic::transport::Channel;

pub fn postgres_config(schema: &str) -> TriggersConfig {
    let mut config = TriggersConfig::in_memory("127.0.0.1:0".parse().expect("addr"));
    config.stores.in_memory = false;
    config.stores.database_url = Some(database_url().into());
    config.stores.db_schema = schema.to_owned();
    config.sync_interval = Duration::from_millis(250);
    config
}

/// A running server; stops when dropped or on `stop`.
pub type Running = Served;

pub async fn client(server: &Running) -> TriggerServiceClient<Channel> {
    TriggerServiceClient::connect(server.url()).await.expect("connect to triggers")
}

pub async fn spawn(config: &TriggersConfig) -> Running {
    let server = TriggersServer::bind(config).await.expect("bind triggers server");
    start(server)
}

pub async fn spawn_with_store(config: &TriggersConfig, store: Arc<dyn TriggerStore>) -> Running {
    start(TriggersServer::bind_with_store(config, store).await.expect("bind triggers server"))
}

fn start(server: TriggersServer) -> Running {
    Served::spawn(server.local_addr(), |shutdown| server.serve(shutdown))
}
