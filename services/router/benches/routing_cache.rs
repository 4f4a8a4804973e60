//! The routing cache's lookup against its floor, measured in the same run on the real Redis
//! (`REDIS_URL`) and the real MiniLM model:
//!
//! - `exact hit`: the tenant's decision for the same message, from Redis — against a Redis
//!   `PING` on the same connection (the round-trip floor);
//! - `miss`: the whole lookup of a message that is nowhere (a correction check for a user with
//!   corrections, the exact lookup in Redis, then a similarity scan over a full tenant of
//!   1,024 cached decisions), the embedding given — against the same `PING`;
//! - `similarity scan` alone, in process;
//! - and, for scale, embedding the message (which a turn needs anyway for the fast router).
//!
//! Run: `cargo bench -p switchyard-router --bench routing_cache` (needs models/ and Redis).
//! Prints a table; BENCHMARKS.md records it.

use std::time::Instant;

use hdrhistogram::Histogram;
use switchyard_kit::{Secret, store::KeyPrefix};
use switchyard_models::Embedder;
use switchyard_router::{
    cache::{CacheSettings, CachedRoute, RoutingCache},
    route::Route,
};
use switchyard_testkit::latency::{histogram, ms, sequential};

const WARMUP: usize = 200;
const SAMPLES: usize = 5000;
const ENTRIES: usize = 1024;

fn row(name: &str, subject: &Histogram<u64>, baseline: &Histogram<u64>) {
    println!(
        "| {name} | {:.3} | {:.3} | {:.3} | {:.2}× |",
        ms(subject.value_at_quantile(0.5)),
        ms(subject.value_at_quantile(0.99)),
        ms(subject.max()),
        subject.value_at_quantile(0.99) as f64 / baseline.value_at_quantile(0.99).max(1) as f64,
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let redis_url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let conn = switchyard_kit::store::RedisConnection::connect(&Secret::new(&redis_url))
        .await
        .unwrap_or_else(|err| panic!("redis at {redis_url} (set REDIS_URL): {err}"));
    let prefix = format!("sy-bench-cache-{}", std::process::id());
    let settings = CacheSettings { entries_per_tenant: ENTRIES, ..CacheSettings::default() };
    let cache = RoutingCache::redis(settings, conn.clone(), KeyPrefix::parse(&prefix).expect("prefix"));

    let model_dir = std::env::var("SWITCHYARD_MODEL_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/all-MiniLM-L6-v2").to_owned());
    let embedder = Embedder::load(std::path::Path::new(&model_dir))
        .unwrap_or_else(|err| panic!("MiniLM at {model_dir} (scripts/fetch-models.sh): {err}"));

    // A full tenant: 1,024 decisions with real embeddings (of varied messages), cached.
    let messages: Vec<String> = (0..ENTRIES)
        .map(|i| format!("Question {i}: how do I configure service number {} for region {}?", i * 7, i % 13))
        .collect();
    let texts: Vec<&str> = messages.iter().map(String::as_str).collect();
    let vectors = embedder.embed(&texts).expect("embed");
    let cached = CachedRoute { route: Route::McpAgent, reasoning: "bench".into(), domains: Vec::new() };
    for (message, vector) in messages.iter().zip(&vectors) {
        cache.put("acme", message, Some(vector), &cached).await.expect("put");
    }
    let stranger = embedder.embed(&["Write a sonnet about the autumn sea"]).expect("embed").remove(0);

    let ping_conn = conn.clone();
    let ping = sequential(WARMUP, SAMPLES, |_| {
        let mut c = ping_conn.clone();
        async move {
            let _: String = redis::cmd("PING").query_async(&mut c).await.expect("ping");
        }
    })
    .await;
    let exact = sequential(WARMUP, SAMPLES, |i| {
        let (cache, message) = (&cache, &messages[i % ENTRIES]);
        async move {
            assert!(cache.exact("acme", message).await.expect("lookup").is_some());
        }
    })
    .await;
    let miss = sequential(WARMUP, SAMPLES, |_| {
        let (cache, stranger) = (&cache, &stranger);
        async move {
            assert!(cache.correction("acme", "ann", stranger).is_none());
            assert!(cache.exact("acme", "Write a sonnet about the autumn sea").await.expect("lookup").is_none());
            assert!(cache.similar("acme", stranger).is_none());
        }
    })
    .await;
    let scan = sequential(WARMUP, SAMPLES, |_| {
        let (cache, stranger) = (&cache, &stranger);
        async move {
            assert!(cache.similar("acme", stranger).is_none());
        }
    })
    .await;
    let mut embedding = histogram();
    for message in messages.iter().take(200) {
        let started = Instant::now();
        let _ = embedder.embed(&[message.as_str()]).expect("embed");
        let _ = embedding.record(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX).max(1));
    }

    println!("Routing cache lookup, {SAMPLES} samples each ({ENTRIES} decisions cached for the tenant)\n");
    println!("| operation | p50 ms | p99 ms | max ms | p99 ÷ PING p99 |");
    println!("|---|---|---|---|---|");
    row("Redis PING (floor)", &ping, &ping);
    row("exact hit (Redis GET)", &exact, &ping);
    row("miss: correction + exact + similarity scan", &miss, &ping);
    row("similarity scan alone (in process)", &scan, &ping);
    row("embedding the message (MiniLM, for scale)", &embedding, &ping);

    // Leave nothing behind in the shared Redis.
    switchyard_testkit::delete_redis_keys(&prefix).await;
}
