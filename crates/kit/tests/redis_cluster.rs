//! The kit's Redis connection on the real three-primary Redis Cluster that
//! `scripts/ensure-services.sh` starts (`REDIS_CLUSTER_URL`): keys in every slot, a Lua script
//! over hash-tagged keys, and a slot moved under a connected client (`MOVED` followed).
#![allow(clippy::unwrap_used, reason = "a panic in a test is the failure report")]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{AsyncCommands, Script};
use switchyard_kit::{
    Secret,
    store::{RedisConnection, StoreError},
};

/// A primary of the cluster: its id, `host:port` and slot ranges.
type Primary = (String, String, Vec<(u16, u16)>);

fn cluster_url() -> String {
    std::env::var("REDIS_CLUSTER_URL").unwrap_or_else(|_| {
        panic!(
            "REDIS_CLUSTER_URL is not set: run scripts/ensure-services.sh and set \
             REDIS_CLUSTER_URL=redis+cluster://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 (scripts/test does)"
        )
    })
}

fn unique(name: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    format!("kit-test-{name}-{}-{nanos}", std::process::id())
}

async fn connect() -> RedisConnection {
    let url = cluster_url();
    let conn = RedisConnection::connect(&Secret::new(url.clone()))
        .await
        .unwrap_or_else(|err| panic!("the Redis Cluster at {url} (REDIS_CLUSTER_URL) is unreachable: {err}"));
    assert!(conn.is_cluster());
    conn
}

/// A plain connection to one node, `host:port`, for the cluster's own admin commands.
async fn node(addr: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://{addr}")).unwrap().get_multiplexed_async_connection().await.unwrap()
}

/// Each primary of the cluster: (id, host:port, slot ranges), from `CLUSTER NODES`.
async fn primaries(seed: &str) -> Vec<Primary> {
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut node(seed).await).await.unwrap();
    nodes
        .lines()
        .filter(|line| line.contains("master"))
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let addr = fields[1].split('@').next().unwrap().to_owned();
            let slots = fields[8..]
                .iter()
                .filter(|range| !range.starts_with('['))
                .map(|range| match range.split_once('-') {
                    Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
                    None => (range.parse().unwrap(), range.parse().unwrap()),
                })
                .collect();
            (fields[0].to_owned(), addr, slots)
        })
        .collect()
}

#[tokio::test]
async fn keys_in_every_slot_range_are_written_and_read_through_one_connection() {
    let mut conn = connect().await;
    let prefix = unique("spread");
    let seed = cluster_url().trim_start_matches("redis+cluster://").split(',').next().unwrap().to_owned();
    let owners = primaries(&seed).await;
    assert_eq!(owners.len(), 3, "three primaries: {owners:?}");

    let keys: Vec<String> = (0..64).map(|i| format!("{prefix}:{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        let () = conn.set_ex(key, i, 60).await.unwrap();
    }
    // The keys really are spread: every primary holds some.
    let mut held = Vec::new();
    for (_, addr, _) in &owners {
        let mut node = node(addr).await;
        let mut count = 0;
        for key in &keys {
            let exists: bool = redis::cmd("EXISTS").arg(key).query_async(&mut node).await.unwrap_or(false);
            count += usize::from(exists);
        }
        held.push(count);
    }
    assert!(held.iter().all(|&count| count > 0), "keys per primary: {held:?}");
    for (i, key) in keys.iter().enumerate() {
        let value: usize = conn.get(key).await.unwrap();
        assert_eq!(value, i);
    }
    for key in &keys {
        let () = conn.del(key).await.unwrap();
    }
}

#[tokio::test]
async fn a_script_over_hash_tagged_keys_runs_in_one_slot_and_untagged_keys_are_refused() {
    let mut conn = connect().await;
    let tag = unique("script");
    let (a, b) = (format!("{{{tag}}}:a"), format!("{{{tag}}}:b"));
    let script = Script::new(
        "redis.call('SET', KEYS[1], ARGV[1], 'EX', 60) \
         redis.call('SET', KEYS[2], ARGV[1] * 2, 'EX', 60) \
         return redis.call('GET', KEYS[1]) + redis.call('GET', KEYS[2])",
    );
    let sum: i64 = script.key(&a).key(&b).arg(21).invoke_async(&mut conn).await.unwrap();
    assert_eq!(sum, 63);
    let b_value: i64 = conn.get(&b).await.unwrap();
    assert_eq!(b_value, 42);

    // The same script over keys of two slots is the store's mistake, and the cluster says so.
    let err = script.key(format!("{tag}:x")).key(format!("{tag}:y")).arg(1).invoke_async::<i64>(&mut conn).await;
    let err = err.expect_err("keys in two slots");
    assert!(err.to_string().to_lowercase().contains("crossslot"), "{err}");
    let () = conn.del(&a).await.unwrap();
    let () = conn.del(&b).await.unwrap();
}

#[tokio::test]
async fn a_slot_moved_to_another_primary_is_followed() {
    let mut conn = connect().await;
    let key = format!("{{{}}}:moved", unique("moved"));
    let () = conn.set_ex(&key, "before", 60).await.unwrap();
    let value: String = conn.get(&key).await.unwrap();
    assert_eq!(value, "before", "the client has read the slot map");

    let seed = cluster_url().trim_start_matches("redis+cluster://").split(',').next().unwrap().to_owned();
    let slot: u16 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(&key).query_async(&mut node(&seed).await).await.unwrap();
    let owners = primaries(&seed).await;
    let from = owners.iter().find(|(_, _, slots)| slots.iter().any(|&(a, b)| (a..=b).contains(&slot))).unwrap();
    let to = owners.iter().find(|(id, _, _)| *id != from.0).unwrap();
    move_slot(slot, from, to, &owners).await;

    // The client's map still names the old owner, which now answers MOVED.
    let after: Result<String, StoreError> =
        switchyard_kit::store::bounded(Duration::from_secs(5), conn.get(&key)).await;
    move_slot(slot, to, from, &owners).await;
    assert_eq!(after.expect("the read follows MOVED to the new owner"), "before");
    let () = conn.del(&key).await.unwrap();
}

/// Moves `slot` (and its keys) from one primary to another, as `redis-cli --cluster reshard`
/// does, and tells every primary.
async fn move_slot(slot: u16, from: &Primary, to: &Primary, all: &[Primary]) {
    let (mut source, mut target) = (node(&from.1).await, node(&to.1).await);
    let setslot = |state: &str, id: &str| {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SETSLOT").arg(slot).arg(state).arg(id);
        cmd
    };
    let () = setslot("IMPORTING", &from.0).query_async(&mut target).await.unwrap();
    let () = setslot("MIGRATING", &to.0).query_async(&mut source).await.unwrap();
    let (host, port) = to.1.rsplit_once(':').unwrap();
    loop {
        let keys: Vec<String> =
            redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(slot).arg(100).query_async(&mut source).await.unwrap();
        if keys.is_empty() {
            break;
        }
        let mut migrate = redis::cmd("MIGRATE");
        migrate.arg(host).arg(port).arg("").arg(0).arg(5000).arg("KEYS").arg(&keys);
        let _: redis::Value = migrate.query_async(&mut source).await.unwrap();
    }
    let () = setslot("NODE", &to.0).query_async(&mut target).await.unwrap();
    let () = setslot("NODE", &to.0).query_async(&mut source).await.unwrap();
    for (id, addr, _) in all {
        if *id != from.0 && *id != to.0 {
            let () = setslot("NODE", &to.0).query_async(&mut node(addr).await).await.unwrap();
        }
    }
}
