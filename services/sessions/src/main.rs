//! `switchyard-sessions`: roles and live sessions with context switching.

use clap::Parser;
use switchyard_kit::{TelemetryArgs, shutdown_signal, telemetry};
use switchyard_sessions::{SessionsConfig, SessionsServer};

/// Roles and live sessions with context switching (gRPC: switchyard.sessions.v1).
#[derive(Parser)]
#[command(name = "switchyard-sessions", version)]
struct Cli {
    #[command(flatten)]
    config: SessionsConfig,
    #[command(flatten)]
    telemetry: TelemetryArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let _telemetry = telemetry::init("switchyard-sessions", &cli.telemetry)?;
    let server = SessionsServer::bind(&cli.config).await?;
    server.serve(shutdown_signal()).await
}
