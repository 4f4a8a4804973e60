//! `health-check`: grpc.health.v1.Health/Check, the cheapest call any Switchyard server
//! answers. Run against the same server as another scenario it measures the floor — what the
//! transport, the server's layers and this generator cost with no service work — so other
//! results can be stated as ratios to it.

use tonic::Status;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

use super::Scenario;
use crate::connections::Connections;

#[derive(clap::Args)]
pub struct Args {
    /// gRPC URL of any Switchyard service.
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    pub target: String,
}

pub struct HealthCheck {
    connections: Connections,
}

impl HealthCheck {
    pub fn new(connections: Connections) -> Self {
        Self { connections }
    }
}

impl Scenario for HealthCheck {
    const NAME: &'static str = "health-check";

    async fn setup(&mut self) -> anyhow::Result<()> {
        let mut client = HealthClient::new(self.connections.for_worker(0));
        client.check(HealthCheckRequest { service: String::new() }).await?;
        Ok(())
    }

    fn call(&self, worker: usize, _seq: u64) -> impl Future<Output = Result<(), Status>> + Send {
        let mut client = HealthClient::new(self.connections.for_worker(worker));
        async move { client.check(HealthCheckRequest { service: String::new() }).await.map(|_| ()) }
    }
}
