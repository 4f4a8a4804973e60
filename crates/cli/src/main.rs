//! `switchyard`: the whole suite in one process for development and demos.

use std::net::SocketAddr;

use anyhow::Context;
use clap::{Parser, Subcommand};
use switchyard_kit::{TelemetryArgs, shutdown_signal, telemetry};
use switchyard_triggers::{TriggersConfig, TriggersServer};

#[derive(Parser)]
#[command(name = "switchyard", version, about = "Context-aware routing for LLM applications")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    telemetry: TelemetryArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Run every service in this process on its default port, with in-memory stores in place
    /// of Postgres and Redis (nothing survives exit).
    Dev(DevArgs),
}

#[derive(clap::Args)]
struct DevArgs {
    /// Host the services listen on (0.0.0.0 to accept other machines).
    #[arg(long, env = "SWITCHYARD_DEV_HOST", default_value = "127.0.0.1")]
    host: std::net::IpAddr,

    /// gRPC port of the triggers service.
    #[arg(long, default_value_t = 50051)]
    triggers_port: u16,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let _telemetry = telemetry::init("switchyard", &cli.telemetry)?;
    match cli.command {
        Command::Dev(args) => dev(args).await,
    }
}

async fn dev(args: DevArgs) -> anyhow::Result<()> {
    let triggers_config = TriggersConfig::in_memory(SocketAddr::new(args.host, args.triggers_port));
    let triggers = TriggersServer::bind(&triggers_config).await.context("starting triggers")?;
    tracing::info!(triggers = %triggers.local_addr(), "switchyard dev: services up (in-memory stores)");
    println!("switchyard dev is running:");
    println!("  triggers  grpc://{}  (switchyard.triggers.v1.TriggerService)", triggers.local_addr());
    println!("Press Ctrl-C to stop.");
    triggers.serve(shutdown_signal()).await
}
