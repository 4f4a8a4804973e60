//! The real Redis the tests use (`REDIS_URL`) and a key prefix per test, whose keys are
//! deleted when its guard goes out of scope. Keys are found with SCAN, never KEYS, which
//! would block a Redis shared with other tests.

use std::{fmt, net::SocketAddr, ops::Deref, time::Duration};

use crate::proxy;

const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// The three-primary Redis Cluster `scripts/ensure-services.sh` starts
/// (`REDIS_CLUSTER_URL=redis+cluster://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003`, which
/// `scripts/test` exports). A test that needs it fails, naming the variable, when it is unset.
pub fn redis_cluster_url() -> String {
    std::env::var("REDIS_CLUSTER_URL").unwrap_or_else(|_| {
        panic!(
            "REDIS_CLUSTER_URL is not set: run scripts/ensure-services.sh and set \
             REDIS_CLUSTER_URL=redis+cluster://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 (scripts/test does)"
        )
    })
}

/// `host:port` of the Redis in `REDIS_URL`.
pub fn redis_addr() -> SocketAddr {
    proxy::url_addr(&redis_url(), 6379)
}

/// `REDIS_URL` pointed at `addr` instead (a proxy in front of the same Redis).
pub fn redis_url_via(addr: SocketAddr) -> String {
    proxy::url_via(&redis_url(), addr)
}

/// A key prefix no other test uses; every key under it is deleted when the guard is dropped.
pub struct KeyPrefix {
    prefix: String,
}

impl KeyPrefix {
    pub fn new(prefix: &str) -> Self {
        Self { prefix: crate::unique(prefix) }
    }

    pub fn as_str(&self) -> &str {
        &self.prefix
    }
}

impl Deref for KeyPrefix {
    type Target = str;
    fn deref(&self) -> &str {
        &self.prefix
    }
}

impl fmt::Display for KeyPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.prefix)
    }
}

impl Drop for KeyPrefix {
    fn drop(&mut self) {
        // The blocking client needs no runtime, so this works while a panic unwinds too.
        if let Err(err) = delete_keys(&self.prefix) {
            crate::cleanup_failed(&format!("deleting test keys under {}: {err}", self.prefix));
        }
    }
}

/// Deletes every key under `prefix` (what an eviction or FLUSHDB does to a session) and says
/// how many there were.
pub async fn delete_redis_keys(prefix: &str) -> usize {
    let prefix = prefix.to_owned();
    tokio::task::spawn_blocking(move || delete_keys(&prefix))
        .await
        .expect("the key deletion task")
        .unwrap_or_else(|err| panic!("deleting test keys in redis at {} (set REDIS_URL): {err}", redis_url()))
}

fn delete_keys(prefix: &str) -> redis::RedisResult<usize> {
    let client = redis::Client::open(redis_url())?;
    let mut conn = client.get_connection_with_timeout(Duration::from_secs(5))?;
    let mut cursor = 0u64;
    let mut deleted = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}:*"))
            .arg("COUNT")
            .arg(1000)
            .query(&mut conn)?;
        if !keys.is_empty() {
            let removed: usize = redis::cmd("DEL").arg(&keys).query(&mut conn)?;
            deleted += removed;
        }
        if next == 0 {
            return Ok(deleted);
        }
        cursor = next;
    }
}
