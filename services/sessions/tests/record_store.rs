//! One behavioural suite for every `RecordStore` (memory and Postgres), and an outage of
//! Postgres through the test kit's proxy that cuts connections.
#![allow(clippy::unwrap_used, reason = "a panic in a test is the failure report")]

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::{DateTime, TimeDelta, Utc};
use switchyard_sessions::{
    domain::{
        LiveSession, Message, MessageRole, RoleId, SessionId, SessionKey, SessionStatus, SwitchEvent, SwitchReason,
        TenantId, UserId,
    },
    store::{Record, RecordStore, StoreError, memory::MemoryRecordStore, postgres::PostgresStore},
};
use switchyard_testkit::{
    Schema, database_url, eventually,
    postgres::{database_addr, database_url_via},
    proxy::TcpProxy,
};
use tokio::time::timeout;

/// A time Postgres stores exactly (microsecond precision), `secs` after a fixed instant.
fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(1_700_000_000_123_456).unwrap() + TimeDelta::seconds(secs)
}

fn key(tenant: &str, id: &str) -> SessionKey {
    SessionKey { tenant: TenantId::parse(tenant).unwrap(), id: SessionId::parse(id).unwrap() }
}

fn role(id: &str) -> RoleId {
    RoleId::parse(id).unwrap()
}

fn session(key: &SessionKey) -> LiveSession {
    LiveSession {
        key: key.clone(),
        owner: Some(UserId::parse("ann@acme.io").unwrap()),
        role_id: role("general"),
        status: SessionStatus::Active,
        turn_count: 0,
        switch_count: 0,
        message_count: 0,
        created_at: at(0),
        updated_at: at(0),
        ttl: Duration::from_secs(3600),
        metadata: BTreeMap::from([("channel".to_owned(), "web".to_owned()), ("locale".to_owned(), "en".to_owned())]),
        recent: Vec::new(),
    }
}

fn switch(sequence: u64, from: &str, to: &str) -> SwitchEvent {
    SwitchEvent {
        sequence,
        from_role_id: role(from),
        to_role_id: role(to),
        reason: SwitchReason::Triggered,
        reason_detail: format!("matched {to}"),
        from_score: 3,
        to_score: 9,
        query_excerpt: "what does the contract say about…".to_owned(),
        occurred_at: at(100 + i64::try_from(sequence).unwrap()),
    }
}

fn message(seq: u64) -> Message {
    Message {
        seq,
        role: if seq % 2 == 1 { MessageRole::User } else { MessageRole::Assistant },
        content: format!("message {seq}"),
        role_id: "general".to_owned(),
        created_at_ms: at(200 + i64::try_from(seq).unwrap()).timestamp_millis(),
        // Named and unnamed batches both load back as written.
        append_id: if seq >= 3 { format!("resp-{seq}") } else { String::new() },
    }
}

fn appended(key: &SessionKey, seqs: std::ops::RangeInclusive<u64>) -> Record {
    Record::MessagesAppended { key: key.clone(), messages: seqs.map(message).collect() }
}

fn switched(key: &SessionKey, event: SwitchEvent, turn_count: u64) -> Record {
    Record::Switched { key: key.clone(), event, turn_count }
}

async fn load(store: &dyn RecordStore, key: &SessionKey, recent: usize) -> LiveSession {
    store.load_session(key, recent).await.unwrap().unwrap_or_else(|| panic!("session {} not found", key.id))
}

fn seqs(messages: &[Message]) -> Vec<u64> {
    messages.iter().map(|message| message.seq).collect()
}

async fn record_store_behaves(store: Arc<dyn RecordStore>) {
    let store = &*store;
    store.ping().await.unwrap();
    created_sessions_load_back(store).await;
    records_update_the_session(store).await;
    writing_twice_stores_once(store).await;
    replayed_switches_never_move_the_role_back(store).await;
    history_pages(store).await;
    records_of_a_missing_session_keep_what_they_can(store).await;
    a_failing_batch_stores_nothing(store).await;
}

