//! The end-of-run report, as aligned text or as one JSON object.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::stats::Stats;

/// What was run, as asked on the command line.
#[derive(Debug, Clone)]
pub struct RunSetup {
    pub scenario: &'static str,
    pub target: String,
    pub concurrency: usize,
    pub connections: usize,
    /// Target requests per second (open loop); `None` for a closed loop.
    pub target_rate: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    ClosedLoop,
    OpenLoop,
}

/// Latency percentiles in milliseconds, to the microsecond.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub max: f64,
}

impl Percentiles {
    /// `None` when nothing was recorded: zeros would read as an infinitely fast service.
    fn of(micros: &Histogram<u64>) -> Option<Self> {
        if micros.is_empty() {
            return None;
        }
        let ms = |value: u64| value as f64 / 1000.0;
        Some(Self {
            p50: ms(micros.value_at_quantile(0.5)),
            p90: ms(micros.value_at_quantile(0.9)),
            p99: ms(micros.value_at_quantile(0.99)),
            p99_9: ms(micros.value_at_quantile(0.999)),
            max: ms(micros.max()),
        })
    }
}

/// Fields of the JSON object; the text form shows the same values.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub scenario: &'static str,
    pub target: String,
    pub concurrency: usize,
    pub connections: usize,
    pub mode: Mode,
    /// Open loop: requests per second asked for, and sent (ok or failed) in the window.
    pub target_rate: Option<f64>,
    pub achieved_rate: Option<f64>,
    /// Open loop: requests due in the window but never sent because the workers were behind.
    pub unsent: Option<u64>,
    pub duration_s: f64,
    pub requests_ok: u64,
    pub errors_total: u64,
    /// Failed calls by gRPC code name.
    pub errors: BTreeMap<&'static str, u64>,
    /// Successful requests per second.
    pub throughput_rps: f64,
    pub latency_ms: Option<Percentiles>,
    /// Open loop: how late calls were sent against their schedule (included in the latency).
    pub start_lag_ms: Option<Percentiles>,
    /// Every call made, warm-up included (the setup's probe is not): the divisor for the
    /// target's CPU time per call.
    pub calls_made: u64,
    /// With `--cpu-of`: each watched process's CPU milliseconds per call made, and `total`.
    pub cpu_ms_per_call: Option<BTreeMap<String, f64>>,
}

impl Report {
    pub fn new(setup: RunSetup, stats: &Stats, measured: Duration) -> Self {
        let seconds = measured.as_secs_f64();
        let per_second = |count: u64| if seconds > 0.0 { round_to(count as f64 / seconds, 3) } else { 0.0 };
        let errors_total = stats.error_count();
        let open_loop = setup.target_rate.is_some();
        Self {
            scenario: setup.scenario,
            target: setup.target,
            concurrency: setup.concurrency,
            connections: setup.connections,
            mode: if open_loop { Mode::OpenLoop } else { Mode::ClosedLoop },
            target_rate: setup.target_rate,
            achieved_rate: open_loop.then(|| per_second(stats.ok + errors_total)),
            unsent: open_loop.then_some(stats.unsent),
            duration_s: round_to(seconds, 3),
            requests_ok: stats.ok,
            errors_total,
            errors: stats.errors.clone(),
            throughput_rps: per_second(stats.ok),
            latency_ms: Percentiles::of(&stats.latency),
            start_lag_ms: if open_loop { Percentiles::of(&stats.start_lag) } else { None },
            calls_made: stats.calls_made,
            cpu_ms_per_call: None,
        }
    }

    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string(self)
    }
}

fn round_to(value: f64, decimals: i32) -> f64 {
    let scale = 10_f64.powi(decimals);
    (value * scale).round() / scale
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut line = |label: &str, value: &dyn fmt::Display| writeln!(f, "{label:<16}{value}");
        line("scenario", &self.scenario)?;
        line("target", &self.target)?;
        line("concurrency", &self.concurrency)?;
        line("connections", &self.connections)?;
        match self.target_rate {
            Some(rate) => line("mode", &format_args!("target rate {rate} req/s"))?,
            None => line("mode", &"closed loop")?,
        }
        line("duration", &format_args!("{:.3} s", self.duration_s))?;
        line("requests ok", &self.requests_ok)?;
        line("errors", &ErrorList { total: self.errors_total, by_code: &self.errors })?;
        line("throughput", &format_args!("{:.1} req/s", self.throughput_rps))?;
        if let (Some(target), Some(achieved)) = (self.target_rate, self.achieved_rate) {
            line("achieved rate", &format_args!("{achieved:.1} req/s ({:.1}% of target)", 100.0 * achieved / target))?;
        }
        if let Some(unsent) = self.unsent {
            line("unsent", &unsent)?;
        }
        percentile_lines(&mut line, "latency", self.latency_ms.as_ref())?;
        if self.target_rate.is_some() {
            percentile_lines(&mut line, "start lag", self.start_lag_ms.as_ref())?;
        }
        for (process, ms) in self.cpu_ms_per_call.iter().flatten() {
            line(&format!("cpu {process}"), &format_args!("{ms:.3} ms per call"))?;
        }
        Ok(())
    }
}

