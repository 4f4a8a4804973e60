//! The loadgen's own small Redis client for the `sessions-redis-floor` scenario: it lays out
//! sessions the way the sessions service's Redis store does and runs that store's turn script
//! (its file, not a copy), so the floor costs what a ProcessQuery turn costs in Redis without
//! the loadgen depending on a service crate.

use std::time::Duration;

use anyhow::{Context, bail};
use redis::{
    Script,
    aio::{ConnectionManager, ConnectionManagerConfig},
};

/// The service's bounds on one command and on connecting.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The sessions store's own turn script (the same file it loads), run on the path of a turn
/// that keeps its role: check the role and switch count, count the turn, stamp `updated`,
/// refresh both TTLs, return the hash.
/// ARGV: expected role, expected switch count, new role or '', '1' to count a turn, now (ms).
const APPLY_TURN_LUA: &str = include_str!("../../../services/sessions/src/store/apply_turn.lua");

/// One floor session: its hash key and its (empty) message list key.
#[derive(Clone)]
pub struct FloorSession {
    hash: String,
    messages: String,
}

/// A multiplexed, self-reconnecting connection, as the service uses.
pub struct FloorClient {
    conn: ConnectionManager,
    turn: Script,
}

async fn bounded<T>(limit: Duration, work: impl Future<Output = redis::RedisResult<T>>) -> anyhow::Result<T> {
    match tokio::time::timeout(limit, work).await {
        Ok(result) => Ok(result?),
        Err(_) => bail!("redis did not answer within {limit:?}"),
    }
}

impl FloorClient {
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let client = redis::Client::open(url).context("redis url")?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(COMMAND_TIMEOUT))
            .set_response_timeout(Some(COMMAND_TIMEOUT));
        let mut conn = bounded(CONNECT_TIMEOUT, ConnectionManager::new_with_config(client, config)).await?;
        let turn = Script::new(APPLY_TURN_LUA);
        bounded(CONNECT_TIMEOUT, turn.load_async(&mut conn)).await?;
        Ok(Self { conn, turn })
    }

    /// Writes an active session in `role` with no turns, expiring after `ttl`, under the
    /// service's key layout `<prefix>:{<tenant>:<id>}:s` / `:m`.
    pub async fn create(&self, prefix: &str, id: &str, role: &str, ttl: Duration) -> anyhow::Result<FloorSession> {
        let base = format!("{prefix}:{{default:{id}}}");
        let session = FloorSession { hash: format!("{base}:s"), messages: format!("{base}:m") };
        let now = chrono::Utc::now().timestamp_millis().to_string();
        let ttl_secs = ttl.as_secs().max(1);
        let fields = [
            ("role", role.to_owned()),
            ("status", "active".to_owned()),
            ("turns", "0".to_owned()),
            ("switches", "0".to_owned()),
            ("msgs", "0".to_owned()),
            ("created", now.clone()),
            ("updated", now),
            ("ttl", ttl_secs.to_string()),
            ("meta", "{}".to_owned()),
        ];
        let mut pipe = redis::pipe();
        pipe.atomic().hset_multiple(&session.hash, &fields).ignore().expire(&session.hash, ttl_secs as i64).ignore();
        let mut conn = self.conn.clone();
        bounded(COMMAND_TIMEOUT, pipe.query_async::<()>(&mut conn)).await?;
        Ok(session)
    }

    /// One turn that keeps `role`; the script's status word (`ok` when it applied).
    pub async fn keep_role_turn(&self, session: &FloorSession, role: &str) -> anyhow::Result<String> {
        let mut invocation = self.turn.prepare_invoke();
        invocation
            .key(&session.hash)
            .key(&session.messages)
            .arg(role)
            .arg(0)
            .arg("")
            .arg("1")
            .arg(chrono::Utc::now().timestamp_millis());
        let mut conn = self.conn.clone();
        let (status, _hash, _messages): (String, Vec<String>, Vec<String>) =
            bounded(COMMAND_TIMEOUT, invocation.invoke_async(&mut conn)).await?;
        Ok(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against the real Redis (`REDIS_URL`, else the local default): a turn applies, counts and
    /// keeps the TTL; a turn expecting another role is refused, as in the service.
    #[tokio::test]
    async fn a_turn_counts_once_and_another_role_conflicts() {
        let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
        let client = FloorClient::connect(&url).await.expect("redis must be running for this test");
        let id = format!("test-{}", std::process::id());
        let session = client.create("sy-loadgen-test", &id, "tech-expert", Duration::from_secs(60)).await.unwrap();

        assert_eq!(client.keep_role_turn(&session, "tech-expert").await.unwrap(), "ok");
        assert_eq!(client.keep_role_turn(&session, "chef").await.unwrap(), "conflict");
        let mut conn = client.conn.clone();
        let (turns, ttl): (u64, i64) =
            redis::pipe().hget(&session.hash, "turns").ttl(&session.hash).query_async(&mut conn).await.unwrap();
        assert_eq!(turns, 1);
        assert!((1..=60).contains(&ttl), "ttl {ttl}");
        let _: () = redis::cmd("DEL").arg(&session.hash).query_async(&mut conn).await.unwrap();
    }
}