async fn created_sessions_load_back(store: &dyn RecordStore) {
    let key = key("acme", "s-created");
    let created = session(&key);
    // `recent` is not part of the record.
    let with_recent = LiveSession { recent: vec![message(1)], ..created.clone() };
    store.write(&[Record::SessionCreated(with_recent)]).await.unwrap();

    assert_eq!(store.load_session(&key, 20).await.unwrap(), Some(created), "its owner too");
    // A session made by a caller without a user has no owner, and rebuilds so.
    let tenants = LiveSession { owner: None, ..session(&self::key("acme", "s-tenants")) };
    store.write(&[Record::SessionCreated(tenants.clone())]).await.unwrap();
    assert_eq!(store.load_session(&tenants.key, 20).await.unwrap(), Some(tenants));
    let other_tenant = SessionKey { tenant: TenantId::parse("globex").unwrap(), ..key.clone() };
    assert_eq!(store.load_session(&other_tenant, 20).await.unwrap(), None);
    assert_eq!(store.load_session(&self::key("acme", "s-unknown"), 20).await.unwrap(), None);
    store.write(&[switched(&key, switch(1, "general", "finance"), 1)]).await.unwrap();
    assert!(store.history(&other_tenant, 0, 10).await.unwrap().is_empty());
    assert_eq!(store.history(&key, 0, 10).await.unwrap().len(), 1);
    store.write(&[]).await.unwrap();
}

async fn records_update_the_session(store: &dyn RecordStore) {
    let key = key("acme", "s-updates");
    store.write(&[Record::SessionCreated(session(&key))]).await.unwrap();

    store.write(&[Record::Turns { key: key.clone(), turn_count: 3, at: at(10) }]).await.unwrap();
    let loaded = load(store, &key, 0).await;
    assert_eq!((loaded.turn_count, loaded.updated_at), (3, at(10)));
    // Only the latest count matters; an older one changes nothing.
    store.write(&[Record::Turns { key: key.clone(), turn_count: 2, at: at(5) }]).await.unwrap();
    let loaded = load(store, &key, 0).await;
    assert_eq!((loaded.turn_count, loaded.updated_at), (3, at(10)));

    let event = switch(1, "general", "finance");
    store.write(&[switched(&key, event.clone(), 4)]).await.unwrap();
    let loaded = load(store, &key, 0).await;
    assert_eq!(loaded.role_id, role("finance"));
    assert_eq!((loaded.switch_count, loaded.turn_count, loaded.updated_at), (1, 4, event.occurred_at));
    assert_eq!(store.history(&key, 0, 10).await.unwrap(), vec![event]);

    store.write(&[appended(&key, 1..=2), appended(&key, 3..=5)]).await.unwrap();
    let loaded = load(store, &key, 3).await;
    assert_eq!(loaded.message_count, 5);
    assert_eq!(loaded.recent, (3..=5).map(message).collect::<Vec<_>>(), "the newest 3, oldest first");
    assert_eq!(loaded.updated_at, DateTime::from_timestamp_millis(message(5).created_at_ms).unwrap());
    assert!(load(store, &key, 0).await.recent.is_empty());
    assert_eq!(seqs(&load(store, &key, 100).await.recent), vec![1, 2, 3, 4, 5]);

    store.write(&[Record::Closed { key: key.clone(), at: at(300) }]).await.unwrap();
    let closed = load(store, &key, 0).await;
    assert_eq!((closed.status, closed.updated_at), (SessionStatus::Closed, at(300)));
    // Untouched by anything above.
    let created = session(&key);
    assert_eq!((closed.created_at, closed.ttl, closed.metadata), (created.created_at, created.ttl, created.metadata));
}

async fn writing_twice_stores_once(store: &dyn RecordStore) {
    let key = key("acme", "s-twice");
    let batch = [
        Record::SessionCreated(session(&key)),
        Record::Turns { key: key.clone(), turn_count: 1, at: at(10) },
        switched(&key, switch(1, "general", "finance"), 2),
        appended(&key, 1..=2),
        switched(&key, switch(2, "finance", "legal"), 3),
        appended(&key, 3..=3),
        Record::Closed { key: key.clone(), at: at(400) },
    ];
    store.write(&batch).await.unwrap();
    let first = load(store, &key, 10).await;
    let first_history = store.history(&key, 0, 100).await.unwrap();
    assert_eq!(first.role_id, role("legal"));
    assert_eq!((first.turn_count, first.switch_count, first.message_count), (3, 2, 3));
    assert_eq!(first.status, SessionStatus::Closed);
    assert_eq!(seqs(&first.recent), vec![1, 2, 3]);
    assert_eq!(first_history.len(), 2);

    store.write(&batch).await.unwrap();
    assert_eq!(load(store, &key, 10).await, first);
    assert_eq!(store.history(&key, 0, 100).await.unwrap(), first_history);
}

