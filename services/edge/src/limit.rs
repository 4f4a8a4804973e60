//! Per-credential rate limits: a GCRA bucket per API key (or token subject), refilled at the
//! configured rate and holding a burst. A request over the limit is answered 429 with the
//! whole seconds until the bucket lets one through again in `Retry-After`.

use std::{num::NonZeroU32, sync::Arc, time::Duration};

use governor::{
    DefaultKeyedRateLimiter, Quota, RateLimiter,
    clock::{Clock, DefaultClock},
};

use crate::error::ApiError;

/// How often idle buckets are dropped, so the table stays the size of the active callers.
const SWEEP: Duration = Duration::from_secs(60);

#[derive(Clone)]
pub struct RateLimit {
    limiter: Arc<DefaultKeyedRateLimiter<String>>,
    clock: DefaultClock,
}

impl std::fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit").finish_non_exhaustive()
    }
}

impl RateLimit {
    /// `per_second` requests a second with bursts of `burst`; `None` when `per_second` is 0
    /// (no limit).
    pub fn new(per_second: u32, burst: u32) -> Option<Self> {
        let rate = NonZeroU32::new(per_second)?;
        let burst = NonZeroU32::new(burst).unwrap_or(rate);
        let limiter = Arc::new(RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst)));
        Some(Self { limiter, clock: DefaultClock::default() })
    }

    /// Counts one request of `principal`.
    pub fn check(&self, principal: &str) -> Result<(), ApiError> {
        match self.limiter.check_key(&principal.to_owned()) {
            Ok(()) => Ok(()),
            Err(not_until) => {
                let wait = not_until.wait_time_from(self.clock.now());
                Err(ApiError::rate_limited(wait.as_secs_f64().ceil().max(1.0) as u64))
            }
        }
    }

    /// Drops idle buckets every minute while the edge runs.
    pub fn spawn_sweeper(&self) {
        let limiter = Arc::downgrade(&self.limiter);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(SWEEP);
            loop {
                every.tick().await;
                let Some(limiter) = limiter.upgrade() else { return };
                limiter.retain_recent();
                limiter.shrink_to_fit();
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_past_its_burst_waits_and_others_do_not() {
        let limit = RateLimit::new(1, 2).unwrap();
        assert!(limit.check("key:a").is_ok());
        assert!(limit.check("key:a").is_ok());
        let err = limit.check("key:a").unwrap_err();
        assert_eq!(err.status(), 429);
        assert_eq!(err.retry_after(), Some(1));
        assert!(limit.check("key:b").is_ok(), "each key has its own bucket");
        assert!(RateLimit::new(0, 10).is_none());
    }
}
