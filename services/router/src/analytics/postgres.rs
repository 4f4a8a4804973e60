//! Analytics in Postgres (schema `router` by default, its own migrations). The figures are
//! computed by Postgres over the tenant's window, which the (tenant_id, occurred_at) index
//! serves within the window's days: decisions are partitioned by day (migration 0010), the
//! coming days' partitions made ahead by the kit's keeper, and retention drops whole days.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{PgPool, QueryBuilder, Row, postgres::PgRow};
use switchyard_kit::{TenantId, partitions::DailyPartitions, store::StoreError, text::scrub_nul};

use super::{
    AnalyticsStore, Correction, DecisionRecord, Feedback, RecordedTurn, RouteFigures, RoutingStats, Spend,
    StoredCorrection,
    stats::{KeySpend, sort_groups, sort_keys},
};
use crate::route::Route;

pub struct PostgresAnalytics {
    pool: PgPool,
    decisions: DailyPartitions,
}

/// Days after today whose decision partitions exist at all times: the keeper runs at start and
/// hourly, so a keeper stopped for up to this long still leaves no day to the default partition.
pub const DECISION_DAYS_AHEAD: u32 = 3;

/// A failed statement is reported as the store being unavailable — unless Postgres refused
/// what it was given: that error is kept as it is, so the record buffer sets the record aside
/// instead of retrying it forever.
fn unavailable(err: impl Into<StoreError>) -> StoreError {
    match err.into() {
        refused if refused.is_refused_content() => refused,
        StoreError::Database(err) => StoreError::Unavailable(format!("postgres: {err}")),
        other => StoreError::Unavailable(format!("postgres: {other}")),
    }
}

fn partition_unavailable(err: switchyard_kit::partitions::PartitionError) -> StoreError {
    match err {
        switchyard_kit::partitions::PartitionError::Database(err) => unavailable(err),
        other => StoreError::Config(other.to_string()),
    }
}

/// Recorded text as stored: a NUL (which Postgres refuses) as U+FFFD.
fn scrub_nul_all(items: &[String]) -> Vec<String> {
    items.iter().map(|item| scrub_nul(item).into_owned()).collect()
}

