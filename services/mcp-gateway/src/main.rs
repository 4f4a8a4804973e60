//! `switchyard-mcp-gateway`: many MCP servers as one, tools filtered by context.

use clap::Parser;
use switchyard_kit::{TelemetryArgs, shutdown_signal, telemetry};
use switchyard_mcp_gateway::{GatewayConfig, GatewayServer, serve_stdio};

/// Many MCP servers as one, with `set_context` and tools filtered by context (MCP at /mcp or
/// stdio; gRPC: switchyard.mcp.v1).
#[derive(Parser)]
#[command(name = "switchyard-mcp-gateway", version)]
struct Cli {
    #[command(flatten)]
    config: GatewayConfig,
    #[command(flatten)]
    telemetry: TelemetryArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let _telemetry = telemetry::init("switchyard-mcp-gateway", &cli.telemetry)?;
    switchyard_kit::tls::install_crypto_provider();
    if cli.config.stdio {
        serve_stdio(&cli.config, shutdown_signal()).await
    } else {
        let server = GatewayServer::bind(&cli.config).await?;
        tracing::info!(grpc = %server.local_addr(), mcp = %server.mcp_addr(), "mcp-gateway listening");
        server.serve(shutdown_signal()).await
    }
}