async fn replayed_switches_never_move_the_role_back(store: &dyn RecordStore) {
    let key = key("acme", "s-replayed");
    let first = switch(1, "general", "finance");
    let second = switch(2, "finance", "legal");
    store
        .write(&[
            Record::SessionCreated(session(&key)),
            switched(&key, first.clone(), 1),
            switched(&key, second.clone(), 2),
        ])
        .await
        .unwrap();

    store.write(&[switched(&key, first.clone(), 1)]).await.unwrap();
    // Another switch claiming an existing sequence does not replace the recorded one either.
    store.write(&[switched(&key, switch(1, "general", "medical"), 1)]).await.unwrap();
    let loaded = load(store, &key, 0).await;
    assert_eq!((loaded.role_id, loaded.switch_count, loaded.turn_count), (role("legal"), 2, 2));
    assert_eq!(store.history(&key, 0, 10).await.unwrap(), vec![first, second]);

    // Arriving out of order: the newer switch wins whatever the order.
    let other = self::key("acme", "s-reordered");
    store
        .write(&[
            Record::SessionCreated(session(&other)),
            switched(&other, switch(2, "finance", "legal"), 2),
            switched(&other, switch(1, "general", "finance"), 1),
        ])
        .await
        .unwrap();
    let loaded = load(store, &other, 0).await;
    assert_eq!((loaded.role_id, loaded.switch_count), (role("legal"), 2));
    assert_eq!(store.history(&other, 0, 10).await.unwrap().iter().map(|e| e.sequence).collect::<Vec<_>>(), [1, 2]);
}

async fn page(store: &dyn RecordStore, key: &SessionKey, after: u64, limit: u32) -> Vec<u64> {
    store.history(key, after, limit).await.unwrap().iter().map(|event| event.sequence).collect()
}

async fn history_pages(store: &dyn RecordStore) {
    let key = key("acme", "s-history");
    let roles = ["general", "finance", "legal", "medical", "finance", "legal"];
    let events: Vec<SwitchEvent> =
        (1..=5).map(|sequence| switch(sequence, roles[sequence as usize - 1], roles[sequence as usize])).collect();
    let mut batch = vec![Record::SessionCreated(session(&key))];
    batch.extend(events.iter().map(|event| switched(&key, event.clone(), event.sequence)));
    store.write(&batch).await.unwrap();

    assert_eq!(page(store, &key, 0, 2).await, [1, 2]);
    assert_eq!(page(store, &key, 2, 2).await, [3, 4]);
    assert_eq!(page(store, &key, 4, 2).await, [5]);
    assert!(page(store, &key, 5, 2).await.is_empty());
    assert!(page(store, &key, 0, 0).await.is_empty());
    assert!(page(store, &key, u64::MAX, 10).await.is_empty());
    assert_eq!(store.history(&key, 0, 100).await.unwrap(), events, "every field round-trips");
    assert_eq!(load(store, &key, 0).await.role_id, role("legal"));
}

async fn records_of_a_missing_session_keep_what_they_can(store: &dyn RecordStore) {
    // Its SessionCreated was lost; the batch still succeeds, and other sessions in it are written.
    let ghost = key("acme", "s-ghost");
    let present = key("acme", "s-present");
    let event = switch(1, "general", "finance");
    store
        .write(&[
            Record::Turns { key: ghost.clone(), turn_count: 2, at: at(10) },
            switched(&ghost, event.clone(), 2),
            appended(&ghost, 1..=2),
            Record::Closed { key: ghost.clone(), at: at(20) },
            Record::SessionCreated(session(&present)),
        ])
        .await
        .unwrap();
    assert_eq!(store.load_session(&ghost, 10).await.unwrap(), None);
    assert_eq!(store.history(&ghost, 0, 10).await.unwrap(), vec![event]);
    assert_eq!(load(store, &present, 10).await, session(&present));

    // The kept messages are there once the session row appears.
    store.write(&[Record::SessionCreated(session(&ghost))]).await.unwrap();
    assert_eq!(seqs(&load(store, &ghost, 10).await.recent), vec![1, 2]);
}

