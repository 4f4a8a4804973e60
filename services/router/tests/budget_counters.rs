//! One suite for every `SpendCounters` behind the budgets: in memory, in one Redis and on the
//! real three-primary Redis Cluster (`REDIS_CLUSTER_URL`). A missing counter reads as missing
//! and is not created by an increment; seeding sets it once (a second seed keeps the first
//! value, as two replicas rebuilding at once must); increments add to every counter of a
//! tenant at once, for many tenants (their hash tags land on every primary of a cluster).
#![allow(clippy::unwrap_used, reason = "a panic in a test is the failure report")]

use std::time::Duration;

use switchyard_kit::{Secret, TenantId, store::RedisConnection};
use switchyard_router::budget::{MemorySpendCounters, RedisSpendCounters, SpendCounters};
use switchyard_testkit::{KeyPrefix, redis_cluster_url, redis_url};

const TTL: Duration = Duration::from_secs(600);

async fn behaves(counters: &dyn SpendCounters) {
    let acme = TenantId::parse("acme").unwrap();
    let names = vec!["*:day:2026-11-27".to_owned(), "k1:month:2026-11-01".to_owned()];
    assert_eq!(counters.read(&acme, &names).await.unwrap(), [None, None]);
    // An increment never starts a lost counter from zero.
    assert_eq!(counters.add(&acme, &names, 5).await.unwrap(), [None, None], "no totals for missing counters");
    assert_eq!(counters.read(&acme, &names).await.unwrap(), [None, None]);
    assert_eq!(counters.seed(&acme, &names[0], 100, TTL).await.unwrap(), 100);
    assert_eq!(counters.seed(&acme, &names[0], 70, TTL).await.unwrap(), 100, "the first seed stands");
    assert_eq!(counters.seed(&acme, &names[1], 0, TTL).await.unwrap(), 0);
    let totals = counters.add(&acme, &names, 1_500_000_000).await.unwrap();
    assert_eq!(totals, [Some(1_500_000_100), Some(1_500_000_000)], "an increment answers the new totals");
    assert_eq!(counters.read(&acme, &names).await.unwrap(), totals);
    // Tenants are counted apart, on whichever slot their tag falls.
    for n in 0..24 {
        let tenant = TenantId::parse(&format!("tenant-{n}")).unwrap();
        assert_eq!(counters.read(&tenant, &names).await.unwrap(), [None, None]);
        for name in &names {
            counters.seed(&tenant, name, n, TTL).await.unwrap();
        }
        assert_eq!(counters.add(&tenant, &names, 1000).await.unwrap(), [Some(n + 1000), Some(n + 1000)]);
        assert_eq!(counters.read(&tenant, &names).await.unwrap(), [Some(n + 1000), Some(n + 1000)]);
    }
    assert_eq!(counters.read(&acme, &names).await.unwrap(), [Some(1_500_000_100), Some(1_500_000_000)]);
    assert_eq!(counters.read(&acme, &[]).await.unwrap(), Vec::<Option<i64>>::new());
    assert_eq!(counters.add(&acme, &[], 1).await.unwrap(), Vec::<Option<i64>>::new());
}

#[tokio::test]
async fn memory_counters() {
    behaves(&MemorySpendCounters::default()).await;
}

#[tokio::test]
async fn redis_counters() {
    let url = Secret::new(redis_url());
    let conn = RedisConnection::connect(&url).await.unwrap_or_else(|err| panic!("redis (set REDIS_URL): {err}"));
    let prefix = KeyPrefix::new("budget-counters");
    let parsed = switchyard_kit::store::KeyPrefix::parse(prefix.as_str()).unwrap();
    behaves(&RedisSpendCounters::new(conn, parsed)).await;
}

#[tokio::test]
async fn redis_cluster_counters() {
    let url = Secret::new(redis_cluster_url());
    let conn =
        RedisConnection::connect(&url).await.unwrap_or_else(|err| panic!("redis cluster (REDIS_CLUSTER_URL): {err}"));
    // Fresh per run: the prefix guard deletes keys on the single Redis only.
    let prefix = switchyard_kit::store::KeyPrefix::parse(&format!("budget-cluster-{}", uuid::Uuid::new_v4())).unwrap();
    behaves(&RedisSpendCounters::new(conn, prefix)).await;
}
