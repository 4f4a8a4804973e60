//! `switchyard-loadgen`: drives one RPC of a Switchyard service with concurrent clients, in a
//! closed loop or at a target rate, and prints throughput and latency percentiles.

mod cli;
mod connections;
mod cpu;
mod http1;
mod pacer;
mod redis_floor;
mod report;
mod runner;
mod scenario;
mod schedule;
mod stats;

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, ensure};
use clap::Parser;

use crate::cli::{Cli, RunArgs, ScenarioCommand};
use crate::connections::Connections;
use crate::report::{Report, RunSetup};
use crate::runner::RunPlan;
use crate::scenario::Scenario;
use crate::scenario::chat::Chat;
use crate::scenario::detect_triggers::DetectTriggers;
use crate::scenario::health_check::HealthCheck;
use crate::scenario::http_chat::HttpChat;
use crate::scenario::llm_direct::LlmDirect;
use crate::scenario::process_query::ProcessQuery;
use crate::scenario::routing_stats::RoutingStats;
use crate::scenario::sessions_redis_floor::SessionsRedisFloor;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => code,
        Err(error) => {
            // One line with the whole cause chain; no backtrace, this is a user-facing tool.
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    ensure!(!cli.run.duration.is_zero(), "--duration must be longer than zero");
    ensure!(!cli.run.timeout.is_zero(), "--timeout must be longer than zero");

    match cli.scenario {
        ScenarioCommand::DetectTriggers(args) => {
            let target = args.target.clone();
            let connections = Connections::open(&target, cli.run.connections.get()).await?;
            drive(DetectTriggers::new(args, connections), target, &cli.run).await
        }
        ScenarioCommand::ProcessQuery(args) => {
            let target = args.target.clone();
            let connections = Connections::open(&target, cli.run.connections.get()).await?;
            drive(ProcessQuery::new(args, connections), target, &cli.run).await
        }
        ScenarioCommand::SessionsRedisFloor(args) => {
            let target = args.redis_url.clone();
            drive(SessionsRedisFloor::new(args), target, &cli.run).await
        }
        ScenarioCommand::Chat(args) => {
            let target = args.target.clone();
            let connections = Connections::open(&target, cli.run.connections.get()).await?;
            drive(Chat::new(args, connections), target, &cli.run).await
        }
        ScenarioCommand::HttpChat(args) => {
            let target = args.target.clone();
            drive(HttpChat::new(args, cli.run.connections.get())?, target, &cli.run).await
        }
        ScenarioCommand::LlmDirect(args) => {
            let target = args.base_url.clone();
            drive(LlmDirect::new(args)?, target, &cli.run).await
        }
        ScenarioCommand::RoutingStats(args) => {
            let target = args.target.clone();
            let connections = Connections::open(&target, cli.run.connections.get()).await?;
            drive(RoutingStats::new(args, connections)?, target, &cli.run).await
        }
        ScenarioCommand::HealthCheck(args) => {
            let connections = Connections::open(&args.target, cli.run.connections.get()).await?;
            drive(HealthCheck::new(connections), args.target, &cli.run).await
        }
    }
}

/// How long after a run the CPU time of the processes under test is read, so that the work of
/// the last calls (the rest of a stream timed to its first token) is in it.
const STREAMS_SETTLE: std::time::Duration = std::time::Duration::from_millis(200);

/// Sets the scenario up, runs it, and prints the report. Fails (non-zero exit) when the setup
/// fails or when not a single call succeeded, so scripts notice a run that measured nothing.
async fn drive<S: Scenario>(mut scenario: S, target: String, run: &RunArgs) -> anyhow::Result<ExitCode> {
    scenario.setup().await.with_context(|| format!("setting up scenario {}", S::NAME))?;

    let plan = RunPlan {
        concurrency: run.concurrency.get(),
        warmup: run.warmup,
        duration: run.duration,
        rate: run.rate,
        call_timeout: run.timeout,
    };
    let cpu_before = cpu::snapshot(&run.cpu_of)?;
    let outcome = runner::run(Arc::new(scenario), &plan).await?;
    let cpu_per_call = if run.cpu_of.is_empty() {
        None
    } else {
        // Streams a scenario stopped timing at their first token are still being read.
        tokio::time::sleep(STREAMS_SETTLE).await;
        let after = cpu::snapshot(&run.cpu_of)?;
        Some(cpu::per_call(&run.cpu_of, &cpu_before, &after, outcome.stats.calls_made))
    };

    let setup = RunSetup {
        scenario: S::NAME,
        target,
        concurrency: plan.concurrency,
        connections: run.connections.get(),
        target_rate: plan.rate,
    };
    let mut report = Report::new(setup, &outcome.stats, outcome.measured);
    report.cpu_ms_per_call = cpu_per_call;
    if run.json {
        println!("{}", report.to_json().context("encoding the report as JSON")?);
    } else {
        print!("{report}");
    }

    if outcome.stats.ok == 0 {
        eprintln!("error: no call succeeded");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
