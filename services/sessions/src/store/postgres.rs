//! The record and the roles in Postgres, in the service's own schema (so services sharing a
//! database do not share migration bookkeeping). Writes are idempotent upserts guarded by
//! `GREATEST` and sequence checks, so a batch retried after an ambiguous failure, or replayed
//! out of order, never moves a session backwards.
//!
//! The history (switches and messages) is partitioned by month (migration 0003): the kit's
//! keeper makes this month's and the next months' partitions ahead, and the history retention
//! drops whole months.

use std::{borrow::Cow, collections::BTreeMap, time::Duration};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{
    Postgres, Row, Transaction,
    postgres::{PgPool, PgRow},
    types::Json,
};

use switchyard_kit::{
    partitions::{KeptTables, PartitionError, TimePartitions},
    text::scrub_nul,
};

use super::{Record, RecordStore, RoleStore, StoreError};
use crate::domain::{
    CustomTrigger, LiveSession, Message, MessageRole, Role, RoleId, SessionKey, SessionStatus, SwitchEvent,
    SwitchReason, TenantId, UserId,
};

/// How a role's tenant is stored: `''` for the built-in roles (no tenant id is empty).
fn stored_tenant(tenant: Option<&TenantId>) -> &str {
    tenant.map_or("", TenantId::as_str)
}

/// Sessions, their switches and messages, and roles — one pool for both [`RecordStore`] and
/// [`RoleStore`].
pub struct PostgresStore {
    pool: PgPool,
    history: KeptTables,
}

/// Months after this one whose history partitions exist at all times: the keeper runs at
/// start and hourly, so a keeper stopped for weeks still leaves no month to the default
/// partition.
pub const HISTORY_MONTHS_AHEAD: u32 = 1;

impl PostgresStore {
    /// Connects, creates `schema` if needed, runs the migrations in it and makes the history's
    /// partitions for this month and the next.
    pub async fn connect(url: &str, schema: &str) -> Result<Self, StoreError> {
        let pool = switchyard_kit::postgres::connect_in_schema(url, schema, 8).await?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        let history = KeptTables::new(
            vec![
                TimePartitions::monthly("session_switches", "occurred_at").map_err(partition_error)?,
                TimePartitions::monthly("session_messages", "created_at").map_err(partition_error)?,
            ],
            HISTORY_MONTHS_AHEAD,
        );
        // Not fatal: until the keeper's next round, this month's history goes to the default
        // partition.
        if let Err(err) = history.create_ahead(&pool).await {
            tracing::warn!(error = %err, "creating the coming months' history partitions; retrying within the hour");
        }
        Ok(Self { pool, history })
    }
}

fn partition_error(err: PartitionError) -> StoreError {
    match err {
        PartitionError::Database(err) => StoreError::from(err),
        other => StoreError::Config(other.to_string()),
    }
}

/// A value that does not fit its column; refused before anything of the batch is committed.
fn unstorable(what: &str, value: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what} {value} is out of the range the record can store"))
}

fn to_bigint(what: &str, value: u64) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| unstorable(what, value))
}

fn to_int(what: &str, value: u32) -> Result<i32, StoreError> {
    i32::try_from(value).map_err(|_| unstorable(what, value))
}

fn from_millis(ms: i64) -> Result<DateTime<Utc>, StoreError> {
    DateTime::from_timestamp_millis(ms).ok_or_else(|| unstorable("message time (ms)", ms))
}