fn percentile_lines(
    line: &mut impl FnMut(&str, &dyn fmt::Display) -> fmt::Result,
    name: &str,
    percentiles: Option<&Percentiles>,
) -> fmt::Result {
    let Some(p) = percentiles else {
        return line(name, &"n/a (no successful call)");
    };
    for (label, value) in [("p50", p.p50), ("p90", p.p90), ("p99", p.p99), ("p99.9", p.p99_9), ("max", p.max)] {
        line(&format!("{name} {label}"), &format_args!("{value:.3} ms"))?;
    }
    Ok(())
}

/// `0`, or `3 (DEADLINE_EXCEEDED 1, UNAVAILABLE 2)`.
struct ErrorList<'a> {
    total: u64,
    by_code: &'a BTreeMap<&'static str, u64>,
}

impl fmt::Display for ErrorList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.total)?;
        if self.total == 0 {
            return Ok(());
        }
        let by_code: Vec<String> = self.by_code.iter().map(|(code, count)| format!("{code} {count}")).collect();
        write!(f, " ({})", by_code.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use tonic::Code;

    use super::*;

    fn setup(target_rate: Option<f64>) -> RunSetup {
        RunSetup {
            scenario: "detect-triggers",
            target: "http://127.0.0.1:50151".to_owned(),
            concurrency: 32,
            connections: 4,
            target_rate,
        }
    }

    /// 1000 successes of 1..=1000 µs (sent 250 µs late) and 3 failures.
    fn stats() -> Stats {
        let mut stats = Stats::new().unwrap();
        let now = Instant::now();
        for micros in 1..=1000 {
            stats.record(Ok(()), Duration::from_micros(micros), Duration::from_micros(250), now);
        }
        stats.record(Err(Code::Unavailable), Duration::ZERO, Duration::from_micros(250), now);
        stats.record(Err(Code::Unavailable), Duration::ZERO, Duration::from_micros(250), now);
        stats.record(Err(Code::DeadlineExceeded), Duration::ZERO, Duration::from_micros(250), now);
        stats
    }

    #[test]
    fn closed_loop_text_is_aligned_and_in_milliseconds() {
        let report = Report::new(setup(None), &stats(), Duration::from_millis(2000));
        let text = report.to_string();
        let expected = "\
scenario        detect-triggers
target          http://127.0.0.1:50151
concurrency     32
connections     4
mode            closed loop
duration        2.000 s
requests ok     1000
errors          3 (DEADLINE_EXCEEDED 1, UNAVAILABLE 2)
throughput      500.0 req/s
latency p50     0.500 ms
latency p90     0.900 ms
latency p99     0.990 ms
latency p99.9   0.999 ms
latency max     1.000 ms
";
        assert_eq!(text, expected);
    }

    #[test]
    fn open_loop_text_compares_achieved_with_target_rate() {
        let report = Report::new(setup(Some(2000.0)), &stats(), Duration::from_millis(500));
        let text = report.to_string();
        assert!(text.contains("mode            target rate 2000 req/s\n"), "{text}");
        assert!(text.contains("achieved rate   2006.0 req/s (100.3% of target)\n"), "{text}");
        assert!(text.contains("unsent          0\n"), "{text}");
        assert!(text.contains("start lag p50   0.250 ms\n"), "{text}");
    }

    #[test]
    fn json_has_snake_case_keys_and_numbers() {
        let report = Report::new(setup(Some(2000.0)), &stats(), Duration::from_millis(500));
        let json: serde_json::Value = serde_json::from_str(&report.to_json().unwrap()).unwrap();
        assert_eq!(json["scenario"], "detect-triggers");
        assert_eq!(json["mode"], "open_loop");
        assert_eq!(json["concurrency"], 32);
        assert_eq!(json["target_rate"], 2000.0);
        assert_eq!(json["achieved_rate"], 2006.0);
        assert_eq!(json["duration_s"], 0.5);
        assert_eq!(json["requests_ok"], 1000);
        assert_eq!(json["errors_total"], 3);
        assert_eq!(json["errors"]["UNAVAILABLE"], 2);
        assert_eq!(json["throughput_rps"], 2000.0);
        assert_eq!(json["latency_ms"]["p50"], 0.5);
        assert_eq!(json["latency_ms"]["p99_9"], 0.999);
        assert_eq!(json["latency_ms"]["max"], 1.0);
        assert_eq!(json["start_lag_ms"]["p99"], 0.25);
    }

    #[test]
    fn closed_loop_json_has_null_open_loop_fields() {
        let json: serde_json::Value =
            serde_json::from_str(&Report::new(setup(None), &stats(), Duration::from_secs(1)).to_json().unwrap())
                .unwrap();
        assert_eq!(json["mode"], "closed_loop");
        assert!(json["target_rate"].is_null());
        assert!(json["achieved_rate"].is_null());
        assert!(json["start_lag_ms"].is_null());
    }

    #[test]
    fn a_run_without_successes_has_no_latency_rather_than_zeros() {
        let mut stats = Stats::new().unwrap();
        stats.record(Err(Code::Unavailable), Duration::ZERO, Duration::ZERO, Instant::now());
        let report = Report::new(setup(None), &stats, Duration::from_secs(1));
        assert_eq!(report.latency_ms, None);
        assert!(report.to_string().contains("latency         n/a (no successful call)\n"));
        assert_eq!(report.throughput_rps, 0.0);
    }
}
