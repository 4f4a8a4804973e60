//! The answers kept for `previous_response_id` and `GET /v1/responses/{id}`.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use base64::{Engine, engine::general_purpose::STANDARD as BASE64};
use serde_json::{Value, json};
use switchyard_kit::{
    Secret,
    store::{KeyPrefix, REDIS_COMMAND_TIMEOUT, RedisConnection, StoreError, bounded},
};
use switchyard_proto::router::v1 as router;

use crate::auth::Caller;

/// An answer as kept: whose it is, the Switchyard session it continues, the conversation up to
/// and including it (without the instructions, which do not carry over, as in OpenAI's API),
/// and the response object `GET` returns.
#[derive(Debug, Clone)]
pub struct StoredResponse {
    pub(super) tenant: String,
    pub(super) user: Option<String>,
    pub(super) session_id: String,
    pub(super) conversation: Vec<router::ChatMessage>,
    pub(super) response: Value,
}

impl StoredResponse {
    pub(super) fn owned_by(&self, caller: &Caller) -> bool {
        let user = caller.user.as_ref().map(|u| u.as_str());
        self.tenant == caller.tenant.as_str() && self.user.as_deref() == user
    }

    /// As Redis keeps it: JSON, the conversation as the router's protobuf (a ChatRequest's
    /// history) in base64, so every part of it (images, calls, results) survives unchanged.
    pub(super) fn to_json(&self) -> String {
        let history = router::ChatRequest { history: self.conversation.clone(), ..Default::default() };
        json!({
            "tenant": self.tenant,
            "user": self.user,
            "session_id": self.session_id,
            "conversation": BASE64.encode(prost::Message::encode_to_vec(&history)),
            "response": self.response,
        })
        .to_string()
    }

    pub(super) fn from_json(text: &str) -> Result<Self, StoreError> {
        let corrupt = |what: &str| StoreError::Corrupt(format!("a stored response's {what}"));
        let value: Value = serde_json::from_str(text).map_err(|_| corrupt("JSON"))?;
        let text_of = |field: &str| value[field].as_str().map(str::to_owned).ok_or_else(|| corrupt(field));
        let bytes = BASE64.decode(text_of("conversation")?).map_err(|_| corrupt("conversation"))?;
        let history: router::ChatRequest =
            prost::Message::decode(bytes.as_slice()).map_err(|_| corrupt("conversation"))?;
        Ok(Self {
            tenant: text_of("tenant")?,
            user: value["user"].as_str().map(str::to_owned),
            session_id: text_of("session_id")?,
            conversation: history.history,
            response: value["response"].clone(),
        })
    }
}

/// Answers by id, for the retention period (`EDGE_RESPONSES_TTL`). In Redis when the edge has
/// one (`REDIS_URL`), so every replica finds every answer; otherwise in this replica's memory,
/// at most `EDGE_RESPONSES_MAX` answers, the oldest evicted first — there a
/// `previous_response_id` or `GET` that reaches another replica finds nothing and is told so.
pub struct ResponseStore {
    ttl: Duration,
    backend: Backend,
}

pub(super) enum Backend {
    Memory { capacity: usize, entries: Mutex<Entries> },
    Redis { conn: RedisConnection, prefix: String },
}

#[derive(Default)]
pub(super) struct Entries {
    pub(super) by_id: HashMap<String, (Instant, StoredResponse)>,
    pub(super) order: VecDeque<String>,
}

impl ResponseStore {
    /// In this replica's memory.
    pub fn memory(ttl: Duration, capacity: usize) -> Self {
        Self { ttl, backend: Backend::Memory { capacity: capacity.max(1), entries: Mutex::new(Entries::default()) } }
    }

    /// In Redis, under `<prefix>:edge:response:<id>`, each key expiring with its answer.
    pub async fn redis(url: &Secret, prefix: &str, ttl: Duration) -> Result<Self, StoreError> {
        let prefix = KeyPrefix::parse(prefix)?.as_str().to_owned();
        let conn = RedisConnection::connect(url).await?;
        Ok(Self { ttl, backend: Backend::Redis { conn, prefix } })
    }

