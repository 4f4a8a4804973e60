//! The history partitioned by month, on the real Postgres: a schema holding switches and
//! messages of the unpartitioned layout (migrations up to 0002) is moved to month partitions
//! by migration 0003 without losing or changing a row; the store then makes the coming months
//! ahead, rebuilds a session from messages spread over two years of partitions, stores a
//! retried or replayed record once, writes across a month's turn and into the default
//! partition, and its history retention drops whole months only — also with replicas at once.
#![allow(clippy::unwrap_used, reason = "a panic in a test is the failure report")]

use std::{collections::BTreeMap, time::Duration};

use chrono::{DateTime, Datelike, Months, NaiveDate, NaiveTime, TimeZone, Utc};
use sqlx::PgPool;
use switchyard_kit::{partitions::TimePartitions, postgres::connect_in_schema};
use switchyard_sessions::{
    domain::{
        LiveSession, Message, MessageRole, RoleId, SessionId, SessionKey, SessionStatus, SwitchEvent, SwitchReason,
        TenantId,
    },
    store::{Record, RecordStore, postgres::PostgresStore},
};
use switchyard_testkit::partitions::{self, count};
use switchyard_testkit::{Schema, database_url};

async fn pool_in(schema: &Schema) -> PgPool {
    connect_in_schema(&database_url(), schema.name(), 4)
        .await
        .unwrap_or_else(|err| panic!("postgres at {} (set DATABASE_URL): {err}", database_url()))
}

/// Every row of `table` in key order, hashed: equal before and after only if no row was lost,
/// added or changed in any column (the layout keeps the columns' order).
/// The rows' count and a digest of the columns the old layout had (later migrations add some).
async fn fingerprint(pool: &PgPool, table: &str, order: &str) -> (i64, String) {
    let columns = match table {
        "session_messages" => "t.tenant_id, t.session_id, t.seq, t.role, t.content, t.role_id, t.created_at",
        _ => "t.*",
    };
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT count(*), md5(coalesce(string_agg(ROW({columns})::text, '|' ORDER BY {order}), '')) FROM {table} t"
    )))
    .fetch_one(pool)
    .await
    .unwrap()
}

fn key(id: &str) -> SessionKey {
    SessionKey { tenant: TenantId::parse("acme").unwrap(), id: SessionId::parse(id).unwrap() }
}

fn role(id: &str) -> RoleId {
    RoleId::parse(id).unwrap()
}

fn session(key: &SessionKey, created_at: DateTime<Utc>) -> LiveSession {
    LiveSession {
        key: key.clone(),
        owner: None,
        role_id: role("general"),
        status: SessionStatus::Active,
        turn_count: 0,
        switch_count: 0,
        message_count: 0,
        created_at,
        updated_at: created_at,
        ttl: Duration::from_secs(3600),
        metadata: BTreeMap::new(),
        recent: Vec::new(),
    }
}

fn message(seq: u64, content: &str, at: DateTime<Utc>) -> Message {
    Message {
        seq,
        role: MessageRole::User,
        content: content.to_owned(),
        role_id: "general".to_owned(),
        created_at_ms: at.timestamp_millis(),
        append_id: String::new(),
    }
}

fn switch(sequence: u64, to: &str, at: DateTime<Utc>) -> SwitchEvent {
    SwitchEvent {
        sequence,
        from_role_id: role("general"),
        to_role_id: role(to),
        reason: SwitchReason::Triggered,
        reason_detail: format!("matched {to}"),
        from_score: 3,
        to_score: 9,
        query_excerpt: "what does the contract say".to_owned(),
        occurred_at: at,
    }
}

fn month_start(day: NaiveDate) -> DateTime<Utc> {
    day.with_day(1).unwrap().and_time(NaiveTime::MIN).and_utc()
}

