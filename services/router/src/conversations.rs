//! Stateless callers' conversations. A caller that names no session but sends a conversation
//! key (the edge derives one from the tenant, the system prompt and the first user message)
//! gets the same session for the same key, per tenant, so the role and the model stick across
//! its requests. The mapping lives in Redis when the router has one (shared by replicas; one
//! Redis or a Redis Cluster: every entry is one key, read and written by single-key
//! GET/GETEX/SET, so no command spans two slots), in memory otherwise, with the session
//! retention as its TTL, renewed on every use.
//!
//! Beside the keys, the persona a caller's tool loop started with (the role's prompt with its
//! transition context), so the turns that continue the loop are asked in exactly the same words.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use redis::AsyncCommands;
use sha2::{Digest, Sha256};
use switchyard_kit::{
    SessionId,
    store::{KeyPrefix, REDIS_COMMAND_TIMEOUT, RedisConnection, StoreError, bounded},
};

/// Keys held in memory at most; past it, expired ones go, then the oldest.
const MEMORY_KEYS: usize = 100_000;

pub struct ConversationKeys {
    ttl: Duration,
    store: Store,
}

enum Store {
    Memory { keys: Mutex<HashMap<String, (SessionId, Instant)>>, loops: Mutex<HashMap<String, (String, Instant)>> },
    Redis { conn: RedisConnection, prefix: KeyPrefix },
}

/// The persona a tool loop started with, for the role it started in.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LoopPersona {
    pub role_id: String,
    pub system_prompt: String,
}

impl ConversationKeys {
    pub fn memory(ttl: Duration) -> Self {
        Self { ttl, store: Store::Memory { keys: Mutex::default(), loops: Mutex::default() } }
    }

    pub fn redis(ttl: Duration, conn: RedisConnection, prefix: KeyPrefix) -> Self {
        Self { ttl, store: Store::Redis { conn, prefix } }
    }

