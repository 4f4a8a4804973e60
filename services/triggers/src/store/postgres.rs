//! Registrations in Postgres, in the service's own schema (so services sharing a database do
//! not share migration bookkeeping). Every change bumps a registry version and NOTIFYs it;
//! each replica LISTENs, and also polls the version, so a lost notification (say, during a
//! reconnect) delays convergence by at most one poll interval.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use sqlx::{
    Row,
    postgres::{PgListener, PgPool},
    types::Json,
};
use tokio::{sync::watch, task::JoinHandle};

use super::{Snapshot, StoreError, TriggerStore};
use crate::domain::{RoleId, RoleRegistration, Trigger};

pub struct PostgresStore {
    pool: PgPool,
    channel: String,
    versions: Arc<watch::Sender<u64>>,
    follower: JoinHandle<()>,
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.follower.abort();
    }
}

impl PostgresStore {
    /// Connects, creates the schema if needed, runs migrations, and starts following changes
    /// made by other replicas (checking the version every `poll_interval` as well).
    pub async fn connect(url: &str, schema: &str, poll_interval: Duration) -> Result<Self, StoreError> {
        let pool = switchyard_kit::postgres::connect_in_schema(url, schema, 8).await?;
        sqlx::migrate!("./migrations").run(&pool).await?;

        let version = current_version(&pool).await?;
        let versions = Arc::new(watch::Sender::new(version));
        let channel = channel_name(schema);
        let follower = tokio::spawn(follow_changes(pool.clone(), channel.clone(), versions.clone(), poll_interval));
        Ok(Self { pool, channel, versions, follower })
    }
}

async fn current_version(pool: &PgPool) -> Result<u64, StoreError> {
    let version: i64 = sqlx::query_scalar("SELECT version FROM registry_version").fetch_one(pool).await?;
    Ok(u64::try_from(version).unwrap_or(0))
}

fn publish(versions: &watch::Sender<u64>, version: u64) {
    versions.send_if_modified(|known| {
        let changed = *known != version;
        *known = version;
        changed
    });
}

/// The NOTIFY channel of a schema's registry. Postgres refuses a channel name over 63 bytes,
/// and a schema's name may be 63 bytes itself: a long one is cut, and told apart from others cut
/// alike by a hash of the whole name (FNV-1a: the same in every build, so every replica listens
/// where the others notify).
fn channel_name(schema: &str) -> String {
    const MAX_BYTES: usize = 63;
    let channel = format!("{schema}_registry_changed");
    if channel.len() <= MAX_BYTES {
        return channel;
    }
    let hash = schema
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3));
    let suffix = format!("_{hash:016x}_registry_changed");
    let mut cut = MAX_BYTES - suffix.len();
    while !schema.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{suffix}", &schema[..cut])
}

async fn follow_changes(pool: PgPool, channel: String, versions: Arc<watch::Sender<u64>>, poll_interval: Duration) {
    let mut ticker = tokio::time::interval(poll_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(listener) => listener,
            Err(err) => {
                tracing::warn!(%err, "cannot listen for registry changes, polling only");
                ticker.tick().await;
                if let Ok(version) = current_version(&pool).await {
                    publish(&versions, version);
                }
                continue;
            }
        };
        if let Err(err) = listener.listen(&channel).await {
            tracing::warn!(%err, %channel, "LISTEN failed");
            ticker.tick().await;
            continue;
        }
        loop {
            tokio::select! {
                notification = listener.try_recv() => match notification {
                    Ok(Some(notification)) => {
                        if let Ok(version) = notification.payload().parse() {
                            publish(&versions, version);
                        }
                    }
                    // The connection dropped; `try_recv` reconnects on the next call. Catch
                    // up on anything missed meanwhile.
                    Ok(None) => {
                        if let Ok(version) = current_version(&pool).await {
                            publish(&versions, version);
                        }
                    }
                    Err(err) => {
                        tracing::warn!(%err, "registry change listener failed, reconnecting");
                        break;
                    }
                },
                _ = ticker.tick() => {
                    match current_version(&pool).await {
                        Ok(version) => publish(&versions, version),
                        Err(err) => tracing::debug!(%err, "registry version poll failed"),
                    }
                }
            }
        }
    }
}

