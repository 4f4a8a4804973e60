//! Analytics in Postgres (schema `router` by default, its own migrations). Decisions are
//! partitioned by day (migration 0010), the coming days' partitions made ahead by the kit's
//! keeper, and retention drops whole days. Each batch of decisions also adds to the hourly
//! rollups (migration 0011) in the same transaction, and GetRoutingStats reads those for the
//! window's whole hours (see [`super::postgres_stats`]).

use std::{borrow::Cow, collections::HashMap};

use async_trait::async_trait;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use sqlx::PgPool;
use switchyard_kit::{TenantId, partitions::DailyPartitions, store::StoreError, text::scrub_nul};

use super::{
    AnalyticsStore, Correction, DecisionRecord, Feedback, RecordedTurn, RoutingStats, StoredCorrection, postgres_stats,
    rollup::RollupDelta,
};
use crate::{cost::CallCost, route::Route};

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
fn scrub_nul_all(items: &[String]) -> Vec<Cow<'_, str>> {
    items.iter().map(|item| scrub_nul(item)).collect()
}

/// Inserts a batch of decisions given as a JSON array of [`StoredDecision`] rows, returning
/// the rows stored (a decision already there is skipped).
const INSERT_DECISIONS: &str = "INSERT INTO routing_decisions (id, occurred_at, tenant_id, user_id, session_id, \
    role_id, route, reasoning, routing_ms, execution_ms, provider, model, routing_model, cache_hit, fallback_used, \
    attempts, model_fallbacks, prompt_tokens, completion_tokens, tools_used, domains, degraded, message, \
    interrupted, client_tools, continuation, held_switch_role_id, client_tools_called, cached_prompt_tokens, \
    cost_nanousd, cost_parts, unpriced_calls, routing_call_avoided, key_id) \
    SELECT id, occurred_at, tenant_id, user_id, session_id, role_id, route, reasoning, routing_ms, execution_ms, \
    provider, model, routing_model, cache_hit, fallback_used, attempts, model_fallbacks, prompt_tokens, \
    completion_tokens, tools_used, domains, degraded, message, interrupted, client_tools, continuation, \
    held_switch_role_id, client_tools_called, cached_prompt_tokens, cost_nanousd, cost_parts, unpriced_calls, \
    routing_call_avoided, key_id \
    FROM json_to_recordset($1::json) AS d(id text, occurred_at timestamptz, tenant_id text, user_id text, \
    session_id text, role_id text, route text, reasoning text, routing_ms integer, execution_ms integer, \
    provider text, model text, routing_model text, cache_hit boolean, fallback_used boolean, attempts integer, \
    model_fallbacks integer, prompt_tokens integer, completion_tokens integer, tools_used text[], domains text[], \
    degraded text[], message text, interrupted boolean, client_tools boolean, continuation boolean, \
    held_switch_role_id text, client_tools_called text[], cached_prompt_tokens integer, cost_nanousd bigint, \
    cost_parts jsonb, unpriced_calls integer, routing_call_avoided boolean, key_id text) \
    ON CONFLICT (id, occurred_at) DO NOTHING RETURNING id, occurred_at";

/// A decision as one row of [`INSERT_DECISIONS`]' JSON: the columns' names and types, free
/// text with NULs scrubbed, counts clamped to the columns' `integer`.
#[derive(Serialize)]
struct StoredDecision<'a> {
    id: &'a str,
    /// RFC 3339 with microseconds, Postgres's precision (the nanoseconds dropped, as sqlx does).
    occurred_at: String,
    tenant_id: &'a str,
    user_id: Option<&'a str>,
    session_id: &'a str,
    role_id: &'a str,
    route: &'static str,
    reasoning: Cow<'a, str>,
    routing_ms: i32,
    execution_ms: i32,
    provider: &'a str,
    model: &'a str,
    routing_model: &'a str,
    cache_hit: bool,
    fallback_used: bool,
    attempts: i32,
    model_fallbacks: i32,
    prompt_tokens: i32,
    completion_tokens: i32,
    tools_used: Vec<Cow<'a, str>>,
    domains: Vec<Cow<'a, str>>,
    degraded: Vec<Cow<'a, str>>,
    message: Option<Cow<'a, str>>,
    interrupted: bool,
    client_tools: bool,
    continuation: bool,
    held_switch_role_id: Option<Cow<'a, str>>,
    client_tools_called: Vec<Cow<'a, str>>,
    cached_prompt_tokens: i32,
    cost_nanousd: i64,
    cost_parts: &'a [CallCost],
    unpriced_calls: i32,
    routing_call_avoided: bool,
    key_id: Option<&'a str>,
}

fn column_int(value: impl TryInto<i32>) -> i32 {
    value.try_into().unwrap_or(i32::MAX)
}

impl<'a> StoredDecision<'a> {
    fn of(d: &'a DecisionRecord) -> Self {
        Self {
            id: &d.id,
            occurred_at: d.occurred_at.to_rfc3339_opts(SecondsFormat::Micros, true),
            tenant_id: &d.tenant,
            user_id: d.user.as_deref(),
            session_id: &d.session_id,
            role_id: &d.role_id,
            route: d.route.as_str(),
            reasoning: scrub_nul(&d.reasoning),
            routing_ms: column_int(d.routing_ms),
            execution_ms: column_int(d.execution_ms),
            provider: &d.provider,
            model: &d.model,
            routing_model: &d.routing_model,
            cache_hit: d.cache_hit,
            fallback_used: d.fallback_used,
            attempts: column_int(d.attempts),
            model_fallbacks: column_int(d.model_fallbacks),
            prompt_tokens: column_int(d.prompt_tokens),
            completion_tokens: column_int(d.completion_tokens),
            tools_used: scrub_nul_all(&d.tools_used),
            domains: scrub_nul_all(&d.domains),
            degraded: scrub_nul_all(&d.degraded),
            message: d.message.as_deref().map(scrub_nul),
            interrupted: d.interrupted,
            client_tools: d.client_tools,
            continuation: d.continuation,
            held_switch_role_id: d.held_switch_role_id.as_deref().map(scrub_nul),
            client_tools_called: scrub_nul_all(&d.client_tools_called),
            cached_prompt_tokens: column_int(d.cached_prompt_tokens),
            cost_nanousd: d.cost_nanousd,
            cost_parts: &d.cost_parts,
            unpriced_calls: column_int(d.cost_parts.iter().filter(|part| !part.priced).count()),
            routing_call_avoided: d.routing_call_avoided,
            key_id: d.key_id.as_deref(),
        }
    }
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
        // One statement whatever the batch's size: the batch goes as one JSON document of rows
        // (`json`, not `jsonb`: parsed once, no 256 MB cap on a batch of long messages). A
        // multi-row VALUES would be a different statement, parsed and planned anew, for each size.
        let rows: Vec<StoredDecision<'_>> = decisions.iter().map(StoredDecision::of).collect();
        let rows = serde_json::to_string(&rows).map_err(|err| StoreError::Corrupt(format!("decision batch: {err}")))?;
        // A batch retried after a timeout may have landed already. The key holds the partition
        // column; a retry repeats the decision's time, so (id, occurred_at) catches it.
        let insert = sqlx::query_as::<_, (String, DateTime<Utc>)>(INSERT_DECISIONS).bind(rows);
        let mut tx = self.pool.begin().await.map_err(unavailable)?;
        let stored: Vec<(String, DateTime<Utc>)> = insert.fetch_all(&mut *tx).await.map_err(unavailable)?;
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
