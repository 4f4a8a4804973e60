//! What a run measured: latency histograms and counts, kept per worker (so that recording needs
//! no locking) and merged once the run is over.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use tonic::Code;

/// Latencies are recorded in microseconds, from 1 µs to 60 s, to 3 significant figures.
const LOWEST_MICROS: u64 = 1;
const HIGHEST_MICROS: u64 = 60_000_000;
const SIGNIFICANT_FIGURES: u8 = 3;

pub fn new_histogram() -> anyhow::Result<Histogram<u64>> {
    Histogram::new_with_bounds(LOWEST_MICROS, HIGHEST_MICROS, SIGNIFICANT_FIGURES)
        .context("creating a latency histogram")
}

/// Counts and latencies of the calls that started inside the measurement window.
#[derive(Debug, Clone)]
pub struct Stats {
    /// Successful calls: from the intended start (open loop) or the send (closed loop) to the
    /// response.
    pub latency: Histogram<u64>,
    /// Open loop only: how late each call was sent against its schedule. It is part of
    /// `latency`; kept apart so that timer granularity and saturated workers show up as such.
    pub start_lag: Histogram<u64>,
    pub ok: u64,
    /// Failed calls by gRPC code name (`UNAVAILABLE`, …).
    pub errors: BTreeMap<&'static str, u64>,
    /// Open loop only: requests due inside the window that were never sent because their
    /// worker was still behind schedule when the window closed.
    pub unsent: u64,
    /// When the last recorded call completed; the measured duration runs until then.
    pub last_completion: Option<Instant>,
    /// Every call made, the warm-up's included: what the processes under test did work for
    /// (CPU time per call from their own accounting divides by this).
    pub calls_made: u64,
}

impl Stats {
    pub fn new() -> anyhow::Result<Self> {
        Ok(Self {
            latency: new_histogram()?,
            start_lag: new_histogram()?,
            ok: 0,
            errors: BTreeMap::new(),
            unsent: 0,
            last_completion: None,
            calls_made: 0,
        })
    }

    /// Records one finished call. A failure is counted by code and kept out of the latency
    /// histogram: a fast rejection would otherwise make the service look quicker.
    pub fn record(&mut self, outcome: Result<(), Code>, latency: Duration, start_lag: Duration, completed: Instant) {
        match outcome {
            Ok(()) => {
                self.ok += 1;
                self.latency.saturating_record(micros(latency));
            }
            Err(code) => *self.errors.entry(code_name(code)).or_default() += 1,
        }
        self.start_lag.saturating_record(micros(start_lag));
        self.last_completion = self.last_completion.max(Some(completed));
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    pub fn merge(&mut self, other: &Stats) -> anyhow::Result<()> {
        self.latency.add(&other.latency).context("merging latency histograms")?;
        self.start_lag.add(&other.start_lag).context("merging start-lag histograms")?;
        self.ok += other.ok;
        for (code, count) in &other.errors {
            *self.errors.entry(code).or_default() += count;
        }
        self.unsent += other.unsent;
        self.last_completion = self.last_completion.max(other.last_completion);
        self.calls_made += other.calls_made;
        Ok(())
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// The canonical gRPC name of a status code (defined once, in the kit).
pub use switchyard_kit::error::code_name;

#[cfg(test)]
mod tests {
    use super::*;

    fn ok_after(stats: &mut Stats, micros: u64) {
        stats.record(Ok(()), Duration::from_micros(micros), Duration::ZERO, Instant::now());
    }

    #[test]
    fn merged_workers_give_the_percentiles_of_all_calls() {
        // Worker a saw 1..=900 µs, worker b 901..=1000 µs: the tail lives only in b.
        let mut a = Stats::new().unwrap();
        let mut b = Stats::new().unwrap();
        (1..=900).for_each(|v| ok_after(&mut a, v));
        (901..=1000).for_each(|v| ok_after(&mut b, v));
        a.merge(&b).unwrap();
        assert_eq!(a.ok, 1000);
        assert_eq!(a.latency.value_at_quantile(0.5), 500);
        assert_eq!(a.latency.value_at_quantile(0.99), 990);
        assert_eq!(a.latency.max(), 1000);
    }

    #[test]
    fn failures_are_counted_by_code_and_not_timed() {
        let mut a = Stats::new().unwrap();
        let mut b = Stats::new().unwrap();
        ok_after(&mut a, 100);
        a.record(Err(Code::Unavailable), Duration::from_micros(5), Duration::ZERO, Instant::now());
        b.record(Err(Code::Unavailable), Duration::from_micros(5), Duration::ZERO, Instant::now());
        b.record(Err(Code::DeadlineExceeded), Duration::from_secs(5), Duration::ZERO, Instant::now());
        a.merge(&b).unwrap();
        assert_eq!(a.ok, 1);
        assert_eq!(a.latency.len(), 1);
        assert_eq!(a.error_count(), 3);
        assert_eq!(a.errors.get("UNAVAILABLE"), Some(&2));
        assert_eq!(a.errors.get("DEADLINE_EXCEEDED"), Some(&1));
    }

    #[test]
    fn latencies_beyond_the_histogram_saturate_instead_of_failing() {
        let mut stats = Stats::new().unwrap();
        ok_after(&mut stats, 3_600_000_000);
        assert_eq!(stats.ok, 1);
        assert!(stats.latency.max() >= HIGHEST_MICROS);
    }

    #[test]
    fn last_completion_is_the_latest_of_all_workers() {
        let mut a = Stats::new().unwrap();
        let mut b = Stats::new().unwrap();
        let early = Instant::now();
        let late = early + Duration::from_millis(10);
        b.record(Ok(()), Duration::ZERO, Duration::ZERO, late);
        a.record(Ok(()), Duration::ZERO, Duration::ZERO, early);
        a.merge(&b).unwrap();
        assert_eq!(a.last_completion, Some(late));
    }
}