#[async_trait]
impl TriggerStore for PostgresStore {
    async fn load(&self) -> Result<Snapshot, StoreError> {
        let mut tx = self.pool.begin().await?;
        // One consistent view of the version and the rows.
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY").execute(&mut *tx).await?;
        let version: i64 = sqlx::query_scalar("SELECT version FROM registry_version").fetch_one(&mut *tx).await?;
        let rows = sqlx::query(
            "SELECT role_id, domains, custom_triggers, description, example_questions, updated_at
                 FROM role_triggers ORDER BY role_id",
        )
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let mut roles = Vec::with_capacity(rows.len());
        for row in rows {
            let role: String = row.try_get("role_id")?;
            let role_id = RoleId::parse(&role)
                .map_err(|reason| StoreError::Corrupt(format!("registration of `{role}`: {reason}")))?;
            let Json(custom_triggers): Json<Vec<Trigger>> = row.try_get("custom_triggers")?;
            let Json(example_questions): Json<Vec<String>> = row.try_get("example_questions")?;
            roles.push(RoleRegistration {
                role_id,
                domains: row.try_get("domains")?,
                custom_triggers,
                description: row.try_get("description")?,
                example_questions,
                updated_at: row.try_get("updated_at")?,
            });
        }
        Ok(Snapshot { version: u64::try_from(version).unwrap_or(0), roles })
    }

    async fn upsert(&self, registration: &RoleRegistration) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO role_triggers (role_id, domains, custom_triggers, description, example_questions, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (role_id) DO UPDATE
             SET domains = EXCLUDED.domains, custom_triggers = EXCLUDED.custom_triggers,
                 description = EXCLUDED.description, example_questions = EXCLUDED.example_questions,
                 updated_at = EXCLUDED.updated_at",
        )
        .bind(registration.role_id.as_str())
        .bind(&registration.domains)
        .bind(Json(&registration.custom_triggers))
        .bind(&registration.description)
        .bind(Json(&registration.example_questions))
        .bind(registration.updated_at)
        .execute(&mut *tx)
        .await?;
        let version = bump_version(&mut tx, &self.channel).await?;
        tx.commit().await?;
        publish(&self.versions, version);
        Ok(version)
    }

    async fn remove(&self, role: &RoleId) -> Result<Option<u64>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let removed =
            sqlx::query("DELETE FROM role_triggers WHERE role_id = $1").bind(role.as_str()).execute(&mut *tx).await?;
        if removed.rows_affected() == 0 {
            return Ok(None);
        }
        let version = bump_version(&mut tx, &self.channel).await?;
        tx.commit().await?;
        publish(&self.versions, version);
        Ok(Some(version))
    }

    fn versions(&self) -> watch::Receiver<u64> {
        self.versions.subscribe()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}

/// Bumps the version inside the writing transaction and queues the notification, which
/// Postgres delivers only if the transaction commits.
async fn bump_version(tx: &mut sqlx::Transaction<'_, sqlx::Postgres>, channel: &str) -> Result<u64, StoreError> {
    let version: i64 = sqlx::query_scalar("UPDATE registry_version SET version = version + 1 RETURNING version")
        .fetch_one(&mut **tx)
        .await?;
    sqlx::query("SELECT pg_notify($1, $2)").bind(channel).bind(version.to_string()).execute(&mut **tx).await?;
    Ok(u64::try_from(version).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::channel_name;

    #[test]
    fn a_long_schemas_channel_fits_postgres_and_stays_its_own() {
        assert_eq!(channel_name("triggers"), "triggers_registry_changed");
        let long = format!("faults_triggers_{}", "0123456789abcdef".repeat(2));
        let other = format!("faults_triggers_{}", "0123456789abcdee".repeat(2));
        for schema in [&long, &other, &"é".repeat(31)] {
            let channel = channel_name(schema);
            assert!(channel.len() <= 63, "{channel} is {} bytes", channel.len());
            assert!(channel.ends_with("_registry_changed"), "{channel}");
        }
        assert_ne!(channel_name(&long), channel_name(&other));
        assert_eq!(channel_name(&long), channel_name(&long.clone()));
    }
}
