//! One behavioural suite for `LiveStore`, run against the in-memory store, the real Redis and
//! the real three-primary Redis Cluster (`REDIS_CLUSTER_URL`).
// clippy.toml lets tests unwrap, but it does not see the suite's helper functions as tests.
#![allow(clippy::unwrap_used, reason = "a panic in a test is the failure report")]

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use switchyard_sessions::{
    domain::{LiveSession, Message, MessageRole, RoleId, SessionId, SessionKey, SessionStatus, TenantId, UserId},
    store::{
        AppendOutcome, LiveStore, StoreError, TurnOutcome, TurnUpdate, memory::MemoryLiveStore, redis::RedisLiveStore,
    },
};
use switchyard_testkit::{
    KeyPrefix, eventually,
    proxy::TcpProxy,
    redis::{redis_addr, redis_cluster_url, redis_url, redis_url_via},
};
use tokio::time::{Instant, sleep_until};

const TENANT: &str = "acme";
const START_ROLE: &str = "generalist";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_live_store() {
    live_store_suite(Arc::new(MemoryLiveStore::default())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_live_store() {
    let prefix = KeyPrefix::new("t");
    let url = redis_url();
    let store = RedisLiveStore::connect(&url.as_str().into(), &prefix)
        .await
        .unwrap_or_else(|err| panic!("connecting to redis at {url} (set REDIS_URL): {err}"));
    store.ping().await.expect("ping redis");
    let store = Arc::new(store);
    live_store_suite(store.clone()).await;
    malformed_hashes_are_corrupt(store, &url, &prefix).await;
}

/// The same suite on the Redis Cluster: a session's two keys share one hash tag, so every
/// script runs in one slot. Its keys expire with the suite's sessions (no cleanup by SCAN).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_cluster_live_store() {
    let prefix = switchyard_testkit::unique("t");
    let url = redis_cluster_url();
    let store = RedisLiveStore::connect(&url.as_str().into(), &prefix)
        .await
        .unwrap_or_else(|err| panic!("connecting to the redis cluster at {url} (REDIS_CLUSTER_URL): {err}"));
    store.ping().await.expect("ping the redis cluster");
    live_store_suite(Arc::new(store)).await;
}

async fn live_store_suite(store: Arc<dyn LiveStore>) {
    // The TTL checks sleep, so they run alongside everything else.
    let ttl = tokio::spawn(sessions_expire(store.clone()));
    round_trip(&*store).await;
    create_and_restore_never_overwrite(&*store).await;
    another_tenant_misses(&*store).await;
    turns_and_switches(&*store).await;
    stale_updates_conflict(&*store).await;
    closed_sessions_refuse_updates(&*store).await;
    messages_are_numbered_and_windowed(&*store).await;
    a_named_batch_is_appended_once(&*store).await;
    concurrent_turns_never_interleave(store.clone()).await;
    ttl.await.expect("ttl checks");
}

// ---- helpers ----

fn role(id: &str) -> RoleId {
    RoleId::parse(id).unwrap()
}

fn new_key(tenant: &str) -> SessionKey {
    SessionKey { tenant: TenantId::parse(tenant).unwrap(), id: SessionId::generate() }
}

/// Now, at the millisecond precision stores keep.
fn now_ms() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap()
}

fn message(seq: u64, content: &str) -> Message {
    Message {
        seq,
        role: MessageRole::User,
        content: content.to_owned(),
        role_id: START_ROLE.to_owned(),
        created_at_ms: 1_700_000_000_000 + seq as i64,
        append_id: String::new(),
    }
}

fn new_session(ttl: Duration) -> LiveSession {
    let now = now_ms();
    LiveSession {
        key: new_key(TENANT),
        owner: Some(UserId::parse("ann@acme.io").unwrap()),
        role_id: role(START_ROLE),
        status: SessionStatus::Active,
        turn_count: 0,
        switch_count: 0,
        message_count: 0,
        created_at: now,
        updated_at: now,
        ttl,
        metadata: BTreeMap::new(),
        recent: Vec::new(),
    }
}

async fn created(store: &dyn LiveStore) -> LiveSession {
    let session = new_session(Duration::from_secs(300));
    assert!(store.create(&session).await.unwrap());
    session
}

fn turn(session: &LiveSession, new_role: Option<&str>, count_turn: bool) -> TurnUpdate {
    TurnUpdate {
        expected_role: session.role_id.clone(),
        expected_switch_count: session.switch_count,
        new_role: new_role.map(role),
        count_turn,
        now: now_ms(),
    }
}

