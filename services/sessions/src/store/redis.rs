//! The live store in Redis: each session is a hash plus a list of recent messages, and every
//! change is one Lua script, so concurrent calls on one session never interleave.
//!
//! Data model, per session (`<tenant>` and `<id>` cannot contain braces, so the `{…}` hash tag
//! keeps both keys in one Redis Cluster slot; the tenant in the key is what makes another
//! tenant's lookup miss):
//!
//! - `<prefix>:{<tenant>:<id>}:s` — a hash: `role` (role id), `status` (`active`/`closed`),
//!   `turns`, `switches`, `msgs` (the message count), `created` and `updated` (milliseconds
//!   since the Unix epoch), `ttl` (seconds), `meta` (the metadata as a JSON object) and,
//!   when a user created the session, `user` (its owner).
//! - `<prefix>:{<tenant>:<id>}:m` — a list of JSON-encoded `Message`s, oldest first, trimmed
//!   to the newest `window` on every append.
//!
//! Both keys expire after `ttl` seconds; every turn and append restarts that, reads and closing
//! do not.

use std::{collections::BTreeMap, collections::HashMap, time::Duration};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use redis::{Script, ScriptInvocation, Value};
use serde::Serialize;

use switchyard_kit::{
    Secret,
    store::{KeyPrefix, REDIS_COMMAND_TIMEOUT, REDIS_CONNECT_TIMEOUT, RedisConnection, bounded, ping_redis},
};

use super::{AppendOutcome, LiveStore, StoreError, TurnOutcome, TurnUpdate, batch_append_id};
use crate::domain::{LiveSession, Message, MessageRole, RoleId, SessionKey, SessionStatus, UserId};

/// Bound on every Redis command, so a hung Redis fails a request instead of hanging it.
const COMMAND_TIMEOUT: Duration = REDIS_COMMAND_TIMEOUT;
/// Bound on connecting (and loading the scripts) at startup.
const CONNECT_TIMEOUT: Duration = REDIS_CONNECT_TIMEOUT;

/// Shared by `create` and `restore`: both write a whole session unless its hash exists.
/// ARGV: ttl seconds, the number n of hash field/value pairs, the n pairs, then the messages.
const CREATE_LUA: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local ttl = tonumber(ARGV[1])
local pairs_end = 2 + 2 * tonumber(ARGV[2])
redis.call('HSET', KEYS[1], unpack(ARGV, 3, pairs_end))
redis.call('DEL', KEYS[2])
for i = pairs_end + 1, #ARGV do
  redis.call('RPUSH', KEYS[2], ARGV[i])
end
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('EXPIRE', KEYS[2], ttl)
return 1
";

/// A consistent snapshot of the hash and the messages; no TTL change.
const LOAD_LUA: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'missing', {}, {}}
end
return {'ok', redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[2], 0, -1)}
";

/// Validation comes before any write: Redis does not roll a script back when it fails midway.
/// ARGV: expected role, expected switch count, new role or '', '1' to count a turn, now (ms).
/// A file of its own: the load generator's Redis floor runs the same script.
const APPLY_TURN_LUA: &str = include_str!("apply_turn.lua");

/// Each message arrives as a JSON object without `seq`; the script numbers it by splicing
/// `{"seq":N,` in front of the object's fields, so no JSON library is needed in Lua. A batch
/// with an append id is looked for in the window first, as the exact text `"append_id":"ID"`
/// (the id's characters need no JSON escaping, so its encoding is the id itself).
/// ARGV: window, now (ms), append id or '', then the messages.
const APPEND_LUA: &str = r#"
local function is_count(v) return v and string.match(v, '^%d+$') ~= nil end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'missing', {}, {}}
end
local s = redis.call('HMGET', KEYS[1], 'status', 'msgs', 'ttl')
if s[1] == 'closed' then
  return {'closed', {}, {}}
end
if not is_count(s[2]) or not is_count(s[3]) or tonumber(s[3]) < 1 then
  return {'corrupt', {'missing or malformed msgs or ttl'}, {}}
end
if ARGV[3] ~= '' then
  local mark = '"append_id":"' .. ARGV[3] .. '"'
  for _, m in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
    if string.find(m, mark, 1, true) then
      return {'repeated', redis.call('HGETALL', KEYS[1]), {}}
    end
  end
