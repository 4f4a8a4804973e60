//! Routing decisions partitioned by day, on the real Postgres: a schema holding decisions of the
//! unpartitioned layout (migrations up to 0009) is moved to day partitions by migration 0010
//! without losing or changing a row; the store then makes the coming days ahead, skips a
//! retried batch, reads across partitions, and its retention drops whole days.
#![allow(clippy::unwrap_used, reason = "a panic in a test is the failure report")]

use chrono::{Days, NaiveDate, Utc};
use sqlx::PgPool;
use switchyard_kit::{TenantId, partitions::DailyPartitions, postgres::connect_in_schema};
use switchyard_router::{
    analytics::{AnalyticsStore, DecisionRecord, PostgresAnalytics},
    route::Route,
};
use switchyard_testkit::{Schema, database_url, partitions};

/// Every row of the decisions in id order, hashed: equal before and after only if no row was
/// lost, added or changed in any column (the layout keeps the columns' order).
async fn fingerprint(pool: &PgPool) -> (i64, String) {
    sqlx::query_as(
        "SELECT count(*), md5(coalesce(string_agg(d::text, '|' ORDER BY d.id), '')) FROM routing_decisions d",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn count_where(pool: &PgPool, condition: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM routing_decisions WHERE {condition}")))
        .fetch_one(pool)
        .await
        .unwrap()
}

fn decision(id: &str, tenant: &str) -> DecisionRecord {
    DecisionRecord {
        id: id.to_owned(),
        occurred_at: Utc::now(),
        tenant: tenant.to_owned(),
        user: Some("ada".to_owned()),
        session_id: "s".to_owned(),
        role_id: "general-assistant".to_owned(),
        route: Route::Direct,
        reasoning: "simple question".to_owned(),
        routing_ms: 12,
        execution_ms: 40,
        provider: "openai".to_owned(),
        model: "gpt-4o-mini".to_owned(),
        routing_model: "openai/gpt-4o-mini".to_owned(),
        cache_hit: false,
        fallback_used: false,
        attempts: 1,
        model_fallbacks: 0,
        prompt_tokens: 100,
        completion_tokens: 20,
        cached_prompt_tokens: 0,
        cost_nanousd: 1_234,
        routing_call_avoided: false,
        key_id: Some("k1".to_owned()),
        cost_parts: Vec::new(),
        tools_used: Vec::new(),
        domains: Vec::new(),
        degraded: Vec::new(),
        message: Some("what is 2 + 2".to_owned()),
        interrupted: false,
        client_tools: false,
        continuation: false,
        held_switch_role_id: None,
        client_tools_called: Vec::new(),
    }
}

#[tokio::test]
async fn unpartitioned_decisions_move_to_day_partitions_whole() {
    let schema = Schema::new("router_partitions");
    let pool = connect_in_schema(&database_url(), schema.name(), 2)
        .await
        .unwrap_or_else(|err| panic!("postgres at {} (set DATABASE_URL): {err}", database_url()));
    let migrations = sqlx::migrate!("./migrations");
    migrations.run_to(9, &pool).await.unwrap();

    // 600 decisions of the old layout, 30 minutes apart over the last 12.5 days across two
    // tenants, every column set; one from 2001 (an old import), one a week ahead (a fast
    // clock), and feedback on some.
    sqlx::query(
        "INSERT INTO routing_decisions (id, occurred_at, tenant_id, user_id, session_id, role_id, route, reasoning, \
         routing_ms, execution_ms, provider, model, routing_model, cache_hit, fallback_used, attempts, \
         model_fallbacks, prompt_tokens, completion_tokens, tools_used, domains, degraded, message, interrupted, \
         client_tools, continuation, held_switch_role_id, client_tools_called, cached_prompt_tokens, cost_nanousd, \
         cost_parts, unpriced_calls, routing_call_avoided, key_id) \
         SELECT 'chat-' || n, now() - n * interval '30 minutes', CASE WHEN n % 3 = 0 THEN 'globex' ELSE 'acme' END, \
         CASE WHEN n % 4 = 0 THEN NULL ELSE 'user-' || n % 5 END, 's-' || n % 17, 'general-assistant', \
         (ARRAY['direct', 'mcp_agent', 'multiagent'])[1 + n % 3], 'because ' || n, n % 400, n % 900, 'openai', \
         'gpt-4o-mini', 'openai/gpt-4o-mini', n % 5 = 0, n % 7 = 0, 1 + n % 2, n % 2, 100 + n, 20 + n, \
         ARRAY['fx__lookup'], ARRAY['finance'], CASE WHEN n % 9 = 0 THEN ARRAY['expert x: timed out'] ELSE '{}' END, \
         'message ' || n, n % 11 = 0, n % 3 = 0, n % 6 = 0, NULL, '{}', n % 13, 1000 * n, \
         jsonb_build_array(jsonb_build_object('kind', 'answer', 'model', 'openai/gpt-4o-mini', 'role_id', \
         'general-assistant', 'prompt_tokens', 100 + n, 'cached_prompt_tokens', 0, 'completion_tokens', 20 + n, \
         'cost_nanousd', 1000 * n, 'priced', true)), 0, n % 5 = 0, CASE WHEN n % 2 = 0 THEN 'k' || n % 3 END \
         FROM generate_series(0, 599) AS n",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO routing_decisions (id, occurred_at, tenant_id, session_id, role_id, route, reasoning, routing_ms, \
         execution_ms, provider, model, routing_model, cache_hit, fallback_used, attempts, model_fallbacks, \
         prompt_tokens, completion_tokens, tools_used, domains, degraded) VALUES \
         ('chat-import', '2001-02-03 04:05:06+00', 'acme', 's', 'general-assistant', 'direct', '', 1, 1, 'openai', \
          'gpt-4o-mini', 'openai/gpt-4o-mini', false, false, 1, 0, 1, 1, '{}', '{}', '{}'), \
         ('chat-fast-clock', now() + interval '7 days', 'acme', 's', 'general-assistant', 'direct', '', 1, 1, \
          'openai', 'gpt-4o-mini', 'openai/gpt-4o-mini', false, false, 1, 0, 1, 1, '{}', '{}', '{}')",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO routing_feedback (response_id, tenant_id, helpful, expected_route, comment, submitted_at) \
         SELECT 'chat-' || n, 'acme', n % 20 = 1, CASE WHEN n % 20 = 2 THEN 'multiagent' END, '', now() \
         FROM generate_series(1, 599, 10) AS n",
    )
    .execute(&pool)
    .await
    .unwrap();
    let before = fingerprint(&pool).await;
    assert_eq!(before.0, 602);
    let acme_week =
        count_where(&pool, "tenant_id = 'acme' AND occurred_at >= now() - interval '7 days' AND occurred_at < now()")
            .await;
    let old_days: Vec<NaiveDate> = sqlx::query_scalar(
        "SELECT DISTINCT (occurred_at AT TIME ZONE 'UTC')::date FROM routing_decisions \
         WHERE occurred_at > '2002-01-01' ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();

    // The router's start: migration 0010, then the keeper.
    let store = PostgresAnalytics::connect(&database_url(), schema.name()).await.unwrap();
    assert_eq!(fingerprint(&pool).await, before, "every row kept as it was");
    partitions::assert_partitioned(&pool, "routing_decisions").await;

    // Each day that held rows has its partition, and so do today and the three days after.
    let partitions = DailyPartitions::new("routing_decisions", "occurred_at").unwrap();
    let days = partitions.days(&pool).await.unwrap();
    let today = Utc::now().date_naive();
    for day in old_days.iter().copied().chain((0..=3).map(|ahead| today.checked_add_days(Days::new(ahead)).unwrap())) {
        assert!(days.contains(&day), "partition of {day} in {days:?}");
    }
    let in_default: Vec<String> =
        sqlx::query_scalar("SELECT id FROM routing_decisions_default").fetch_all(&pool).await.unwrap();
    assert_eq!(in_default, ["chat-import"], "only the old import is outside every day");

    // The indexes the queries rely on are on the partitioned table.
    let mut indexes: Vec<String> = sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes WHERE schemaname = $1 AND tablename = 'routing_decisions'",
    )
    .bind(schema.name())
    .fetch_all(&pool)
    .await
    .unwrap();
    indexes.sort();
    assert_eq!(
        indexes,
        [
            "routing_decisions_pkey",
            "routing_decisions_tenant_key_time",
            "routing_decisions_tenant_time",
            "routing_decisions_tenant_user_time",
            "routing_decisions_time"
        ]
    );

    // Reads across partitions: a moved turn by id, and a week's figures of one tenant.
    let acme = TenantId::parse("acme").unwrap();
    let turn = store.recorded_turn(&acme, "chat-1").await.unwrap().unwrap();
    assert_eq!((turn.route, turn.message.as_deref()), (Route::McpAgent, Some("message 1")));
    let now = Utc::now();
    let week = store.stats(&acme, now - chrono::Duration::days(7), now + chrono::Duration::seconds(1)).await.unwrap();
    assert_eq!(week.total, u64::try_from(acme_week).unwrap());

    // A new turn lands in today's partition; its batch retried is stored once.
    let fresh = [decision("chat-fresh", "acme")];
    store.record(&fresh).await.unwrap();
    store.record(&fresh).await.unwrap();
    let stored: Vec<String> =
        sqlx::query_scalar("SELECT tableoid::regclass::text FROM routing_decisions WHERE id = 'chat-fresh'")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(stored, [partitions.partition_name(fresh[0].occurred_at.date_naive())]);

    // Retention at five days drops every day wholly older, deletes the rest before the cut,
    // and keeps everything after it.
    let cut = Utc::now() - chrono::Duration::days(5);
    let expected: i64 = sqlx::query_scalar("SELECT count(*) FROM routing_decisions WHERE occurred_at < $1")
        .bind(cut)
        .fetch_one(&pool)
        .await
        .unwrap();
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM routing_decisions WHERE occurred_at >= $1")
        .bind(cut)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(store.prune(cut).await.unwrap(), u64::try_from(expected).unwrap());
    assert_eq!(count_where(&pool, "true").await, kept);
    let days = partitions.days(&pool).await.unwrap();
    assert_eq!(days.first().copied(), Some(cut.date_naive()), "the cut's day is the oldest kept");
}