async fn load(store: &dyn LiveStore, key: &SessionKey) -> LiveSession {
    store.load(key).await.unwrap().expect("session is live")
}

fn applied(outcome: TurnOutcome) -> LiveSession {
    match outcome {
        TurnOutcome::Applied(session) => session,
        other => panic!("expected Applied, got {other:?}"),
    }
}

// ---- cases ----

async fn round_trip(store: &dyn LiveStore) {
    let created_at = DateTime::from_timestamp_millis(1_700_000_000_123).unwrap();
    let session = LiveSession {
        key: new_key(TENANT),
        owner: Some(UserId::parse("bob@acme.io").unwrap()),
        role_id: role("finance-expert"),
        status: SessionStatus::Active,
        turn_count: 3,
        switch_count: 1,
        message_count: 7,
        created_at,
        updated_at: now_ms(),
        ttl: Duration::from_secs(300),
        metadata: BTreeMap::from([
            ("channel".to_owned(), "web".to_owned()),
            ("note".to_owned(), "quotes \" and braces {} and ünïcode".to_owned()),
        ]),
        recent: vec![message(6, "six"), message(7, "seven")],
    };
    assert!(store.create(&session).await.unwrap());
    assert_eq!(store.load(&session.key).await.unwrap(), Some(session.clone()), "the owner too");
    // A session made by a caller without a user has no owner, and reads back so.
    let tenants = LiveSession { key: new_key(TENANT), owner: None, ..session.clone() };
    assert!(store.create(&tenants).await.unwrap());
    assert_eq!(store.load(&tenants.key).await.unwrap(), Some(tenants));
    // Reading twice changes nothing.
    assert_eq!(store.load(&session.key).await.unwrap(), Some(session));
}

async fn create_and_restore_never_overwrite(store: &dyn LiveStore) {
    let session = created(store).await;
    let other = LiveSession { role_id: role("legal-expert"), turn_count: 9, ..session.clone() };
    assert!(!store.create(&other).await.unwrap(), "create twice");
    assert!(!store.restore(&other).await.unwrap(), "restore onto a live copy");
    assert_eq!(load(store, &session.key).await, session);

    let rebuilt = LiveSession { key: new_key(TENANT), message_count: 40, recent: vec![message(40, "last")], ..session };
    assert!(store.restore(&rebuilt).await.unwrap());
    assert_eq!(load(store, &rebuilt.key).await, rebuilt);
}

async fn another_tenant_misses(store: &dyn LiveStore) {
    let session = created(store).await;
    let foreign = SessionKey { tenant: TenantId::parse("other-tenant").unwrap(), id: session.key.id.clone() };
    assert_eq!(store.load(&foreign).await.unwrap(), None);
    assert_eq!(store.apply_turn(&foreign, &turn(&session, None, true)).await.unwrap(), TurnOutcome::Missing);
    let outcome = store.append_messages(&foreign, &[message(0, "x")], 20, now_ms()).await.unwrap();
    assert_eq!(outcome, AppendOutcome::Missing);
    assert_eq!(store.close(&foreign, now_ms()).await.unwrap(), None);
    assert_eq!(load(store, &session.key).await, session, "the owner's session is untouched");
}

async fn turns_and_switches(store: &dyn LiveStore) {
    let session = created(store).await;
    store.append_messages(&session.key, &[message(0, "hello")], 20, session.updated_at).await.unwrap();
    let before = load(store, &session.key).await;

    let update = turn(&before, None, true);
    let after = applied(store.apply_turn(&session.key, &update).await.unwrap());
    let expected = LiveSession { turn_count: 1, updated_at: update.now, recent: Vec::new(), ..before.clone() };
    assert_eq!(after, expected, "a counted turn");
    assert_eq!(load(store, &session.key).await, LiveSession { recent: before.recent.clone(), ..expected });

    let update = turn(&after, Some("finance-expert"), false);
    let switched = applied(store.apply_turn(&session.key, &update).await.unwrap());
    let expected = LiveSession {
        role_id: role("finance-expert"),
        switch_count: 1,
        turn_count: 1,
        updated_at: update.now,
        ..after.clone()
    };
    assert_eq!(switched, expected, "a manual switch");
    assert_eq!(load(store, &session.key).await, LiveSession { recent: before.recent, ..expected });
}