async fn a_failing_batch_stores_nothing(store: &dyn RecordStore) {
    let key = key("acme", "s-atomic");
    let result = store
        .write(&[
            Record::SessionCreated(session(&key)),
            // Out of the range the record can hold.
            Record::Turns { key: key.clone(), turn_count: u64::MAX, at: at(10) },
        ])
        .await;
    assert!(result.is_err(), "{result:?}");
    assert_eq!(store.load_session(&key, 10).await.unwrap(), None);
}

#[tokio::test]
async fn memory_record_store() {
    record_store_behaves(Arc::new(MemoryRecordStore::default())).await;
}

#[tokio::test]
async fn postgres_record_store() {
    let schema = Schema::new("t");
    let store = PostgresStore::connect(&database_url(), &schema)
        .await
        .expect("connect to postgres at DATABASE_URL (is it running?)");
    record_store_behaves(Arc::new(store)).await;
}

#[tokio::test]
async fn memory_record_store_simulates_an_outage() {
    let store = MemoryRecordStore::default();
    let key = key("acme", "s-outage");
    store.write(&[Record::SessionCreated(session(&key))]).await.unwrap();

    store.set_available(false);
    let turns = [Record::Turns { key: key.clone(), turn_count: 1, at: at(10) }];
    assert!(matches!(store.write(&turns).await, Err(StoreError::Timeout)));
    assert!(matches!(store.load_session(&key, 10).await, Err(StoreError::Timeout)));
    assert!(matches!(store.history(&key, 0, 10).await, Err(StoreError::Timeout)));
    assert!(matches!(store.ping().await, Err(StoreError::Timeout)));

    store.set_available(true);
    assert_eq!(load(&store, &key, 10).await.turn_count, 0, "nothing was written during the outage");
    store.write(&turns).await.unwrap();
    assert_eq!(load(&store, &key, 10).await.turn_count, 1);
}

#[tokio::test]
async fn postgres_writes_fail_fast_during_an_outage_and_recover() {
    let schema = Schema::new("t");
    let proxy = TcpProxy::start(database_addr()).await;
    let store = PostgresStore::connect(&database_url_via(proxy.addr()), &schema)
        .await
        .expect("connect to postgres at DATABASE_URL through the proxy (is it running?)");
    let key = key("acme", "s-outage");
    store.write(&[Record::SessionCreated(session(&key))]).await.unwrap();

    proxy.cut();
    let turns = |turn_count| [Record::Turns { key: key.clone(), turn_count, at: at(10) }];
    // The first write finds a pooled connection that was cut; later ones must open a new one,
    // which the proxy refuses: both fail promptly.
    for attempt in 1..=3 {
        let started = Instant::now();
        let during =
            timeout(Duration::from_secs(10), store.write(&turns(1))).await.expect("a write during the outage hung");
        assert!(during.is_err(), "write {attempt} during the outage succeeded");
        assert!(started.elapsed() < Duration::from_secs(4), "write {attempt} took {:?} to fail", started.elapsed());
    }
    assert!(timeout(Duration::from_secs(10), store.ping()).await.expect("ping hung").is_err());

    proxy.restore();
    // The first attempts may still find dead pooled connections; the pool must replace them.
    eventually(Duration::from_secs(20), "the store recovered after the outage", || async {
        timeout(Duration::from_secs(10), store.write(&turns(2))).await.expect("a write after the outage hung")
    })
    .await;
    assert_eq!(load(&store, &key, 0).await.turn_count, 2);
}

/// A message Postgres refuses for its content even once text is made safe: a time before
/// 4713 BC is out of the range of `timestamptz` (SQLSTATE 22008).
fn out_of_range(seq: u64) -> Message {
    let year_5000_bc = chrono::NaiveDate::from_ymd_opt(-5000, 1, 1)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc()
        .timestamp_millis();
    Message { created_at_ms: year_5000_bc, ..message(seq) }
}

