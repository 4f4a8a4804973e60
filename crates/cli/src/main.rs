//! `switchyard`: the whole suite in one process for development and demos.

use clap::{Parser, Subcommand};
use switchyard_cli::{DevPorts, DevStack};
use switchyard_kit::{TelemetryArgs, shutdown_signal, telemetry};

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

    /// gRPC port of the sessions service.
    #[arg(long, default_value_t = 50052)]
    sessions_port: u16,
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
    let stack =
        DevStack::start(DevPorts { host: args.host, triggers: args.triggers_port, sessions: args.sessions_port })
            .await?;
    tracing::info!(triggers = %stack.triggers_addr(), sessions = %stack.sessions_addr(), "switchyard dev: services up");
    println!("switchyard dev is running (in-memory stores; nothing survives exit):");
    println!("  triggers  grpc://{}  switchyard.triggers.v1.TriggerService", stack.triggers_addr());
    println!("  sessions  grpc://{}  switchyard.sessions.v1.SessionService, RoleService", stack.sessions_addr());
    println!("Press Ctrl-C to stop.");
    stack.serve(shutdown_signal()).await
}
