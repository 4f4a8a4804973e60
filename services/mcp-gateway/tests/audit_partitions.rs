//! The audit trail partitioned by day, on the real Postgres: a schema holding audit records of
//! the unpartitioned layout (migrations up to 0002) is moved to day partitions by migration
//! 0003 without losing or changing a row; the store then makes the coming days ahead, skips a
//! retried batch, pages across partitions, and its retention drops whole days.
#![allow(clippy::unwrap_used, reason = "a panic in a test is the failure report")]

use chrono::{Days, NaiveDate, Utc};
use sqlx::PgPool;
use switchyard_kit::{partitions::DailyPartitions, postgres::connect_in_schema};
use switchyard_mcp_gateway::{
    audit::{AuditQuery, AuditRecord, Outcome},
    domain::UsageRecord,
    store::{UsageStore, postgres::PostgresUsageStore},
};
use switchyard_testkit::{Schema, database_url, partitions};

/// Every audit row in id order, hashed: equal before and after only if no row was lost, added
/// or changed in any column (the layout keeps the columns' order).
async fn fingerprint(pool: &PgPool) -> (i64, String) {
    sqlx::query_as("SELECT count(*), md5(coalesce(string_agg(a::text, '|' ORDER BY a.id), '')) FROM tool_call_audit a")
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM tool_call_audit").fetch_one(pool).await.unwrap()
}

fn audit_record() -> AuditRecord {
    AuditRecord {
        id: uuid::Uuid::new_v4(),
        at: Utc::now(),
        tenant: "acme".to_owned(),
        user: Some("ada".to_owned()),
        role: None,
        groups: Vec::new(),
        session_id: Some("s1".to_owned()),
        server: "fx".to_owned(),
        tool: "fx__lookup".to_owned(),
        arguments_sha256: "ab".repeat(32),
        arguments_bytes: 2,
        arguments: None,
        outcome: Outcome::Ok,
        error: None,
        duration_ms: 3,
        policy: None,
    }
}

#[tokio::test]
async fn unpartitioned_audit_records_move_to_day_partitions_whole() {
    let schema = Schema::new("gateway_partitions");
    let pool = connect_in_schema(&database_url(), schema.name(), 2)
        .await
        .unwrap_or_else(|err| panic!("postgres at {} (set DATABASE_URL): {err}", database_url()));
    sqlx::migrate!("./migrations").run_to(2, &pool).await.unwrap();

    // 400 records of the old layout, 45 minutes apart over the last 12.5 days, every column
    // set; one from 2001 (an old import) and one a week ahead (a fast clock).
    sqlx::query(
        "INSERT INTO tool_call_audit (id, created_at, tenant, user_id, role, groups, session_id, server, tool, \
         arguments_sha256, arguments_bytes, arguments, outcome, error, duration_ms, policy) \
         SELECT md5('audit ' || n)::uuid, now() - n * interval '45 minutes', CASE WHEN n % 3 = 0 THEN 'globex' \
         ELSE 'acme' END, 'user-' || n % 5, 'finance-expert', ARRAY['staff'], 's-' || n % 7, 'fx', 'fx__lookup', \
         md5(n::text) || md5(n::text), n, jsonb_build_object('q', n), CASE WHEN n % 4 = 0 THEN 'denied' ELSE 'ok' \
         END, CASE WHEN n % 4 = 0 THEN 'refused' END, n % 90, CASE WHEN n % 4 = 0 THEN 'contractors' END \
         FROM generate_series(0, 399) AS n",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO tool_call_audit (id, created_at, tenant, server, tool, arguments_sha256, arguments_bytes, \
         outcome, duration_ms) VALUES \
         (md5('import')::uuid, '2001-02-03 04:05:06+00', 'acme', 'fx', 'fx__lookup', '', 0, 'ok', 1), \
         (md5('fast clock')::uuid, now() + interval '7 days', 'acme', 'fx', 'fx__lookup', '', 0, 'ok', 1)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let before = fingerprint(&pool).await;
    assert_eq!(before.0, 402);
    let old_days: Vec<NaiveDate> = sqlx::query_scalar(
        "SELECT DISTINCT (created_at AT TIME ZONE 'UTC')::date FROM tool_call_audit \
         WHERE created_at > '2002-01-01' ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();

    // The gateway's start: migration 0003, then the keeper.
    let store = PostgresUsageStore::connect(&database_url(), schema.name()).await.unwrap();
    assert_eq!(fingerprint(&pool).await, before, "every row kept as it was");
    partitions::assert_partitioned(&pool, "tool_call_audit").await;
    let partitions = DailyPartitions::new("tool_call_audit", "created_at").unwrap();
    let days = partitions.days(&pool).await.unwrap();
    let today = Utc::now().date_naive();
    for day in old_days.iter().copied().chain((0..=3).map(|ahead| today.checked_add_days(Days::new(ahead)).unwrap())) {
        assert!(days.contains(&day), "partition of {day} in {days:?}");
    }
    let in_default: i64 =
        sqlx::query_scalar("SELECT count(*) FROM tool_call_audit_default").fetch_one(&pool).await.unwrap();
    assert_eq!(in_default, 1, "only the old import is outside every day");
    let mut indexes: Vec<String> = sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes WHERE schemaname = $1 AND tablename = 'tool_call_audit'",
    )
    .bind(schema.name())
    .fetch_all(&pool)
    .await
    .unwrap();
    indexes.sort();
    assert_eq!(indexes, ["tool_call_audit_pkey", "tool_call_audit_tenant_time", "tool_call_audit_time"]);

    // A tenant's trail reads across partitions, newest first.
    let acme = AuditQuery { tenant: Some("acme".into()), limit: 1000, ..AuditQuery::default() };
    let trail = store.audit(&acme).await.unwrap();
    assert_eq!(trail.len(), 400 - 134 + 2, "acme's records (n % 3 != 0) and the two odd ones");
    assert!(trail.windows(2).all(|w| (w[0].at, w[0].id) > (w[1].at, w[1].id)), "newest first");

    // A new record lands in today's partition; its batch retried is stored once.
    let fresh = audit_record();
    let batch = [UsageRecord::Audit(Box::new(fresh.clone()))];
    store.record(&batch).await.unwrap();
    store.record(&batch).await.unwrap();
    let stored: Vec<String> = sqlx::query_scalar("SELECT tableoid::regclass::text FROM tool_call_audit WHERE id = $1")
        .bind(fresh.id)
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(stored, [partitions.partition_name(fresh.at.date_naive())]);

    // Retention at five days drops every day wholly older, deletes the rest before the cut,
    // and keeps everything after it.
    let cut = Utc::now() - chrono::Duration::days(5);
    let expected: i64 = sqlx::query_scalar("SELECT count(*) FROM tool_call_audit WHERE created_at < $1")
        .bind(cut)
        .fetch_one(&pool)
        .await
        .unwrap();
    let total = count(&pool).await;
    assert_eq!(store.prune_audit(cut).await.unwrap(), u64::try_from(expected).unwrap());
    assert_eq!(count(&pool).await, total - expected);
    let days = partitions.days(&pool).await.unwrap();
    assert_eq!(days.first().copied(), Some(cut.date_naive()), "the cut's day is the oldest kept");
}
