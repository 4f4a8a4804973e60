//! The usage record in Postgres (schema `mcp_gateway` by default, its own migrations).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row};
use switchyard_kit::text::scrub_nul;

use super::{SessionKey, StoreError, UsageStore, embedding_from_bytes, embedding_to_bytes};
use crate::domain::{ShownMatch, UsagePair, UsageRecord, context_text};

pub struct PostgresUsageStore {
    pool: PgPool,
}

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
        Ok(Self { pool })
    }
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
                UsageRecord::SetContext { key, query, intent, at } => {
                    sqlx::query(
                        "INSERT INTO context_events (tenant, session_id, query, intent, created_at) \
                         VALUES ($1, $2, $3, $4, $5)",
                    )
                    .bind(key.tenant.as_str())
                    .bind(key.id.as_str())
                    .bind(scrub_nul(query))
                    .bind(intent.as_deref().map(scrub_nul))
                    .bind(at)
                    .execute(&mut *tx)
                    .await
                    .map_err(unavailable)?;
                }
                UsageRecord::ToolCall {
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
                         context_intent, context_embedding, in_filtered_list, is_error, duration_ms, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
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
                    .execute(&mut *tx)
                    .await
                    .map_err(unavailable)?;
                }
            }
        }
        tx.commit().await.map_err(unavailable)
    }

    async fn history(&self, limit: usize) -> Result<Vec<UsagePair>, StoreError> {
        let rows = sqlx::query(
            "SELECT context_query, context_intent, tool, context_embedding FROM tool_calls \
             WHERE context_query IS NOT NULL AND NOT is_error ORDER BY created_at DESC, id DESC LIMIT $1",
        )
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(unavailable)?;
        rows.into_iter()
            .map(|row| {
                let query: String = row.try_get("context_query").map_err(unavailable)?;
                let intent: Option<String> = row.try_get("context_intent").map_err(unavailable)?;
                let embedding: Option<Vec<u8>> = row.try_get("context_embedding").map_err(unavailable)?;
                Ok(UsagePair {
                    context: context_text(&query, intent.as_deref()),
                    tool: row.try_get("tool").map_err(unavailable)?,
                    embedding: embedding.as_deref().map(embedding_from_bytes).transpose()?,
                })
            })
            .collect()
    }

    async fn session_records(&self, key: &SessionKey, limit: usize) -> Result<Vec<UsageRecord>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let contexts = sqlx::query(
            "SELECT query, intent, created_at FROM context_events WHERE tenant = $1 AND session_id = $2 \
             ORDER BY created_at DESC, id DESC LIMIT $3",
        )
        .bind(key.tenant.as_str())
        .bind(key.id.as_str())
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(unavailable)?;
        let calls = sqlx::query(
            "SELECT tool, server, upstream_tool, context_query, context_intent, context_embedding, in_filtered_list, \
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
}