impl PostgresAnalytics {
    /// The rows of a stats query over one tenant's window (`$1` tenant, `$2` since, `$3` until).
    async fn window_rows(
        &self,
        sql: impl sqlx::SqlSafeStr,
        tenant: &TenantId,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<PgRow>, sqlx::Error> {
        sqlx::query(sql).bind(tenant.as_str()).bind(since).bind(until).fetch_all(&self.pool).await
    }

    pub async fn connect(url: &str, schema: &str) -> Result<Self, StoreError> {
        let pool = switchyard_kit::postgres::connect_in_schema(url, schema, 4).await.map_err(unavailable)?;
        sqlx::migrate!("./migrations").run(&pool).await.map_err(unavailable)?;
        let decisions = DailyPartitions::new("routing_decisions", "occurred_at")
            .map_err(|err| StoreError::Config(err.to_string()))?;
        let store = Self { pool, decisions };
        // Not fatal: until the keeper's next round, today's decisions go to the default partition.
        if let Err(err) = store.create_partitions_ahead().await {
            tracing::warn!(error = %err, "creating the coming days' decision partitions; retrying within the hour");
        }
        Ok(store)
    }

    /// Today's and the next [`DECISION_DAYS_AHEAD`] days' decision partitions (another replica
    /// may be making them at the same time).
    async fn create_partitions_ahead(&self) -> Result<u32, StoreError> {
        let today = Utc::now().date_naive();
        self.decisions.create_ahead(&self.pool, today, DECISION_DAYS_AHEAD).await.map_err(partition_unavailable)
    }
}

/// Latency percentiles and feedback counts of the rows a query selects, as columns.
const FIGURES: &str = "count(*) AS n, \
     coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY d.routing_ms), 0) AS r50, \
     coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY d.routing_ms), 0) AS r95, \
     coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY d.routing_ms), 0) AS r99, \
     coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY d.execution_ms), 0) AS e50, \
     coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY d.execution_ms), 0) AS e95, \
     count(f.response_id) AS feedback, \
     count(*) FILTER (WHERE f.helpful) AS helpful, \
     count(*) FILTER (WHERE f.expected_route IS NOT NULL AND f.expected_route <> d.route) AS misrouted, \
     count(*) FILTER (WHERE d.cache_hit) AS cache_hits, \
     count(*) FILTER (WHERE d.fallback_used) AS fallbacks, \
     count(*) FILTER (WHERE cardinality(d.degraded) > 0) AS degraded, \
     count(*) FILTER (WHERE d.client_tools) AS client_tools, \
     count(*) FILTER (WHERE d.continuation) AS continuations, \
     count(*) FILTER (WHERE d.held_switch_role_id IS NOT NULL) AS held_switches, \
     count(*) FILTER (WHERE d.routing_call_avoided) AS routing_calls_avoided, \
     coalesce(sum(jsonb_array_length(d.cost_parts)), 0)::bigint AS calls, \
     coalesce(sum(d.prompt_tokens), 0)::bigint AS prompt_tokens, \
     coalesce(sum(d.cached_prompt_tokens), 0)::bigint AS cached_prompt_tokens, \
     coalesce(sum(d.completion_tokens), 0)::bigint AS completion_tokens, \
     coalesce(sum(d.cost_nanousd), 0)::bigint AS cost_nanousd, \
     coalesce(sum(d.unpriced_calls), 0)::bigint AS unpriced_calls";

/// The window's model calls (the parts of each turn's cost), grouped by model, by role and by
/// kind of call in one scan.
const GROUPS: &str = "SELECT c.model, c.role_id, c.kind, \
     grouping(c.model) AS not_model, grouping(c.role_id) AS not_role, \
     count(*) AS calls, \
     coalesce(sum(c.prompt_tokens), 0)::bigint AS prompt_tokens, \
     coalesce(sum(c.cached_prompt_tokens), 0)::bigint AS cached_prompt_tokens, \
     coalesce(sum(c.completion_tokens), 0)::bigint AS completion_tokens, \
     coalesce(sum(c.cost_nanousd), 0)::bigint AS cost_nanousd, \
     count(*) FILTER (WHERE NOT c.priced) AS unpriced_calls \
     FROM routing_decisions d, jsonb_to_recordset(d.cost_parts) AS c(kind text, model text, role_id text, \
     prompt_tokens bigint, cached_prompt_tokens bigint, completion_tokens bigint, cost_nanousd bigint, priced boolean) \
     WHERE d.tenant_id = $1 AND d.occurred_at >= $2 AND d.occurred_at < $3 \
     GROUP BY GROUPING SETS ((c.model), (c.role_id), (c.kind))";

/// The window's turns grouped by API key (turns without one under '').
const KEYS: &str = "SELECT coalesce(d.key_id, '') AS key_id, count(*) AS turns, \
     coalesce(sum(jsonb_array_length(d.cost_parts)), 0)::bigint AS calls, \
     coalesce(sum(d.prompt_tokens), 0)::bigint AS prompt_tokens, \
     coalesce(sum(d.cached_prompt_tokens), 0)::bigint AS cached_prompt_tokens, \
     coalesce(sum(d.completion_tokens), 0)::bigint AS completion_tokens, \
     coalesce(sum(d.cost_nanousd), 0)::bigint AS cost_nanousd, \
     coalesce(sum(d.unpriced_calls), 0)::bigint AS unpriced_calls \
     FROM routing_decisions d \
     WHERE d.tenant_id = $1 AND d.occurred_at >= $2 AND d.occurred_at < $3 \
     GROUP BY coalesce(d.key_id, '')";

fn spend(row: &PgRow) -> Result<Spend, sqlx::Error> {
    let count = |name: &str| row.try_get::<i64, _>(name).map(|n| n.max(0) as u64);
    Ok(Spend {
        calls: count("calls")?,
        prompt_tokens: count("prompt_tokens")?,
        cached_prompt_tokens: count("cached_prompt_tokens")?,
        completion_tokens: count("completion_tokens")?,
        cost_nanousd: row.try_get("cost_nanousd")?,
        unpriced_calls: count("unpriced_calls")?,
    })
}

fn figures(row: &PgRow) -> Result<RouteFigures, sqlx::Error> {
    let count = |name: &str| row.try_get::<i64, _>(name).map(|n| n.max(0) as u64);
    Ok(RouteFigures {
        count: count("n")?,
        routing_p50_ms: row.try_get("r50")?,
        routing_p95_ms: row.try_get("r95")?,
        routing_p99_ms: row.try_get("r99")?,
        execution_p50_ms: row.try_get("e50")?,
        execution_p95_ms: row.try_get("e95")?,
        feedback: count("feedback")?,
        helpful: count("helpful")?,
        misrouted: count("misrouted")?,
        spend: spend(row)?,
    })
}

#[async_trait]
impl AnalyticsStore for PostgresAnalytics {
    async fn record(&self, decisions: &[DecisionRecord]) -> Result<(), StoreError> {
        if decisions.is_empty() {
            return Ok(());
        }
        let mut insert = QueryBuilder::new(
            "INSERT INTO routing_decisions (id, occurred_at, tenant_id, user_id, session_id, role_id, route, \
             reasoning, routing_ms, execution_ms, provider, model, routing_model, cache_hit, fallback_used, \
             attempts, model_fallbacks, prompt_tokens, completion_tokens, tools_used, domains, degraded, message, \
             interrupted, client_tools, continuation, held_switch_role_id, client_tools_called, \
             cached_prompt_tokens, cost_nanousd, cost_parts, unpriced_calls, routing_call_avoided, key_id) ",
        );
        insert.push_values(decisions, |mut row, d| {
            row.push_bind(&d.id)
                .push_bind(d.occurred_at)
                .push_bind(&d.tenant)
                .push_bind(&d.user)
                .push_bind(&d.session_id)
                .push_bind(&d.role_id)
                .push_bind(d.route.as_str())
                .push_bind(scrub_nul(&d.reasoning))
                .push_bind(i32::try_from(d.routing_ms).unwrap_or(i32::MAX))
                .push_bind(i32::try_from(d.execution_ms).unwrap_or(i32::MAX))
                .push_bind(&d.provider)
                .push_bind(&d.model)
                .push_bind(&d.routing_model)
                .push_bind(d.cache_hit)
                .push_bind(d.fallback_used)
                .push_bind(i32::try_from(d.attempts).unwrap_or(i32::MAX))
                .push_bind(i32::try_from(d.model_fallbacks).unwrap_or(i32::MAX))
                .push_bind(i32::try_from(d.prompt_tokens).unwrap_or(i32::MAX))
                .push_bind(i32::try_from(d.completion_tokens).unwrap_or(i32::MAX))
                .push_bind(scrub_nul_all(&d.tools_used))
                .push_bind(scrub_nul_all(&d.domains))
                .push_bind(scrub_nul_all(&d.degraded))
                .push_bind(d.message.as_deref().map(scrub_nul))
                .push_bind(d.interrupted)
                .push_bind(d.client_tools)
                .push_bind(d.continuation)
                .push_bind(d.held_switch_role_id.as_deref().map(scrub_nul))
                .push_bind(scrub_nul_all(&d.client_tools_called))
                .push_bind(i32::try_from(d.cached_prompt_tokens).unwrap_or(i32::MAX))
                .push_bind(d.cost_nanousd)
                .push_bind(sqlx::types::Json(&d.cost_parts))
                .push_bind(i32::try_from(d.cost_parts.iter().filter(|part| !part.priced).count()).unwrap_or(i32::MAX))
                .push_bind(d.routing_call_avoided)
                .push_bind(&d.key_id);
        });
        // A batch retried after a timeout may have landed already. The key holds the partition
        // column; a retry repeats the decision's time, so (id, occurred_at) catches it.
        insert.push(" ON CONFLICT (id, occurred_at) DO NOTHING");
        insert.build().execute(&self.pool).await.map_err(unavailable)?;
        Ok(())
    }

