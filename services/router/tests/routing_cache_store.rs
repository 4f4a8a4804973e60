//! One suite for every `DecisionStore` behind the routing cache: its exact decisions answer
//! alike in memory, in one Redis and on the real three-primary Redis Cluster
//! (`REDIS_CLUSTER_URL`): an entry is per tenant, forgotten on demand, and gone after its TTL.
//! In Redis each entry is one key (`<prefix>:router:route:<digest>`) read and written by
//! single-key GET/SET EX/DEL, so a cluster takes it as it is.
// clippy.toml lets tests unwrap, but it does not see the suite's helper functions as tests.
#![allow(clippy::unwrap_used, reason = "a panic in a test is the failure report")]

use std::time::Duration;

use switchyard_kit::{Secret, store::RedisConnection};
use switchyard_router::{
    RouterConfig,
    cache::{
        CacheSettings, CachedRoute, DecisionStore, HitKind, RoutingCache, memory::MemoryDecisions,
        redis::RedisDecisions,
    },
    open_stores,
    route::Route,
};
use switchyard_testkit::{KeyPrefix, Schema, database_url, redis_cluster_url, redis_url};

fn route(route: Route, reasoning: &str) -> CachedRoute {
    CachedRoute { route, reasoning: reasoning.to_owned(), domains: vec!["code".to_owned()] }
}

fn settings(ttl: Duration) -> CacheSettings {
    CacheSettings { ttl, ..CacheSettings::default() }
}

async fn behaves(cache: &RoutingCache) {
    assert_eq!(cache.exact("acme", "How do I sort a list?").await.unwrap(), None);
    let cached = route(Route::McpAgent, "needs the interpreter");
    cache.put("acme", "How do I sort a list?", None, &cached).await.unwrap();
    // Normalized: case and whitespace do not matter.
    let hit = cache.exact("acme", "  how do I   SORT a list? ").await.unwrap().expect("an exact hit");
    assert_eq!(hit.cached, cached);
    assert_eq!(hit.kind, HitKind::Exact);
    // Another tenant's same message is not theirs.
    assert_eq!(cache.exact("globex", "How do I sort a list?").await.unwrap(), None);
    let theirs = route(Route::Direct, "");
    cache.put("globex", "How do I sort a list?", None, &theirs).await.unwrap();
    assert_eq!(cache.exact("globex", "how do i sort a list?").await.unwrap().unwrap().cached, theirs);
    assert_eq!(cache.exact("acme", "how do i sort a list?").await.unwrap().unwrap().cached, cached);
    // Many messages: on a cluster their keys land on every primary.
    for n in 0..32 {
        cache.put("acme", &format!("message {n}"), None, &route(Route::Direct, &format!("r{n}"))).await.unwrap();
    }
    for n in 0..32 {
        let hit = cache.exact("acme", &format!("message {n}")).await.unwrap().expect("cached");
        assert_eq!(hit.cached.reasoning, format!("r{n}"));
    }
    // Forgetting one tenant's entry leaves the other's.
    cache.forget("acme", "How do I sort a list?").await.unwrap();
    assert_eq!(cache.exact("acme", "How do I sort a list?").await.unwrap(), None);
    assert_eq!(cache.exact("globex", "How do I sort a list?").await.unwrap().unwrap().cached, theirs);
}

async fn expires(cache: &RoutingCache) {
    cache.put("acme", "short lived", None, &route(Route::Direct, "")).await.unwrap();
    assert!(cache.exact("acme", "short lived").await.unwrap().is_some());
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    assert_eq!(cache.exact("acme", "short lived").await.unwrap(), None);
}

/// The whole suite on the stores `store` makes (one for each TTL the suite needs), each behind
/// a routing cache.
async fn suite<F, Fut>(store: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Box<dyn DecisionStore>>,
{
    behaves(&RoutingCache::with_store(settings(Duration::from_secs(60)), store().await)).await;
    expires(&RoutingCache::with_store(settings(Duration::from_secs(1)), store().await)).await;
}

async fn redis_store(url: &str, prefix: &str) -> Box<dyn DecisionStore> {
    let conn = RedisConnection::connect(&Secret::new(url)).await.unwrap_or_else(|err| panic!("redis at {url}: {err}"));
    Box::new(RedisDecisions::new(conn, switchyard_kit::store::KeyPrefix::parse(prefix).unwrap()))
}

#[tokio::test]
async fn in_memory() {
    suite(|| async { Box::new(MemoryDecisions::new(1024)) as Box<dyn DecisionStore> }).await;
}

#[tokio::test]
async fn in_redis() {
    let prefix = KeyPrefix::new("router-cache");
    let url = redis_url();
    suite(|| redis_store(&url, prefix.as_str())).await;
}

/// Its keys expire with their TTL (a minute at most): no SCAN across the cluster to clean up.
#[tokio::test]
async fn in_redis_cluster() {
    let prefix = switchyard_testkit::unique("router-cache");
    let url = redis_cluster_url();
    suite(|| redis_store(&url, &prefix)).await;
}

/// The router opens its stores on a cluster URL as it does on one Redis: REDIS_URL may be
/// `redis+cluster://HOST:PORT[,…]`, and the routing cache it opens works there.
#[tokio::test]
async fn the_router_opens_its_cache_on_a_cluster_url() {
    let schema = Schema::new("router_test");
    let prefix = switchyard_testkit::unique("router-cache");
    let mut config =
        RouterConfig::in_memory("127.0.0.1:0".parse().unwrap(), "http://127.0.0.1:1", "http://127.0.0.1:1");
    config.stores.in_memory = false;
    config.stores.database_url = Some(Secret::new(database_url()));
    config.stores.db_schema = schema.name().to_owned();
    config.stores.redis_url = Some(Secret::new(redis_cluster_url()));
    config.stores.redis_prefix = prefix;
    config.cache_routing = true;
    config.cache_ttl = Duration::from_secs(60);
    let stores = open_stores(&config).await.unwrap_or_else(|err| panic!("opening the router's stores: {err:#}"));
    behaves(&stores.cache.expect("the routing cache is on")).await;
}
