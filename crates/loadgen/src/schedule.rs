//! The open-loop schedule: when each request is meant to start, and which worker sends it.
//!
//! Requests are numbered globally `k = 0, 1, 2, …`; request `k` is due `k / rate` seconds after
//! the run starts and belongs to worker `k mod W`. Each worker therefore sends every `W / rate`
//! seconds, and together the workers make one evenly spaced stream.

use std::time::Duration;

#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    rate_per_second: f64,
    workers: u64,
}

impl Schedule {
    /// `rate_per_second` must be positive and `workers` at least one (the command line ensures
    /// both).
    pub fn new(rate_per_second: f64, workers: usize) -> Self {
        Self { rate_per_second, workers: workers.max(1) as u64 }
    }

    /// When request `index` is due, as an offset from the start of the run.
    pub fn due(&self, index: u64) -> Duration {
        // Whole nanoseconds, rounded, so that float truncation does not make the schedule
        // drift; f64 holds integers exactly up to 2^53 ns (about 104 days).
        let nanos = (index as f64 * 1e9 / self.rate_per_second).round();
        Duration::from_nanos(nanos as u64)
    }

    /// Number of workers sharing the schedule.
    pub fn workers(&self) -> usize {
        // Came from a usize in `new`.
        self.workers as usize
    }

    /// The worker that sends request `index`.
    pub fn worker(&self, index: u64) -> usize {
        // Below `workers`, which came from a usize.
        (index % self.workers) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_evenly_spaced_at_the_rate() {
        let schedule = Schedule::new(2000.0, 32);
        assert_eq!(schedule.due(0), Duration::ZERO);
        assert_eq!(schedule.due(1), Duration::from_micros(500));
        assert_eq!(schedule.due(3), Duration::from_micros(1500));
        assert_eq!(schedule.due(2000), Duration::from_secs(1));
        assert_eq!(schedule.due(20_000_000), Duration::from_secs(10_000));
    }

    #[test]
    fn workers_take_turns_so_each_sends_at_rate_over_workers() {
        let schedule = Schedule::new(1000.0, 4);
        let owners: Vec<usize> = (0..8).map(|index| schedule.worker(index)).collect();
        assert_eq!(owners, [0, 1, 2, 3, 0, 1, 2, 3]);
        // Worker 2 sends requests 2, 6, 10, …: every 4 ms, starting at 2 ms.
        let worker_2: Vec<Duration> =
            (0..40).filter(|&index| schedule.worker(index) == 2).map(|index| schedule.due(index)).take(3).collect();
        assert_eq!(worker_2, [2, 6, 10].map(Duration::from_millis));
    }

    #[test]
    fn slow_rates_space_requests_seconds_apart() {
        let schedule = Schedule::new(0.5, 1);
        assert_eq!(schedule.due(3), Duration::from_secs(6));
        assert_eq!(schedule.worker(3), 0);
    }
}