end
local seq = tonumber(s[2])
for i = 4, #ARGV do
  seq = seq + 1
  redis.call('RPUSH', KEYS[2], string.format('{"seq":%d,%s', seq, string.sub(ARGV[i], 2)))
end
local window = tonumber(ARGV[1])
if window > 0 then
  redis.call('LTRIM', KEYS[2], -window, -1)
else
  redis.call('DEL', KEYS[2])
end
redis.call('HSET', KEYS[1], 'msgs', string.format('%d', seq), 'updated', ARGV[2])
redis.call('EXPIRE', KEYS[1], tonumber(s[3]))
redis.call('EXPIRE', KEYS[2], tonumber(s[3]))
return {'ok', redis.call('HGETALL', KEYS[1]), {}}
"#;

/// Closing twice changes nothing the second time; the TTL is kept as it is.
/// ARGV: now (ms).
const CLOSE_LUA: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'missing', {}, {}}
end
if redis.call('HGET', KEYS[1], 'status') ~= 'closed' then
  redis.call('HSET', KEYS[1], 'status', 'closed', 'updated', ARGV[1])
end
return {'ok', redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[2], 0, -1)}
";

/// A message as the append script receives it: everything but `seq`, which the script assigns.
#[derive(Serialize)]
struct MessageBody<'a> {
    role: MessageRole,
    content: &'a str,
    role_id: &'a str,
    created_at_ms: i64,
    #[serde(skip_serializing_if = "str::is_empty")]
    append_id: &'a str,
}

/// The two keys of one session.
struct SessionKeys {
    hash: String,
    messages: String,
}

/// What every script but `create` returns: a status word, the session hash (flattened field,
/// value pairs; for `corrupt`, the reason) and the messages when the script read them.
struct ScriptReply {
    status: String,
    hash: Vec<String>,
    messages: Vec<String>,
}

/// The Redis live store, on one Redis or a Redis Cluster (`REDIS_URL`). Cheap to share: one
/// connection multiplexes every request and reconnects by itself. Both keys of a session share
/// the hash tag `{<tenant>:<session>}`, so every script stays in one slot on a cluster.
pub struct RedisLiveStore {
    conn: RedisConnection,
    key_prefix: String,
    create: Script,
    load: Script,
    apply_turn: Script,
    append: Script,
    close: Script,
}

impl std::fmt::Debug for RedisLiveStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLiveStore").field("key_prefix", &self.key_prefix).finish_non_exhaustive()
    }
}

impl RedisLiveStore {
    /// Connects to Redis at `url` and loads the scripts. Keys start with `key_prefix` (see
    /// [`KeyPrefix`]), so several deployments or tests can share one Redis.
    pub async fn connect(url: &Secret, key_prefix: &str) -> Result<Self, StoreError> {
        let key_prefix = KeyPrefix::parse(key_prefix)?;
        let mut conn = RedisConnection::connect(url).await?;
        let store = Self {
            key_prefix: key_prefix.to_string(),
            create: Script::new(CREATE_LUA),
            load: Script::new(LOAD_LUA),
            apply_turn: Script::new(APPLY_TURN_LUA),
            append: Script::new(APPEND_LUA),
            close: Script::new(CLOSE_LUA),
            conn: conn.clone(),
        };
        // Loading up front turns a script error into a startup failure; should Redis lose the
        // scripts later (a restart), invoking falls back to loading them again.
        for script in [&store.create, &store.load, &store.apply_turn, &store.append, &store.close] {
            bounded(CONNECT_TIMEOUT, script.load_async(&mut conn)).await?;
        }
        tracing::debug!(%key_prefix, "connected to redis live store");
        Ok(store)
    }

    fn keys(&self, key: &SessionKey) -> SessionKeys {
        let base = format!("{}:{{{}:{}}}", self.key_prefix, key.tenant, key.id);
        SessionKeys { hash: format!("{base}:s"), messages: format!("{base}:m") }
    }

    async fn invoke(&self, invocation: &ScriptInvocation<'_>) -> Result<Value, StoreError> {
        let mut conn = self.conn.clone();
        bounded(COMMAND_TIMEOUT, invocation.invoke_async(&mut conn)).await
    }

