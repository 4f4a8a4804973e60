//! `switchyard-edge`: the HTTP/JSON front door (REST API, SSE, OpenAI-compatible chat,
//! console).

use clap::Parser;
use switchyard_edge::{EdgeConfig, EdgeServer};
use switchyard_kit::{TelemetryArgs, shutdown_signal, telemetry};

/// Switchyard's HTTP front door: the REST API transcoded to the gRPC services, Server-Sent
/// Events, OpenAI-compatible `/v1/chat/completions`, API keys and JWTs, and a console at `/`.
#[derive(Parser)]
#[command(name = "switchyard-edge", version)]
struct Cli {
    #[command(flatten)]
    config: EdgeConfig,
    #[command(flatten)]
    telemetry: TelemetryArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let _telemetry = telemetry::init("switchyard-edge", &cli.telemetry)?;
    switchyard_kit::tls::install_crypto_provider();
    let server = EdgeServer::bind(&cli.config).await?;
    tracing::info!(listen = %server.local_addr(), "switchyard-edge serving");
    server.serve(shutdown_signal()).await
}
