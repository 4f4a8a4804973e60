//! The context store in Redis, shared by every gateway replica: one Redis or a Redis Cluster
//! (`REDIS_URL=redis+cluster://…`), through the kit's [`RedisConnection`].
//!
//! Keys (`<tenant>` and `<session>` cannot contain braces):
//! - `<prefix>:mcp:{<tenant>:<session>}` — a hash per MCP session: `q` (current query), `i`
//!   (current intent), `at` (last updated, ms since the epoch), `emb` (the context's
//!   embedding, little-endian f32), `used` (JSON array of tools used), `shown` (JSON array of
//!   the filtered list last shown), `seen` (counted). Sliding TTL: every write restarts it.
//! - `<prefix>:mcp:stats` — a hash of counters for all replicas: `sessions`, `ctx_sessions`,
//!   `calls`, `listed` (calls after a filtered list), `hits` (of those, calls of a listed tool).
//! - `<prefix>:mcp:transport:<session>` — the MCP transport's session state (JSON), so a
//!   session initialized on one replica continues on another.
//!
//! Each change to a session is one Lua script over that session's one key, so concurrent
//! requests of one session never interleave and every script stays in one slot on a cluster.
//! A script returns what it changed; the counters are then added to the stats hash by a second
//! script over that key alone (two slots may not meet in one script). A Redis failure between
//! the two loses those counts (logged), never counts twice. Keys and fields are those of the
//! single-Redis layout before, so replicas of both kinds may share one Redis during an upgrade.

use std::{collections::HashMap, time::Duration};

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use redis::Script;
use switchyard_kit::{
    Secret,
    store::{KeyPrefix, REDIS_COMMAND_TIMEOUT, RedisConnection, bounded, ping_redis},
};

use super::{ContextStore, SessionKey, StoreError, embedding_from_bytes, embedding_to_bytes};
use crate::domain::{Counters, SessionContext, ShownMatch};

const COMMAND_TIMEOUT: Duration = REDIS_COMMAND_TIMEOUT;

/// Returns 1 if the session was new (to be counted), else 0.
const TOUCH_LUA: &str = r"
local new = redis.call('HSETNX', KEYS[1], 'seen', '1')
redis.call('EXPIRE', KEYS[1], ARGV[1])
return new
";

/// ARGV: ttl, query, intent ('' for none), updated at (ms), embedding ('' for none).
/// Returns {new session (0/1), first context (0/1), the session's fields}.
const SET_CONTEXT_LUA: &str = r"
local new = redis.call('HSETNX', KEYS[1], 'seen', '1')
local first = 1 - redis.call('HEXISTS', KEYS[1], 'q')
redis.call('HSET', KEYS[1], 'q', ARGV[2], 'at', ARGV[4])
if ARGV[3] == '' then redis.call('HDEL', KEYS[1], 'i') else redis.call('HSET', KEYS[1], 'i', ARGV[3]) end
if ARGV[5] == '' then redis.call('HDEL', KEYS[1], 'emb') else redis.call('HSET', KEYS[1], 'emb', ARGV[5]) end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return {new, first, redis.call('HGETALL', KEYS[1])}
";