    async fn invoke_reply(&self, invocation: &ScriptInvocation<'_>, hash_key: &str) -> Result<ScriptReply, StoreError> {
        let value = self.invoke(invocation).await?;
        let (status, hash, messages): (String, Vec<String>, Vec<String>) = redis::from_redis_value(value)
            .map_err(|err| StoreError::Corrupt(format!("{hash_key}: unexpected script reply: {err}")))?;
        if status == "corrupt" {
            let reason = hash.first().map_or("malformed session", String::as_str);
            return Err(StoreError::Corrupt(format!("{hash_key}: {reason}")));
        }
        Ok(ScriptReply { status, hash, messages })
    }

    /// `create` and `restore` are the same write: the whole session, unless its hash exists.
    async fn put_unless_exists(&self, session: &LiveSession) -> Result<bool, StoreError> {
        let keys = self.keys(&session.key);
        let fields = session_fields(session)?;
        let mut invocation = self.create.prepare_invoke();
        invocation.key(&keys.hash).key(&keys.messages).arg(ttl_secs(session.ttl)).arg(fields.len());
        for (field, value) in &fields {
            invocation.arg(*field).arg(value);
        }
        for message in &session.recent {
            invocation.arg(to_json(message, &keys.hash)?);
        }
        match self.invoke(&invocation).await? {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            other => Err(StoreError::Corrupt(format!("{}: unexpected script reply: {other:?}", keys.hash))),
        }
    }
}

#[async_trait]
impl LiveStore for RedisLiveStore {
    async fn create(&self, session: &LiveSession) -> Result<bool, StoreError> {
        self.put_unless_exists(session).await
    }

    async fn restore(&self, session: &LiveSession) -> Result<bool, StoreError> {
        self.put_unless_exists(session).await
    }

    async fn load(&self, key: &SessionKey) -> Result<Option<LiveSession>, StoreError> {
        let keys = self.keys(key);
        let mut invocation = self.load.prepare_invoke();
        invocation.key(&keys.hash).key(&keys.messages);
        let reply = self.invoke_reply(&invocation, &keys.hash).await?;
        match reply.status.as_str() {
            "ok" => parse_session(key, &keys.hash, reply.hash, &reply.messages).map(Some),
            "missing" => Ok(None),
            other => Err(unexpected_status(&keys.hash, other)),
        }
    }

    async fn apply_turn(&self, key: &SessionKey, update: &TurnUpdate) -> Result<TurnOutcome, StoreError> {
        let keys = self.keys(key);
        let mut invocation = self.apply_turn.prepare_invoke();
        invocation
            .key(&keys.hash)
            .key(&keys.messages)
            .arg(update.expected_role.as_str())
            .arg(update.expected_switch_count)
            .arg(update.new_role.as_ref().map_or("", RoleId::as_str))
            .arg(if update.count_turn { "1" } else { "0" })
            .arg(update.now.timestamp_millis());
        let reply = self.invoke_reply(&invocation, &keys.hash).await?;
        match reply.status.as_str() {
            "ok" => parse_session(key, &keys.hash, reply.hash, &[]).map(TurnOutcome::Applied),
            "missing" => Ok(TurnOutcome::Missing),
            "closed" => Ok(TurnOutcome::Closed),
            "conflict" => Ok(TurnOutcome::Conflict),
            other => Err(unexpected_status(&keys.hash, other)),
        }
    }

    async fn append_messages(
        &self,
        key: &SessionKey,
        messages: &[Message],
        window: usize,
        now: DateTime<Utc>,
    ) -> Result<AppendOutcome, StoreError> {
        let keys = self.keys(key);
        let mut invocation = self.append.prepare_invoke();
        let batch_id = batch_append_id(messages);
        invocation.key(&keys.hash).key(&keys.messages).arg(window).arg(now.timestamp_millis()).arg(batch_id);
        for message in messages {
            let body = MessageBody {
                role: message.role,
                content: &message.content,
                role_id: &message.role_id,
                created_at_ms: message.created_at_ms,
                append_id: &message.append_id,
            };
            invocation.arg(to_json(&body, &keys.hash)?);
        }
        let reply = self.invoke_reply(&invocation, &keys.hash).await?;
        match reply.status.as_str() {
            "ok" => {
                let hash = HashMap::<String, String>::from_iter(pairs(reply.hash));
                let message_count = parse_field::<u64>(&hash, "msgs", &keys.hash)?;
                let first_seq = message_count.saturating_sub(messages.len() as u64) + 1;
                let stored =
                    (first_seq..).zip(messages).map(|(seq, message)| Message { seq, ..message.clone() }).collect();
                Ok(AppendOutcome::Applied { messages: stored, message_count })
            }
            "repeated" => {
                let hash = HashMap::<String, String>::from_iter(pairs(reply.hash));
                Ok(AppendOutcome::Repeated { message_count: parse_field::<u64>(&hash, "msgs", &keys.hash)? })
            }
            "missing" => Ok(AppendOutcome::Missing),
            "closed" => Ok(AppendOutcome::Closed),
            other => Err(unexpected_status(&keys.hash, other)),
        }
    }

