//! Exact decisions in Redis, shared by replicas: each entry is one key, read and written by
//! single-key GET/SET EX/DEL, so one Redis or a Redis Cluster (`REDIS_URL`) takes it alike.

use std::time::Duration;

use async_trait::async_trait;
use redis::AsyncCommands;
use sha2::{Digest, Sha256};
use switchyard_kit::store::{KeyPrefix, REDIS_COMMAND_TIMEOUT, RedisConnection, StoreError, bounded};

use super::{CachedRoute, DecisionStore};

pub struct RedisDecisions {
    conn: RedisConnection,
    prefix: KeyPrefix,
}

impl RedisDecisions {
    pub fn new(conn: RedisConnection, prefix: KeyPrefix) -> Self {
        Self { conn, prefix }
    }

    /// A tenant's entry: a digest, so no message text is in key names and tenants can never
    /// share a key.
    fn key(&self, tenant: &str, normalized: &str) -> String {
        let mut digest = Sha256::new();
        digest.update(tenant.as_bytes());
        digest.update([0]);
        digest.update(normalized.as_bytes());
        let hex: String = digest.finalize().iter().map(|b| format!("{b:02x}")).collect();
        format!("{}:router:route:{hex}", self.prefix)
    }
}

#[async_trait]
impl DecisionStore for RedisDecisions {
    async fn get(&self, tenant: &str, normalized: &str) -> Result<Option<CachedRoute>, StoreError> {
        let mut conn = self.conn.clone();
        let value: Option<String> = bounded(REDIS_COMMAND_TIMEOUT, conn.get(self.key(tenant, normalized))).await?;
        value
            .map(|json| {
                serde_json::from_str::<CachedRoute>(&json)
                    .map_err(|err| StoreError::Corrupt(format!("routing cache entry: {err}")))
            })
            .transpose()
    }

    async fn put(&self, tenant: &str, normalized: &str, cached: &CachedRoute, ttl: Duration) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let json = serde_json::to_string(cached).map_err(|err| StoreError::Corrupt(err.to_string()))?;
        let key = self.key(tenant, normalized);
        bounded(REDIS_COMMAND_TIMEOUT, conn.set_ex::<_, _, ()>(&key, json, ttl.as_secs().max(1))).await?;
        Ok(())
    }

    async fn forget(&self, tenant: &str, normalized: &str) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        bounded(REDIS_COMMAND_TIMEOUT, conn.del::<_, ()>(self.key(tenant, normalized))).await?;
        Ok(())
    }
}