    async fn recorded_turn(&self, tenant: &TenantId, response_id: &str) -> Result<Option<RecordedTurn>, StoreError> {
        let row: Option<(String, Option<String>, Option<String>)> =
            sqlx::query_as("SELECT route, user_id, message FROM routing_decisions WHERE id = $1 AND tenant_id = $2")
                .bind(response_id)
                .bind(tenant.as_str())
                .fetch_optional(&self.pool)
                .await
                .map_err(unavailable)?;
        let Some((route, user, message)) = row else { return Ok(None) };
        let route = route.parse::<Route>().map_err(|err| StoreError::Corrupt(err.to_string()))?;
        Ok(Some(RecordedTurn { route, user, message }))
    }

    async fn put_correction(&self, correction: &Correction) -> Result<i64, StoreError> {
        // A new judgement of the same answer replaces the old row under a new id, so replicas
        // that loaded the old one load the new one too.
        let mut tx = self.pool.begin().await.map_err(unavailable)?;
        sqlx::query("DELETE FROM routing_corrections WHERE response_id = $1")
            .bind(&correction.response_id)
            .execute(&mut *tx)
            .await
            .map_err(unavailable)?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO routing_corrections (tenant_id, user_id, message, route, response_id, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
        )
        .bind(&correction.tenant)
        .bind(&correction.user)
        .bind(scrub_nul(&correction.message))
        .bind(correction.route.as_str())
        .bind(&correction.response_id)
        .bind(correction.created_at)
        .fetch_one(&mut *tx)
        .await
        .map_err(unavailable)?;
        tx.commit().await.map_err(unavailable)?;
        Ok(id)
    }

    async fn corrections_after(&self, after: i64, limit: i64) -> Result<Vec<StoredCorrection>, StoreError> {
        let rows: Vec<(i64, String, String, String, String, String, DateTime<Utc>)> = sqlx::query_as(
            "SELECT id, tenant_id, user_id, message, route, response_id, created_at FROM routing_corrections \
             WHERE id > $1 ORDER BY id LIMIT $2",
        )
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(unavailable)?;
        rows.into_iter()
            .map(|(id, tenant, user, message, route, response_id, created_at)| {
                let route = route.parse::<Route>().map_err(|err| StoreError::Corrupt(err.to_string()))?;
                Ok(StoredCorrection {
                    id,
                    correction: Correction { tenant, user, message, route, response_id, created_at },
                })
            })
            .collect()
    }