#[async_trait]
impl RecordStore for PostgresStore {
    async fn write(&self, records: &[Record]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin().await?;
        for record in records {
            write_record(&mut tx, record).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn load_session(&self, key: &SessionKey, recent: usize) -> Result<Option<LiveSession>, StoreError> {
        let mut tx = self.pool.begin().await?;
        // The row and its messages from one snapshot.
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY").execute(&mut *tx).await?;
        let row = sqlx::query(
            "SELECT role_id, status, turn_count, switch_count, message_count, ttl_seconds, metadata,
                    created_at, updated_at, user_id
             FROM sessions WHERE tenant_id = $1 AND session_id = $2",
        )
        .bind(key.tenant.as_str())
        .bind(key.id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let messages = if recent == 0 {
            Vec::new()
        } else {
            sqlx::query(
                "SELECT seq, role, content, role_id, created_at, append_id FROM session_messages
                 WHERE tenant_id = $1 AND session_id = $2 ORDER BY seq DESC LIMIT $3",
            )
            .bind(key.tenant.as_str())
            .bind(key.id.as_str())
            .bind(i64::try_from(recent).unwrap_or(i64::MAX))
            .fetch_all(&mut *tx)
            .await?
        };
        tx.commit().await?;

        let mut recent = messages.iter().map(message_from_row).collect::<Result<Vec<_>, _>>()?;
        recent.reverse();
        let role_id: String = row.try_get("role_id")?;
        let status: String = row.try_get("status")?;
        let Json(metadata): Json<serde_json::Value> = row.try_get("metadata")?;
        let owner = row
            .try_get::<Option<String>, _>("user_id")?
            .map(|user| UserId::parse(&user).map_err(|err| StoreError::Corrupt(format!("session owner: {err}"))))
            .transpose()?;
        Ok(Some(LiveSession {
            key: key.clone(),
            owner,
            role_id: parse_role_id(&role_id)?,
            status: SessionStatus::parse(&status)
                .ok_or_else(|| StoreError::Corrupt(format!("unknown session status `{status}`")))?,
            turn_count: count(&row, "turn_count")?,
            switch_count: count(&row, "switch_count")?,
            message_count: count(&row, "message_count")?,
            created_at: row.try_get("created_at")?,
            updated_at: row.try_get("updated_at")?,
            ttl: Duration::from_secs(count(&row, "ttl_seconds")?),
            metadata: serde_json::from_value::<BTreeMap<String, String>>(metadata)
                .map_err(|err| StoreError::Corrupt(format!("session metadata: {err}")))?,
            recent,
        }))
    }

    async fn history(&self, key: &SessionKey, after: u64, limit: u32) -> Result<Vec<SwitchEvent>, StoreError> {
        // Past i64::MAX there is nothing stored.
        let Ok(after) = i64::try_from(after) else {
            return Ok(Vec::new());
        };
        let rows = sqlx::query(
            "SELECT sequence, from_role_id, to_role_id, reason, reason_detail, from_score, to_score,
                    query_excerpt, occurred_at
             FROM session_switches
             WHERE tenant_id = $1 AND session_id = $2 AND sequence > $3
             ORDER BY sequence LIMIT $4",
        )
        .bind(key.tenant.as_str())
        .bind(key.id.as_str())
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(event_from_row).collect()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn keep_history(&self, cut: Option<DateTime<Utc>>) -> Result<u64, StoreError> {
        self.history.keep(&self.pool, cut).await.map_err(partition_error)
    }
}

/// Applies one record. Updates of a session row that does not exist match nothing and are
/// skipped; the switch event or messages are still kept.
async fn write_record(tx: &mut Transaction<'_, Postgres>, record: &Record) -> Result<(), StoreError> {
    match record {
        Record::SessionCreated(session) => {
            let closed_at = (session.status == SessionStatus::Closed).then_some(session.updated_at);
            sqlx::query(
                "INSERT INTO sessions (tenant_id, session_id, role_id, status, turn_count, switch_count,
                                       message_count, ttl_seconds, metadata, created_at, updated_at, closed_at,
                                       user_id)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
                 ON CONFLICT (tenant_id, session_id) DO NOTHING",
            )
            .bind(session.key.tenant.as_str())
            .bind(session.key.id.as_str())
            .bind(session.role_id.as_str())
            .bind(session.status.as_str())
            .bind(to_bigint("turn_count", session.turn_count)?)
            .bind(to_bigint("switch_count", session.switch_count)?)
            .bind(to_bigint("message_count", session.message_count)?)
            .bind(to_bigint("ttl_seconds", session.ttl.as_secs())?)
            .bind(Json(scrubbed_metadata(&session.metadata)))
            .bind(session.created_at)
            .bind(session.updated_at)
            .bind(closed_at)
            .bind(session.owner.as_ref().map(UserId::as_str))
            .execute(&mut **tx)
            .await?;
        }
        Record::Turns { key, turn_count, at } => {
            sqlx::query(
                "UPDATE sessions
                 SET turn_count = GREATEST(turn_count, $3), updated_at = GREATEST(updated_at, $4)
                 WHERE tenant_id = $1 AND session_id = $2",
            )
            .bind(key.tenant.as_str())
            .bind(key.id.as_str())
            .bind(to_bigint("turn_count", *turn_count)?)
            .bind(*at)
            .execute(&mut **tx)
            .await?;
        }
        Record::Switched { key, event, turn_count } => {
            let sequence = to_bigint("switch sequence", event.sequence)?;
            // The key holds the time (the table is partitioned by it): a retry repeats the
            // time and meets the key; a sequence already stored under another time is skipped
            // by the NOT EXISTS, as the key on the sequence alone did before.
            sqlx::query(
                "INSERT INTO session_switches (tenant_id, session_id, sequence, from_role_id, to_role_id, reason,
                                               reason_detail, from_score, to_score, query_excerpt, occurred_at)
                 SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11
                 WHERE NOT EXISTS (SELECT 1 FROM session_switches
                                   WHERE tenant_id = $1 AND session_id = $2 AND sequence = $3)
                 ON CONFLICT (tenant_id, session_id, sequence, occurred_at) DO NOTHING",
            )
            .bind(key.tenant.as_str())
            .bind(key.id.as_str())
            .bind(sequence)
            .bind(event.from_role_id.as_str())
            .bind(event.to_role_id.as_str())
            .bind(event.reason.as_str())
            .bind(scrub_nul(&event.reason_detail))
            .bind(to_int("from_score", event.from_score)?)
            .bind(to_int("to_score", event.to_score)?)
            .bind(scrub_nul(&event.query_excerpt))
            .bind(event.occurred_at)
            .execute(&mut **tx)
            .await?;
            // The role moves only with a switch at least as new as the last one applied (the
            // right-hand side sees the row as it was before this UPDATE).
            sqlx::query(
                "UPDATE sessions
                 SET role_id = CASE WHEN $3 >= switch_count THEN $4 ELSE role_id END,
                     switch_count = GREATEST(switch_count, $3),
                     turn_count = GREATEST(turn_count, $5),
                     updated_at = GREATEST(updated_at, $6)
                 WHERE tenant_id = $1 AND session_id = $2",
            )
            .bind(key.tenant.as_str())
            .bind(key.id.as_str())
            .bind(sequence)
            .bind(event.to_role_id.as_str())
            .bind(to_bigint("turn_count", *turn_count)?)
            .bind(event.occurred_at)
            .execute(&mut **tx)
            .await?;
        }
        Record::MessagesAppended { key, messages } => {
            if messages.is_empty() {
                return Ok(());
            }
            let mut seqs = Vec::with_capacity(messages.len());
            let mut roles = Vec::with_capacity(messages.len());
            let mut contents = Vec::with_capacity(messages.len());
            let mut role_ids = Vec::with_capacity(messages.len());
            let mut times = Vec::with_capacity(messages.len());
            let mut append_ids = Vec::with_capacity(messages.len());
            for message in messages {
                seqs.push(to_bigint("message seq", message.seq)?);
                roles.push(message.role.as_str());
                contents.push(scrub_nul(&message.content));
                role_ids.push(message.role_id.as_str());
                times.push(from_millis(message.created_at_ms)?);
                append_ids.push((!message.append_id.is_empty()).then_some(message.append_id.as_str()));
            }
            let (Some(&last_seq), Some(&last_time)) = (seqs.iter().max(), times.iter().max()) else {
                return Ok(());
            };
            // As for switches: the key holds the time, and a seq already stored is skipped.
            sqlx::query(
                "INSERT INTO session_messages (tenant_id, session_id, seq, role, content, role_id, created_at, append_id)
                 SELECT $1, $2, m.seq, m.role, m.content, m.role_id, m.created_at, m.append_id
                 FROM UNNEST($3::BIGINT[], $4::TEXT[], $5::TEXT[], $6::TEXT[], $7::TIMESTAMPTZ[], $8::TEXT[])
                      AS m(seq, role, content, role_id, created_at, append_id)
                 WHERE NOT EXISTS (SELECT 1 FROM session_messages s
                                   WHERE s.tenant_id = $1 AND s.session_id = $2 AND s.seq = m.seq)
                 ON CONFLICT (tenant_id, session_id, seq, created_at) DO NOTHING",
            )
            .bind(key.tenant.as_str())
            .bind(key.id.as_str())
            .bind(&seqs)
            .bind(&roles)
            .bind(&contents)
            .bind(&role_ids)
            .bind(&times)
            .bind(&append_ids)
            .execute(&mut **tx)
            .await?;
            sqlx::query(
                "UPDATE sessions
                 SET message_count = GREATEST(message_count, $3), updated_at = GREATEST(updated_at, $4)
                 WHERE tenant_id = $1 AND session_id = $2",
            )
            .bind(key.tenant.as_str())
            .bind(key.id.as_str())
            .bind(last_seq)
            .bind(last_time)
            .execute(&mut **tx)
            .await?;
        }
        Record::Closed { key, at } => {
            sqlx::query(
                "UPDATE sessions
                 SET status = $3, closed_at = COALESCE(closed_at, $4), updated_at = GREATEST(updated_at, $4)
                 WHERE tenant_id = $1 AND session_id = $2",
            )
            .bind(key.tenant.as_str())
            .bind(key.id.as_str())
            .bind(SessionStatus::Closed.as_str())
            .bind(*at)
            .execute(&mut **tx)
            .await?;
        }
    }
    Ok(())
}

/// The metadata as stored: a NUL (which `jsonb` refuses) as U+FFFD, like all recorded text.
fn scrubbed_metadata(metadata: &BTreeMap<String, String>) -> BTreeMap<Cow<'_, str>, Cow<'_, str>> {
    metadata.iter().map(|(key, value)| (scrub_nul(key), scrub_nul(value))).collect()
}

fn count(row: &PgRow, column: &str) -> Result<u64, StoreError> {
    let value: i64 = row.try_get(column)?;
    u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("{column} is negative: {value}")))
}

