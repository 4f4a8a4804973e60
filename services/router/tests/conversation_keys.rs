//! The conversation-key store answers alike in memory (`switchyard dev`) and in Redis (shared
//! by replicas): the first session claimed for a key wins, keys are per tenant, a gone
//! session is replaced, and an entry lives for the TTL from its last use.

use std::time::Duration;

use switchyard_kit::{Secret, SessionId, store::connect_redis};
use switchyard_router::conversations::{ConversationKeys, LoopPersona};
use switchyard_testkit::{KeyPrefix, redis_url};

fn id(text: &str) -> SessionId {
    SessionId::parse(text).expect("session id")
}

async fn behaves(keys: &ConversationKeys) {
    assert_eq!(keys.session("acme", "k").await.expect("read"), None);
    assert_eq!(keys.claim("acme", "k", &id("first")).await.expect("claim"), id("first"));
    // A second first request of the same conversation joins the first's session.
    assert_eq!(keys.claim("acme", "k", &id("second")).await.expect("claim"), id("first"));
    assert_eq!(keys.session("acme", "k").await.expect("read"), Some(id("first")));
    // Another tenant's same key is another conversation.
    assert_eq!(keys.session("globex", "k").await.expect("read"), None);
    assert_eq!(keys.claim("globex", "k", &id("theirs")).await.expect("claim"), id("theirs"));
    keys.replace("acme", "k", &id("second")).await.expect("replace");
    assert_eq!(keys.session("acme", "k").await.expect("read"), Some(id("second")));
    assert_eq!(keys.session("globex", "k").await.expect("read"), Some(id("theirs")));

    // A tool loop's persona is kept per tenant and session.
    let persona = LoopPersona { role_id: "tech-expert".into(), system_prompt: "You are… (from finance)".into() };
    assert_eq!(keys.loop_persona("acme", &id("first")).await.expect("read"), None);
    keys.remember_loop("acme", &id("first"), &persona).await.expect("keep");
    assert_eq!(keys.loop_persona("acme", &id("first")).await.expect("read"), Some(persona));
    assert_eq!(keys.loop_persona("globex", &id("first")).await.expect("read"), None);
}

async fn expires(keys: &ConversationKeys) {
    keys.claim("acme", "short", &id("s")).await.expect("claim");
    // Read within the TTL, the entry is renewed; untouched past it, it is gone.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(keys.session("acme", "short").await.expect("read"), Some(id("s")));
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    assert_eq!(keys.session("acme", "short").await.expect("read"), None);
}

async fn redis_keys(ttl: Duration) -> (ConversationKeys, KeyPrefix) {
    let url = Secret::new(redis_url());
    let conn = connect_redis(&url)
        .await
        .unwrap_or_else(|err| panic!("redis at {} (set REDIS_URL): {err}", url.url_without_credentials()));
    let prefix = KeyPrefix::new("router-conv");
    let parsed = switchyard_kit::store::KeyPrefix::parse(prefix.as_str()).expect("prefix");
    (ConversationKeys::redis(ttl, conn, parsed), prefix)
}

#[tokio::test]
async fn in_memory() {
    behaves(&ConversationKeys::memory(Duration::from_secs(60))).await;
    expires(&ConversationKeys::memory(Duration::from_secs(1))).await;
}

#[tokio::test]
async fn in_redis() {
    let (keys, _prefix) = redis_keys(Duration::from_secs(60)).await;
    behaves(&keys).await;
    let (keys, _prefix) = redis_keys(Duration::from_secs(1)).await;
    expires(&keys).await;
}
