//! The edge's rate limits across replicas: two edges on one Redis (then on the Redis Cluster)
//! let one credential through at the limit once, not once each; with Redis cut, each edge
//! still limits on its own and keeps serving. The edges are open (every request is the one
//! credential `open`) and answer `GET /v1/models` themselves, so no other service is needed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use switchyard_edge::{EdgeConfig, EdgeServer, auth::Authenticator, clients::UpstreamUrls};
use switchyard_kit::Secret;
use switchyard_testkit::{ClosedPort, KeyPrefix, Served, closed_port, proxy::TcpProxy, redis};

const RATE: u32 = 1;
const BURST: u32 = 5;
const REQUESTS: usize = 20;

struct Edges {
    replicas: Vec<Served>,
    http: reqwest::Client,
    _upstreams: Vec<ClosedPort>,
}

impl Edges {
    /// `count` open edges sharing `redis_url` (none: each limits alone) under `prefix`.
    async fn start(count: usize, redis_url: Option<String>, prefix: &str) -> Self {
        switchyard_kit::tls::install_crypto_provider();
        let upstreams: Vec<ClosedPort> = (0..4).map(|_| closed_port()).collect();
        let urls = UpstreamUrls {
            router: upstreams[0].url(),
            sessions: upstreams[1].url(),
            triggers: upstreams[2].url(),
            mcp_gateway: upstreams[3].url(),
        };
        let mut replicas = Vec::new();
        for _ in 0..count {
            let mut config = EdgeConfig::open(std::net::SocketAddr::from(([127, 0, 0, 1], 0)), &urls);
            (config.rate_limit, config.rate_burst) = (RATE, BURST);
            config.redis_url = redis_url.clone().map(Secret::new);
            config.redis_prefix = prefix.to_owned();
            let edge = EdgeServer::bind_with_auth(&config, Authenticator::new(true, None, None))
                .await
                .unwrap_or_else(|err| panic!("the edge binds with REDIS_URL {redis_url:?}: {err:#}"));
            replicas.push(Served::spawn(edge.local_addr(), |stop| edge.serve(stop)));
        }
        let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
        Self { replicas, http, _upstreams: upstreams }
    }

    /// `REQUESTS` requests of the one credential as fast as they go, round robin over the
    /// replicas: how many were let through, and the slowest answer.
    async fn burst(&self) -> (usize, Duration) {
        let (mut allowed, mut slowest) = (0, Duration::ZERO);
        for i in 0..REQUESTS {
            let edge = &self.replicas[i % self.replicas.len()];
            let started = Instant::now();
            let response = self.http.get(format!("{}/v1/models", edge.url())).send().await.unwrap();
            slowest = slowest.max(started.elapsed());
            match response.status().as_u16() {
                200 => allowed += 1,
                429 => {
                    let retry_after: u64 = response.headers()["retry-after"].to_str().unwrap().parse().unwrap();
                    assert!((1..=2).contains(&retry_after), "Retry-After {retry_after}");
                }
                other => panic!("request {i}: HTTP {other}: {}", response.text().await.unwrap()),
            }
        }
        (allowed, slowest)
    }
}

/// The burst, plus at most one refill if the requests took over a second.
fn assert_limit_held_once(allowed: usize, slowest: Duration, what: &str) {
    assert!(
        (BURST as usize..=BURST as usize + 1).contains(&allowed),
        "{what}: {allowed} of {REQUESTS} let through; the combined limit is a burst of {BURST} (slowest answer {slowest:?})"
    );
}

#[tokio::test]
async fn two_replicas_on_one_redis_let_a_credential_through_at_the_limit_once() {
    let prefix = KeyPrefix::new("edge-rl");
    let edges = Edges::start(2, Some(redis::redis_url()), &prefix).await;
    let (allowed, slowest) = edges.burst().await;
    assert_limit_held_once(allowed, slowest, "two replicas on one Redis");
}

#[tokio::test]
async fn two_replicas_on_the_redis_cluster_let_a_credential_through_at_the_limit_once() {
    // The keys expire by themselves a second after their bucket is full again.
    let prefix = switchyard_testkit::unique("edge-rl");
    let edges = Edges::start(2, Some(redis::redis_cluster_url()), &prefix).await;
    let (allowed, slowest) = edges.burst().await;
    assert_limit_held_once(allowed, slowest, "two replicas on the Redis Cluster");
}

#[tokio::test]
async fn without_redis_each_replica_limits_alone() {
    // What the shared state fixes: per-replica buckets let the credential through twice.
    let edges = Edges::start(2, None, "unused").await;
    let (allowed, _) = edges.burst().await;
    assert_eq!(allowed, 2 * BURST as usize, "each replica allows its own burst");
}

#[tokio::test]
async fn with_redis_cut_the_edge_limits_locally_and_keeps_serving() {
    let prefix = KeyPrefix::new("edge-rl-cut");
    let proxy = TcpProxy::start(redis::redis_addr()).await;
    let edges = Edges::start(1, Some(redis::redis_url_via(proxy.addr())), &prefix).await;
    proxy.cut();
    let (allowed, slowest) = edges.burst().await;
    assert_limit_held_once(allowed, slowest, "one replica with Redis cut");
    assert!(slowest < Duration::from_secs(1), "no request waits out Redis: slowest {slowest:?}");

    // Redis back: the shared state is used again (a fresh credential bucket in Redis).
    proxy.restore();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    switchyard_testkit::eventually(Duration::from_secs(10), "the limit state back in Redis", || async {
        let _ = edges.http.get(format!("{}/v1/models", edges.replicas[0].url())).send().await;
        let client = ::redis::Client::open(redis::redis_url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.map_err(|err| err.to_string())?;
        let key = format!("{{{}:edge:rl:open}}", prefix.as_str());
        let exists: bool = ::redis::cmd("EXISTS").arg(&key).query_async(&mut conn).await.map_err(|e| e.to_string())?;
        if exists { Ok(()) } else { Err(format!("{key} absent")) }
    })
    .await;
}
