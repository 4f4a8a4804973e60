//! The command line: options shared by every scenario, plus one subcommand per scenario.

use std::num::NonZeroUsize;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::scenario::{
    chat, detect_triggers, health_check, http_chat, llm_direct, process_query, routing_stats, sessions_redis_floor,
};

#[derive(Parser)]
#[command(
    name = "switchyard-loadgen",
    version,
    about = "Load generator for Switchyard gRPC services",
    subcommand_value_name = "SCENARIO",
    subcommand_help_heading = "Scenarios"
)]
pub struct Cli {
    #[command(flatten)]
    pub run: RunArgs,

    #[command(subcommand)]
    pub scenario: ScenarioCommand,
}

// How hard and how long to drive the target; the same for every scenario. The options are
// global so they may come before or after the scenario name. (A plain comment: clap would show
// a doc comment as the program's description.)
#[derive(Args)]
#[command(next_help_heading = "Load options")]
pub struct RunArgs {
    /// Number of concurrent client tasks.
    #[arg(long, global = true, default_value = "32")]
    pub concurrency: NonZeroUsize,

    /// Number of HTTP/2 connections, shared round-robin by the client tasks (http-chat: HTTP/1.1
    /// keep-alive connections, one request at a time each, taken by whichever task is sending).
    #[arg(long, global = true, default_value = "4")]
    pub connections: NonZeroUsize,

    /// How long to measure, after the warm-up (e.g. 10s, 500ms, 2m).
    #[arg(long, global = true, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,

    /// How long to send load before measuring; those calls are made but not recorded.
    #[arg(long, global = true, default_value = "2s", value_parser = parse_duration)]
    pub warmup: Duration,

    /// Target total requests per second across all tasks (open loop, on a fixed schedule).
    /// Without it, each task sends its next request as soon as the previous one completes.
    #[arg(long, global = true, value_parser = parse_rate)]
    pub rate: Option<f64>,

    /// A call taking longer than this is abandoned and counted as DEADLINE_EXCEEDED.
    #[arg(long, global = true, default_value = "5s", value_parser = parse_duration)]
    pub timeout: Duration,

    /// Print the report as one JSON object instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    /// A process under test whose CPU time per call to report, `NAME=PID` (repeatable): read
    /// from /proc/PID/stat from the warm-up's start to the end of the run, over every call made.
    #[arg(long = "cpu-of", global = true, value_parser = crate::cpu::parse_watched)]
    pub cpu_of: Vec<crate::cpu::Watched>,
}

#[derive(Subcommand)]
pub enum ScenarioCommand {
    /// TriggerService.DetectTriggers with one or more queries, sent in turn.
    DetectTriggers(detect_triggers::Args),
    /// grpc.health.v1.Health/Check: the transport floor, for ratios against other scenarios.
    HealthCheck(health_check::Args),
    /// RouterService.Chat (or ChatStream) on continuing sessions: a whole turn through the router.
    Chat(chat::Args),
    /// A chat turn over HTTP/1.1 keep-alive connections through a client API of the edge (or any
    /// OpenAI-compatible server): chat completions, Messages, Responses or the REST chat.
    HttpChat(http_chat::Args),
    /// A chat completion straight from an OpenAI-compatible server: the router's baseline.
    LlmDirect(llm_direct::Args),
    /// SessionService.ProcessQuery on sessions whose role the query keeps (no switch).
    ProcessQuery(process_query::Args),
    /// The Redis round trips of a ProcessQuery without a switch, made directly: its floor.
    SessionsRedisFloor(sessions_redis_floor::Args),
    /// RouterService.GetRoutingStats over one tenant's window ending now.
    RoutingStats(routing_stats::Args),
}

/// Parses a duration written as a number and a unit: `500ms`, `10s`, `2m`, `1h`, `1.5s`.
///
/// A bare number is rejected: whether `10` means seconds or milliseconds is a guess.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let seconds_per_unit = match unit.trim() {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "" => return Err(format!("`{text}` has no unit; write e.g. 10s, 500ms or 2m")),
        other => return Err(format!("unknown unit `{other}` in `{text}`; use ms, s, m or h")),
    };
    let value: f64 = number.parse().map_err(|_| format!("`{text}` does not start with a number"))?;
    Duration::try_from_secs_f64(value * seconds_per_unit).map_err(|error| format!("`{text}`: {error}"))
}

/// Parses a request rate: a positive, finite number of requests per second.
fn parse_rate(text: &str) -> Result<f64, String> {
    let rate: f64 = text.trim().parse().map_err(|_| format!("`{text}` is not a number"))?;
    if rate.is_finite() && rate > 0.0 { Ok(rate) } else { Err(format!("rate must be above zero, got `{text}`")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_with_units() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration(" 3s ").unwrap(), Duration::from_secs(3));
    }

    #[test]
    fn durations_without_a_usable_unit_or_number_are_rejected() {
        for bad in ["10", "", "s", "10x", "ten s", "1..2s", "-1s", "5 sec"] {
            assert!(parse_duration(bad).is_err(), "`{bad}` should be rejected");
        }
    }

    #[test]
    fn rates_must_be_positive_numbers() {
        assert_eq!(parse_rate("2000").unwrap(), 2000.0);
        assert_eq!(parse_rate("0.5").unwrap(), 0.5);
        for bad in ["0", "-3", "inf", "NaN", "fast"] {
            assert!(parse_rate(bad).is_err(), "`{bad}` should be rejected");
        }
    }

    #[test]
    fn options_may_follow_the_scenario() {
        let cli = Cli::try_parse_from([
            "switchyard-loadgen",
            "--concurrency",
            "8",
            "detect-triggers",
            "--duration",
            "5s",
            "--rate",
            "100",
        ])
        .unwrap();
        assert_eq!(cli.run.concurrency.get(), 8);
        assert_eq!(cli.run.duration, Duration::from_secs(5));
        assert_eq!(cli.run.rate, Some(100.0));
    }

    #[test]
    fn zero_concurrency_is_rejected() {
        assert!(Cli::try_parse_from(["switchyard-loadgen", "--concurrency", "0", "detect-triggers"]).is_err());
    }
}