fn score(row: &PgRow, column: &str) -> Result<u32, StoreError> {
    let value: i32 = row.try_get(column)?;
    u32::try_from(value).map_err(|_| StoreError::Corrupt(format!("{column} is negative: {value}")))
}

fn parse_role_id(text: &str) -> Result<RoleId, StoreError> {
    RoleId::parse(text).map_err(StoreError::Corrupt)
}

fn message_from_row(row: &PgRow) -> Result<Message, StoreError> {
    let role: String = row.try_get("role")?;
    let created_at: DateTime<Utc> = row.try_get("created_at")?;
    Ok(Message {
        seq: count(row, "seq")?,
        role: MessageRole::parse(&role).ok_or_else(|| StoreError::Corrupt(format!("unknown message role `{role}`")))?,
        content: row.try_get("content")?,
        role_id: row.try_get("role_id")?,
        created_at_ms: created_at.timestamp_millis(),
        append_id: row.try_get::<Option<String>, _>("append_id")?.unwrap_or_default(),
    })
}

fn event_from_row(row: &PgRow) -> Result<SwitchEvent, StoreError> {
    let from_role_id: String = row.try_get("from_role_id")?;
    let to_role_id: String = row.try_get("to_role_id")?;
    let reason: String = row.try_get("reason")?;
    Ok(SwitchEvent {
        sequence: count(row, "sequence")?,
        from_role_id: parse_role_id(&from_role_id)?,
        to_role_id: parse_role_id(&to_role_id)?,
        reason: SwitchReason::parse(&reason)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown switch reason `{reason}`")))?,
        reason_detail: row.try_get("reason_detail")?,
        from_score: score(row, "from_score")?,
        to_score: score(row, "to_score")?,
        query_excerpt: row.try_get("query_excerpt")?,
        occurred_at: row.try_get("occurred_at")?,
    })
}

