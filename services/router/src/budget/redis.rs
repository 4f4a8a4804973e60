//! Spend counters in Redis, shared by replicas: one key per budget and period, all of a
//! tenant's under the hash tag `{budget:<tenant>}` so the multi-key reads and the script stay
//! in one Redis Cluster slot. Increments are atomic; a missing counter is never recreated by an
//! increment (that would start it from zero) but rebuilt by the next check.

use std::time::Duration;

use async_trait::async_trait;
use redis::Script;
use switchyard_kit::{
    TenantId,
    store::{KeyPrefix, REDIS_COMMAND_TIMEOUT, RedisConnection, StoreError, bounded},
};

use super::SpendCounters;

/// INCRBY on each key that exists; the new totals, nil (false) for a missing key.
const ADD_TO_EXISTING: &str = r"
local totals = {}
for i, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then
    totals[i] = redis.call('INCRBY', key, ARGV[1])
  else
    totals[i] = false
  end
end
return totals
";

/// SET NX EX, then the value whoever set it holds.
const SEED: &str = r"
redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2])
return redis.call('GET', KEYS[1])
";

pub struct RedisSpendCounters {
    conn: RedisConnection,
    prefix: KeyPrefix,
    add: Script,
    seed: Script,
}

impl RedisSpendCounters {
    pub fn new(conn: RedisConnection, prefix: KeyPrefix) -> Self {
        Self { conn, prefix, add: Script::new(ADD_TO_EXISTING), seed: Script::new(SEED) }
    }

    fn key(&self, tenant: &TenantId, counter: &str) -> String {
        format!("{}:router:{{budget:{}}}:{counter}", self.prefix, tenant.as_str())
    }
}

#[async_trait]
impl SpendCounters for RedisSpendCounters {
    async fn read(&self, tenant: &TenantId, counters: &[String]) -> Result<Vec<Option<i64>>, StoreError> {
        if counters.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn.clone();
        let mut mget = redis::cmd("MGET");
        for counter in counters {
            mget.arg(self.key(tenant, counter));
        }
        bounded(REDIS_COMMAND_TIMEOUT, mget.query_async(&mut conn)).await
    }

    async fn seed(&self, tenant: &TenantId, counter: &str, nanos: i64, ttl: Duration) -> Result<i64, StoreError> {
        let mut conn = self.conn.clone();
        let mut invocation = self.seed.key(self.key(tenant, counter));
        invocation.arg(nanos).arg(ttl.as_secs().max(1));
        let value: Option<i64> = bounded(REDIS_COMMAND_TIMEOUT, invocation.invoke_async(&mut conn)).await?;
        Ok(value.unwrap_or(nanos))
    }

    async fn add(&self, tenant: &TenantId, counters: &[String], nanos: i64) -> Result<Vec<Option<i64>>, StoreError> {
        if counters.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn.clone();
        let mut invocation = self.add.prepare_invoke();
        for counter in counters {
            invocation.key(self.key(tenant, counter));
        }
        invocation.arg(nanos);
        bounded(REDIS_COMMAND_TIMEOUT, invocation.invoke_async(&mut conn)).await
    }
}