async fn stale_updates_conflict(store: &dyn LiveStore) {
    let session = created(store).await;
    let switched = applied(store.apply_turn(&session.key, &turn(&session, Some("legal-expert"), true)).await.unwrap());

    let stale_role = TurnUpdate { expected_switch_count: switched.switch_count, ..turn(&session, None, true) };
    assert_eq!(store.apply_turn(&session.key, &stale_role).await.unwrap(), TurnOutcome::Conflict);
    let stale_count = TurnUpdate { expected_switch_count: 0, ..turn(&switched, Some("finance-expert"), true) };
    assert_eq!(store.apply_turn(&session.key, &stale_count).await.unwrap(), TurnOutcome::Conflict);
    assert_eq!(load(store, &session.key).await, switched, "conflicts change nothing");
}

async fn closed_sessions_refuse_updates(store: &dyn LiveStore) {
    let session = created(store).await;
    store.append_messages(&session.key, &[message(0, "bye")], 20, session.updated_at).await.unwrap();
    let open = load(store, &session.key).await;

    let closed_at = DateTime::from_timestamp_millis(open.updated_at.timestamp_millis() + 1000).unwrap();
    let closed = store.close(&session.key, closed_at).await.unwrap().expect("close a live session");
    assert_eq!(closed, LiveSession { status: SessionStatus::Closed, updated_at: closed_at, ..open });
    assert_eq!(load(store, &session.key).await, closed);

    assert_eq!(store.apply_turn(&session.key, &turn(&closed, None, true)).await.unwrap(), TurnOutcome::Closed);
    let switch = turn(&closed, Some("finance-expert"), false);
    assert_eq!(store.apply_turn(&session.key, &switch).await.unwrap(), TurnOutcome::Closed);
    let append = store.append_messages(&session.key, &[message(0, "late")], 20, now_ms()).await.unwrap();
    assert_eq!(append, AppendOutcome::Closed);
    assert_eq!(load(store, &session.key).await, closed, "a closed session does not change");

    let later = DateTime::from_timestamp_millis(closed_at.timestamp_millis() + 5000).unwrap();
    assert_eq!(store.close(&session.key, later).await.unwrap(), Some(closed.clone()), "closing is idempotent");
    assert_eq!(load(store, &session.key).await, closed);
    assert_eq!(store.close(&new_key(TENANT), now_ms()).await.unwrap(), None);
}

async fn messages_are_numbered_and_windowed(store: &dyn LiveStore) {
    let session = created(store).await;
    let key = &session.key;
    // The seq passed in is ignored.
    let first = [message(99, "one"), message(99, "two"), message(99, "three")];
    let now = now_ms();
    let AppendOutcome::Applied { messages, message_count } = store.append_messages(key, &first, 20, now).await.unwrap()
    else {
        panic!("append to a live session")
    };
    assert_eq!(message_count, 3);
    let expected: Vec<Message> =
        first.iter().zip(1..).map(|(message, seq)| Message { seq, ..message.clone() }).collect();
    assert_eq!(messages, expected);

    let second = [message(0, "four"), message(0, "five")];
    let AppendOutcome::Applied { messages, message_count } =
        store.append_messages(key, &second, 20, now).await.unwrap()
    else {
        panic!("append to a live session")
    };
    assert_eq!((message_count, messages.iter().map(|m| m.seq).collect::<Vec<_>>()), (5, vec![4, 5]));
    let loaded = load(store, key).await;
    assert_eq!(loaded.recent.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5]);
    assert_eq!(loaded.recent[..3], expected[..]);
    assert_eq!((loaded.message_count, loaded.updated_at), (5, now));

    // Window trimming: 25 messages with a window of 20 keep the newest 20.
    let windowed = created(store).await;
    let batch: Vec<Message> = (1..=25).map(|n| message(0, &format!("message {n}"))).collect();
    let outcome = store.append_messages(&windowed.key, &batch, 20, now_ms()).await.unwrap();
    let AppendOutcome::Applied { messages, message_count } = outcome else { panic!("append to a live session") };
    assert_eq!((messages.len(), message_count), (25, 25), "every message is returned as stored");
    let loaded = load(store, &windowed.key).await;
    assert_eq!(loaded.message_count, 25);
    assert_eq!(loaded.recent, messages[5..], "the newest 20, oldest first");
    assert_eq!(loaded.recent[0].content, "message 6");
    // Another append keeps the window sliding and numbering continuing.
    let outcome = store.append_messages(&windowed.key, &[message(0, "26")], 20, now_ms()).await.unwrap();
    assert!(matches!(outcome, AppendOutcome::Applied { message_count: 26, .. }), "{outcome:?}");
    let loaded = load(store, &windowed.key).await;
    assert_eq!(loaded.recent.iter().map(|m| m.seq).collect::<Vec<_>>(), (7..=26).collect::<Vec<_>>());
}

