//! The triggers service's own test setup: the service started on port 0, in memory or on the
//! real Postgres in a schema of the test's own (the test kit's guard).
#![allow(dead_code)]

use std::{net::SocketAddr, sync::Arc, time::Duration};

use switchyard_proto::triggers::v1::trigger_service_client::TriggerServiceClient;
use switchyard_testkit::database_url;
use switchyard_triggers::{TriggersConfig, TriggersServer, store::TriggerStore};
use tokio::{sync::oneshot, task::JoinHandle};
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
pub struct Running {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Running {
    pub async fn client(&self) -> TriggerServiceClient<Channel> {
        TriggerServiceClient::connect(format!("http://{}", self.addr)).await.expect("connect to triggers")
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.expect("server task").expect("server ran cleanly");
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn spawn(config: &TriggersConfig) -> Running {
    let server = TriggersServer::bind(config).await.expect("bind triggers server");
    start(server)
}

pub async fn spawn_with_store(config: &TriggersConfig, store: Arc<dyn TriggerStore>) -> Running {
    start(TriggersServer::bind_with_store(config, store).await.expect("bind triggers server"))
}

fn start(server: TriggersServer) -> Running {
    let addr = server.local_addr();
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(server.serve(async move {
        let _ = stopped.await;
    }));
    Running { addr, stop: Some(stop), task }
}