    async fn close(&self, key: &SessionKey, now: DateTime<Utc>) -> Result<Option<LiveSession>, StoreError> {
        let keys = self.keys(key);
        let mut invocation = self.close.prepare_invoke();
        invocation.key(&keys.hash).key(&keys.messages).arg(now.timestamp_millis());
        let reply = self.invoke_reply(&invocation, &keys.hash).await?;
        match reply.status.as_str() {
            "ok" => parse_session(key, &keys.hash, reply.hash, &reply.messages).map(Some),
            "missing" => Ok(None),
            other => Err(unexpected_status(&keys.hash, other)),
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        ping_redis(&self.conn).await
    }
}

/// The TTL in whole seconds, rounded up and at least 1 (Redis `EXPIRE` takes seconds, and a
/// session should never expire sooner than asked).
fn ttl_secs(ttl: Duration) -> u64 {
    (ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)).max(1)
}

fn to_json<T: Serialize>(value: &T, hash_key: &str) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|err| StoreError::Corrupt(format!("{hash_key}: encoding a message: {err}")))
}

fn unexpected_status(hash_key: &str, status: &str) -> StoreError {
    StoreError::Corrupt(format!("{hash_key}: unexpected script status `{status}`"))
}

/// The hash fields of a session, as written by `create`/`restore`.
fn session_fields(session: &LiveSession) -> Result<Vec<(&'static str, String)>, StoreError> {
    let meta = serde_json::to_string(&session.metadata)
        .map_err(|err| StoreError::Corrupt(format!("encoding session metadata: {err}")))?;
    let mut fields = vec![
        ("role", session.role_id.as_str().to_owned()),
        ("status", session.status.as_str().to_owned()),
        ("turns", session.turn_count.to_string()),
        ("switches", session.switch_count.to_string()),
        ("msgs", session.message_count.to_string()),
        ("created", session.created_at.timestamp_millis().to_string()),
        ("updated", session.updated_at.timestamp_millis().to_string()),
        ("ttl", ttl_secs(session.ttl).to_string()),
        ("meta", meta),
    ];
    if let Some(owner) = &session.owner {
        fields.push(("user", owner.as_str().to_owned()));
    }
    Ok(fields)
}

/// `[f1, v1, f2, v2, …]` as `(f1, v1), (f2, v2), …` (an odd trailing field is dropped, and
/// then reported as missing by whoever needs it).
fn pairs(flat: Vec<String>) -> impl Iterator<Item = (String, String)> {
    let mut items = flat.into_iter();
    std::iter::from_fn(move || Some((items.next()?, items.next()?)))
}

fn parse_field<T: std::str::FromStr>(
    hash: &HashMap<String, String>,
    field: &str,
    hash_key: &str,
) -> Result<T, StoreError> {
    let text = hash.get(field).ok_or_else(|| StoreError::Corrupt(format!("{hash_key}: field `{field}` is missing")))?;
    text.parse().map_err(|_| StoreError::Corrupt(format!("{hash_key}: field `{field}` is malformed: `{text}`")))
}

fn parse_time(hash: &HashMap<String, String>, field: &str, hash_key: &str) -> Result<DateTime<Utc>, StoreError> {
    let ms = parse_field::<i64>(hash, field, hash_key)?;
    DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| StoreError::Corrupt(format!("{hash_key}: field `{field}` is out of range: {ms}")))
}