#[tokio::test]
async fn unpartitioned_history_moves_to_month_partitions_whole() {
    let schema = Schema::new("sessions_history_partitions");
    let pool = pool_in(&schema).await;
    sqlx::migrate!("./migrations").run_to(2, &pool).await.unwrap();

    // The old layout, every column set: one long session with a message a day for 800 days
    // (26 months and more) and a switch every 10 days; a row from 2001 (an old import, older
    // than the ten years the migration makes months for) and one a week ahead (a fast clock).
    for statement in [
        "INSERT INTO sessions (tenant_id, session_id, role_id, status, turn_count, switch_count, message_count, \
         ttl_seconds, metadata, created_at, updated_at, user_id) VALUES ('acme', 'long', 'general', 'active', 800, \
         80, 802, 3600, '{\"channel\": \"web\"}', now() - interval '801 days', now(), 'ann')",
        "INSERT INTO session_messages (tenant_id, session_id, seq, role, content, role_id, created_at) \
         SELECT 'acme', 'long', 801 - n, CASE WHEN n % 2 = 0 THEN 'user' ELSE 'assistant' END, 'message ' || n, \
         'general', date_trunc('milliseconds', now()) - n * interval '1 day' FROM generate_series(1, 800) AS n",
        "INSERT INTO session_messages (tenant_id, session_id, seq, role, content, role_id, created_at) VALUES \
         ('acme', 'import', 1, 'user', 'imported', 'general', '2001-02-03 04:05:06+00'), \
         ('acme', 'long', 801, 'user', 'fast clock', 'general', date_trunc('milliseconds', now()) + interval '7 days')",
        "INSERT INTO session_switches (tenant_id, session_id, sequence, from_role_id, to_role_id, reason, \
         reason_detail, from_score, to_score, query_excerpt, occurred_at) \
         SELECT 'acme', 'long', 81 - n, 'general', 'finance', 'triggered', 'detail ' || n, n % 7, n % 11, \
         'excerpt ' || n, now() - n * interval '10 days' FROM generate_series(1, 80) AS n",
        "INSERT INTO session_switches (tenant_id, session_id, sequence, from_role_id, to_role_id, reason, \
         reason_detail, from_score, to_score, query_excerpt, occurred_at) VALUES \
         ('acme', 'import', 1, 'general', 'legal', 'manual', '', 0, 0, '', '2001-02-03 04:05:06+00')",
    ] {
        sqlx::query(statement).execute(&pool).await.unwrap();
    }
    let messages_key = "t.tenant_id, t.session_id, t.seq";
    let switches_key = "t.tenant_id, t.session_id, t.sequence";
    let before = (
        fingerprint(&pool, "session_messages", messages_key).await,
        fingerprint(&pool, "session_switches", switches_key).await,
    );
    assert_eq!((before.0.0, before.1.0), (802, 81));
    let old_months: Vec<NaiveDate> = sqlx::query_scalar(
        "SELECT DISTINCT date_trunc('month', created_at AT TIME ZONE 'UTC')::date FROM session_messages \
         WHERE created_at > '2002-01-01' ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(old_months.len() >= 27, "{old_months:?}");

    // The service's start: migration 0003, then the keeper.
    let store = PostgresStore::connect(&database_url(), schema.name()).await.unwrap();
    let after = (
        fingerprint(&pool, "session_messages", messages_key).await,
        fingerprint(&pool, "session_switches", switches_key).await,
    );
    assert_eq!(after, before, "every row kept as it was");
    let messages = TimePartitions::monthly("session_messages", "created_at").unwrap();
    let switches = TimePartitions::monthly("session_switches", "occurred_at").unwrap();
    for table in ["session_messages", "session_switches"] {
        partitions::assert_partitioned(&pool, table).await;
    }
    let months = messages.periods(&pool).await.unwrap();
    let this_month = month_start(Utc::now().date_naive()).date_naive();
    let next_month = this_month.checked_add_months(Months::new(1)).unwrap();
    for month in old_months.iter().chain([&this_month, &next_month]) {
        assert!(months.contains(month), "message partition of {month} in {months:?}");
    }
    let switch_months = switches.periods(&pool).await.unwrap();
    assert!(switch_months.contains(&this_month) && switch_months.contains(&next_month), "{switch_months:?}");
    assert_eq!(count(&pool, "session_messages_default").await, 1, "only the old import is outside every month");
    assert_eq!(count(&pool, "session_switches_default").await, 1);
    let keys: Vec<String> = sqlx::query_scalar(
        "SELECT pg_get_indexdef(indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid \
         WHERE c.relname IN ('session_messages', 'session_switches') AND c.relnamespace = current_schema()::regnamespace \
         ORDER BY c.relname",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys[0].ends_with("(tenant_id, session_id, seq, created_at)"), "{}", keys[0]);
    assert!(keys[1].ends_with("(tenant_id, session_id, sequence, occurred_at)"), "{}", keys[1]);

    // Rebuilding the session after Redis lost it: its newest messages from across partitions,
    // oldest first; its switches page across partitions in sequence order.
    let long = key("long");
    let rebuilt = store.load_session(&long, 20).await.unwrap().unwrap();
    assert_eq!(rebuilt.message_count, 802);
    let seqs: Vec<u64> = rebuilt.recent.iter().map(|m| m.seq).collect();
    assert_eq!(seqs, (782..=801).collect::<Vec<_>>());
    assert_eq!(rebuilt.recent.last().unwrap().content, "fast clock");
    let mut sequences = Vec::new();
    let mut after_seq = 0;
    loop {
        let page = store.history(&long, after_seq, 7).await.unwrap();
        let Some(last) = page.last() else { break };
        after_seq = last.sequence;
        sequences.extend(page.iter().map(|e| e.sequence));
    }
    assert_eq!(sequences, (1..=80).collect::<Vec<_>>());
    let import = store.load_session(&key("import"), 5).await.unwrap();
    assert_eq!(import, None, "the import has no session row");
    assert_eq!(store.history(&key("import"), 0, 5).await.unwrap().len(), 1, "read from the default partition");

    // Writes across a month's turn, into the default, retried and replayed.
    let fresh = key("fresh");
    let turn = month_start(Utc::now().date_naive());
    let last_of_before = turn - chrono::Duration::milliseconds(1);
    store.write(&[Record::SessionCreated(session(&fresh, last_of_before))]).await.unwrap();
    let batch = [
        Record::MessagesAppended {
            key: fresh.clone(),
            messages: vec![
                message(1, "before the turn", last_of_before),
                message(2, "after the turn", turn),
                message(3, "an old clock", Utc.with_ymd_and_hms(2001, 1, 1, 0, 0, 0).unwrap()),
            ],
        },
        Record::Switched { key: fresh.clone(), event: switch(1, "finance", turn), turn_count: 1 },
    ];
    store.write(&batch).await.unwrap();
    store.write(&batch).await.unwrap();
    // The same sequences again under other times (a replica that lost the live session
    // numbered them again): the ones stored first stay.
    let later = turn + chrono::Duration::hours(1);
    let replayed = [
        Record::MessagesAppended { key: fresh.clone(), messages: vec![message(2, "a second 2", later)] },
        Record::Switched { key: fresh.clone(), event: switch(1, "legal", later), turn_count: 1 },
    ];
    store.write(&replayed).await.unwrap();
    let stored: Vec<(i64, String, String)> = sqlx::query_as(
        "SELECT seq, content, tableoid::regclass::text FROM session_messages WHERE session_id = 'fresh' ORDER BY seq",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let previous_month = last_of_before.date_naive();
    assert_eq!(
        stored,
        [
            (1, "before the turn".to_owned(), messages.partition_name(previous_month)),
            (2, "after the turn".to_owned(), messages.partition_name(turn.date_naive())),
            (3, "an old clock".to_owned(), messages.default_partition()),
        ]
    );
    let events = store.history(&fresh, 0, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].to_role_id.as_str(), events[0].occurred_at), ("finance", turn));
    let reloaded = store.load_session(&fresh, 10).await.unwrap().unwrap();
    assert_eq!(reloaded.recent.iter().map(|m| m.seq).collect::<Vec<_>>(), [1, 2, 3]);

    // Without a retention the upkeep keeps everything.
    let total = count(&pool, "session_messages").await + count(&pool, "session_switches").await;
    assert_eq!(store.keep_history(None).await.unwrap(), 0);
    assert_eq!(count(&pool, "session_messages").await + count(&pool, "session_switches").await, total);

    // A retention of 200 days drops the whole months before the cut's month and everything
    // in the default before that month's start; the cut's month stays whole.
    let cut = Utc::now() - chrono::Duration::days(200);
    let boundary = month_start(cut.date_naive());
    let expected: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM session_messages WHERE created_at < $1) \
              + (SELECT count(*) FROM session_switches WHERE occurred_at < $1)",
    )
    .bind(boundary)
    .fetch_one(&pool)
    .await
    .unwrap();
    let in_cut_month_before_cut: i64 =
        sqlx::query_scalar("SELECT count(*) FROM session_messages WHERE created_at >= $1 AND created_at < $2")
            .bind(boundary)
            .bind(cut)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(store.keep_history(Some(cut)).await.unwrap(), u64::try_from(expected).unwrap());
    assert_eq!(count(&pool, "session_messages").await + count(&pool, "session_switches").await, total - expected);
    assert_eq!(messages.periods(&pool).await.unwrap().first().copied(), Some(boundary.date_naive()));
    assert_eq!(switches.periods(&pool).await.unwrap().first().copied(), Some(boundary.date_naive()));
    let kept_before_cut: i64 = sqlx::query_scalar("SELECT count(*) FROM session_messages WHERE created_at < $1")
        .bind(cut)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(kept_before_cut, in_cut_month_before_cut, "the cut's month is kept whole");
    assert_eq!(count(&pool, "session_messages_default").await, 0, "the old clocks were before the boundary");
    // The session's newest messages are still there to rebuild it.
    let rebuilt = store.load_session(&long, 20).await.unwrap().unwrap();
    assert_eq!(rebuilt.recent.iter().map(|m| m.seq).collect::<Vec<_>>(), (782..=801).collect::<Vec<_>>());
    assert_eq!(store.keep_history(Some(cut)).await.unwrap(), 0, "a second round finds nothing more");
}

