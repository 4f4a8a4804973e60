//! The edge while the API key table is away: the real Postgres behind a TCP proxy the tests
//! cut, the real services behind the edge. Keys accepted before the outage keep working from
//! their last check (at once, not after the pool's 2 s acquire timeout), unknown keys get a
//! quick 503, a key revoked meanwhile stops as soon as Postgres is back, the staleness bound
//! ends stale serving, and `/readyz` says which of these holds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use common::{Auth, Options, Stack, json};
use serde_json::Value;
use switchyard_edge::auth::KeyStore;
use switchyard_kit::{TenantId, UserId};
use switchyard_testkit::{
    Schema, database_url, eventually,
    llm::{Reply, ScriptedLlm},
    postgres::{database_addr, database_url_via},
    proxy::TcpProxy,
};

/// Well under the key pool's 2 s acquire timeout: an answer this quick did not wait on it.
const QUICK: Duration = Duration::from_millis(1000);

struct Outage {
    stack: Stack,
    proxy: TcpProxy,
    /// The same key table reached directly, as `switchyard keys` on another host would.
    direct: KeyStore,
    _schema: Schema,
}

async fn start(max_staleness: Duration) -> Outage {
    let schema = Schema::new("edge_keys_outage");
    let proxy = TcpProxy::start(database_addr()).await;
    // No remembering beyond the request, as in the other key tests: every check asks Postgres.
    let keys = KeyStore::connect(&database_url_via(proxy.addr()), schema.name(), Duration::ZERO)
        .await
        .unwrap_or_else(|err| panic!("postgres at {} (set DATABASE_URL): {err}", database_url()))
        .with_max_staleness(max_staleness);
    let direct = KeyStore::connect(&database_url(), schema.name(), Duration::ZERO).await.expect("key table");
    let llm = ScriptedLlm::start(|_| Reply::text("Hello.")).await;
    let stack = Stack::start(llm, Options { auth: Auth::Keys(Arc::new(keys)), ..Options::default() }).await;
    Outage { stack, proxy, direct, _schema: schema }
}

impl Outage {
    async fn key(&self, user: &str) -> (String, String) {
        let tenant = TenantId::parse("acme").unwrap();
        let user = UserId::parse(user).unwrap();
        let created = self.direct.create(&tenant, Some(&user), "outage", false).await.expect("key created");
        (created.secret, created.key.id)
    }

    /// Status, body and how long the edge took to answer a key-checked request.
    async fn roles(&self, key: &str) -> (u16, Value, Duration) {
        let start = Instant::now();
        let (status, body) = json(self.stack.get("/api/context/roles", Some(key)).await).await;
        (status, body, start.elapsed())
    }

    async fn ready(&self) -> (u16, Value) {
        json(self.stack.get("/readyz", None).await).await
    }
}

