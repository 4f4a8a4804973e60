//! Circuits shared by replicas through a real Redis (one node, and the three-primary cluster):
//! two breakers, each with its own connection as two router replicas have, over one failing
//! vendor. The one that sees the failures opens; the other skips the vendor too without a call
//! of its own; after the cooldown exactly one probe reaches the vendor across both, and its
//! answer closes both. With Redis cut away, a breaker goes on alone.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use switchyard_kit::{
    Secret,
    store::{KeyPrefix, RedisConnection},
};
use switchyard_llm::{
    CircuitBreaker, CircuitSettings, CircuitState, CircuitSync, ErrorKind, Provider, ProviderConfig,
    circuit_sync::{CLAIM_TIMEOUT, Change, Record},
};
use switchyard_testkit::{
    eventually,
    llm::{Reply, ScriptedLlm},
    proxy::TcpProxy,
    redis::{redis_addr, redis_url_via},
    redis_cluster_url, redis_url,
};

use crate::support::{Vendor, question};

const SETTINGS: CircuitSettings = CircuitSettings { failures: 2, cooldown: Duration::from_millis(1500) };
/// How often each breaker reads the shared record.
const INTERVAL: Duration = Duration::from_millis(100);

async fn connect(url: &str) -> RedisConnection {
    RedisConnection::connect(&Secret::new(url)).await.unwrap_or_else(|err| panic!("redis at {url}: {err}"))
}

/// One replica's view: its own Redis connection, the test's key prefix.
async fn sync_over(url: &str, prefix: &str) -> Arc<CircuitSync> {
    Arc::new(CircuitSync::new(connect(url).await, &KeyPrefix::parse(prefix).unwrap(), INTERVAL))
}

/// A vendor answering 500 until `healthy`, then "up" after `answer_delay` (so a probe is
/// still out while the other calls are decided).
async fn sick_vendor(answer_delay: Duration) -> (ScriptedLlm, Arc<AtomicBool>) {
    let healthy = Arc::new(AtomicBool::new(false));
    let up = healthy.clone();
    let server = ScriptedLlm::start(move |_| {
        if up.load(Ordering::SeqCst) { Reply::text("up").delay(answer_delay) } else { Reply::error(500, "down") }
    })
    .await;
    (server, healthy)
}

fn provider(server: &ScriptedLlm) -> Arc<dyn Provider> {
    Vendor::OpenAi.provider(ProviderConfig { max_retries: 0, ..Vendor::OpenAi.config(server) })
}