/// Replicas start on a fresh schema (two at once) and write while their keepers run: nothing
/// fails, each month's partition exists once, and a retention round at once on every replica
/// removes each row once.
#[tokio::test]
async fn replicas_keep_the_history_at_once() {
    let schema = Schema::new("sessions_history_replicas");
    // The first start runs the migrations (sqlx creates its bookkeeping table before taking
    // its lock, so two first starts at once can collide there); the others start together.
    let first = PostgresStore::connect(&database_url(), schema.name()).await.unwrap();
    let starts: Vec<_> = (0..2)
        .map(|_| {
            let name = schema.name().to_owned();
            tokio::spawn(async move { PostgresStore::connect(&database_url(), &name).await })
        })
        .collect();
    let mut stores = vec![std::sync::Arc::new(first)];
    for start in starts {
        stores.push(std::sync::Arc::new(start.await.unwrap().unwrap()));
    }
    let pool = pool_in(&schema).await;

    // Each replica writes its own sessions' messages, one a month for 14 months back, while
    // every replica runs its upkeep (no retention).
    let now = Utc::now();
    let mut tasks = Vec::new();
    for (replica, store) in stores.iter().enumerate() {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..10u64 {
                let key = key(&format!("r{replica}-s{n}"));
                store.write(&[Record::SessionCreated(session(&key, now))]).await.unwrap();
                let messages = (0..14u32)
                    .map(|back| {
                        let at = now.checked_sub_months(Months::new(back)).unwrap();
                        message(u64::from(14 - back), "turn", at)
                    })
                    .collect();
                store.write(&[Record::MessagesAppended { key, messages }]).await.unwrap();
            }
        }));
        let store = stores[replica].clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..3 {
                store.keep_history(None).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(count(&pool, "session_messages").await, 3 * 10 * 14);
    let messages = TimePartitions::monthly("session_messages", "created_at").unwrap();
    let this_month = month_start(now.date_naive()).date_naive();
    let next_month = this_month.checked_add_months(Months::new(1)).unwrap();
    assert_eq!(messages.periods(&pool).await.unwrap(), [this_month, next_month], "made once, by whichever replica");
    assert_eq!(count(&pool, "session_messages_default").await, 3 * 10 * 13, "the months before this one");

    // Retention at once on every replica: the months before the cut's go, each row counted once.
    let cut = now.checked_sub_months(Months::new(6)).unwrap();
    let expected: i64 = sqlx::query_scalar("SELECT count(*) FROM session_messages WHERE created_at < $1")
        .bind(month_start(cut.date_naive()))
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(expected > 0);
    let rounds: Vec<_> = stores
        .iter()
        .map(|store| {
            let store = store.clone();
            tokio::spawn(async move { store.keep_history(Some(cut)).await })
        })
        .collect();
    let mut removed = 0;
    for round in rounds {
        removed += round.await.unwrap().unwrap();
    }
    assert_eq!(removed, u64::try_from(expected).unwrap());
    assert_eq!(count(&pool, "session_messages").await, 3 * 10 * 14 - expected);
    // The months after the cut's are untouched: every session still rebuilds its newest turns.
    let rebuilt = stores[0].load_session(&key("r2-s9"), 3).await.unwrap().unwrap();
    assert_eq!(rebuilt.recent.iter().map(|m| m.seq).collect::<Vec<_>>(), [12, 13, 14]);
}