/// Builds a session from its hash and messages, reporting anything malformed as
/// [`StoreError::Corrupt`] with the key, never panicking.
fn parse_session(
    key: &SessionKey,
    hash_key: &str,
    flat: Vec<String>,
    messages: &[String],
) -> Result<LiveSession, StoreError> {
    let hash = HashMap::<String, String>::from_iter(pairs(flat));
    let corrupt = |what: String| StoreError::Corrupt(format!("{hash_key}: {what}"));
    let role_text = parse_field::<String>(&hash, "role", hash_key)?;
    let role_id = RoleId::parse(&role_text).map_err(|reason| corrupt(format!("field `role`: {reason}")))?;
    let status_text = parse_field::<String>(&hash, "status", hash_key)?;
    let status = SessionStatus::parse(&status_text)
        .ok_or_else(|| corrupt(format!("field `status` is malformed: `{status_text}`")))?;
    let ttl = parse_field::<u64>(&hash, "ttl", hash_key)?;
    if ttl == 0 {
        return Err(corrupt("field `ttl` is 0".to_owned()));
    }
    let meta_text = parse_field::<String>(&hash, "meta", hash_key)?;
    let metadata = serde_json::from_str::<BTreeMap<String, String>>(&meta_text)
        .map_err(|err| corrupt(format!("field `meta` is not a JSON object of strings: {err}")))?;
    let owner = hash
        .get("user")
        .map(|user| UserId::parse(user).map_err(|err| corrupt(format!("field `user`: {err}"))))
        .transpose()?;
    let recent = messages
        .iter()
        .map(|json| serde_json::from_str::<Message>(json))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| StoreError::Corrupt(format!("{hash_key}: a message in the list is malformed: {err}")))?;
    Ok(LiveSession {
        key: key.clone(),
        owner,
        role_id,
        status,
        turn_count: parse_field(&hash, "turns", hash_key)?,
        switch_count: parse_field(&hash, "switches", hash_key)?,
        message_count: parse_field(&hash, "msgs", hash_key)?,
        created_at: parse_time(&hash, "created", hash_key)?,
        updated_at: parse_time(&hash, "updated", hash_key)?,
        ttl: Duration::from_secs(ttl),
        metadata,
        recent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{SessionId, TenantId};

    fn key() -> SessionKey {
        SessionKey { tenant: TenantId::parse("acme").unwrap(), id: SessionId::parse("s-1").unwrap() }
    }

    fn flat(fields: &[(&str, &str)]) -> Vec<String> {
        fields.iter().flat_map(|(f, v)| [(*f).to_owned(), (*v).to_owned()]).collect()
    }

    const GOOD: [(&str, &str); 9] = [
        ("role", "finance-expert"),
        ("status", "active"),
        ("turns", "3"),
        ("switches", "1"),
        ("msgs", "7"),
        ("created", "1700000000123"),
        ("updated", "1700000000456"),
        ("ttl", "60"),
        ("meta", r#"{"a":"b"}"#),
    ];

    #[test]
    fn ttls_are_whole_seconds_rounded_up() {
        assert_eq!(ttl_secs(Duration::ZERO), 1);
        assert_eq!(ttl_secs(Duration::from_millis(1500)), 2);
        assert_eq!(ttl_secs(Duration::from_secs(60)), 60);
    }

    #[test]
    fn a_well_formed_hash_parses() {
        let messages =
            [r#"{"seq":7,"role":"user","content":"hi","role_id":"finance-expert","created_at_ms":5}"#.to_owned()];
        let session = parse_session(&key(), "p:{acme:s-1}:s", flat(&GOOD), &messages).unwrap();
        assert_eq!(session.turn_count, 3);
        assert_eq!(session.created_at.timestamp_millis(), 1_700_000_000_123);
        assert_eq!(session.ttl, Duration::from_secs(60));
        assert_eq!(session.metadata.get("a").map(String::as_str), Some("b"));
        assert_eq!(session.recent[0].seq, 7);
    }

    #[test]
    fn a_malformed_hash_is_corrupt_not_a_panic() {
        let cases: [(&str, Option<&str>); 6] = [
            ("role", Some("Not A Role")),
            ("status", Some("paused")),
            ("turns", Some("-1")),
            ("created", Some("yesterday")),
            ("meta", Some("[1]")),
            ("ttl", None),
        ];
        for (field, value) in cases {
            let fields: Vec<(&str, &str)> = GOOD
                .iter()
                .filter_map(|&(f, v)| if f == field { value.map(|value| (f, value)) } else { Some((f, v)) })
                .collect();
            let err = parse_session(&key(), "p:{acme:s-1}:s", flat(&fields), &[]).unwrap_err();
            assert!(matches!(&err, StoreError::Corrupt(text) if text.contains("p:{acme:s-1}:s")), "{field}: {err}");
        }
        let err = parse_session(&key(), "k", flat(&GOOD), &["not json".to_owned()]).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)));
    }
}