fn role_from_row(row: &PgRow) -> Result<Role, StoreError> {
    let id: String = row.try_get("id")?;
    let tenant: String = row.try_get("tenant_id")?;
    let tenant = if tenant.is_empty() {
        None
    } else {
        Some(TenantId::parse(&tenant).map_err(|err| StoreError::Corrupt(format!("tenant of role `{id}`: {err}")))?)
    };
    let Json(custom_triggers): Json<serde_json::Value> = row.try_get("custom_triggers")?;
    Ok(Role {
        tenant,
        id: parse_role_id(&id)?,
        name: row.try_get("name")?,
        description: row.try_get("description")?,
        domains: row.try_get("domains")?,
        system_prompt: row.try_get("system_prompt")?,
        custom_triggers: serde_json::from_value::<Vec<CustomTrigger>>(custom_triggers)
            .map_err(|err| StoreError::Corrupt(format!("custom triggers of role `{id}`: {err}")))?,
        preferred_model: row.try_get("preferred_model")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

#[async_trait]
impl RoleStore for PostgresStore {
    async fn list(&self) -> Result<Vec<Role>, StoreError> {
        let rows = sqlx::query(
            "SELECT tenant_id, id, name, description, domains, system_prompt, custom_triggers, preferred_model,
                    created_at, updated_at
             FROM roles ORDER BY tenant_id COLLATE \"C\", id COLLATE \"C\"",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(role_from_row).collect()
    }

    async fn insert(&self, role: &Role) -> Result<bool, StoreError> {
        let inserted = sqlx::query(
            "INSERT INTO roles (id, name, description, domains, system_prompt, custom_triggers, preferred_model,
                                created_at, updated_at, tenant_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
             ON CONFLICT (tenant_id, id) DO NOTHING",
        )
        .bind(role.id.as_str())
        .bind(&role.name)
        .bind(&role.description)
        .bind(&role.domains)
        .bind(&role.system_prompt)
        .bind(Json(&role.custom_triggers))
        .bind(&role.preferred_model)
        .bind(role.created_at)
        .bind(role.updated_at)
        .bind(stored_tenant(role.tenant.as_ref()))
        .execute(&self.pool)
        .await?;
        Ok(inserted.rows_affected() == 1)
    }

    async fn update(&self, role: &Role) -> Result<bool, StoreError> {
        let updated = sqlx::query(
            "UPDATE roles
             SET name = $2, description = $3, domains = $4, system_prompt = $5, custom_triggers = $6,
                 preferred_model = $7, updated_at = $8
             WHERE id = $1 AND tenant_id = $9",
        )
        .bind(role.id.as_str())
        .bind(&role.name)
        .bind(&role.description)
        .bind(&role.domains)
        .bind(&role.system_prompt)
        .bind(Json(&role.custom_triggers))
        .bind(&role.preferred_model)
        .bind(role.updated_at)
        .bind(stored_tenant(role.tenant.as_ref()))
        .execute(&self.pool)
        .await?;
        Ok(updated.rows_affected() == 1)
    }

    async fn delete(&self, tenant: Option<&TenantId>, id: &RoleId) -> Result<bool, StoreError> {
        let deleted = sqlx::query("DELETE FROM roles WHERE tenant_id = $1 AND id = $2")
            .bind(stored_tenant(tenant))
            .bind(id.as_str())
            .execute(&self.pool)
            .await?;
        Ok(deleted.rows_affected() == 1)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_values_are_refused() {
        assert_eq!(to_bigint("turn_count", 7).unwrap(), 7);
        assert!(matches!(to_bigint("turn_count", u64::MAX), Err(StoreError::Corrupt(_))));
        assert!(matches!(to_int("from_score", u32::MAX), Err(StoreError::Corrupt(_))));
        assert_eq!(from_millis(1_700_000_000_123).unwrap().timestamp_millis(), 1_700_000_000_123);
        assert!(from_millis(i64::MAX).is_err());
    }
}
