//! The usage record partitioned by month, on the real Postgres: a schema holding context
//! events and tool calls of the unpartitioned layout (migrations up to 0003) is moved to month
//! partitions by migration 0004 without losing or changing a row; the ids keep coming from the
//! tables' sequences; the store then makes the coming months ahead, writes into the right
//! month, reads the usage prior's history and a session's records across months, and its
//! usage retention drops whole months only.
#![allow(clippy::unwrap_used, reason = "a panic in a test is the failure report")]

use chrono::{DateTime, Datelike, Months, NaiveDate, NaiveTime, Utc};
use sqlx::PgPool;
use switchyard_kit::{SessionId, TenantId, partitions::TimePartitions, postgres::connect_in_schema};
use switchyard_mcp_gateway::{
    domain::{ShownMatch, UsageRecord},
    store::{SessionKey, UsageStore, postgres::PostgresUsageStore},
};
use switchyard_testkit::partitions::{self, count};
use switchyard_testkit::{Schema, database_url};
use uuid::Uuid;

/// The rows' count and every row of `table` in id order, hashed: equal before and after only if
/// no row was lost, added or changed in any column it had before migration 0005 (`record_id`,
/// which rows written before it leave empty, is left out).
async fn fingerprint(pool: &PgPool, table: &str) -> (i64, String) {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT count(*), md5(coalesce(string_agg((to_jsonb(t) - 'record_id')::text, '|' ORDER BY t.id), '')) \
         FROM {table} t"
    )))
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn count_before(pool: &PgPool, table: &str, before: DateTime<Utc>) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table} WHERE created_at < $1")))
        .bind(before)
        .fetch_one(pool)
        .await
        .unwrap()
}

fn month_start(day: NaiveDate) -> DateTime<Utc> {
    day.with_day(1).unwrap().and_time(NaiveTime::MIN).and_utc()
}

fn key(session: &str) -> SessionKey {
    SessionKey::new(TenantId::parse("acme").unwrap(), SessionId::parse(session).unwrap())
}

fn call(session: &SessionKey, tool: &str, context: Option<&str>, is_error: bool, at: DateTime<Utc>) -> UsageRecord {
    UsageRecord::ToolCall {
        id: Uuid::new_v4(),
        key: session.clone(),
        tool: tool.to_owned(),
        server: "fx".to_owned(),
        upstream_tool: tool.trim_start_matches("fx__").to_owned(),
        context_query: context.map(str::to_owned),
        context_intent: None,
        context_embedding: context.map(|_| vec![0.5, -2.0]),
        shown: ShownMatch::InList,
        is_error,
        duration_ms: 7,
        at,
    }
}

fn time_of(record: &UsageRecord) -> DateTime<Utc> {
    match record {
        UsageRecord::SetContext { at, .. } | UsageRecord::ToolCall { at, .. } => *at,
        UsageRecord::Audit(audit) => audit.at,
    }
}

/// The tool of each record the usage prior would learn from, newest first.
async fn learned_tools(store: &PostgresUsageStore) -> Vec<String> {
    store.history(100_000).await.unwrap().into_iter().map(|pair| pair.tool).collect()
}

