//! Flags shared by every service binary. Each flag has an environment fallback so Kubernetes
//! can configure through env; each binary adds its own `--listen` (its default port differs)
//! and the URLs of the services it calls.

use std::time::Duration;

use clap::{Args, FromArgMatches, ValueEnum};

/// Server limits and behaviour.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// Largest gRPC message accepted or sent, in bytes.
    #[arg(long, env = "MAX_MESSAGE_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub max_message_bytes: usize,

    /// Deadline for one request; longer calls fail with DEADLINE_EXCEEDED.
    #[arg(long, env = "REQUEST_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// Requests served at once across all connections; further requests are shed at once with
    /// RESOURCE_EXHAUSTED rather than queued.
    #[arg(long, env = "CONCURRENCY_LIMIT", default_value_t = 1024)]
    pub concurrency_limit: usize,

    /// On SIGTERM/SIGINT, how long in-flight calls may take to finish before the process exits;
    /// streams still open near its end close with UNAVAILABLE. Longer than a vendor's timeout
    /// (OPENAI_TIMEOUT, ANTHROPIC_TIMEOUT: 60s), so a model call in flight answers or fails
    /// within it.
    #[arg(long, env = "SHUTDOWN_GRACE", default_value = "75s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,

    /// How long a new connection may take to send the HTTP/2 connection preface (its first 24
    /// bytes; gRPC clients send it at once) before it is closed: a connection that says nothing
    /// would otherwise hold its file descriptor for good. 0 turns it off.
    #[arg(long, env = "HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub handshake_timeout: Duration,

    /// Also answers callers in this same process without the network (the whole suite in one
    /// process: `switchyard dev`, the test stack); see [`crate::in_process`]. Not a flag: the
    /// process that runs several services decides.
    #[arg(skip)]
    pub serve_in_process: bool,
}

impl Default for ServerArgs {
    fn default() -> Self {
        flag_defaults()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Logging and tracing. Log levels come from `RUST_LOG` (default `info`); traces are exported
/// over OTLP/gRPC when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
#[derive(Debug, Clone, Args)]
pub struct TelemetryArgs {
    /// Log line format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// OTLP/gRPC endpoint for traces (e.g. http://otel-collector:4317); no export when unset.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,

    /// Address to serve Prometheus metrics on (`GET /metrics`, text format), e.g. 0.0.0.0:9464;
    /// no metrics listener when unset.
    #[arg(long, env = "METRICS_LISTEN", global = true)]
    pub metrics_listen: Option<std::net::SocketAddr>,

    /// A fault that repeats on every request (a store away, a provider's circuit open) is logged
    /// at its first occurrence, then at most once per this interval with the count not logged
    /// (`suppressed`); 0 logs every occurrence.
    #[arg(long, env = "LOG_REPEAT_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub log_repeat_interval: Duration,

    /// How often the process checks the memory its allocator holds free and hands it back to
    /// the OS once at least 1 MiB more is free than the least seen since its last trim (glibc
    /// keeps a burst's peak resident otherwise); 0 never does.
    #[arg(long, env = "HEAP_TRIM_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub heap_trim_interval: Duration,
}

impl Default for TelemetryArgs {
    fn default() -> Self {
        flag_defaults()
    }
}

/// Parses a flags type from `args` (flags and values, no program name) alone: no environment
/// variable is read, so what a shell or test process has set cannot leak in. Every flag not
/// given takes its clap default, which is what makes those defaults the only ones written.
pub fn parse_flags<T: Args + FromArgMatches>(args: &[&str]) -> Result<T, clap::Error> {
    let command = T::augment_args(clap::Command::new("flags").no_binary_name(true)).mut_args(|arg| arg.env(None));
    T::from_arg_matches(&command.try_get_matches_from(args)?)
}

/// A flags type as a binary called `name` with no flags reads it: each flag from its
/// environment variable, else its default (one process running several services'
/// configurations from one environment: `switchyard serve`). Several services have a flag of
/// the same name (`--listen`), so the error names the binary and the variable.
pub fn parse_env<T: Args + FromArgMatches>(name: &'static str) -> anyhow::Result<T> {
    let command = T::augment_args(clap::Command::new(name).no_binary_name(true));
    let parsed = command
        .clone()
        .try_get_matches_from(std::iter::empty::<std::ffi::OsString>())
        .and_then(|matches| T::from_arg_matches(&matches));
    parsed.map_err(|err| {
        let variable = err.get(clap::error::ContextKind::InvalidArg).and_then(|arg| {
            let arg = arg.to_string();
            let flag = arg.split_whitespace().next().unwrap_or_default().trim_start_matches('-').to_owned();
            command
                .get_arguments()
                .find(|candidate| candidate.get_long() == Some(flag.as_str()))
                .and_then(|candidate| candidate.get_env())
                .map(|env| env.to_string_lossy().into_owned())
        });
        let reason = err.render().to_string();
        let reason = reason.lines().next().unwrap_or_default().trim_start_matches("error: ");
        match variable {
            Some(variable) => anyhow::anyhow!("{name}'s setting {variable}: {reason}"),
            None => anyhow::anyhow!("{name}'s settings: {reason}"),
        }
    })
}

/// A flags type as its clap defaults alone make it (see [`parse_flags`]): the configuration of
/// tests and `switchyard dev` starts here.
///
/// # Panics
/// When the defaults do not parse or a flag without a default is required: a mistake in the
/// type's attributes, which its `in_memory` test catches.
pub fn flag_defaults<T: Args + FromArgMatches>() -> T {
    parse_flags(&[])
        .unwrap_or_else(|err| panic!("the flag defaults of {} do not parse: {err}", std::any::type_name::<T>()))
}

/// Parses `250ms`, `30s`, `5m`, `1h` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("`{text}` is not a duration like 30s or 250ms"))?;
    let seconds = match unit.trim() {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        other => return Err(format!("unknown duration unit `{other}` (use ms, s, m or h)")),
    };
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(format!("`{text}` is not a valid duration"));
    }
    // A finite value can still be past what a Duration holds: an error, never a panic.
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("`{text}` is too long a duration"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert!(parse_duration("5 fortnights").is_err());
        assert!(parse_duration("abc").is_err());
        assert!(parse_duration("99999999999999999999999").is_err());
        assert!(parse_duration("99999999999999999999h").is_err());
    }

    /// Flags whose environment fallback is a variable every test process has.
    #[derive(Debug, Args)]
    struct PathFlags {
        #[arg(long, env = "PATH", default_value = "unset")]
        path: String,
        #[arg(long, default_value_t = 3)]
        count: u32,
    }

    #[test]
    fn flag_defaults_come_from_the_attributes_and_never_from_the_environment() {
        assert!(std::env::var_os("PATH").is_some(), "the test needs PATH set");
        let flags: PathFlags = flag_defaults();
        assert_eq!((flags.path.as_str(), flags.count), ("unset", 3), "the environment leaked into the defaults");
        let args: ServerArgs = flag_defaults();
        assert_eq!(args.request_timeout, Duration::from_secs(30));
        let given: PathFlags = parse_flags(&["--count", "9"]).expect("parses");
        assert_eq!(given.count, 9);
        let wrong = parse_flags::<PathFlags>(&["--count", "many"]).expect_err("not a number");
        assert!(wrong.to_string().contains("--count"), "{wrong}");
    }
}