    async fn put_feedback(&self, feedback: &Feedback) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO routing_feedback (response_id, tenant_id, helpful, expected_route, comment, submitted_at) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (response_id) DO UPDATE SET helpful = EXCLUDED.helpful, \
             expected_route = EXCLUDED.expected_route, comment = EXCLUDED.comment, submitted_at = EXCLUDED.submitted_at",
        )
        .bind(&feedback.response_id)
        .bind(feedback.tenant.as_str())
        .bind(feedback.helpful)
        .bind(feedback.expected_route.map(Route::as_str))
        .bind(scrub_nul(&feedback.comment))
        .bind(feedback.submitted_at)
        .execute(&self.pool)
        .await
        .map_err(unavailable)?;
        Ok(())
    }

    async fn stats(
        &self,
        tenant: &TenantId,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<RoutingStats, StoreError> {
        // One scan: a row per route plus the overall row (GROUPING SETS).
        let sql = format!(
            "SELECT d.route, grouping(d.route) AS overall, {FIGURES} \
             FROM routing_decisions d LEFT JOIN routing_feedback f ON f.response_id = d.id \
             WHERE d.tenant_id = $1 AND d.occurred_at >= $2 AND d.occurred_at < $3 \
             GROUP BY GROUPING SETS ((d.route), ())"
        );
        // Built from constants only: nothing of the request is in the text.
        let rows = self.window_rows(sqlx::AssertSqlSafe(sql), tenant, since, until).await.map_err(unavailable)?;
        let mut stats = RoutingStats::default();
        for row in &rows {
            let overall: i32 = row.try_get("overall").map_err(unavailable)?;
            let figures = figures(row).map_err(unavailable)?;
            if overall == 1 {
                let count = |name: &str| row.try_get::<i64, _>(name).map(|n| n.max(0) as u64).map_err(unavailable);
                stats.total = figures.count;
                stats.cache_hits = count("cache_hits")?;
                stats.fallbacks = count("fallbacks")?;
                stats.degraded = count("degraded")?;
                stats.client_tools = count("client_tools")?;
                stats.continuations = count("continuations")?;
                stats.held_switches = count("held_switches")?;
                stats.routing_calls_avoided = count("routing_calls_avoided")?;
                stats.overall = figures;
            } else {
                let route: String = row.try_get("route").map_err(unavailable)?;
                if let Ok(route) = route.parse::<Route>() {
                    stats.routes.push((route, figures));
                }
            }
        }
        stats.routes.sort_by_key(|(route, _)| Route::ALL.iter().position(|r| r == route));

        let rows = self.window_rows(GROUPS, tenant, since, until).await.map_err(unavailable)?;
        for row in &rows {
            let spend = spend(row).map_err(unavailable)?;
            let not_model: i32 = row.try_get("not_model").map_err(unavailable)?;
            let not_role: i32 = row.try_get("not_role").map_err(unavailable)?;
            let (groups, column) = match (not_model, not_role) {
                (0, _) => (&mut stats.models, "model"),
                (_, 0) => (&mut stats.roles, "role_id"),
                _ => (&mut stats.call_kinds, "kind"),
            };
            let key: Option<String> = row.try_get(column).map_err(unavailable)?;
            groups.push((key.unwrap_or_default(), spend));
        }
        for groups in [&mut stats.models, &mut stats.roles, &mut stats.call_kinds] {
            sort_groups(groups);
        }

        let rows = self.window_rows(KEYS, tenant, since, until).await.map_err(unavailable)?;
        for row in &rows {
            let turns: i64 = row.try_get("turns").map_err(unavailable)?;
            stats.keys.push(KeySpend {
                key_id: row.try_get("key_id").map_err(unavailable)?,
                turns: turns.max(0) as u64,
                spend: spend(row).map_err(unavailable)?,
            });
        }
        sort_keys(&mut stats.keys);
        Ok(stats)
    }

    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        // The hourly round is also the keeper's: the coming days get their partitions. Their
        // failure does not hold up the retention (today's partition was made earlier).
        if let Err(err) = self.create_partitions_ahead().await {
            tracing::warn!(error = %err, "creating the coming days' decision partitions; retrying within the hour");
        }
        sqlx::query("DELETE FROM routing_feedback WHERE submitted_at < $1")
            .bind(before)
            .execute(&self.pool)
            .await
            .map_err(unavailable)?;
        let pruned = self.decisions.prune_before(&self.pool, before).await.map_err(partition_unavailable)?;
        Ok(pruned.rows)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await.map(|_| ()).map_err(unavailable)
    }
}