    pub fn describe(&self) -> &'static str {
        match self.backend {
            Backend::Memory { .. } => "memory (per replica)",
            Backend::Redis { .. } => "redis",
        }
    }

    pub(super) async fn put(&self, id: String, stored: StoredResponse) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Memory { capacity, entries } => {
                let mut entries = entries.lock().unwrap_or_else(PoisonError::into_inner);
                let now = Instant::now();
                entries.by_id.insert(id.clone(), (now + self.ttl, stored));
                entries.order.push_back(id);
                // Insertion order is expiry order (one TTL for all), so the front is always the
                // first to go, whether by age or by count.
                while let Some(front) = entries.order.front().cloned() {
                    let expired = entries.by_id.get(&front).is_none_or(|(expires, _)| *expires <= now);
                    if !expired && entries.by_id.len() <= *capacity {
                        break;
                    }
                    entries.order.pop_front();
                    entries.by_id.remove(&front);
                }
                Ok(())
            }
            Backend::Redis { conn, prefix } => {
                let mut conn = conn.clone();
                let millis = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX).max(1);
                let mut set = redis::cmd("SET");
                set.arg(format!("{prefix}:edge:response:{id}")).arg(stored.to_json()).arg("PX").arg(millis);
                bounded(REDIS_COMMAND_TIMEOUT, set.query_async::<()>(&mut conn)).await
            }
        }
    }

    /// The answer `id` when it is still kept and belongs to the caller's tenant and user.
    pub(super) async fn get(&self, id: &str, caller: &Caller) -> Result<Option<StoredResponse>, StoreError> {
        let stored = match &self.backend {
            Backend::Memory { entries, .. } => {
                let entries = entries.lock().unwrap_or_else(PoisonError::into_inner);
                entries.by_id.get(id).filter(|(expires, _)| *expires > Instant::now()).map(|(_, s)| s.clone())
            }
            Backend::Redis { conn, prefix } => {
                let mut conn = conn.clone();
                let mut get = redis::cmd("GET");
                get.arg(format!("{prefix}:edge:response:{id}"));
                match bounded(REDIS_COMMAND_TIMEOUT, get.query_async::<Option<String>>(&mut conn)).await? {
                    Some(text) => Some(StoredResponse::from_json(&text)?),
                    None => None,
                }
            }
        };
        Ok(stored.filter(|stored| stored.owned_by(caller)))
    }
}

#[cfg(test)]
mod tests {
    use switchyard_proto::router::v1::content_part;

    use super::*;

    fn caller(tenant: &str, user: Option<&str>) -> Caller {
        use switchyard_kit::identity::{TenantId, UserId};
        Caller {
            tenant: TenantId::parse(tenant).unwrap(),
            user: user.map(|u| UserId::parse(u).unwrap()),
            principal: "key".into(),
            admin: false,
        }
    }

    fn stored(tenant: &str, user: Option<&str>) -> StoredResponse {
        let image = router::ContentPart {
            part: Some(content_part::Part::Image(router::ImagePart {
                url: "data:image/png;base64,iVBO".into(),
                detail: "low".into(),
            })),
        };
        StoredResponse {
            tenant: tenant.into(),
            user: user.map(str::to_owned),
            session_id: "s-1".into(),
            conversation: vec![
                router::ChatMessage { role: router::ChatRole::User as i32, parts: vec![image], ..Default::default() },
                router::ChatMessage {
                    role: router::ChatRole::Assistant as i32,
                    tool_calls: vec![router::ToolCall {
                        id: "c".into(),
                        name: "f".into(),
                        arguments_json: "{}".into(),
                    }],
                    ..Default::default()
                },
            ],
            response: json!({"id": "resp_1", "output": []}),
        }
    }

    /// What every backend does: an answer is found by its owner alone, whole, until it expires.
    async fn store_suite(store: ResponseStore, short: ResponseStore) {
        let ann = caller("acme", Some("ann"));
        store.put("resp_a".into(), stored("acme", Some("ann"))).await.unwrap();
        let found = store.get("resp_a", &ann).await.unwrap().expect("kept");
        assert_eq!(found.session_id, "s-1");
        assert_eq!(found.conversation, stored("acme", None).conversation, "the conversation survives whole");
        assert_eq!(found.response["id"], "resp_1");
        assert!(store.get("resp_a", &caller("acme", Some("bob"))).await.unwrap().is_none(), "another user");
        assert!(store.get("resp_a", &caller("acme", None)).await.unwrap().is_none(), "no user is another user");
        assert!(store.get("resp_a", &caller("globex", Some("ann"))).await.unwrap().is_none(), "another tenant");
        assert!(store.get("resp_b", &ann).await.unwrap().is_none(), "unknown");
        short.put("resp_a".into(), stored("acme", Some("ann"))).await.unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(short.get("resp_a", &ann).await.unwrap().is_none(), "past the retention");
    }

    #[tokio::test]
    async fn the_memory_store_keeps_answers_for_their_owner_within_the_retention_and_the_count() {
        store_suite(
            ResponseStore::memory(Duration::from_secs(60), 10),
            ResponseStore::memory(Duration::from_millis(20), 10),
        )
        .await;
        let store = ResponseStore::memory(Duration::from_secs(60), 2);
        for id in ["a", "b", "c"] {
            store.put(id.into(), stored("acme", None)).await.unwrap();
        }
        let acme = caller("acme", None);
        assert!(store.get("a", &acme).await.unwrap().is_none(), "the oldest went past the count");
        assert!(store.get("c", &acme).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn the_redis_store_keeps_answers_for_their_owner_within_the_retention() {
        let url = Secret::new(switchyard_testkit::redis_url());
        let prefix = switchyard_testkit::KeyPrefix::new("edge_responses");
        let store = ResponseStore::redis(&url, &prefix, Duration::from_secs(60)).await.expect("REDIS_URL reachable");
        let short = ResponseStore::redis(&url, &prefix, Duration::from_millis(20)).await.unwrap();
        store_suite(store, short).await;
    }
}
