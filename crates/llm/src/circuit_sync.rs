//! Circuit state shared by the router's replicas through Redis, so that a provider one replica
//! found sick is skipped by all of them and, after the cooldown, probed by one of them only.
//!
//! Per provider, one record and one probe lease, both under the hash tag `{circuit:<provider>}`
//! (one Redis Cluster slot, so the two-key script runs on a cluster too):
//!
//! - `<prefix>:{circuit:<provider>}` holds the last change any replica made: `<at> open <until>`
//!   or `<at> closed` (wall-clock milliseconds). A write only replaces an older record (last
//!   writer by `at` wins), so changes published out of order cannot undo a newer one.
//! - `<prefix>:{circuit:<provider>}:probe` is the probe lease: a replica whose circuit is due a
//!   probe claims it with `SET NX PX <cooldown>` in a script that first checks the record is
//!   still open and past its time. One replica wins; the others keep refusing and learn the
//!   probe's outcome from the record. The lease is not released after the probe but expires,
//!   so a replica that has not yet read the new record cannot claim a second probe.
//!
//! Why polling and not a read per call: a closed circuit (the normal case) must cost the turn
//! nothing, so no Redis round trip is made on a model call's path while the circuit is closed
//! or open. Each breaker reads its record in the background every `interval` (one `GET` per
//! provider per replica per interval) and takes any newer change; changes are written in the
//! background when they happen, and a change that could not be written (Redis away) is written
//! by the first read that finds the record older. Only claiming a probe, once per cooldown, is on a call's path,
//! bounded by [`CLAIM_TIMEOUT`]. A replica learns of another's opening within `interval`;
//! pub/sub would be quicker but needs a connection per node on a cluster and a resubscribe
//! after every outage, for a few hundred milliseconds gained on an event that lasts a cooldown.
//!
//! When Redis is away every call here fails within its bound, the breakers go on with their own
//! state (each replica opens and probes on its own, as without Redis), the outage is logged
//! once (and its end once) and counted in `switchyard.provider.circuit_sync_errors`.

use std::{
    sync::{
        OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use opentelemetry::{KeyValue, metrics::Counter};
use redis::Script;
use switchyard_kit::store::{KeyPrefix, RedisConnection, StoreError, bounded};

/// Longest wait for the probe lease, on the path of the call that would be the probe; past it
/// the replica decides alone (and probes).
pub const CLAIM_TIMEOUT: Duration = Duration::from_millis(250);
/// Longest wait for a background read or write of a record.
const SYNC_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a record lives after its last change: long enough for any replica to read it (an
/// open record is read well within its cooldown), short enough that a provider removed from the
/// configuration leaves nothing behind for long.
pub const RECORD_TTL: Duration = Duration::from_secs(3600);

/// Replaces the record only when the new one is newer. KEYS[1] record; ARGV[1] the new record's
/// `at`, ARGV[2] the record, ARGV[3] its time to live in ms.
const PUBLISH: &str = r"
local current = redis.call('GET', KEYS[1])
if current then
  local at = tonumber(string.match(current, '^(%d+)'))
  if at and at >= tonumber(ARGV[1]) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
";

/// Claims the probe lease when the record is not closed and not open into the future.
/// KEYS[1] record, KEYS[2] lease; ARGV[1] now in ms, ARGV[2] lease ms, ARGV[3] the claimant.
/// Answers `probe` when claimed, else the record (empty when there is none).
const CLAIM: &str = r"
local current = redis.call('GET', KEYS[1])
if current then
  local kind, untl = string.match(current, '^%d+ (%a+) ?(%d*)$')
  if kind == 'closed' then return current end
  if kind == 'open' and tonumber(untl) > tonumber(ARGV[1]) then return current end
end
if redis.call('SET', KEYS[2], ARGV[3], 'NX', 'PX', ARGV[2]) then return 'probe' end
return current or ''
";

/// One change of a provider's circuit, as written to Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// When the change was made, in wall-clock milliseconds since the epoch.
    pub at_ms: u64,
    pub change: Change,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Opened until this wall-clock time (ms since the epoch).
    Open { until_ms: u64 },
    /// Closed by a probe that answered.
    Closed,
}

impl Record {
    fn encode(self) -> String {
        match self.change {
            Change::Open { until_ms } => format!("{} open {until_ms}", self.at_ms),
            Change::Closed => format!("{} closed", self.at_ms),
        }
    }

    /// `None` for anything else than what [`encode`](Self::encode) writes.
    pub fn parse(text: &str) -> Option<Self> {
        let mut words = text.split(' ');
        let at_ms = words.next()?.parse().ok()?;
        let change = match (words.next()?, words.next()) {
            ("open", Some(until)) => Change::Open { until_ms: until.parse().ok()? },
            ("closed", None) => Change::Closed,
            _ => return None,
        };
        words.next().is_none().then_some(Self { at_ms, change })
    }
}

/// What claiming the probe lease found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// This replica probes.
    Won,
    /// Another replica probes, or the record says there is nothing to probe (with the record,
    /// when there is one).
    Lost(Option<Record>),
    /// Redis did not answer in time: the replica decides alone.
    Unavailable,
}

/// The wall clock in milliseconds since the epoch (what records are stamped with).
pub fn wall_ms() -> u64 {
    millis(SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default())
}

/// A duration in whole milliseconds, saturating (a cooldown of years is still a number).
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn sync_errors() -> &'static Counter<u64> {
    static ERRORS: OnceLock<Counter<u64>> = OnceLock::new();
    ERRORS.get_or_init(|| {
        opentelemetry::global::meter("switchyard-llm")
            .u64_counter("switchyard.provider.circuit_sync_errors")
            .with_description(
                "Reads and writes of the shared circuit state that failed (Redis away or slow), by operation; \
                 the circuits go on per replica meanwhile",
            )
            .build()
    })
}