/// A batch retried under its `append_id` (its first reply lost) is appended once, while it is
/// in the window; other ids, and batches without one, append as usual. A restored session
/// (rebuilt from the record) knows the ids its recent messages carry.
async fn a_named_batch_is_appended_once(store: &dyn LiveStore) {
    let session = created(store).await;
    let key = &session.key;
    let named = |id: &str, content: &str| Message { append_id: id.to_owned(), ..message(0, content) };
    let turn = [named("resp-1", "question"), named("resp-1", "answer")];
    let first = store.append_messages(key, &turn, 4, now_ms()).await.unwrap();
    assert!(matches!(first, AppendOutcome::Applied { message_count: 2, .. }), "{first:?}");
    let again = store.append_messages(key, &turn, 4, now_ms()).await.unwrap();
    assert_eq!(again, AppendOutcome::Repeated { message_count: 2 });
    let loaded = load(store, key).await;
    assert_eq!(loaded.recent.iter().map(|m| m.content.as_str()).collect::<Vec<_>>(), ["question", "answer"]);
    assert!(loaded.recent.iter().all(|m| m.append_id == "resp-1"), "the id is kept with the messages");

    // A prefix of another id, and an unnamed batch twice, are new batches.
    let other = store.append_messages(key, &[named("resp-", "more")], 4, now_ms()).await.unwrap();
    assert!(matches!(other, AppendOutcome::Applied { message_count: 3, .. }), "{other:?}");
    for count in [4, 5, 6] {
        let unnamed = store.append_messages(key, &[message(0, "same")], 4, now_ms()).await.unwrap();
        assert!(matches!(unnamed, AppendOutcome::Applied { message_count, .. } if message_count == count));
    }
    // Once out of the window (4 messages) the id is forgotten.
    let late = store.append_messages(key, &turn, 4, now_ms()).await.unwrap();
    assert!(matches!(late, AppendOutcome::Applied { message_count: 8, .. }), "{late:?}");

    // Rebuilt from the record with its recent messages, a session still knows their ids.
    let restored = LiveSession {
        message_count: 2,
        recent: vec![Message { seq: 1, ..named("resp-9", "q") }, Message { seq: 2, ..named("resp-9", "a") }],
        ..new_session(Duration::from_secs(60))
    };
    assert!(store.restore(&restored).await.unwrap());
    let retried = store.append_messages(&restored.key, &restored.recent, 20, now_ms()).await.unwrap();
    assert_eq!(retried, AppendOutcome::Repeated { message_count: 2 });
}

/// A 1 s session is gone after ~2.2 s; a 2 s session with a turn at 1.2 s is still there.
async fn sessions_expire(store: Arc<dyn LiveStore>) {
    let start = Instant::now();
    let short = new_session(Duration::from_secs(1));
    let extended = new_session(Duration::from_secs(2));
    assert!(store.create(&short).await.unwrap());
    assert!(store.create(&extended).await.unwrap());
    assert_eq!(load(&*store, &short.key).await.ttl, Duration::from_secs(1));

    sleep_until(start + Duration::from_millis(1200)).await;
    applied(store.apply_turn(&extended.key, &turn(&extended, None, true)).await.unwrap());

    sleep_until(start + Duration::from_millis(2200)).await;
    assert_eq!(store.load(&short.key).await.unwrap(), None, "expired");
    assert_eq!(store.apply_turn(&short.key, &turn(&short, None, true)).await.unwrap(), TurnOutcome::Missing);
    let append = store.append_messages(&short.key, &[message(0, "x")], 20, now_ms()).await.unwrap();
    assert_eq!(append, AppendOutcome::Missing);
    assert_eq!(store.close(&short.key, now_ms()).await.unwrap(), None);
    // Restoring after expiry works like creating.
    assert!(store.restore(&short).await.unwrap());
    assert_eq!(load(&*store, &extended.key).await.turn_count, 1, "the turn extended the ttl");
}

