//! One behavioural suite per store trait, run against memory and the real Redis / Postgres;
//! the context store also against the real three-primary Redis Cluster (`REDIS_CLUSTER_URL`).
#![allow(clippy::unwrap_used, reason = "a panic in a test is the failure report")]

use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};
use switchyard_kit::{SessionId, TenantId};
use switchyard_mcp_gateway::{
    audit::{AuditQuery, AuditRecord, Cursor, Outcome},
    domain::{Counters, ShownMatch, UsagePair, UsageRecord},
    store::{
        ContextStore, SessionKey, UsageStore,
        memory::{MemoryContextStore, MemoryUsageStore},
        postgres::PostgresUsageStore,
        redis::RedisContextStore,
    },
};
use switchyard_testkit::{KeyPrefix, Schema, database_url, redis_cluster_url, redis_url};
use uuid::Uuid;

fn key(tenant: &str, session: &str) -> SessionKey {
    SessionKey::new(TenantId::parse(tenant).expect("tenant"), SessionId::parse(session).expect("session id"))
}

fn at(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(1_790_000_000_000 + ms).unwrap()
}

#[tokio::test]
async fn memory_context_store() {
    context_suite(Arc::new(MemoryContextStore::default())).await;
}

#[tokio::test]
async fn redis_context_store() {
    let prefix = KeyPrefix::new("gw");
    let store = RedisContextStore::connect(&redis_url().into(), &prefix, std::time::Duration::from_secs(60))
        .await
        .unwrap_or_else(|err| panic!("redis at {} (set REDIS_URL): {err}", redis_url()));
    context_suite(Arc::new(store)).await;
}

/// The same suite on the Redis Cluster: every script runs over one session's key, and the
/// counters go to their own key in a second script, so nothing crosses slots. The contexts
/// expire with their TTL; the suite's one stats key is deleted at the end (no cleanup by SCAN).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_cluster_context_store() {
    let prefix = switchyard_testkit::unique("gw");
    let url = redis_cluster_url();
    let store = RedisContextStore::connect(&url.as_str().into(), &prefix, std::time::Duration::from_secs(60))
        .await
        .unwrap_or_else(|err| panic!("the redis cluster at {url} (REDIS_CLUSTER_URL): {err}"));
    context_suite(Arc::new(store)).await;

    let client = redis::cluster::ClusterClient::new(
        url.trim_start_matches("redis+cluster://").split(',').map(|node| format!("redis://{node}")).collect::<Vec<_>>(),
    )
    .unwrap();
    let mut conn = client.get_async_connection().await.unwrap();
    let deleted: i64 = redis::cmd("DEL").arg(format!("{prefix}:mcp:stats")).query_async(&mut conn).await.unwrap();
    assert_eq!(deleted, 1, "the counters are in one hash for the whole cluster");
}

