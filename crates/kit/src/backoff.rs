//! Exponential backoff with jitter, for every loop that retries a dependency (record writers,
//! MCP upstream reconnects, store reconnects): one definition, so retries behave the same
//! everywhere and a fleet of replicas does not retry in lockstep.

use std::time::Duration;

/// Delays that double from `initial` up to `max`. Jitter spreads each delay over
/// `[delay * (1 - jitter), delay]` so replicas that failed together retry apart.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    jitter: f64,
    next: Duration,
    attempts: u32,
}

impl Backoff {
    /// Doubles from `initial` to `max`, with up to 20 % jitter.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self { initial, max: max.max(initial), jitter: 0.2, next: initial, attempts: 0 }
    }

    /// The share of each delay that is randomised, 0 (none) to 1.
    pub fn with_jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter.clamp(0.0, 1.0);
        self
    }

    /// The delay before the next attempt; each call doubles the one after.
    pub fn next_delay(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(self.max);
        self.attempts = self.attempts.saturating_add(1);
        self.jittered(base)
    }

    /// The delay after `failures` consecutive failures (0 for the first retry), for callers
    /// that count failures themselves.
    pub fn delay(&self, failures: u32) -> Duration {
        let base = self.initial.saturating_mul(2u32.saturating_pow(failures.min(31))).min(self.max);
        self.jittered(base)
    }

    fn jittered(&self, base: Duration) -> Duration {
        if self.jitter == 0.0 {
            return base;
        }
        base.saturating_sub(base.mul_f64(self.jitter * rand::random::<f64>()))
    }

    /// Failed attempts since the last success.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Whether the last attempt failed (a delay has been handed out since the last reset).
    pub fn is_backing_off(&self) -> bool {
        self.attempts > 0
    }

    /// After a success: the next failure starts again from `initial`.
    pub fn reset(&mut self) {
        self.next = self.initial;
        self.attempts = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(500)).with_jitter(0.0);
        let delays: Vec<u128> = (0..5).map(|_| backoff.next_delay().as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 500, 500]);
        assert_eq!(backoff.attempts(), 5);
        backoff.reset();
        assert!(!backoff.is_backing_off());
        assert_eq!(backoff.next_delay(), Duration::from_millis(100));
        assert_eq!(backoff.delay(0), Duration::from_millis(100));
        assert_eq!(backoff.delay(2), Duration::from_millis(400));
        assert_eq!(backoff.delay(u32::MAX), Duration::from_millis(500));
    }

    #[test]
    fn jitter_stays_within_its_share() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(1));
        for _ in 0..100 {
            let delay = backoff.next_delay();
            assert!(delay <= Duration::from_secs(1) && delay >= Duration::from_millis(800), "{delay:?}");
        }
    }
}
