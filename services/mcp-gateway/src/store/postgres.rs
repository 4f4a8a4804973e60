//! The usage record in Postgres (schema `mcp_gateway` by default, its own migrations). The
//! audit trail is partitioned by day (migration 0003): the kit's keeper makes the coming days'
//! partitions ahead, and retention drops whole days. The usage record (`context_events`,
//! `tool_calls`) is partitioned by month (migration 0004): the keeper makes this month's and
//! the next months' partitions ahead, and the usage retention drops whole months.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use sqlx::{PgPool, Row};
use switchyard_kit::{
    partitions::{DailyPartitions, KeptTables, PartitionError, TimePartitions},
    text::scrub_nul,
};
use uuid::Uuid;

use super::{SessionKey, StoreError, UsageStore, embedding_from_bytes, embedding_to_bytes};
use crate::{
    audit::{AuditQuery, AuditRecord, Outcome},
    domain::{ShownMatch, UsagePair, UsageRecord, context_text},
};

pub struct PostgresUsageStore {
    pool: PgPool,
    audit: DailyPartitions,
    usage: KeptTables,
}

/// Days after today whose audit partitions exist at all times: the keeper runs at start and
/// hourly, so a keeper stopped for up to this long still leaves no day to the default partition.
pub const AUDIT_DAYS_AHEAD: u32 = 3;

/// Months after this one whose usage partitions exist at all times: the keeper runs at start
/// and hourly, so a keeper stopped for weeks still leaves no month to the default partition.
pub const USAGE_MONTHS_AHEAD: u32 = 1;

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

impl PostgresUsageStore {
    pub async fn connect(url: &str, schema: &str) -> Result<Self, StoreError> {
        let pool = switchyard_kit::postgres::connect_in_schema(url, schema, 4).await.map_err(unavailable)?;
        sqlx::migrate!("./migrations").run(&pool).await.map_err(unavailable)?;
        let audit =
            DailyPartitions::new("tool_call_audit", "created_at").map_err(|err| StoreError::Config(err.to_string()))?;
        let usage = KeptTables::new(
            vec![
                TimePartitions::monthly("context_events", "created_at").map_err(partition_unavailable)?,
                TimePartitions::monthly("tool_calls", "created_at").map_err(partition_unavailable)?,
            ],
            USAGE_MONTHS_AHEAD,
        );
        let store = Self { pool, audit, usage };
        // Not fatal: until the keeper's next round, today's records go to the default partition.
        if let Err(err) = store.create_partitions_ahead().await {
            tracing::warn!(error = %err, "creating the coming days' audit partitions; retrying within the hour");
        }
        if let Err(err) = store.usage.create_ahead(&store.pool).await {
            tracing::warn!(error = %err, "creating the coming months' usage partitions; retrying within the hour");
        }
        Ok(store)
    }

    /// Today's and the next [`AUDIT_DAYS_AHEAD`] days' audit partitions (another replica may be
    /// making them at the same time).
    async fn create_partitions_ahead(&self) -> Result<u32, StoreError> {
        let today = Utc::now().date_naive();
        self.audit.create_ahead(&self.pool, today, AUDIT_DAYS_AHEAD).await.map_err(partition_unavailable)
    }
}

fn partition_unavailable(err: PartitionError) -> StoreError {
    match err {
        PartitionError::Database(err) => unavailable(err),
        other => StoreError::Config(other.to_string()),
    }
}

/// A usage record's id as read back; the nil id for a row written before records had ids
/// (migration 0005).
fn record_id(row: &sqlx::postgres::PgRow) -> Result<Uuid, StoreError> {
    let id: Option<Uuid> = row.try_get("record_id").map_err(unavailable)?;
    Ok(id.unwrap_or_default())
}

fn shown_flag(shown: ShownMatch) -> Option<bool> {
    match shown {
        ShownMatch::NoList => None,
        ShownMatch::InList => Some(true),
        ShownMatch::NotInList => Some(false),
    }
}