#[tokio::test]
async fn known_keys_are_served_from_their_last_check_and_revocations_apply_once_postgres_is_back() {
    let outage = start(Duration::from_secs(900)).await;
    let (ann, ann_id) = outage.key("ann").await;
    let (bob, _) = outage.key("bob").await;
    let (status, body, _) = outage.roles(&ann).await;
    assert_eq!(status, 200, "{body}");
    let (status, ready) = outage.ready().await;
    assert_eq!((status, ready["dependencies"]["api_keys"].as_str()), (200, Some("SERVING")), "{ready}");
    assert_eq!(ready["degraded"], serde_json::json!([]), "{ready}");

    outage.proxy.cut();
    // The first check to meet the outage may wait for the pool; it still serves the known key.
    let (status, body, _) = outage.roles(&ann).await;
    assert_eq!(status, 200, "a key accepted before the outage is served from its last check: {body}");
    for _ in 0..5 {
        let (status, body, took) = outage.roles(&ann).await;
        assert_eq!(status, 200, "{body}");
        assert!(took < QUICK, "a known key during the outage waited {took:?}");
    }
    // A key the edge never saw cannot be judged: 503 (not 401), at once, in the REST shape.
    let (status, body, took) = outage.roles(&bob).await;
    assert_eq!((status, body["error"]["status"].as_str()), (503, Some("UNAVAILABLE")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("unreachable"), "{body}");
    assert!(took < QUICK, "an unknown key during the outage waited {took:?}");
    // The same in OpenAI's error shape on its endpoints.
    let (status, body) = json(outage.stack.get("/v1/models", Some(&bob)).await).await;
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("unavailable")), "{body}");
    assert_eq!(body["error"]["type"], "api_error", "{body}");
    // Ready, since callers are still served, and saying it is degraded.
    let ready = eventually(Duration::from_secs(10), "readiness reporting the key store degraded", || async {
        let (status, ready) = outage.ready().await;
        let state = ready["dependencies"]["api_keys"].as_str().unwrap_or_default().to_owned();
        if status == 200 && state.starts_with("DEGRADED") { Ok(ready) } else { Err(format!("{status} {ready}")) }
    })
    .await;
    assert_eq!(ready["status"], "ready", "{ready}");
    assert_eq!(ready["degraded"], serde_json::json!(["api_keys"]), "{ready}");

    // Revoked elsewhere while this edge cannot see the table: served until it can.
    assert!(outage.direct.revoke(&ann_id).await.unwrap());
    let (status, body, _) = outage.roles(&ann).await;
    assert_eq!(status, 200, "{body}");

    outage.proxy.restore();
    eventually(Duration::from_secs(10), "the revocation applied once Postgres is back", || async {
        let (status, body, _) = outage.roles(&ann).await;
        if status == 401 { Ok(()) } else { Err(format!("{status} {body}")) }
    })
    .await;
    let (status, body, _) = outage.roles(&bob).await;
    assert_eq!(status, 200, "a key the table holds is checked again: {body}");
    eventually(Duration::from_secs(10), "readiness back to serving", || async {
        let (status, ready) = outage.ready().await;
        let serving = ready["dependencies"]["api_keys"] == "SERVING" && ready["degraded"] == serde_json::json!([]);
        if status == 200 && serving { Ok(()) } else { Err(format!("{status} {ready}")) }
    })
    .await;
}

#[tokio::test]
async fn stale_keys_stop_at_the_staleness_bound_and_readiness_tells_when_nobody_can_be_let_in() {
    let bound = Duration::from_secs(3);
    let outage = start(bound).await;
    let (ann, _) = outage.key("ann").await;
    let (status, body, _) = outage.roles(&ann).await;
    assert_eq!(status, 200, "{body}");
    let checked = Instant::now();

    outage.proxy.cut();
    let (status, body, _) = outage.roles(&ann).await;
    assert_eq!(status, 200, "within the bound the last check still counts: {body}");

    // Past the bound the key is no longer vouched for: 503, and with no key left to serve
    // (and no tokens configured) the edge cannot let anyone in, so it is not ready.
    tokio::time::sleep(bound.saturating_sub(checked.elapsed())).await;
    let (status, body, took) = outage.roles(&ann).await;
    assert_eq!((status, body["error"]["status"].as_str()), (503, Some("UNAVAILABLE")), "{body}");
    assert!(took < QUICK, "{took:?}");
    let ready = eventually(Duration::from_secs(10), "readiness reporting nobody can be let in", || async {
        let (status, ready) = outage.ready().await;
        let state = ready["dependencies"]["api_keys"].as_str().unwrap_or_default().to_owned();
        if status == 503 && state.starts_with("UNAVAILABLE") { Ok(ready) } else { Err(format!("{status} {ready}")) }
    })
    .await;
    assert_eq!(ready["status"], "not_ready", "{ready}");

    outage.proxy.restore();
    eventually(Duration::from_secs(10), "the key checked afresh once Postgres is back", || async {
        let (status, body, _) = outage.roles(&ann).await;
        if status == 200 { Ok(()) } else { Err(format!("{status} {body}")) }
    })
    .await;
    eventually(Duration::from_secs(10), "ready again", || async {
        let (status, ready) = outage.ready().await;
        if status == 200 { Ok(()) } else { Err(format!("{status} {ready}")) }
    })
    .await;
}