/// Each partition of `table` with the number of indexes it has.
async fn indexes_per_partition(pool: &PgPool, table: &str) -> Vec<(String, i64)> {
    sqlx::query_as(
        "SELECT c.relname::text, count(i.indexrelid) FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid \
         LEFT JOIN pg_index i ON i.indrelid = c.oid WHERE h.inhparent = $1::text::regclass GROUP BY c.relname ORDER BY 1",
    )
    .bind(table)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn unpartitioned_usage_records_move_to_month_partitions_and_retention_drops_whole_months() {
    let schema = Schema::new("gateway_usage_partitions");
    let pool = connect_in_schema(&database_url(), schema.name(), 2)
        .await
        .unwrap_or_else(|err| panic!("postgres at {} (set DATABASE_URL): {err}", database_url()));
    sqlx::migrate!("./migrations").run_to(3, &pool).await.unwrap();

    // The old layout, every column set: a tool call a day for 600 days (about 20 months) over
    // seven sessions, each a minute after its session's set_context; a context and a call
    // from 2001 (an old import, older than the ten years the migration makes months for) and
    // a context a week ahead (a fast clock). Ids come from the sequences, in this order.
    for statement in [
        "INSERT INTO context_events (tenant, session_id, query, intent, created_at) \
         SELECT 'acme', 's-' || n % 7, 'query ' || n, CASE WHEN n % 3 = 0 THEN NULL ELSE 'intent ' || n END, \
         date_trunc('milliseconds', now()) - n * interval '1 day' - interval '1 minute' \
         FROM generate_series(0, 599) AS n",
        "INSERT INTO tool_calls (tenant, session_id, tool, server, upstream_tool, context_query, context_intent, \
         context_embedding, in_filtered_list, is_error, duration_ms, created_at) \
         SELECT 'acme', 's-' || n % 7, 'fx__t' || n, 'fx', 't' || n, \
         CASE WHEN n % 4 = 0 THEN NULL ELSE 'query ' || n END, CASE WHEN n % 3 = 0 THEN NULL ELSE 'intent ' || n END, \
         CASE WHEN n % 4 = 0 THEN NULL ELSE decode(lpad(to_hex(n), 8, '0') || '0000803f', 'hex') END, \
         CASE n % 3 WHEN 0 THEN NULL WHEN 1 THEN true ELSE false END, n % 5 = 0, n, \
         date_trunc('milliseconds', now()) - n * interval '1 day' FROM generate_series(0, 599) AS n",
        "INSERT INTO context_events (tenant, session_id, query, intent, created_at) VALUES \
         ('acme', 'import', 'imported', NULL, '2001-02-03 04:05:06+00'), \
         ('acme', 's-0', 'fast clock', NULL, date_trunc('milliseconds', now()) + interval '7 days')",
        "INSERT INTO tool_calls (tenant, session_id, tool, server, upstream_tool, context_query, is_error, \
         duration_ms, created_at) VALUES \
         ('acme', 'import', 'fx__import', 'fx', 'import', 'imported', false, 1, '2001-02-03 04:05:07+00')",
    ] {
        sqlx::query(statement).execute(&pool).await.unwrap();
    }
    let before = (fingerprint(&pool, "context_events").await, fingerprint(&pool, "tool_calls").await);
    assert_eq!((before.0.0, before.1.0), (602, 601));
    let old_months: Vec<NaiveDate> = sqlx::query_scalar(
        "SELECT DISTINCT date_trunc('month', created_at AT TIME ZONE 'UTC')::date FROM tool_calls \
         WHERE created_at > '2002-01-01' ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(old_months.len() >= 20, "{old_months:?}");

    // The gateway's start: migration 0004, then the keeper.
    let store = PostgresUsageStore::connect(&database_url(), schema.name()).await.unwrap();
    let after = (fingerprint(&pool, "context_events").await, fingerprint(&pool, "tool_calls").await);
    assert_eq!(after, before, "every row kept as it was, ids included");
    for table in ["context_events", "tool_calls"] {
        let with_record_ids: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {table} WHERE record_id IS NOT NULL"
        )))
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(with_record_ids, 0, "{table}: no id made up for a row written before record ids");
    }

    let contexts = TimePartitions::monthly("context_events", "created_at").unwrap();
    let calls = TimePartitions::monthly("tool_calls", "created_at").unwrap();
    let this_month = month_start(Utc::now().date_naive()).date_naive();
    let next_month = this_month.checked_add_months(Months::new(1)).unwrap();
    for (table, partitions) in [("context_events", &contexts), ("tool_calls", &calls)] {
        partitions::assert_partitioned(&pool, table).await;
        let months = partitions.periods(&pool).await.unwrap();
        for month in old_months.iter().chain([&this_month, &next_month]) {
            assert!(months.contains(month), "{table}'s partition of {month} in {months:?}");
        }
        assert_eq!(count(&pool, &format!("{table}_default")).await, 1, "only the old import is outside every month");
        // The id's sequence moved with it (BIGSERIAL's, owned by the new table's column).
        let sequence: Option<String> =
            sqlx::query_scalar("SELECT pg_get_serial_sequence($1, 'id')").bind(table).fetch_one(&pool).await.unwrap();
        assert_eq!(sequence, Some(format!("{}.{table}_id_seq", schema.name())));
    }
    let mut indexes: Vec<String> = sqlx::query_scalar(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename IN ('context_events', 'tool_calls')",
    )
    .bind(schema.name())
    .fetch_all(&pool)
    .await
    .unwrap();
    indexes.sort();
    let on = |table: &str| format!("ON ONLY {}.{table} USING btree", schema.name());
    assert_eq!(
        indexes,
        [
            format!(
                "CREATE INDEX context_events_session {} (tenant, session_id, created_at DESC, id DESC)",
                on("context_events")
            ),
            format!(
                "CREATE INDEX tool_calls_learning {} (created_at DESC, id DESC) WHERE ((context_query IS NOT NULL) AND (NOT is_error))",
                on("tool_calls")
            ),
            format!(
                "CREATE INDEX tool_calls_session {} (tenant, session_id, created_at DESC, id DESC)",
                on("tool_calls")
            ),
            format!("CREATE UNIQUE INDEX context_events_pkey {} (id, created_at)", on("context_events")),
            format!("CREATE UNIQUE INDEX context_events_record {} (record_id, created_at)", on("context_events")),
            format!("CREATE UNIQUE INDEX tool_calls_pkey {} (id, created_at)", on("tool_calls")),
            format!("CREATE UNIQUE INDEX tool_calls_record {} (record_id, created_at)", on("tool_calls")),
        ]
    );
    // Every partition has every index — those the migration made, the keeper's (tool_calls'
    // next month: no call was that far ahead) and the defaults.
    for (table, expected) in [("context_events", 3), ("tool_calls", 4)] {
        let partitions = indexes_per_partition(&pool, table).await;
        assert!(partitions.len() >= old_months.len() + 2, "{partitions:?}");
        assert!(partitions.iter().all(|(_, n)| *n == expected), "{table}: {partitions:?}");
    }

    // The usage prior's history reads across the months, newest first: the successful calls
    // that had a context (n % 4 != 0, n % 5 != 0), the import last.
    let mut expected: Vec<String> =
        (0..600).filter(|n| n % 4 != 0 && n % 5 != 0).map(|n| format!("fx__t{n}")).collect();
    expected.push("fx__import".to_owned());
    assert_eq!(learned_tools(&store).await, expected);
    let newest = store.history(3).await.unwrap();
    assert_eq!(newest.len(), 3, "the limit is honoured");
    assert_eq!((newest[0].context.as_str(), newest[0].tool.as_str()), ("query 1 (intent 1)", "fx__t1"));
    assert_eq!(newest[0].embedding, Some(vec![f32::from_le_bytes([0, 0, 0, 1]), 1.0]), "the moved embedding");

    // A session's records across the months, newest first: a call then the context a minute
    // before it, from this month back to 20 months ago.
    let session = store.session_records(&key("s-3"), 10_000).await.unwrap();
    let stored = count(&pool, "context_events WHERE session_id = 's-3'").await
        + count(&pool, "tool_calls WHERE session_id = 's-3'").await;
    assert_eq!(i64::try_from(session.len()).unwrap(), stored);
    assert!(session.windows(2).all(|w| time_of(&w[0]) > time_of(&w[1])), "newest first");
    assert!(matches!(&session[0], UsageRecord::ToolCall { tool, .. } if tool == "fx__t3"));
    assert!(matches!(&session[1], UsageRecord::SetContext { query, .. } if query == "query 3"));
    assert_eq!(store.session_records(&key("s-3"), 5).await.unwrap(), session[..5], "the limit keeps the newest");

    // New records get fresh ids from the moved sequences and land in their month's partition:
    // now in this month's, the last millisecond of last month in last month's, a date far
    // ahead in the default.
    let fresh = key("fresh");
    let now = Utc::now();
    let turn = month_start(now.date_naive());
    let last_of_before = turn - chrono::Duration::milliseconds(1);
    let far = month_start(NaiveDate::from_ymd_opt(2100, 1, 1).unwrap());
    store
        .record(&[
            UsageRecord::SetContext {
                id: Uuid::new_v4(),
                key: fresh.clone(),
                query: "fresh".into(),
                intent: None,
                at: now,
            },
            call(&fresh, "fx__now", Some("fresh"), false, now),
            call(&fresh, "fx__before_the_turn", None, false, last_of_before),
            call(&fresh, "fx__far", None, true, far),
        ])
        .await
        .unwrap();
    let placed: Vec<(i64, String, String)> = sqlx::query_as(
        "SELECT id, tool, tableoid::regclass::text FROM tool_calls WHERE session_id = 'fresh' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        placed,
        [
            (602, "fx__now".to_owned(), calls.partition_name(now.date_naive())),
            (603, "fx__before_the_turn".to_owned(), calls.partition_name(last_of_before.date_naive())),
            (604, "fx__far".to_owned(), calls.default_partition()),
        ]
    );
    let context: (i64, String) =
        sqlx::query_as("SELECT id, tableoid::regclass::text FROM context_events WHERE session_id = 'fresh'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(context, (603, contexts.partition_name(now.date_naive())));
    expected.insert(0, "fx__now".to_owned());
    assert_eq!(learned_tools(&store).await, expected);

    // Without a retention the upkeep keeps everything.
    let total = count(&pool, "context_events").await + count(&pool, "tool_calls").await;
    assert_eq!(store.keep_usage(None).await.unwrap(), 0);
    assert_eq!(count(&pool, "context_events").await + count(&pool, "tool_calls").await, total);

    // A retention reaching back into the middle of a month about 200 days ago drops the whole
    // months before the cut's month (and the default's rows before that month's start); the
    // cut's month stays whole, this month is untouched.
    let boundary = month_start((now - chrono::Duration::days(200)).date_naive());
    let cut = boundary + chrono::Duration::days(15);
    let removed =
        count_before(&pool, "context_events", boundary).await + count_before(&pool, "tool_calls", boundary).await;
    let in_cut_month_before_cut =
        count_before(&pool, "tool_calls", cut).await - count_before(&pool, "tool_calls", boundary).await;
    assert!(in_cut_month_before_cut > 0, "the data has days in the cut's month before the cut");
    let this_months = count(&pool, &calls.partition_name(now.date_naive())).await;
    assert_eq!(store.keep_usage(Some(cut)).await.unwrap(), u64::try_from(removed).unwrap());
    assert_eq!(count(&pool, "context_events").await + count(&pool, "tool_calls").await, total - removed);
    assert_eq!(contexts.periods(&pool).await.unwrap().first().copied(), Some(boundary.date_naive()));
    assert_eq!(calls.periods(&pool).await.unwrap().first().copied(), Some(boundary.date_naive()));
    assert_eq!(count_before(&pool, "tool_calls", cut).await, in_cut_month_before_cut, "the cut's month is kept whole");
    assert_eq!(count(&pool, &calls.partition_name(now.date_naive())).await, this_months);
    assert_eq!(count(&pool, "context_events_default").await, 0, "the import was before the boundary");
    assert_eq!(count(&pool, "tool_calls_default").await, 1, "the call far ahead stays");
    assert_eq!(store.keep_usage(Some(cut)).await.unwrap(), 0, "a second round finds nothing more");

    // The history now holds the calls from the boundary on, newest first, as before.
    let kept: i64 =
        sqlx::query_scalar("SELECT count(*) FROM tool_calls WHERE context_query IS NOT NULL AND NOT is_error")
            .fetch_one(&pool)
            .await
            .unwrap();
    expected.truncate(usize::try_from(kept).unwrap());
    assert_eq!(learned_tools(&store).await, expected);
    assert!(expected.last().is_some_and(|tool| tool != "fx__import"));

    // The sequences go on after the retention.
    store.record(&[call(&fresh, "fx__later", None, false, Utc::now())]).await.unwrap();
    let later: i64 =
        sqlx::query_scalar("SELECT id FROM tool_calls WHERE tool = 'fx__later'").fetch_one(&pool).await.unwrap();
    assert_eq!(later, 605);
}
