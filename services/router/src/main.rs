//! `switchyard-router`: the unified chat endpoint.

use clap::Parser;
use switchyard_kit::{TelemetryArgs, shutdown_signal, telemetry};
use switchyard_router::{RouterConfig, RouterServer};

/// The unified chat endpoint: the LLM routes each message to a direct answer, the MCP agent
/// or several experts (gRPC: switchyard.router.v1).
#[derive(Parser)]
#[command(name = "switchyard-router", version)]
struct Cli {
    #[command(flatten)]
    config: RouterConfig,
    #[command(flatten)]
    telemetry: TelemetryArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let _telemetry = telemetry::init("switchyard-router", &cli.telemetry)?;
    switchyard_kit::tls::install_crypto_provider();
    let server = RouterServer::bind(&cli.config).await?;
    server.serve(shutdown_signal()).await
}
