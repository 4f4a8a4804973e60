//! `switchyard`: the whole suite in one process for development and demos.

use std::net::SocketAddr;

use anyhow::Context;
use clap::{Parser, Subcommand};
use switchyard_kit::{TelemetryArgs, shutdown_signal, telemetry};
use switchyard_sessions::{SessionsConfig, SessionsServer};
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
    let triggers_config = TriggersConfig::in_memory(SocketAddr::new(args.host, args.triggers_port));
    let triggers = TriggersServer::bind(&triggers_config).await.context("starting triggers")?;
    let triggers_url = format!("http://{}", triggers.local_addr());
    let sessions_config = SessionsConfig::in_memory(SocketAddr::new(args.host, args.sessions_port), &triggers_url);
    let sessions = SessionsServer::bind(&sessions_config).await.context("starting sessions")?;

    tracing::info!(triggers = %triggers.local_addr(), sessions = %sessions.local_addr(), "switchyard dev: services up (in-memory stores)");
    println!("switchyard dev is running (in-memory stores; nothing survives exit):");
    println!("  triggers  grpc://{}  switchyard.triggers.v1.TriggerService", triggers.local_addr());
    println!("  sessions  grpc://{}  switchyard.sessions.v1.SessionService, RoleService", sessions.local_addr());
    println!("Press Ctrl-C to stop.");

    // One signal stops every service; each drains its own in-flight calls.
    let (stop, _) = tokio::sync::broadcast::channel::<()>(1);
    let stopped = |mut rx: tokio::sync::broadcast::Receiver<()>| async move {
        let _ = rx.recv().await;
    };
    let servers = tokio::spawn({
        let (a, b) = (stop.subscribe(), stop.subscribe());
        async move { tokio::try_join!(triggers.serve(stopped(a)), sessions.serve(stopped(b))) }
    });
    shutdown_signal().await;
    let _ = stop.send(());
    servers.await.context("dev servers")??;
    Ok(())
}
