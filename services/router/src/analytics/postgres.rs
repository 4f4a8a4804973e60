//! Analytics in Postgres (schema `router` by default, its own migrations). Decisions are
//! partitioned by day (migration 0010), the coming days' partitions made ahead by the kit's
//! keeper, and retention drops whole days. Each batch of decisions also adds to the hourly
//! rollups (migration 0011) in the same transaction, and GetRoutingStats reads those for the
//! window's whole hours (see [`super::postgres_stats`]).

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{PgPool, QueryBuilder};
use switchyard_kit::{TenantId, partitions::DailyPartitions, store::StoreError, text::scrub_nul};

use super::{
    AnalyticsStore, Correction, DecisionRecord, Feedback, RecordedTurn, RoutingStats, StoredCorrection, postgres_stats,
    rollup::RollupDelta,
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

/// A time as Postgres stores it, in whole microseconds since 2000 (as sqlx sends it: the
/// nanoseconds dropped toward 2000), to match the stored decisions to the batch.
fn stored_micros(at: DateTime<Utc>) -> i64 {
    let epoch = DateTime::<Utc>::from_timestamp(946_684_800, 0).unwrap_or_default();
    (at - epoch).num_microseconds().unwrap_or(i64::MAX)
}

/// Recorded text as stored: a NUL (which Postgres refuses) as U+FFFD.
fn scrub_nul_all(items: &[String]) -> Vec<String> {
    items.iter().map(|item| scrub_nul(item).into_owned()).collect()
}

impl PostgresAnalytics {
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
        insert.push(" ON CONFLICT (id, occurred_at) DO NOTHING RETURNING id, occurred_at");
        let mut tx = self.pool.begin().await.map_err(unavailable)?;
        let stored: Vec<(String, DateTime<Utc>)> =
            insert.build_query_as().fetch_all(&mut *tx).await.map_err(unavailable)?;
        // Only the decisions this statement stored add to the rollups: one stored before (a
        // batch replayed after an outage or a timeout) is skipped above and counted once.
        let mut stored: HashMap<(String, i64), usize> =
            stored.into_iter().fold(HashMap::new(), |mut stored, (id, at)| {
                *stored.entry((id, stored_micros(at))).or_default() += 1;
                stored
            });
        let mut delta = RollupDelta::default();
        for decision in decisions {
            if let Some(left) = stored.get_mut(&(decision.id.clone(), stored_micros(decision.occurred_at)))
                && *left > 0
            {
                *left -= 1;
                delta.add(decision);
            }
        }
        postgres_stats::write_rollup(&mut tx, &delta).await.map_err(unavailable)?;
        tx.commit().await.map_err(unavailable)?;
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
        postgres_stats::stats(&self.pool, tenant, since, until).await.map_err(unavailable)
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
        // The rollups go with the decisions, so a window's figures are the same whichever way
        // they are read.
        postgres_stats::prune_rollups(&self.pool, before).await.map_err(unavailable)?;
        Ok(pruned.rows)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await.map(|_| ()).map_err(unavailable)
    }
}
