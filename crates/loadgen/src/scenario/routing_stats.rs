//! `routing-stats`: RouterService.GetRoutingStats over one tenant's window ending now — the
//! analytics read an operator's dashboard makes, timed against a filled decisions table
//! (scripts/bench-stats.sh fills one with millions of rows).

use anyhow::Context;
use chrono::Utc;
use switchyard_kit::proto_time::timestamp;
use switchyard_proto::router::v1::{GetRoutingStatsRequest, router_service_client::RouterServiceClient};
use tonic::{
    Request, Status,
    metadata::{Ascii, MetadataValue},
};

use super::Scenario;
use crate::connections::Connections;

#[derive(clap::Args)]
pub struct Args {
    /// gRPC URL of the router.
    #[arg(long, default_value = "http://127.0.0.1:50053")]
    pub target: String,

    /// The tenant whose figures are read (`x-tenant-id`); the default tenant when absent.
    #[arg(long)]
    pub tenant: Option<String>,

    /// The window's length, ending at each call's time (e.g. 24h, 720h).
    #[arg(long, default_value = "24h", value_parser = crate::cli::parse_duration)]
    pub window: std::time::Duration,
}

pub struct RoutingStats {
    connections: Connections,
    tenant: Option<MetadataValue<Ascii>>,
    window: chrono::Duration,
}

impl RoutingStats {
    pub fn new(args: Args, connections: Connections) -> anyhow::Result<Self> {
        let tenant = args
            .tenant
            .as_deref()
            .map(|tenant| MetadataValue::try_from(tenant).context("--tenant is not a valid header value"))
            .transpose()?;
        let window = chrono::Duration::from_std(args.window).context("--window is too long")?;
        Ok(Self { connections, tenant, window })
    }

    fn request(&self) -> Request<GetRoutingStatsRequest> {
        let until = Utc::now();
        let mut request = Request::new(GetRoutingStatsRequest {
            since: Some(timestamp(until - self.window)),
            until: Some(timestamp(until)),
        });
        if let Some(tenant) = &self.tenant {
            request.metadata_mut().insert("x-tenant-id", tenant.clone());
        }
        request
    }
}

impl Scenario for RoutingStats {
    const NAME: &'static str = "routing-stats";

    async fn setup(&mut self) -> anyhow::Result<()> {
        let mut client = RouterServiceClient::new(self.connections.for_worker(0));
        let stats = client.get_routing_stats(self.request()).await.context("probe GetRoutingStats")?.into_inner();
        // A window with no decisions measures nothing worth reporting.
        anyhow::ensure!(stats.total > 0, "the tenant has no decisions in the window");
        Ok(())
    }

    fn call(&self, worker: usize, _seq: u64) -> impl Future<Output = Result<(), Status>> + Send {
        let mut client = RouterServiceClient::new(self.connections.for_worker(worker));
        let request = self.request();
        async move { client.get_routing_stats(request).await.map(|_| ()) }
    }
}