/// The shared circuit state in one Redis (single node or cluster), for every provider's breaker
/// of one replica.
pub struct CircuitSync {
    conn: RedisConnection,
    prefix: String,
    interval: Duration,
    publish: Script,
    claim: Script,
    /// Who holds a probe lease, for an operator reading Redis.
    claimant: String,
    reachable: AtomicBool,
}

impl std::fmt::Debug for CircuitSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CircuitSync").field("prefix", &self.prefix).field("interval", &self.interval).finish()
    }
}

impl CircuitSync {
    /// Records under `prefix`; each breaker reads its record every `interval`.
    pub fn new(conn: RedisConnection, prefix: &KeyPrefix, interval: Duration) -> Self {
        Self {
            conn,
            prefix: prefix.as_str().to_owned(),
            interval,
            publish: Script::new(PUBLISH),
            claim: Script::new(CLAIM),
            claimant: format!("{}-{}", std::process::id(), wall_ms()),
            reachable: AtomicBool::new(true),
        }
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The record's key; the probe lease's is this with `:probe`.
    pub fn record_key(&self, provider: &str) -> String {
        format!("{}:{{circuit:{provider}}}", self.prefix)
    }

    fn lease_key(&self, provider: &str) -> String {
        format!("{}:probe", self.record_key(provider))
    }

    /// The provider's record; `None` when there is none or it is unreadable (logged).
    pub async fn read(&self, provider: &str) -> Result<Option<Record>, StoreError> {
        let mut conn = self.conn.clone();
        let read = bounded(SYNC_TIMEOUT, redis::cmd("GET").arg(self.record_key(provider)).query_async(&mut conn)).await;
        let text: Option<String> = self.note("read", read)?;
        Ok(text.and_then(|text| {
            let record = Record::parse(&text);
            if record.is_none() {
                tracing::warn!(provider, record = %text, "unreadable shared circuit record; ignored");
            }
            record
        }))
    }

    /// Writes the change unless a newer one is there already.
    pub async fn publish(&self, provider: &str, record: Record) {
        let mut conn = self.conn.clone();
        let mut invocation = self.publish.key(self.record_key(provider));
        invocation.arg(record.at_ms).arg(record.encode()).arg(millis(RECORD_TTL));
        let written: Result<i64, StoreError> = bounded(SYNC_TIMEOUT, invocation.invoke_async(&mut conn)).await;
        // A change not written is written by the breaker's next read that finds it missing.
        let _ = self.note("publish", written);
    }

    /// Claims the probe of `provider`'s circuit for `lease` (after which another replica may
    /// probe, should this one's probe never report).
    pub async fn claim_probe(&self, provider: &str, lease: Duration) -> Claim {
        let mut conn = self.conn.clone();
        let mut invocation = self.claim.key(self.record_key(provider));
        invocation.key(self.lease_key(provider));
        invocation.arg(wall_ms()).arg(millis(lease).max(1)).arg(&self.claimant);
        let answer: Result<String, StoreError> = bounded(CLAIM_TIMEOUT, invocation.invoke_async(&mut conn)).await;
        match self.note("claim", answer) {
            Err(_) => Claim::Unavailable,
            Ok(answer) if answer == "probe" => Claim::Won,
            Ok(answer) => Claim::Lost(Record::parse(&answer)),
        }
    }

    /// The call's outcome, noted: a failure is counted, and logged when it is the first since
    /// Redis last answered (and the first answer after failures is logged too).
    fn note<T>(&self, operation: &'static str, outcome: Result<T, StoreError>) -> Result<T, StoreError> {
        match outcome {
            Ok(value) => {
                if !self.reachable.swap(true, Ordering::Relaxed) {
                    tracing::info!("the shared circuit state is reachable again; circuits are shared across replicas");
                }
                Ok(value)
            }
            Err(err) => {
                sync_errors().add(1, &[KeyValue::new("operation", operation)]);
                if self.reachable.swap(false, Ordering::Relaxed) {
                    tracing::warn!(
                        operation,
                        error = %err,
                        "the shared circuit state is unreachable; each replica keeps its own circuits until it answers"
                    );
                }
                Err(err)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_what_is_written_and_nothing_else() {
        for record in [
            Record { at_ms: 1_700_000_000_123, change: Change::Open { until_ms: 1_700_000_030_123 } },
            Record { at_ms: 5, change: Change::Closed },
        ] {
            assert_eq!(Record::parse(&record.encode()), Some(record));
        }
        for bad in
            ["", "12", "12 open", "12 open x", "x closed", "12 closed 5", "12 half 5", "12 open 5 6", "-1 closed"]
        {
            assert_eq!(Record::parse(bad), None, "{bad:?}");
        }
    }
}