async fn two_replicas_share_one_circuit(url: &str, prefix: &str) {
    let (server, healthy) = sick_vendor(Duration::from_millis(400)).await;
    let a = CircuitBreaker::shared(provider(&server), SETTINGS, sync_over(url, prefix).await);
    let b = CircuitBreaker::shared(provider(&server), SETTINGS, sync_over(url, prefix).await);

    for _ in 0..SETTINGS.failures {
        assert_eq!(a.complete(question("hi")).await.unwrap_err().kind, ErrorKind::Server);
    }
    assert_eq!(a.state(), CircuitState::Open);
    let opened = Instant::now();
    assert_eq!(b.state(), CircuitState::Closed, "B has seen no failure of its own");

    // B learns of it from Redis, without a call of its own, and then skips the vendor.
    eventually(Duration::from_secs(5), "replica B takes the open circuit", || async {
        (b.state() == CircuitState::Open).then_some(())
    })
    .await;
    assert!(opened.elapsed() < SETTINGS.cooldown, "B must learn of it within the cooldown: {:?}", opened.elapsed());
    for _ in 0..3 {
        let refused = b.complete(question("hi")).await.unwrap_err();
        assert_eq!((refused.kind, refused.provider.as_str()), (ErrorKind::CircuitOpen, "openai"), "{refused}");
        assert_eq!(b.stream(question("hi")).await.err().map(|e| e.kind), Some(ErrorKind::CircuitOpen));
    }
    assert_eq!(server.requests().len(), 2, "only A's two failures reached the vendor");

    // The vendor recovers. After the cooldown both replicas are asked at once, four calls
    // each: one probe in all reaches the vendor (slow to answer, so every other call is
    // decided while it is out), and every other call is refused at once.
    healthy.store(true, Ordering::SeqCst);
    tokio::time::sleep_until((opened + SETTINGS.cooldown).into()).await;
    let calls = (0..4).flat_map(|_| [a.clone(), b.clone()]).map(|breaker| async move {
        let started = Instant::now();
        (breaker.complete(question("hi")).await, started.elapsed())
    });
    let outcomes = futures::future::join_all(calls).await;
    let answered: Vec<_> = outcomes.iter().filter(|(outcome, _)| outcome.is_ok()).collect();
    assert_eq!(answered.len(), 1, "exactly one probe: {outcomes:?}");
    for (outcome, took) in &outcomes {
        match outcome {
            Ok(completion) => assert_eq!(completion.content, "up"),
            Err(error) => {
                assert_eq!(error.kind, ErrorKind::CircuitOpen, "{error}");
                assert!(*took < Duration::from_millis(300), "a refusal waits on nothing: {took:?}");
            }
        }
    }
    assert_eq!(server.requests().len(), 3, "one probe across both replicas");

    // Its answer closes the circuit in both replicas, and both call the vendor again.
    eventually(Duration::from_secs(5), "both replicas close", || async {
        let states = (a.state(), b.state());
        if states == (CircuitState::Closed, CircuitState::Closed) { Ok(()) } else { Err(format!("{states:?}")) }
    })
    .await;
    assert_eq!(a.complete(question("hi")).await.unwrap().content, "up");
    assert_eq!(b.complete(question("hi")).await.unwrap().content, "up");
    assert_eq!(server.requests().len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_a_circuit_over_one_redis() {
    let prefix = switchyard_testkit::KeyPrefix::new("llm-circuits");
    two_replicas_share_one_circuit(&redis_url(), prefix.as_str()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_a_circuit_over_the_cluster() {
    // The record and the lease share a slot on one primary; the guard scans every primary.
    let prefix = switchyard_testkit::ClusterKeyPrefix::new("llm-circuits");
    two_replicas_share_one_circuit(&redis_cluster_url(), prefix.as_str()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_away_a_replica_keeps_its_own_circuit() {
    let prefix = switchyard_testkit::KeyPrefix::new("llm-circuits");
    let proxy = TcpProxy::start(redis_addr()).await;
    let (server, healthy) = sick_vendor(Duration::ZERO).await;
    let sync = sync_over(&redis_url_via(proxy.addr()), prefix.as_str()).await;
    let settings = CircuitSettings { failures: 2, cooldown: Duration::from_millis(500) };
    let breaker = CircuitBreaker::shared(provider(&server), settings, sync.clone());
    proxy.cut();

    // The failures open the local circuit; publishing it fails in the background, not on the calls.
    for _ in 0..settings.failures {
        let started = Instant::now();
        assert_eq!(breaker.complete(question("hi")).await.unwrap_err().kind, ErrorKind::Server);
        assert!(started.elapsed() < Duration::from_millis(500), "a failure waits on no Redis: {:?}", started.elapsed());
    }
    assert_eq!(breaker.state(), CircuitState::Open);
    assert_eq!(breaker.complete(question("hi")).await.unwrap_err().kind, ErrorKind::CircuitOpen);
    assert_eq!(server.requests().len(), 2);

    // After the cooldown the probe cannot claim the lease: within the claim's bound the
    // replica probes on its own, and the answer closes its circuit.
    healthy.store(true, Ordering::SeqCst);
    tokio::time::sleep(settings.cooldown).await;
    let started = Instant::now();
    assert_eq!(breaker.complete(question("hi")).await.unwrap().content, "up");
    let took = started.elapsed();
    assert!(took < CLAIM_TIMEOUT + Duration::from_millis(500), "the probe waited {took:?} on Redis");
    assert_eq!(breaker.state(), CircuitState::Closed);
    assert_eq!(server.requests().len(), 3);

    // Redis back: the next opening is published again.
    proxy.restore();
    healthy.store(false, Ordering::SeqCst);
    for _ in 0..settings.failures {
        breaker.complete(question("hi")).await.unwrap_err();
    }
    assert_eq!(breaker.state(), CircuitState::Open);
    let direct = sync_over(&redis_url(), prefix.as_str()).await;
    eventually(Duration::from_secs(10), "the opening published once Redis is back", || async {
        match direct.read("openai").await {
            Ok(Some(Record { change: Change::Open { .. }, .. })) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}