    /// A digest of tenant and key: tenants never share an entry, and no caller text is in key
    /// names.
    fn digest(tenant: &str, key: &str) -> String {
        let mut digest = Sha256::new();
        digest.update(tenant.as_bytes());
        digest.update([0]);
        digest.update(key.as_bytes());
        digest.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    fn redis_key(prefix: &KeyPrefix, tenant: &str, key: &str) -> String {
        format!("{prefix}:router:conversation:{}", Self::digest(tenant, key))
    }

    fn ttl_secs(&self) -> u64 {
        self.ttl.as_secs().max(1)
    }

    /// The session the key maps to, its TTL renewed.
    pub async fn session(&self, tenant: &str, key: &str) -> Result<Option<SessionId>, StoreError> {
        let found = match &self.store {
            Store::Redis { conn, prefix } => {
                let mut conn = conn.clone();
                let key = Self::redis_key(prefix, tenant, key);
                let value: Option<String> =
                    bounded(REDIS_COMMAND_TIMEOUT, conn.get_ex(&key, redis::Expiry::EX(self.ttl_secs()))).await?;
                value
            }
            Store::Memory { keys, .. } => {
                let mut map = keys.lock().unwrap_or_else(PoisonError::into_inner);
                let digest = Self::digest(tenant, key);
                match map.get_mut(&digest) {
                    Some((session, expires)) if *expires > Instant::now() => {
                        *expires = Instant::now() + self.ttl;
                        Some(session.to_string())
                    }
                    Some(_) => {
                        map.remove(&digest);
                        None
                    }
                    None => None,
                }
            }
        };
        found
            .map(|id| {
                SessionId::parse(&id).map_err(|_| StoreError::Corrupt(format!("conversation key maps to `{id}`")))
            })
            .transpose()
    }

    /// Maps the key to `session` unless another request mapped it first; returns the session
    /// the key maps to, so two first requests of one conversation end on one session.
    pub async fn claim(&self, tenant: &str, key: &str, session: &SessionId) -> Result<SessionId, StoreError> {
        self.put(tenant, key, session, false).await
    }

    /// Maps the key to `session` (the one it named is gone).
    pub async fn replace(&self, tenant: &str, key: &str, session: &SessionId) -> Result<(), StoreError> {
        self.put(tenant, key, session, true).await.map(|_| ())
    }

    async fn put(
        &self,
        tenant: &str,
        key: &str,
        session: &SessionId,
        overwrite: bool,
    ) -> Result<SessionId, StoreError> {
        match &self.store {
            Store::Redis { conn, prefix } => {
                let mut conn = conn.clone();
                let key = Self::redis_key(prefix, tenant, key);
                let mut options = redis::SetOptions::default().with_expiration(redis::SetExpiry::EX(self.ttl_secs()));
                if !overwrite {
                    options = options.conditional_set(redis::ExistenceCheck::NX);
                }
                let set: Option<String> =
                    bounded(REDIS_COMMAND_TIMEOUT, conn.set_options(&key, session.as_str(), options)).await?;
                if set.is_some() {
                    return Ok(session.clone());
                }
                let current: Option<String> = bounded(REDIS_COMMAND_TIMEOUT, conn.get(&key)).await?;
                match current {
                    Some(id) => SessionId::parse(&id)
                        .map_err(|_| StoreError::Corrupt(format!("conversation key maps to `{id}`"))),
                    // Expired in between: this request's session stands.
                    None => Ok(session.clone()),
                }
            }
            Store::Memory { keys, .. } => {
                let mut map = keys.lock().unwrap_or_else(PoisonError::into_inner);
                let now = Instant::now();
                if map.len() >= MEMORY_KEYS {
                    map.retain(|_, (_, expires)| *expires > now);
                    if map.len() >= MEMORY_KEYS
                        && let Some(oldest) = map.iter().min_by_key(|(_, (_, e))| *e).map(|(k, _)| k.clone())
                    {
                        map.remove(&oldest);
                    }
                }
                let digest = Self::digest(tenant, key);
                if !overwrite
                    && let Some((current, expires)) = map.get(&digest)
                    && *expires > now
                {
                    return Ok(current.clone());
                }
                map.insert(digest, (session.clone(), now + self.ttl));
                Ok(session.clone())
            }
        }
    }

    /// Keeps the persona of the tool loop running on `session`.
    pub async fn remember_loop(
        &self,
        tenant: &str,
        session: &SessionId,
        persona: &LoopPersona,
    ) -> Result<(), StoreError> {
        self.put_loop_record("loop", tenant, session, persona).await
    }

    /// The persona of the tool loop running on `session`, if one was kept.
    pub async fn loop_persona(&self, tenant: &str, session: &SessionId) -> Result<Option<LoopPersona>, StoreError> {
        self.loop_record("loop", tenant, session).await
    }

    /// Keeps the gateway's tools of the tool loop running on `session` (and the gateway tool
    /// traffic its turns had), for the loop's continuations.
    pub async fn remember_loop_tools(
        &self,
        tenant: &str,
        session: &SessionId,
        tools: &LoopTools,
    ) -> Result<(), StoreError> {
        self.put_loop_record("loop-tools", tenant, session, tools).await
    }

    /// The gateway's tools of the tool loop running on `session`, if it was offered any.
    pub async fn loop_tools(&self, tenant: &str, session: &SessionId) -> Result<Option<LoopTools>, StoreError> {
        self.loop_record("loop-tools", tenant, session).await
    }

    async fn put_loop_record<T: serde::Serialize>(
        &self,
        kind: &str,
        tenant: &str,
        session: &SessionId,
        record: &T,
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(record).map_err(|err| StoreError::Corrupt(err.to_string()))?;
        match &self.store {
            Store::Redis { conn, prefix } => {
                let mut conn = conn.clone();
                let key = format!("{prefix}:router:{kind}:{}", Self::digest(tenant, session.as_str()));
                bounded(REDIS_COMMAND_TIMEOUT, conn.set_ex::<_, _, ()>(&key, json, self.ttl_secs())).await
            }
            Store::Memory { loops, .. } => {
                let mut map = loops.lock().unwrap_or_else(PoisonError::into_inner);
                let now = Instant::now();
                if map.len() >= MEMORY_KEYS {
                    map.retain(|_, (_, expires)| *expires > now);
                    if map.len() >= MEMORY_KEYS {
                        map.clear();
                    }
                }
                map.insert(format!("{kind}:{}", Self::digest(tenant, session.as_str())), (json, now + self.ttl));
                Ok(())
            }
        }
    }

    async fn loop_record<T: serde::de::DeserializeOwned>(
        &self,
        kind: &str,
        tenant: &str,
        session: &SessionId,
    ) -> Result<Option<T>, StoreError> {
        let json = match &self.store {
            Store::Redis { conn, prefix } => {
                let mut conn = conn.clone();
                let key = format!("{prefix}:router:{kind}:{}", Self::digest(tenant, session.as_str()));
                let value: Option<String> =
                    bounded(REDIS_COMMAND_TIMEOUT, conn.get_ex(&key, redis::Expiry::EX(self.ttl_secs()))).await?;
                value
            }
            Store::Memory { loops, .. } => {
                let map = loops.lock().unwrap_or_else(PoisonError::into_inner);
                map.get(&format!("{kind}:{}", Self::digest(tenant, session.as_str())))
                    .filter(|(_, expires)| *expires > Instant::now())
                    .map(|(json, _)| json.clone())
            }
        };
        json.map(|json| {
            serde_json::from_str(&json).map_err(|err| StoreError::Corrupt(format!("tool loop {kind}: {err}")))
        })
        .transpose()
    }
}

/// What a tool loop that was offered the gateway's tools keeps for its continuations: the same
/// tools, and the gateway calls its turns made (which the caller never sees), to put back in
/// the conversation the caller resends.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LoopTools {
    pub tools: Vec<StoredTool>,
    pub steps: Vec<HiddenSteps>,
}

/// A gateway tool as offered.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StoredTool {
    pub name: String,
    pub description: String,
    pub input_schema: serde_json::Value,
    pub server: String,
}

/// The gateway traffic of one turn that ended with calls of the caller's tools: `before`, the
/// model's gateway calls and their results ahead of its last answer; `calls`, all the calls of
/// that last answer (the caller got those of its own tools), and `results`, the results of
/// its gateway calls. `anchor` is the id of the first call the caller got: the assistant
/// message carrying it in a resent conversation is where these go back.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HiddenSteps {
    pub anchor: String,
    pub before: Vec<StoredMessage>,
    pub calls: Vec<StoredCall>,
    pub results: Vec<StoredMessage>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StoredCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// A message of the gateway's traffic (text only: what the router sends the model).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StoredMessage {
    Assistant { content: String, calls: Vec<StoredCall> },
    Tool { call_id: String, content: String, is_error: bool },
}