async fn context_suite(store: Arc<dyn ContextStore>) {
    store.ping().await.unwrap();
    let a = key("acme", "s1");
    assert_eq!(store.get(&a).await.unwrap(), None, "no context before set_context");

    // A session is counted once, however often it is touched.
    store.touch(&a).await.unwrap();
    store.touch(&a).await.unwrap();
    assert_eq!(store.counters().await.unwrap().sessions, 1);

    // set_context stores query, intent, embedding and time; a later one replaces them.
    let embedding = vec![0.25f32, -1.5, 3.0];
    let context =
        store.set_context(&a, "analyze this CSV", Some("data analysis"), Some(&embedding), at(1)).await.unwrap();
    assert_eq!(context.current_query.as_deref(), Some("analyze this CSV"));
    assert_eq!(context.current_intent.as_deref(), Some("data analysis"));
    assert_eq!(context.embedding.as_deref(), Some(embedding.as_slice()));
    assert_eq!(context.last_updated, Some(at(1)));
    assert_eq!(context.text().as_deref(), Some("analyze this CSV (data analysis)"));
    let replaced = store.set_context(&a, "plot it", None, None, at(2)).await.unwrap();
    assert_eq!(replaced.current_intent, None, "an omitted intent clears the old one");
    assert_eq!(replaced.embedding, None);
    assert_eq!(store.get(&a).await.unwrap().unwrap(), replaced);

    // Calls before any filtered list count as calls, not against a list.
    assert_eq!(store.record_call(&a, "csv__parse").await.unwrap().0, ShownMatch::NoList);
    store.record_shown(&a, &["csv__parse".to_owned(), "plot__chart".to_owned()]).await.unwrap();
    assert_eq!(store.record_call(&a, "plot__chart").await.unwrap().0, ShownMatch::InList);
    assert_eq!(store.record_call(&a, "files__read").await.unwrap().0, ShownMatch::NotInList);
    let (shown, returned) = store.record_call(&a, "plot__chart").await.unwrap();
    assert_eq!(shown, ShownMatch::InList);
    let context = store.get(&a).await.unwrap().unwrap();
    assert_eq!(returned, context, "the context the call was made in comes back with it");
    assert_eq!(context.tools_used, ["csv__parse", "plot__chart", "files__read"], "each tool once, first use first");
    assert_eq!(context.shown.as_deref(), Some(["csv__parse".to_owned(), "plot__chart".to_owned()].as_slice()));

    // Another tenant's session of the same id is another session.
    let other = key("globex", "s1");
    assert_eq!(store.get(&other).await.unwrap(), None);
    store.set_context(&other, "weather in Paris", None, None, at(3)).await.unwrap();
    assert_eq!(store.get(&a).await.unwrap().unwrap().current_query.as_deref(), Some("plot it"));

    assert_eq!(
        store.counters().await.unwrap(),
        Counters {
            sessions: 2,
            sessions_with_context: 2,
            tool_calls: 4,
            calls_after_filtered_list: 3,
            filtered_hits: 2
        }
    );

    // Many sessions at once, spread over every slot a cluster has: each call is counted once.
    let before = store.counters().await.unwrap();
    let calls = (0..48).map(|n| {
        let store = store.clone();
        tokio::spawn(async move {
            let session = key("acme", &format!("many-{n}"));
            store.record_shown(&session, &["calc__add".to_owned()]).await.unwrap();
            store.record_call(&session, if n % 2 == 0 { "calc__add" } else { "calc__mul" }).await.unwrap().0
        })
    });
    let mut in_list = 0;
    for call in calls.collect::<Vec<_>>() {
        in_list += u64::from(call.await.unwrap() == ShownMatch::InList);
    }
    assert_eq!(in_list, 24);
    let after = store.counters().await.unwrap();
    assert_eq!(
        (after.tool_calls, after.calls_after_filtered_list, after.filtered_hits),
        (before.tool_calls + 48, before.calls_after_filtered_list + 48, before.filtered_hits + 24)
    );
    assert_eq!(after.sessions, before.sessions, "a call alone does not count a session");

    // The MCP transport's session state round-trips and can be deleted.
    assert_eq!(store.load_transport("t-1").await.unwrap(), None);
    store.store_transport("t-1", r#"{"x":1}"#).await.unwrap();
    assert_eq!(store.load_transport("t-1").await.unwrap().as_deref(), Some(r#"{"x":1}"#));
    store.delete_transport("t-1").await.unwrap();
    assert_eq!(store.load_transport("t-1").await.unwrap(), None);

    // Ending a session forgets its context and shown list, and only that session's.
    let ended = key("acme", "s-ended");
    let other = key("acme", "s-kept");
    for k in [&ended, &other] {
        store.set_context(k, "greek letters", None, None, at(50)).await.unwrap();
        store.record_shown(k, &["fx__alpha".to_owned()]).await.unwrap();
    }
    store.end_session(&ended).await.unwrap();
    assert_eq!(store.get(&ended).await.unwrap(), None);
    assert!(store.get(&other).await.unwrap().is_some());
    store.end_session(&ended).await.unwrap();
}

/// A Postgres usage store in a schema of its own, which goes with the returned guard.
async fn postgres_usage() -> (Schema, PostgresUsageStore) {
    let schema = Schema::new("gw");
    let store = PostgresUsageStore::connect(&database_url(), &schema)
        .await
        .unwrap_or_else(|err| panic!("postgres at {} (set DATABASE_URL): {err}", database_url()));
    (schema, store)
}

#[tokio::test]
async fn memory_usage_store() {
    usage_suite(Arc::new(MemoryUsageStore::default())).await;
}

#[tokio::test]
async fn postgres_usage_store() {
    let (_schema, store) = postgres_usage().await;
    usage_suite(Arc::new(store)).await;
}

/// The record buffer writes a batch again when a write's outcome was lost (the connection cut
/// between COMMIT and its answer): what landed the first time is not stored twice, and a new
/// record in the retried batch still is.
#[tokio::test]
async fn a_usage_batch_written_again_is_stored_once() {
    let (_schema, store) = postgres_usage().await;
    let a = key("acme", "s1");
    let set = read_my_notes(&a);
    let batch = [set.clone(), call(&a, "files__read", Some("read my notes"), false, 2)];
    store.record(&batch).await.unwrap();
    let later = call(&a, "files__write", None, false, 3);
    store.record(&[batch[0].clone(), batch[1].clone(), later.clone()]).await.unwrap();
    assert_eq!(store.session_records(&a, 10).await.unwrap(), [later, batch[1].clone(), set]);
    assert_eq!(store.history(10).await.unwrap().len(), 1, "the usage prior learns the call once");

    // Two calls alike in all but their ids (the same tool at the same microsecond) are both kept.
    let twin = || {
        let mut record = call(&a, "files__stat", None, false, 4);
        if let UsageRecord::ToolCall { id, .. } = &mut record {
            *id = Uuid::new_v4();
        }
        record
    };
    store.record(&[twin(), twin()]).await.unwrap();
    assert_eq!(store.session_records(&a, 10).await.unwrap().len(), 5);
}

/// A record's id, the same each time a test builds the same record (so what is read back
/// compares equal to a record built again).
fn id_of(what: impl std::hash::Hash) -> Uuid {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    Uuid::from_u64_pair(BuildHasherDefault::<DefaultHasher>::default().hash_one(what), 0)
}

/// The set_context the suites' tool calls follow.
fn read_my_notes(session: &SessionKey) -> UsageRecord {
    UsageRecord::SetContext {
        id: id_of((session, "set")),
        key: session.clone(),
        query: "read my notes".into(),
        intent: None,
        at: at(1),
    }
}

fn call(session: &SessionKey, tool: &str, query: Option<&str>, is_error: bool, ms: i64) -> UsageRecord {
    UsageRecord::ToolCall {
        id: id_of((session, tool, ms)),
        key: session.clone(),
        tool: tool.to_owned(),
        server: tool.split("__").next().unwrap().to_owned(),
        upstream_tool: tool.split("__").nth(1).unwrap().to_owned(),
        context_query: query.map(str::to_owned),
        context_intent: query.map(|_| "intent".to_owned()),
        context_embedding: query.map(|_| vec![1.0, 0.5]),
        shown: if query.is_some() { ShownMatch::InList } else { ShownMatch::NoList },
        is_error,
        duration_ms: 12,
        at: at(ms),
    }
}

async fn usage_suite(store: Arc<dyn UsageStore>) {
    store.ping().await.unwrap();
    let a = key("acme", "s1");
    let b = key("acme", "s2");
    assert!(store.history(10).await.unwrap().is_empty());
    let set = read_my_notes(&a);
    store
        .record(&[
            set.clone(),
            call(&a, "files__read", Some("read my notes"), false, 2),
            call(&a, "files__write", None, false, 3),
            call(&a, "files__stat", Some("read my notes"), true, 4),
            call(&b, "web__fetch", Some("open example.com"), false, 5),
        ])
        .await
        .unwrap();

    // History: successful calls that had a context, newest first.
    let history = store.history(10).await.unwrap();
    assert_eq!(
        history,
        [
            UsagePair {
                context: "open example.com (intent)".into(),
                tool: "web__fetch".into(),
                embedding: Some(vec![1.0, 0.5])
            },
            UsagePair {
                context: "read my notes (intent)".into(),
                tool: "files__read".into(),
                embedding: Some(vec![1.0, 0.5])
            },
        ]
    );
    assert_eq!(store.history(1).await.unwrap().len(), 1, "limit is honoured");

    // A session's records, newest first, exactly as written.
    let records = store.session_records(&a, 10).await.unwrap();
    assert_eq!(
        records,
        [
            call(&a, "files__stat", Some("read my notes"), true, 4),
            call(&a, "files__write", None, false, 3),
            call(&a, "files__read", Some("read my notes"), false, 2),
            set,
        ]
    );
    assert_eq!(store.session_records(&key("other", "s1"), 10).await.unwrap(), []);

    // The usage retention removes the records of the whole months (UTC) before the cut's
    // month, of every session; the cut's month is kept whole. (The records above are of
    // September 2026.)
    assert_eq!(store.keep_usage(None).await.unwrap(), 0, "without a retention everything is kept");
    let since_at = |time: DateTime<Utc>| time.timestamp_millis() - at(0).timestamp_millis();
    let october_end = since_at(Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap()) - 1;
    let november = since_at(Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap());
    let c = key("acme", "s3");
    let kept = call(&c, "files__read", Some("in november"), false, november);
    store.record(&[call(&c, "files__read", Some("in october"), false, october_end), kept.clone()]).await.unwrap();
    let cut = Utc.with_ymd_and_hms(2026, 11, 20, 12, 0, 0).unwrap();
    assert_eq!(store.keep_usage(Some(cut)).await.unwrap(), 6, "September's five and October's last");
    assert_eq!(store.session_records(&c, 10).await.unwrap(), [kept]);
    assert_eq!(store.session_records(&a, 10).await.unwrap(), []);
    let history = store.history(10).await.unwrap();
    assert_eq!(history.iter().map(|pair| pair.context.as_str()).collect::<Vec<_>>(), ["in november (intent)"]);
    assert_eq!(store.keep_usage(Some(cut)).await.unwrap(), 0, "a second round finds nothing more");
}

/// The usage store as a record buffer's sink, as the gateway writes it.
struct UsageSink(Arc<PostgresUsageStore>);

#[async_trait::async_trait]
impl switchyard_kit::records::RecordSink<UsageRecord> for UsageSink {
    async fn write(&self, records: &[UsageRecord]) -> Result<(), switchyard_kit::store::StoreError> {
        self.0.record(records).await
    }
}

#[tokio::test]
async fn a_usage_record_postgres_refuses_is_set_aside_and_every_other_one_lands() {
    use switchyard_kit::records::{RecordBuffer, RecordBufferConfig};

    let (_schema, store) = postgres_usage().await;
    let store = Arc::new(store);
    let recorder = RecordBuffer::start(
        Arc::new(UsageSink(store.clone())),
        RecordBufferConfig { flush_interval: std::time::Duration::from_secs(3600), ..RecordBufferConfig::default() },
    );
    let (ann, bob) = (key("acme", "s-ann"), key("globex", "s-bob"));
    let set_context = |session: &SessionKey, query: &str, at: DateTime<Utc>| UsageRecord::SetContext {
        id: Uuid::new_v4(),
        key: session.clone(),
        query: query.to_owned(),
        intent: Some("refinance\0".to_owned()),
        at,
    };
    // A time before 4713 BC, which Postgres refuses whatever the text.
    let long_ago = Utc.with_ymd_and_hms(-5000, 1, 1, 0, 0, 0).single().unwrap();
    recorder.push_all(vec![
        set_context(&ann, "my mortgage \0", at(1)),
        set_context(&ann, "refused", long_ago),
        call(&ann, "calc__add", Some("sum \0 these"), false, 2),
        set_context(&bob, "contracts", at(3)),
    ]);
    let report = recorder.drain(std::time::Duration::from_secs(20)).await;
    assert_eq!((report.written, report.lost, recorder.set_aside()), (3, 0, 1));

    let ann_records = store.session_records(&ann, 10).await.unwrap();
    assert_eq!(ann_records.len(), 2, "{ann_records:?}");
    assert!(ann_records.iter().any(|r| matches!(r,
        UsageRecord::SetContext { query, intent, .. }
            if query == "my mortgage \u{FFFD}" && intent.as_deref() == Some("refinance\u{FFFD}"))));
    assert!(ann_records.iter().any(|r| matches!(r,
        UsageRecord::ToolCall { context_query, .. } if context_query.as_deref() == Some("sum \u{FFFD} these"))));
    assert_eq!(store.session_records(&bob, 10).await.unwrap().len(), 1);
}

#[tokio::test]
async fn memory_audit_store() {
    audit_suite(Arc::new(MemoryUsageStore::default())).await;
}

#[tokio::test]
async fn postgres_audit_store() {
    let (_schema, store) = postgres_usage().await;
    audit_suite(Arc::new(store)).await;
}

fn audit_record(tenant: &str, user: Option<&str>, tool: &str, outcome: Outcome, ms: i64) -> AuditRecord {
    AuditRecord {
        id: uuid::Uuid::new_v4(),
        at: at(ms),
        tenant: tenant.to_owned(),
        user: user.map(str::to_owned),
        role: Some("finance-expert".to_owned()),
        groups: vec!["contractors".to_owned(), "staff".to_owned()],
        session_id: Some("s1".to_owned()),
        server: tool.split("__").next().unwrap().to_owned(),
        tool: tool.to_owned(),
        arguments_sha256: "ab".repeat(32),
        arguments_bytes: 17,
        arguments: (outcome == Outcome::Ok).then(|| serde_json::json!({"q": "x", "password": "[redacted]"})),
        outcome,
        error: (outcome != Outcome::Ok).then(|| "went wrong".to_owned()),
        duration_ms: 9,
        policy: (outcome == Outcome::Denied).then(|| "contractors".to_owned()),
    }
}

async fn audit_suite(store: Arc<dyn UsageStore>) {
    let records = [
        audit_record("acme", Some("ada"), "fx__lookup", Outcome::Ok, 1),
        audit_record("acme", Some("bob"), "fx__secret", Outcome::Denied, 2),
        audit_record("acme", None, "fx__lookup", Outcome::ToolError, 3),
        audit_record("other", Some("ada"), "fx__lookup", Outcome::Ok, 4),
        // Two in the same millisecond: the page order falls back to the id.
        audit_record("acme", Some("ada"), "fx__lookup", Outcome::Ok, 5),
        audit_record("acme", Some("ada"), "fx__lookup", Outcome::Ok, 5),
    ];
    // With the usage records, as the gateway writes them.
    let mut batch: Vec<UsageRecord> = records.iter().cloned().map(|r| UsageRecord::Audit(Box::new(r))).collect();
    batch.push(call(&key("acme", "s1"), "fx__lookup", Some("q"), false, 1));
    store.record(&batch).await.unwrap();

    let acme = AuditQuery { tenant: Some("acme".into()), limit: 100, ..AuditQuery::default() };
    let all = store.audit(&acme).await.unwrap();
    assert_eq!(all.len(), 5, "acme's records only");
    assert!(all.windows(2).all(|w| (w[0].at, w[0].id) > (w[1].at, w[1].id)), "newest first");
    assert_eq!(all.last().unwrap(), &records[0], "every field read back as written");

    // Filters and the window.
    let query = |q: AuditQuery| {
        let store = store.clone();
        async move { store.audit(&q).await.unwrap() }
    };
    assert_eq!(query(AuditQuery { user: Some("ada".into()), ..acme.clone() }).await.len(), 3);
    let denied = query(AuditQuery { outcome: Some(Outcome::Denied), ..acme.clone() }).await;
    assert_eq!(denied, [records[1].clone()]);
    assert_eq!(query(AuditQuery { tool: Some("fx__secret".into()), ..acme.clone() }).await.len(), 1);
    assert_eq!(query(AuditQuery { from: Some(at(2)), to: Some(at(5)), ..acme.clone() }).await.len(), 2);
    assert_eq!(query(AuditQuery { tenant: None, limit: 100, ..AuditQuery::default() }).await.len(), 6);

    // Pages of two, by cursor, cover everything once.
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = query(AuditQuery { limit: 2, after, ..acme.clone() }).await;
        seen.extend(page.iter().map(|r| r.id));
        if page.len() < 2 {
            break;
        }
        after = page.last().map(Cursor::of);
    }
    assert_eq!(seen, all.iter().map(|r| r.id).collect::<Vec<_>>());

    // Retention: older records pruned, newer kept; the usage records are not audit records.
    assert_eq!(store.prune_audit(at(3)).await.unwrap(), 2);
    assert_eq!(store.audit(&acme).await.unwrap().len(), 3);
    assert_eq!(store.history(10).await.unwrap().len(), 1);
}