/// 50 tasks each read, then apply a turn (every 10th also switching role), retrying on
/// conflict: every turn counts exactly once and switches apply in order.
async fn concurrent_turns_never_interleave(store: Arc<dyn LiveStore>) {
    let session = created(&*store).await;
    let tasks: Vec<_> = (0..50)
        .map(|task| {
            let store = store.clone();
            let key = session.key.clone();
            tokio::spawn(async move {
                let new_role = (task % 10 == 0).then(|| role(&format!("expert-{task}")));
                for _ in 0..10_000 {
                    let current = load(&*store, &key).await;
                    let update = TurnUpdate {
                        expected_role: current.role_id,
                        expected_switch_count: current.switch_count,
                        new_role: new_role.clone(),
                        count_turn: true,
                        now: now_ms(),
                    };
                    match store.apply_turn(&key, &update).await.unwrap() {
                        TurnOutcome::Applied(after) => return (new_role, after),
                        TurnOutcome::Conflict => tokio::task::yield_now().await,
                        other => panic!("task {task}: {other:?}"),
                    }
                }
                panic!("task {task} never applied")
            })
        })
        .collect();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.expect("task"));
    }

    let mut turn_counts: Vec<u64> = results.iter().map(|(_, after)| after.turn_count).collect();
    turn_counts.sort_unstable();
    assert_eq!(turn_counts, (1..=50).collect::<Vec<_>>(), "each turn applied on its own");

    let mut switches: Vec<(u64, RoleId)> = results
        .iter()
        .filter_map(|(new_role, after)| new_role.as_ref().map(|_| (after.switch_count, after.role_id.clone())))
        .collect();
    switches.sort();
    assert_eq!(switches.iter().map(|(count, _)| *count).collect::<Vec<_>>(), (1..=5).collect::<Vec<_>>());

    let last = load(&*store, &session.key).await;
    assert_eq!(last.turn_count, 50);
    assert_eq!(last.switch_count, switches.len() as u64);
    assert_eq!(Some(&last.role_id), switches.last().map(|(_, role)| role), "the last applied switch wins");
}

/// Redis only: while Redis is unreachable calls fail promptly (never hang), and once it is back
/// the store reconnects by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_fails_fast_and_recovers() {
    let proxy = TcpProxy::start(redis_addr()).await;
    let proxied_url = redis_url_via(proxy.addr());

    let prefix = KeyPrefix::new("t");
    let store = RedisLiveStore::connect(&proxied_url.as_str().into(), &prefix)
        .await
        .expect("connect to redis through the proxy");
    let session = created(&store).await;

    proxy.cut();
    // Each call fails within the 2 s command timeout (plus slack), however the manager retries.
    let started = Instant::now();
    assert!(store.load(&session.key).await.is_err(), "redis is unreachable");
    assert!(started.elapsed() < Duration::from_secs(3), "load failed after {:?}", started.elapsed());
    let started = Instant::now();
    assert!(store.apply_turn(&session.key, &turn(&session, None, true)).await.is_err());
    assert!(started.elapsed() < Duration::from_secs(3), "apply_turn failed after {:?}", started.elapsed());

    proxy.restore();
    let recovered =
        eventually(Duration::from_secs(10), "the store reconnected", || async { store.load(&session.key).await }).await;
    assert_eq!(recovered, Some(session));
}

/// Redis only: a hash someone else mangled is reported as corrupt, with its key.
async fn malformed_hashes_are_corrupt(store: Arc<RedisLiveStore>, url: &str, prefix: &str) {
    let key = new_key(TENANT);
    let hash_key = format!("{prefix}:{{{}:{}}}:s", key.tenant, key.id);
    let mut conn = redis_conn(url).await;
    let _: () = redis::cmd("HSET")
        .arg(&hash_key)
        .arg(&["role", "Not A Role", "status", "active", "turns", "x"])
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("EXPIRE").arg(&hash_key).arg(300).query_async(&mut conn).await.unwrap();
    let is_corrupt = |err: &StoreError| matches!(err, StoreError::Corrupt(text) if text.contains(&hash_key));
    let err = store.load(&key).await.unwrap_err();
    assert!(is_corrupt(&err), "{err}");
    let update = TurnUpdate {
        expected_role: role(START_ROLE),
        expected_switch_count: 0,
        new_role: None,
        count_turn: true,
        now: now_ms(),
    };
    let err = store.apply_turn(&key, &update).await.unwrap_err();
    assert!(is_corrupt(&err), "{err}");
    let err = store.append_messages(&key, &[message(0, "x")], 20, now_ms()).await.unwrap_err();
    assert!(is_corrupt(&err), "{err}");
}

async fn redis_conn(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url).expect("redis url");
    client.get_multiplexed_async_connection().await.expect("connect to redis")
}
