//! Per-credential rate limits: GCRA per API key (or token subject), refilled at the configured
//! rate and holding a burst. With Redis (`REDIS_URL`, one Redis or a Redis Cluster) the state
//! is one key per credential shared by every replica, so N replicas together allow the rate
//! once; without it, or while Redis is away, each replica keeps its own buckets in memory. A
//! request over the limit is answered 429 with the whole seconds until the bucket lets one
//! through again in `Retry-After`.

use std::{
    num::NonZeroU32,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use governor::{
    DefaultKeyedRateLimiter, Quota, RateLimiter,
    clock::{Clock, DefaultClock},
};
use opentelemetry::metrics::Counter;
use redis::Script;
use switchyard_kit::store::{RedisConnection, StoreError, bounded};

use crate::error::ApiError;

/// How often idle buckets are dropped, so the table stays the size of the active callers.
const SWEEP: Duration = Duration::from_secs(60);
/// How long one shared check may take before this request is decided locally: a rate limit
/// must not make every request wait out Redis's command timeout during an outage.
const SHARED_CHECK_TIMEOUT: Duration = Duration::from_millis(250);
/// After a failed shared check, how long requests are decided locally before Redis is tried
/// again.
const RETRY_SHARED_AFTER: Duration = Duration::from_secs(1);

/// GCRA over one key holding the theoretical arrival time (TAT, microseconds of Redis's clock,
/// so every replica reads the same time). ARGV: emission interval and delay tolerance
/// (interval × (burst − 1)), both in microseconds. Returns 0 when the request is let through,
/// else the microseconds until one would be. One round trip, atomic; the key expires when the
/// bucket is full again.
const GCRA: &str = r"
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000000 + tonumber(now[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local wait = tat - now - tolerance
if wait > 0 then return math.ceil(wait) end
tat = tat + interval
redis.call('SET', KEYS[1], string.format('%d', tat), 'PX', math.ceil((tat - now) / 1000) + 1000)
return 0
";

#[derive(Clone)]
pub struct RateLimit {
    local: Arc<DefaultKeyedRateLimiter<String>>,
    clock: DefaultClock,
    shared: Option<Arc<Shared>>,
}

/// The credentials' GCRA state in Redis, and whether Redis is away.
struct Shared {
    conn: RedisConnection,
    prefix: String,
    script: Script,
    interval_us: u64,
    tolerance_us: u64,
    started: Instant,
    /// Milliseconds since `started` before which requests are decided locally.
    local_until_ms: AtomicU64,
    /// Set from the first failed check of an outage until Redis answers again: one warning each.
    away: AtomicBool,
    fallback: Counter<u64>,
}

impl std::fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit").field("shared", &self.shared.is_some()).finish_non_exhaustive()
    }
}

impl RateLimit {
    /// `per_second` requests a second with bursts of `burst`, in this replica's memory; `None`
    /// when `per_second` is 0 (no limit).
    pub fn new(per_second: u32, burst: u32) -> Option<Self> {
        let rate = NonZeroU32::new(per_second)?;
        let burst = NonZeroU32::new(burst).unwrap_or(rate);
        let local = Arc::new(RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst)));
        Some(Self { local, clock: DefaultClock::default(), shared: None })
    }

    /// The same limit held in Redis for every replica, under `{<prefix>:edge:rl:<principal>}`
    /// (the whole key is its hash tag), with this replica's memory as the fallback while Redis
    /// is away.
    pub fn shared(per_second: u32, burst: u32, conn: RedisConnection, prefix: &str) -> Option<Self> {
        let mut limit = Self::new(per_second, burst)?;
        let burst = u64::from(if burst == 0 { per_second } else { burst });
        let interval_us = 1_000_000_u64.div_ceil(u64::from(per_second));
        limit.shared = Some(Arc::new(Shared {
            conn,
            prefix: prefix.to_owned(),
            script: Script::new(GCRA),
            interval_us,
            tolerance_us: interval_us * (burst - 1),
            started: Instant::now(),
            local_until_ms: AtomicU64::new(0),
            away: AtomicBool::new(false),
            fallback: opentelemetry::global::meter("switchyard-edge")
                .u64_counter("edge.rate_limit.fallback")
                .with_description("requests whose rate limit was decided in this replica because Redis was away")
                .build(),
        }));
        Some(limit)
    }

    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// Counts one request of `principal`: in Redis when shared and reachable, else here.
    pub async fn check(&self, principal: &str) -> Result<(), ApiError> {
        if let Some(shared) = &self.shared
            && let Some(decided) = shared.check(principal).await
        {
            return decided;
        }
        self.check_local(principal)
    }

    fn check_local(&self, principal: &str) -> Result<(), ApiError> {
        match self.local.check_key(&principal.to_owned()) {
            Ok(()) => Ok(()),
            Err(not_until) => Err(rate_limited(not_until.wait_time_from(self.clock.now()))),
        }
    }

    /// Drops idle local buckets every minute while the edge runs.
    pub fn spawn_sweeper(&self) {
        let limiter = Arc::downgrade(&self.local);
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

impl Shared {
    /// The shared decision, or `None` when Redis is away (the caller decides locally).
    async fn check(&self, principal: &str) -> Option<Result<(), ApiError>> {
        let now_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        if now_ms < self.local_until_ms.load(Ordering::Relaxed) {
            self.fallback.add(1, &[]);
            return None;
        }
        let key = format!("{{{}:edge:rl:{principal}}}", self.prefix);
        let mut conn = self.conn.clone();
        let mut invocation = self.script.key(key);
        invocation.arg(self.interval_us).arg(self.tolerance_us);
        let answer: Result<u64, StoreError> = bounded(SHARED_CHECK_TIMEOUT, invocation.invoke_async(&mut conn)).await;
        match answer {
            Ok(wait_us) => {
                if self.away.swap(false, Ordering::Relaxed) {
                    tracing::info!("redis answers again: rate limits are shared by every replica again");
                }
                Some(if wait_us == 0 { Ok(()) } else { Err(rate_limited(Duration::from_micros(wait_us))) })
            }
            Err(err) => {
                let retry_at = now_ms.saturating_add(RETRY_SHARED_AFTER.as_millis() as u64);
                self.local_until_ms.store(retry_at, Ordering::Relaxed);
                if !self.away.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        error = %err,
                        "redis is away: rate limits are counted by each replica alone until it answers"
                    );
                }
                self.fallback.add(1, &[]);
                None
            }
        }
    }
}

fn rate_limited(wait: Duration) -> ApiError {
    ApiError::rate_limited(wait.as_secs_f64().ceil().max(1.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_past_its_burst_waits_and_others_do_not() {
        let limit = RateLimit::new(1, 2).unwrap();
        assert!(limit.check("key:a").await.is_ok());
        assert!(limit.check("key:a").await.is_ok());
        let err = limit.check("key:a").await.unwrap_err();
        assert_eq!(err.status(), 429);
        assert_eq!(err.retry_after(), Some(1));
        assert!(limit.check("key:b").await.is_ok(), "each key has its own bucket");
        assert!(RateLimit::new(0, 10).is_none());
    }
}
