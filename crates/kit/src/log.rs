//! Fault logs that repeat, bounded: during an outage the same failure happens on every request
//! (every turn finds Postgres away, every call finds a provider's circuit open), and a line per
//! request buries the one line that says what changed. A [`Throttle`] lets the first occurrence
//! of each kind through at once, then at most one line per interval, carrying how many were not
//! logged since the last line (`suppressed`). Metrics still count every occurrence; state
//! changes (a circuit opening, a store lost or back) are logged where they happen, unthrottled.
//!
//! A site with one kind uses [`warn_throttled!`](crate::warn_throttled) (or
//! [`error_throttled!`](crate::error_throttled)), which keeps its throttle in a `static`:
//!
//! ```
//! # let err = "connection refused";
//! switchyard_kit::warn_throttled!("budgets", error = %err, "could not check the tenant's budgets");
//! ```
//!
//! and a site with kinds of its own (a provider, a model) keeps a [`Throttle`]:
//!
//! ```
//! use switchyard_kit::log::Throttle;
//! static SPEND: Throttle = Throttle::new();
//! # let err = "connection refused";
//! if let Some(suppressed) = SPEND.admit("spend") {
//!     tracing::warn!(error = %err, suppressed, "could not count a turn's spend");
//! }
//! ```

use std::{
    collections::HashMap,
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

/// The interval a throttle lets one line per kind through, unless the process set another
/// (`--log-repeat-interval`).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

/// Kinds one throttle keeps; past this, kinds whose interval is over are forgotten (their next
/// occurrence logs as a first one), and if all are live the map starts again. Kinds are fault
/// kinds, providers or buffers — a handful — so this is a guard, not a working size.
const MAX_KINDS: usize = 1024;

static INTERVAL_MS: AtomicU64 = AtomicU64::new(DEFAULT_INTERVAL.as_millis() as u64);

/// Sets the interval of every throttle of the process that does not carry its own (from
/// `--log-repeat-interval` at start-up; 0 logs every occurrence).
pub fn set_repeat_interval(interval: Duration) {
    INTERVAL_MS.store(u64::try_from(interval.as_millis()).unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// The process's interval (see [`set_repeat_interval`]).
pub fn repeat_interval() -> Duration {
    Duration::from_millis(INTERVAL_MS.load(Ordering::Relaxed))
}

/// Where a throttle reads the time: the monotonic clock, or a test's.
type Clock = fn() -> Instant;

/// Rate-limits one log site, per kind (a provider, a fault, a buffer's name).
#[derive(Debug)]
pub struct Throttle {
    interval: Option<Duration>,
    clock: Clock,
    kinds: Mutex<Option<HashMap<String, Window>>>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    /// When the last line for this kind was let through.
    logged_at: Instant,
    /// Occurrences not logged since.
    suppressed: u64,
}

impl Default for Throttle {
    fn default() -> Self {
        Self::new()
    }
}

impl Throttle {
    /// A throttle on the process's interval ([`repeat_interval`]); `const`, so a log site keeps
    /// it in a `static`.
    pub const fn new() -> Self {
        Self { interval: None, clock: Instant::now, kinds: Mutex::new(None) }
    }

    /// A throttle with its own interval and clock (tests drive the clock).
    pub const fn with_clock(interval: Duration, clock: Clock) -> Self {
        Self { interval: Some(interval), clock, kinds: Mutex::new(None) }
    }

    fn interval(&self) -> Duration {
        self.interval.unwrap_or_else(repeat_interval)
    }

    /// Whether an occurrence of `kind` is logged now: `Some(suppressed)` — how many occurrences
    /// of the kind were not logged since its last line (0 for the first) — or `None` to stay
    /// quiet (counted for the next line).
    pub fn admit(&self, kind: &str) -> Option<u64> {
        let now = (self.clock)();
        let interval = self.interval();
        let mut guard = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        let kinds = guard.get_or_insert_with(HashMap::new);
        if let Some(window) = kinds.get_mut(kind) {
            if now.saturating_duration_since(window.logged_at) < interval {
                window.suppressed += 1;
                return None;
            }
            let suppressed = std::mem::take(&mut window.suppressed);
            window.logged_at = now;
            return Some(suppressed);
        }
        if kinds.len() >= MAX_KINDS {
            kinds.retain(|_, window| now.saturating_duration_since(window.logged_at) < interval);
            if kinds.len() >= MAX_KINDS {
                kinds.clear();
            }
        }
        kinds.insert(kind.to_owned(), Window { logged_at: now, suppressed: 0 });
        Some(0)
    }

    /// Ends `kind`'s run (its fault is over: a circuit closed, a store answered again): returns
    /// the occurrences not logged since its last line, for the line that says it is over, and
    /// the next occurrence logs at once.
    pub fn settle(&self, kind: &str) -> u64 {
        let mut guard = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        guard.as_mut().and_then(|kinds| kinds.remove(kind)).map_or(0, |window| window.suppressed)
    }
}

/// `tracing::warn!` through a throttle of its own, for `kind`: the first occurrence at once, then
/// at most one line per interval, each with a `suppressed` field (occurrences not logged since
/// the site's last line).
#[macro_export]
macro_rules! warn_throttled {
    ($kind:expr, $($rest:tt)+) => {{
        static THROTTLE: $crate::log::Throttle = $crate::log::Throttle::new();
        if let Some(suppressed) = THROTTLE.admit($kind) {
            ::tracing::warn!(suppressed, $($rest)+);
        }
    }};
}

/// [`warn_throttled!`] at error level.
#[macro_export]
macro_rules! error_throttled {
    ($kind:expr, $($rest:tt)+) => {{
        static THROTTLE: $crate::log::Throttle = $crate::log::Throttle::new();
        if let Some(suppressed) = THROTTLE.admit($kind) {
            ::tracing::error!(suppressed, $($rest)+);
        }
    }};
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A clock the test moves: an offset from a fixed start.
    static OFFSET_MS: Mutex<u64> = Mutex::new(0);
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

    fn test_clock() -> Instant {
        let start = *START.get_or_init(Instant::now);
        start + Duration::from_millis(*OFFSET_MS.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn advance(ms: u64) {
        *OFFSET_MS.lock().unwrap_or_else(PoisonError::into_inner) += ms;
    }

    // One test drives the shared clock, so the steps cannot interleave with another test's.
    #[test]
    fn first_occurrence_at_once_then_one_line_per_interval_with_the_count_not_logged() {
        let throttle = Throttle::with_clock(Duration::from_secs(10), test_clock);

        assert_eq!(throttle.admit("openai"), Some(0), "the first occurrence is logged");
        for _ in 0..99 {
            assert_eq!(throttle.admit("openai"), None);
        }
        // Another kind has its own window.
        assert_eq!(throttle.admit("anthropic"), Some(0));
        advance(9_999);
        assert_eq!(throttle.admit("openai"), None, "still inside the interval");
        advance(1);
        assert_eq!(throttle.admit("openai"), Some(100), "the next line carries the 100 not logged");
        assert_eq!(throttle.admit("openai"), None);
        advance(60_000);
        assert_eq!(throttle.admit("openai"), Some(1), "a quiet spell: the next one logs with what it held");

        // Settling ends the run: its count is handed over and the next occurrence logs at once.
        assert_eq!(throttle.admit("openai"), None);
        assert_eq!(throttle.admit("openai"), None);
        assert_eq!(throttle.settle("openai"), 2);
        assert_eq!(throttle.settle("openai"), 0, "nothing held after a settle");
        assert_eq!(throttle.admit("openai"), Some(0));

        // Past the bound on kinds, lapsed kinds are forgotten first.
        advance(20_000);
        for kind in 0..MAX_KINDS {
            throttle.admit(&kind.to_string());
        }
        assert_eq!(throttle.admit("openai"), Some(0), "a lapsed kind logs as a first occurrence");
        let kinds = throttle.kinds.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map_or(0, HashMap::len);
        assert!(kinds <= MAX_KINDS, "{kinds} kinds kept");
    }

    #[test]
    fn a_zero_interval_logs_every_occurrence() {
        let throttle = Throttle::with_clock(Duration::ZERO, Instant::now);
        for _ in 0..5 {
            assert_eq!(throttle.admit("postgres"), Some(0));
        }
    }
}