const SHOWN_LUA: &str = r"
redis.call('HSET', KEYS[1], 'shown', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
";

/// ARGV: ttl, tool. Returns {0 (no list shown), 1 (in the list) or 2 (not in it), the
/// session's fields}.
const CALL_LUA: &str = r"
local used = redis.call('HGET', KEYS[1], 'used')
local list = {}
if used then list = cjson.decode(used) end
local known = false
for _, t in ipairs(list) do
  if t == ARGV[2] then known = true break end
end
if not known then
  table.insert(list, ARGV[2])
  redis.call('HSET', KEYS[1], 'used', cjson.encode(list))
end
local result = 0
local shown = redis.call('HGET', KEYS[1], 'shown')
if shown then
  result = 2
  for _, t in ipairs(cjson.decode(shown)) do
    if t == ARGV[2] then result = 1 break end
  end
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return {result, redis.call('HGETALL', KEYS[1])}
";

/// KEYS[1]: the stats hash. ARGV: field, increment, field, increment, …
const COUNT_LUA: &str = r"
for i = 1, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
return 1
";

pub struct RedisContextStore {
    conn: RedisConnection,
    prefix: String,
    ttl_secs: u64,
    touch: Script,
    set_context: Script,
    shown: Script,
    call: Script,
    count: Script,
}

impl std::fmt::Debug for RedisContextStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisContextStore").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

impl RedisContextStore {
    /// Connects to the Redis or Redis Cluster at `url` and loads the scripts. Keys start with
    /// `prefix` (see [`KeyPrefix`]); contexts expire `ttl` after their last write.
    pub async fn connect(url: &Secret, prefix: &str, ttl: Duration) -> Result<Self, StoreError> {
        let prefix = KeyPrefix::parse(prefix)?;
        let mut conn = RedisConnection::connect(url).await?;
        let store = Self {
            conn: conn.clone(),
            prefix: prefix.to_string(),
            ttl_secs: ttl.as_secs().max(1),
            touch: Script::new(TOUCH_LUA),
            set_context: Script::new(SET_CONTEXT_LUA),
            shown: Script::new(SHOWN_LUA),
            call: Script::new(CALL_LUA),
            count: Script::new(COUNT_LUA),
        };
        // Loading up front turns a script error into a startup failure; should Redis lose the
        // scripts later (a restart), invoking loads them again.
        for script in [&store.touch, &store.set_context, &store.shown, &store.call, &store.count] {
            bounded(COMMAND_TIMEOUT, script.load_async(&mut conn)).await?;
        }
        Ok(store)
    }

    /// Adds the non-zero `increments` to the stats hash, in one script over that key alone.
    /// The session's change is made by then, so a failure here is logged (those counts are
    /// lost), never reported as the change failing.
    async fn count(&self, increments: &[(&str, i64)]) {
        let mut call = self.count.prepare_invoke();
        call.key(self.stats_key());
        let mut any = false;
        for &(field, by) in increments.iter().filter(|(_, by)| *by != 0) {
            call.arg(field).arg(by);
            any = true;
        }
        if !any {
            return;
        }
        let mut conn = self.conn.clone();
        if let Err(err) = bounded::<i64>(COMMAND_TIMEOUT, call.invoke_async(&mut conn)).await {
            switchyard_kit::warn_throttled!("stats", error = %err, "counting in the gateway's stats hash");
        }
    }

    fn context_key(&self, key: &SessionKey) -> String {
        format!("{}:mcp:{{{}}}", self.prefix, key.store_key())
    }

    fn stats_key(&self) -> String {
        format!("{}:mcp:stats", self.prefix)
    }

    fn transport_key(&self, session_id: &str) -> String {
        format!("{}:mcp:transport:{session_id}", self.prefix)
    }
}

fn text(fields: &HashMap<String, Vec<u8>>, name: &str) -> Result<Option<String>, StoreError> {
    fields
        .get(name)
        .map(|bytes| String::from_utf8(bytes.clone()).map_err(|_| StoreError::Corrupt(format!("field `{name}`"))))
        .transpose()
}

fn names(fields: &HashMap<String, Vec<u8>>, name: &str) -> Result<Option<Vec<String>>, StoreError> {
    fields
        .get(name)
        .map(|bytes| serde_json::from_slice(bytes).map_err(|err| StoreError::Corrupt(format!("field `{name}`: {err}"))))
        .transpose()
}

fn parse_context(fields: &HashMap<String, Vec<u8>>) -> Result<SessionContext, StoreError> {
    let last_updated = text(fields, "at")?
        .map(|ms| ms.parse::<i64>().map_err(|_| StoreError::Corrupt("field `at`".into())))
        .transpose()?
        .and_then(|ms| Utc.timestamp_millis_opt(ms).single());
    Ok(SessionContext {
        current_query: text(fields, "q")?,
        current_intent: text(fields, "i")?,
        tools_used: names(fields, "used")?.unwrap_or_default(),
        last_updated,
        embedding: fields.get("emb").map(|bytes| embedding_from_bytes(bytes)).transpose()?,
        shown: names(fields, "shown")?,
    })
}

#[async_trait]
impl ContextStore for RedisContextStore {
    async fn get(&self, key: &SessionKey) -> Result<Option<SessionContext>, StoreError> {
        let mut conn = self.conn.clone();
        let fields: HashMap<String, Vec<u8>> =
            bounded(COMMAND_TIMEOUT, redis::cmd("HGETALL").arg(self.context_key(key)).query_async(&mut conn)).await?;
        if fields.is_empty() { Ok(None) } else { parse_context(&fields).map(Some) }
    }

    async fn touch(&self, key: &SessionKey) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let mut call = self.touch.prepare_invoke();
        call.key(self.context_key(key)).arg(self.ttl_secs);
        let new: i64 = bounded(COMMAND_TIMEOUT, call.invoke_async(&mut conn)).await?;
        self.count(&[("sessions", new)]).await;
        Ok(())
    }

    async fn set_context(
        &self,
        key: &SessionKey,
        query: &str,
        intent: Option<&str>,
        embedding: Option<&[f32]>,
        at: DateTime<Utc>,
    ) -> Result<SessionContext, StoreError> {
        let mut conn = self.conn.clone();
        let mut call = self.set_context.prepare_invoke();
        call.key(self.context_key(key))
            .arg(self.ttl_secs)
            .arg(query)
            .arg(intent.unwrap_or(""))
            .arg(at.timestamp_millis())
            .arg(embedding.map(embedding_to_bytes).unwrap_or_default());
        let (new, first, fields): (i64, i64, HashMap<String, Vec<u8>>) =
            bounded(COMMAND_TIMEOUT, call.invoke_async(&mut conn)).await?;
        self.count(&[("sessions", new), ("ctx_sessions", first)]).await;
        parse_context(&fields)
    }

    async fn record_shown(&self, key: &SessionKey, tools: &[String]) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let list = serde_json::to_string(tools).map_err(|err| StoreError::Corrupt(err.to_string()))?;
        let mut call = self.shown.prepare_invoke();
        call.key(self.context_key(key)).arg(self.ttl_secs).arg(list);
        let _: i64 = bounded(COMMAND_TIMEOUT, call.invoke_async(&mut conn)).await?;
        Ok(())
    }

    async fn record_call(&self, key: &SessionKey, tool: &str) -> Result<(ShownMatch, SessionContext), StoreError> {
        let mut conn = self.conn.clone();
        let mut call = self.call.prepare_invoke();
        call.key(self.context_key(key)).arg(self.ttl_secs).arg(tool);
        let (result, fields): (i64, HashMap<String, Vec<u8>>) =
            bounded(COMMAND_TIMEOUT, call.invoke_async(&mut conn)).await?;
        let shown = match result {
            1 => ShownMatch::InList,
            2 => ShownMatch::NotInList,
            _ => ShownMatch::NoList,
        };
        let listed = i64::from(shown != ShownMatch::NoList);
        let hit = i64::from(shown == ShownMatch::InList);
        self.count(&[("calls", 1), ("listed", listed), ("hits", hit)]).await;
        Ok((shown, parse_context(&fields)?))
    }

    async fn counters(&self) -> Result<Counters, StoreError> {
        let mut conn = self.conn.clone();
        let fields: HashMap<String, u64> =
            bounded(COMMAND_TIMEOUT, redis::cmd("HGETALL").arg(self.stats_key()).query_async(&mut conn)).await?;
        let get = |name: &str| fields.get(name).copied().unwrap_or(0);
        Ok(Counters {
            sessions: get("sessions"),
            sessions_with_context: get("ctx_sessions"),
            tool_calls: get("calls"),
            calls_after_filtered_list: get("listed"),
            filtered_hits: get("hits"),
        })
    }

    async fn ping(&self) -> Result<(), StoreError> {
        ping_redis(&self.conn).await
    }

    async fn load_transport(&self, session_id: &str) -> Result<Option<String>, StoreError> {
        let mut conn = self.conn.clone();
        bounded(COMMAND_TIMEOUT, redis::cmd("GET").arg(self.transport_key(session_id)).query_async(&mut conn)).await
    }

    async fn store_transport(&self, session_id: &str, state: &str) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let command =
            redis::cmd("SET").arg(self.transport_key(session_id)).arg(state).arg("EX").arg(self.ttl_secs).clone();
        let _: () = bounded(COMMAND_TIMEOUT, command.query_async(&mut conn)).await?;
        Ok(())
    }

    async fn delete_transport(&self, session_id: &str) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let _: i64 =
            bounded(COMMAND_TIMEOUT, redis::cmd("DEL").arg(self.transport_key(session_id)).query_async(&mut conn))
                .await?;
        Ok(())
    }

    async fn end_session(&self, key: &SessionKey) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        // The context hash holds the shown list too: one key is the whole session.
        let _: i64 =
            bounded(COMMAND_TIMEOUT, redis::cmd("DEL").arg(self.context_key(key)).query_async(&mut conn)).await?;
        Ok(())
    }
}