#[async_trait]
impl UsageStore for PostgresUsageStore {
    async fn record(&self, records: &[UsageRecord]) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(unavailable)?;
        for record in records {
            match record {
                // A retried batch repeats each record's id and time: what landed before is skipped.
                UsageRecord::SetContext { id, key, query, intent, at } => {
                    sqlx::query(
                        "INSERT INTO context_events (tenant, session_id, query, intent, created_at, record_id) \
                         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (record_id, created_at) DO NOTHING",
                    )
                    .bind(key.tenant.as_str())
                    .bind(key.id.as_str())
                    .bind(scrub_nul(query))
                    .bind(intent.as_deref().map(scrub_nul))
                    .bind(at)
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(unavailable)?;
                }
                UsageRecord::ToolCall {
                    id,
                    key,
                    tool,
                    server,
                    upstream_tool,
                    context_query,
                    context_intent,
                    context_embedding,
                    shown,
                    is_error,
                    duration_ms,
                    at,
                } => {
                    sqlx::query(
                        "INSERT INTO tool_calls (tenant, session_id, tool, server, upstream_tool, context_query, \
                         context_intent, context_embedding, in_filtered_list, is_error, duration_ms, created_at, \
                         record_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
                         ON CONFLICT (record_id, created_at) DO NOTHING",
                    )
                    .bind(key.tenant.as_str())
                    .bind(key.id.as_str())
                    .bind(scrub_nul(tool))
                    .bind(scrub_nul(server))
                    .bind(scrub_nul(upstream_tool))
                    .bind(context_query.as_deref().map(scrub_nul))
                    .bind(context_intent.as_deref().map(scrub_nul))
                    .bind(context_embedding.as_deref().map(embedding_to_bytes))
                    .bind(shown_flag(*shown))
                    .bind(is_error)
                    .bind(i64::try_from(*duration_ms).unwrap_or(i64::MAX))
                    .bind(at)
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(unavailable)?;
                }
                UsageRecord::Audit(audit) => {
                    sqlx::query(
                        "INSERT INTO tool_call_audit (id, created_at, tenant, user_id, role, groups, session_id, server, \
                         tool, arguments_sha256, arguments_bytes, arguments, outcome, error, duration_ms, policy) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) \
                         ON CONFLICT (id, created_at) DO NOTHING",
                    )
                    .bind(audit.id)
                    .bind(audit.at)
                    .bind(scrub_nul(&audit.tenant))
                    .bind(audit.user.as_deref().map(scrub_nul))
                    .bind(audit.role.as_deref().map(scrub_nul))
                    .bind(audit.groups.iter().map(|g| scrub_nul(g)).collect::<Vec<_>>())
                    .bind(audit.session_id.as_deref().map(scrub_nul))
                    .bind(scrub_nul(&audit.server))
                    .bind(scrub_nul(&audit.tool))
                    .bind(&audit.arguments_sha256)
                    .bind(i64::try_from(audit.arguments_bytes).unwrap_or(i64::MAX))
                    .bind(audit.arguments.as_ref().map(|v| sqlx::types::Json(scrub_json(v))))
                    .bind(audit.outcome.as_str())
                    .bind(audit.error.as_deref().map(scrub_nul))
                    .bind(i64::try_from(audit.duration_ms).unwrap_or(i64::MAX))
                    .bind(audit.policy.as_deref().map(scrub_nul))
                    .execute(&mut *tx)
                    .await
                    .map_err(unavailable)?;
                }
            }
        }
        tx.commit().await.map_err(unavailable)
    }

    async fn history(&self, limit: usize) -> Result<Vec<UsagePair>, StoreError> {
        let mut pairs = Vec::with_capacity(limit.min(65_536));
        self.each_history_pair(limit, &mut |pair| pairs.push(pair)).await?;
        Ok(pairs)
    }

    async fn each_history_pair(
        &self,
        limit: usize,
        each: &mut (dyn FnMut(UsagePair) + Send),
    ) -> Result<(), StoreError> {
        let rows = sqlx::query(
            "SELECT context_query, context_intent, tool, context_embedding FROM tool_calls \
             WHERE context_query IS NOT NULL AND NOT is_error ORDER BY created_at DESC, id DESC LIMIT $1",
        )
        .bind(i64::try_from(limit).unwrap_or(i64::MAX));
        // Streamed, each row converted and handed on as it comes: fetching all rows first
        // kept the whole history twice at each reload (every row's buffer beside its pair), a
        // peak of tens of MiB a minute at the default limit that the allocator kept as resident.
        let mut rows = rows.fetch(&self.pool);
        while let Some(row) = rows.try_next().await.map_err(unavailable)? {
            let query: String = row.try_get("context_query").map_err(unavailable)?;
            let intent: Option<String> = row.try_get("context_intent").map_err(unavailable)?;
            let embedding: Option<&[u8]> = row.try_get("context_embedding").map_err(unavailable)?;
            each(UsagePair {
                context: context_text(&query, intent.as_deref()),
                tool: row.try_get("tool").map_err(unavailable)?,
                embedding: embedding.map(embedding_from_bytes).transpose()?,
            });
        }
        Ok(())
    }

    async fn session_records(&self, key: &SessionKey, limit: usize) -> Result<Vec<UsageRecord>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let contexts = sqlx::query(
            "SELECT record_id, query, intent, created_at FROM context_events WHERE tenant = $1 AND session_id = $2 \
             ORDER BY created_at DESC, id DESC LIMIT $3",
        )
        .bind(key.tenant.as_str())
        .bind(key.id.as_str())
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(unavailable)?;
        let calls = sqlx::query(
            "SELECT record_id, tool, server, upstream_tool, context_query, context_intent, context_embedding, in_filtered_list, \
             is_error, duration_ms, created_at FROM tool_calls WHERE tenant = $1 AND session_id = $2 \
             ORDER BY created_at DESC, id DESC LIMIT $3",
        )
        .bind(key.tenant.as_str())
        .bind(key.id.as_str())
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(unavailable)?;
        let mut records: Vec<(DateTime<Utc>, UsageRecord)> = Vec::new();
        for row in calls {
            let at: DateTime<Utc> = row.try_get("created_at").map_err(unavailable)?;
            let embedding: Option<Vec<u8>> = row.try_get("context_embedding").map_err(unavailable)?;
            let shown = match row.try_get::<Option<bool>, _>("in_filtered_list").map_err(unavailable)? {
                None => ShownMatch::NoList,
                Some(true) => ShownMatch::InList,
                Some(false) => ShownMatch::NotInList,
            };
            let duration: i64 = row.try_get("duration_ms").map_err(unavailable)?;
            records.push((
                at,
                UsageRecord::ToolCall {
                    id: record_id(&row)?,
                    key: key.clone(),
                    tool: row.try_get("tool").map_err(unavailable)?,
                    server: row.try_get("server").map_err(unavailable)?,
                    upstream_tool: row.try_get("upstream_tool").map_err(unavailable)?,
                    context_query: row.try_get("context_query").map_err(unavailable)?,
                    context_intent: row.try_get("context_intent").map_err(unavailable)?,
                    context_embedding: embedding.as_deref().map(embedding_from_bytes).transpose()?,
                    shown,
                    is_error: row.try_get("is_error").map_err(unavailable)?,
                    duration_ms: u64::try_from(duration).unwrap_or(0),
                    at,
                },
            ));
        }
        for row in contexts {
            let at: DateTime<Utc> = row.try_get("created_at").map_err(unavailable)?;
            records.push((
                at,
                UsageRecord::SetContext {
                    id: record_id(&row)?,
                    key: key.clone(),
                    query: row.try_get("query").map_err(unavailable)?,
                    intent: row.try_get("intent").map_err(unavailable)?,
                    at,
                },
            ));
        }
        // Stable, calls first: a set_context and the call it led to may share a millisecond,
        // and the call is the newer.
        records.sort_by_key(|record| std::cmp::Reverse(record.0));
        records.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        Ok(records.into_iter().map(|(_, record)| record).collect())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await.map_err(unavailable)?;
        Ok(())
    }

    async fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, created_at, tenant, user_id, role, groups, session_id, server, tool, arguments_sha256, \
             arguments_bytes, arguments, outcome, error, duration_ms, policy FROM tool_call_audit \
             WHERE ($1::timestamptz IS NULL OR created_at >= $1) AND ($2::timestamptz IS NULL OR created_at < $2) \
             AND ($3::text IS NULL OR tenant = $3) AND ($4::text IS NULL OR user_id = $4) \
             AND ($5::text IS NULL OR session_id = $5) AND ($6::text IS NULL OR server = $6) \
             AND ($7::text IS NULL OR tool = $7) AND ($8::text IS NULL OR outcome = $8) \
             AND ($9::timestamptz IS NULL OR (created_at, id) < ($9, $10::uuid)) \
             ORDER BY created_at DESC, id DESC LIMIT $11",
        )
        .bind(query.from)
        .bind(query.to)
        .bind(query.tenant.as_deref())
        .bind(query.user.as_deref())
        .bind(query.session_id.as_deref())
        .bind(query.server.as_deref())
        .bind(query.tool.as_deref())
        .bind(query.outcome.map(Outcome::as_str))
        .bind(query.after.map(|c| c.at))
        .bind(query.after.map(|c| c.id))
        .bind(i64::try_from(query.limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(unavailable)?;
        rows.into_iter()
            .map(|row| {
                let outcome: String = row.try_get("outcome").map_err(unavailable)?;
                let arguments: Option<sqlx::types::Json<serde_json::Value>> =
                    row.try_get("arguments").map_err(unavailable)?;
                Ok(AuditRecord {
                    id: row.try_get("id").map_err(unavailable)?,
                    at: row.try_get("created_at").map_err(unavailable)?,
                    tenant: row.try_get("tenant").map_err(unavailable)?,
                    user: row.try_get("user_id").map_err(unavailable)?,
                    role: row.try_get("role").map_err(unavailable)?,
                    groups: row.try_get("groups").map_err(unavailable)?,
                    session_id: row.try_get("session_id").map_err(unavailable)?,
                    server: row.try_get("server").map_err(unavailable)?,
                    tool: row.try_get("tool").map_err(unavailable)?,
                    arguments_sha256: row.try_get("arguments_sha256").map_err(unavailable)?,
                    arguments_bytes: u64::try_from(row.try_get::<i64, _>("arguments_bytes").map_err(unavailable)?)
                        .unwrap_or(0),
                    arguments: arguments.map(|json| json.0),
                    outcome: Outcome::parse(&outcome)
                        .ok_or_else(|| StoreError::Corrupt(format!("audit outcome `{outcome}`")))?,
                    error: row.try_get("error").map_err(unavailable)?,
                    duration_ms: u64::try_from(row.try_get::<i64, _>("duration_ms").map_err(unavailable)?).unwrap_or(0),
                    policy: row.try_get("policy").map_err(unavailable)?,
                })
            })
            .collect()
    }

    async fn prune_audit(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        // The hourly round is also the keeper's: the coming days get their partitions. Their
        // failure does not hold up the retention (today's partition was made earlier).
        if let Err(err) = self.create_partitions_ahead().await {
            tracing::warn!(error = %err, "creating the coming days' audit partitions; retrying within the hour");
        }
        let pruned = self.audit.prune_before(&self.pool, before).await.map_err(partition_unavailable)?;
        Ok(pruned.rows)
    }

    async fn keep_usage(&self, cut: Option<DateTime<Utc>>) -> Result<u64, StoreError> {
        self.usage.keep(&self.pool, cut).await.map_err(partition_unavailable)
    }
}

/// Postgres `jsonb` holds no NUL character: strings in kept arguments lose theirs.
fn scrub_json(value: &serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::String(text) => serde_json::Value::String(scrub_nul(text).into_owned()),
        serde_json::Value::Array(items) => serde_json::Value::Array(items.iter().map(scrub_json).collect()),
        serde_json::Value::Object(map) => {
            serde_json::Value::Object(map.iter().map(|(k, v)| (scrub_nul(k).into_owned(), scrub_json(v))).collect())
        }
        other => other.clone(),
    }
}
