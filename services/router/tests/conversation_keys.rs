//! The conversation-key store answers alike in memory (`switchyard dev`) and in Redis (shared
//! by replicas): the first session claimed for a key wins, keys are per tenant, a gone
//! session is replaced, and an entry lives for the TTL from its last use. The Redis store runs
//! on one Redis and on the real three-primary Redis Cluster (`REDIS_CLUSTER_URL`), opened as the
//! router opens it (`open_conversations`): every entry is one key, read and written by
//! single-key GET/GETEX/SET, so a cluster takes it as it is.

use std::{sync::Arc, time::Duration};

use switchyard_kit::{Secret, SessionId};
use switchyard_router::{
    RouterConfig,
    conversations::{ConversationKeys, LoopPersona},
    open_conversations,
};
use switchyard_testkit::{KeyPrefix, redis_cluster_url, redis_url};

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

/// The conversation keys the router opens on `url` (REDIS_URL) under `prefix`.
async fn redis_keys(url: &str, prefix: &str, ttl: Duration) -> Arc<ConversationKeys> {
    let mut config =
        RouterConfig::in_memory("127.0.0.1:0".parse().expect("address"), "http://127.0.0.1:1", "http://127.0.0.1:1");
    config.stores.in_memory = false;
    config.stores.redis_url = Some(Secret::new(url));
    config.stores.redis_prefix = prefix.to_owned();
    config.conversation_ttl = ttl;
    open_conversations(&config).await.unwrap_or_else(|err| panic!("opening the conversation keys on {url}: {err:#}"))
}

#[tokio::test]
async fn in_memory() {
    behaves(&ConversationKeys::memory(Duration::from_secs(60))).await;
    expires(&ConversationKeys::memory(Duration::from_secs(1))).await;
}

#[tokio::test]
async fn in_redis() {
    let prefix = KeyPrefix::new("router-conv");
    behaves(&*redis_keys(&redis_url(), prefix.as_str(), Duration::from_secs(60)).await).await;
    expires(&*redis_keys(&redis_url(), prefix.as_str(), Duration::from_secs(1)).await).await;
}

/// Its keys expire with their TTL (a minute at most): no SCAN across the cluster to clean up.
#[tokio::test]
async fn in_redis_cluster() {
    let prefix = switchyard_testkit::unique("router-conv");
    let url = redis_cluster_url();
    behaves(&*redis_keys(&url, &prefix, Duration::from_secs(60)).await).await;
    expires(&*redis_keys(&url, &prefix, Duration::from_secs(1)).await).await;
}