#[tokio::test]
async fn postgres_stores_a_nul_in_recorded_text_as_a_replacement_character() {
    let schema = Schema::new("t");
    let store = PostgresStore::connect(&database_url(), &schema)
        .await
        .expect("connect to postgres at DATABASE_URL (is it running?)");
    let key = key("acme", "s-nul");
    let mut created = session(&key);
    created.metadata.insert("note".to_owned(), "a\0b".to_owned());
    let mut event = switch(1, "general", "finance-expert");
    event.query_excerpt = "refinance my mortgage \0".to_owned();
    event.reason_detail = "matched \0".to_owned();
    let mut nul = message(1);
    nul.content = "refinance my mortgage \0".to_owned();
    store
        .write(&[
            Record::SessionCreated(created),
            switched(&key, event, 1),
            Record::MessagesAppended { key: key.clone(), messages: vec![nul, message(2)] },
        ])
        .await
        .expect("text holding a NUL is stored");
    let loaded = load(&store, &key, 10).await;
    assert_eq!(loaded.recent[0].content, "refinance my mortgage \u{FFFD}");
    assert_eq!(loaded.recent[1].content, "message 2");
    assert_eq!(loaded.metadata["note"], "a\u{FFFD}b");
    let history = store.history(&key, 0, 10).await.unwrap();
    assert_eq!(history[0].query_excerpt, "refinance my mortgage \u{FFFD}");
    assert_eq!(history[0].reason_detail, "matched \u{FFFD}");
}

#[tokio::test]
async fn a_record_postgres_refuses_is_set_aside_and_every_other_record_lands() {
    use switchyard_sessions::recorder::{self, Durability, RecordBufferConfig};

    let schema = Schema::new("t");
    let store: Arc<dyn RecordStore> = Arc::new(
        PostgresStore::connect(&database_url(), &schema)
            .await
            .expect("connect to postgres at DATABASE_URL (is it running?)"),
    );
    let config =
        RecordBufferConfig { batch: 4, flush_interval: Duration::from_secs(3600), ..RecordBufferConfig::default() };
    let recorder = recorder::start(store.clone(), config);
    let (ann, bob) = (key("acme", "s-ann"), key("globex", "s-bob"));
    for key in [&ann, &bob] {
        assert_eq!(recorder.write_through(vec![Record::SessionCreated(session(key))]).await, Durability::Written);
    }

    // Written through: the refused message is set aside, never held to block what follows.
    let mut nul = message(1);
    nul.content = "refinance my mortgage \0".to_owned();
    let refused = Record::MessagesAppended { key: ann.clone(), messages: vec![out_of_range(2)] };
    let outcome = recorder
        .write_through(vec![Record::MessagesAppended { key: ann.clone(), messages: vec![nul] }, refused.clone()])
        .await;
    assert_eq!(outcome, Durability::SetAside);
    assert_eq!(recorder.backlog(), 0);
    assert_eq!(recorder.write_through(vec![appended(&bob, 1..=1)]).await, Durability::Written);

    // Held (as while Postgres was away), then drained at shutdown: a refused record between
    // good ones of two tenants; every good one lands, in order.
    recorder.push_all(vec![
        switched(&bob, switch(1, "general", "finance-expert"), 2),
        appended(&ann, 3..=3),
        refused.clone(),
        appended(&bob, 2..=3),
        switched(&bob, switch(2, "finance-expert", "legal-expert"), 3),
        Record::MessagesAppended { key: ann.clone(), messages: vec![out_of_range(4)] },
        appended(&ann, 5..=5),
        Record::Closed { key: ann.clone(), at: at(400) },
    ]);
    let report = timeout(Duration::from_secs(30), recorder.drain(Duration::from_secs(20))).await.unwrap();
    assert_eq!((report.written, report.lost), (6, 0));
    assert_eq!(recorder.set_aside(), 3);

    let ann_now = load(&*store, &ann, 10).await;
    assert_eq!(seqs(&ann_now.recent), [1, 3, 5]);
    assert_eq!(ann_now.recent[0].content, "refinance my mortgage \u{FFFD}");
    assert_eq!(ann_now.status, SessionStatus::Closed);
    let bob_now = load(&*store, &bob, 10).await;
    assert_eq!(seqs(&bob_now.recent), [1, 2, 3]);
    assert_eq!(bob_now.role_id, role("legal-expert"));
    let history = store.history(&bob, 0, 10).await.unwrap();
    assert_eq!(history.iter().map(|event| event.sequence).collect::<Vec<_>>(), [1, 2]);
}
