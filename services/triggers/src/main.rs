//! `switchyard-triggers`: the trigger detection gRPC service.

use clap::Parser;
use switchyard_kit::{TelemetryArgs, shutdown_signal, telemetry};
use switchyard_triggers::{TriggersConfig, TriggersServer};

/// Detects which expert role a query belongs to (gRPC: switchyard.triggers.v1.TriggerService).
#[derive(Parser)]
#[command(name = "switchyard-triggers", version)]
struct Cli {
    #[command(flatten)]
    config: TriggersConfig,
    #[command(flatten)]
    telemetry: TelemetryArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let _telemetry = telemetry::init("switchyard-triggers", &cli.telemetry)?;
    let server = TriggersServer::bind(&cli.config).await?;
    server.serve(shutdown_signal()).await
}
