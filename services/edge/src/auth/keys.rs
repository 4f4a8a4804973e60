//! API keys: `sy_<id>_<secret>`, 256 random bits of secret, kept in Postgres as a SHA-256
//! digest only. `switchyard keys create|list|revoke` manages them; the edge checks each
//! presented key against the table, remembering answers (including "no such key") for a short
//! time so a busy key costs no query per request. A revoked key stops working within that
//! time on every replica.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use base64::Engine;
use chrono::{DateTime, Utc};
use rand::RngCore;
use sha2::{Digest, Sha256};
use sqlx::{PgPool, Row};
use switchyard_kit::{TenantId, UserId, postgres::connect_in_schema};

use super::{Caller, KEY_PREFIX};
use crate::error::ApiError;

/// Answers remembered at most; past it, expired ones go, then everything.
const CACHE_ENTRIES: usize = 10_000;

/// A key's record (never its secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub id: String,
    pub tenant: String,
    pub user: Option<String>,
    pub name: String,
    pub admin: bool,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A key just created: the only time its full text exists.
#[derive(Debug, Clone)]
pub struct NewKey {
    pub secret: String,
    pub key: ApiKey,
}

/// Answers by key digest: the caller (or none, for an unknown key) and when it was looked up.
type Answers = HashMap<[u8; 32], (Option<Caller>, Instant)>;

pub struct KeyStore {
    pool: PgPool,
    cache_ttl: Duration,
    cache: Mutex<Answers>,
}

impl std::fmt::Debug for KeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyStore").field("cache_ttl", &self.cache_ttl).finish_non_exhaustive()
    }
}

impl KeyStore {
    /// Opens the key table in `schema` (created, with its migrations, on first use).
    pub async fn connect(database_url: &str, schema: &str, cache_ttl: Duration) -> anyhow::Result<Self> {
        let pool = connect_in_schema(database_url, schema, 4).await?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        Ok(Self { pool, cache_ttl, cache: Mutex::new(HashMap::new()) })
    }

    pub async fn ping(&self) -> Result<(), sqlx::Error> {
        sqlx::query("SELECT 1").execute(&self.pool).await.map(|_| ())
    }

    /// Creates a key for `tenant` (and `user`); returns its text, shown once.
    pub async fn create(
        &self,
        tenant: &TenantId,
        user: Option<&UserId>,
        name: &str,
        admin: bool,
    ) -> anyhow::Result<NewKey> {
        // Postgres refuses a NUL in text: say which field, not what the database said.
        switchyard_kit::text::reject_nul("name", name)?;
        let mut secret = [0_u8; 32];
        rand::rng().fill_bytes(&mut secret);
        let mut id = [0_u8; 6];
        rand::rng().fill_bytes(&mut id);
        let id: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let text = format!("{KEY_PREFIX}{id}_{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret));
        let row = sqlx::query(
            "INSERT INTO api_keys (id, key_hash, tenant_id, user_id, name, admin) VALUES ($1, $2, $3, $4, $5, $6) \
             RETURNING created_at",
        )
        .bind(&id)
        .bind(digest(&text).as_slice())
        .bind(tenant.as_str())
        .bind(user.map(UserId::as_str))
        .bind(name)
        .bind(admin)
        .fetch_one(&self.pool)
        .await?;
        let key = ApiKey {
            id,
            tenant: tenant.as_str().to_owned(),
            user: user.map(|u| u.as_str().to_owned()),
            name: name.to_owned(),
            admin,
            created_at: row.try_get("created_at")?,
            revoked_at: None,
        };
        Ok(NewKey { secret: text, key })
    }

    /// Revokes a key by id; false when there is no such live key.
    pub async fn revoke(&self, id: &str) -> anyhow::Result<bool> {
        let done = sqlx::query("UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL")
            .bind(id)
            .execute(&self.pool)
            .await?;
        // This replica forgets at once; others within the cache time.
        if let Ok(mut cache) = self.cache.lock() {
            cache.clear();
        }
        Ok(done.rows_affected() == 1)
    }

    /// Every key, or one tenant's, newest first.
    pub async fn list(&self, tenant: Option<&TenantId>) -> anyhow::Result<Vec<ApiKey>> {
        let rows = sqlx::query(
            "SELECT id, tenant_id, user_id, name, admin, created_at, revoked_at FROM api_keys \
             WHERE $1::text IS NULL OR tenant_id = $1 ORDER BY created_at DESC, id",
        )
        .bind(tenant.map(TenantId::as_str))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(ApiKey {
                    id: row.try_get("id")?,
                    tenant: row.try_get("tenant_id")?,
                    user: row.try_get("user_id")?,
                    name: row.try_get("name")?,
                    admin: row.try_get("admin")?,
                    created_at: row.try_get("created_at")?,
                    revoked_at: row.try_get("revoked_at")?,
                })
            })
            .collect()
    }

    /// The caller a presented key stands for: 401 for an unknown or revoked key, 503 when the
    /// key table cannot be read.
    pub async fn verify(&self, presented: &str) -> Result<Caller, ApiError> {
        let hash = digest(presented);
        if let Some(answer) = self.cached(&hash) {
            return answer.ok_or_else(invalid);
        }
        let row = sqlx::query(
            "SELECT id, tenant_id, user_id, admin FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL",
        )
        .bind(hash.as_slice())
        .fetch_optional(&self.pool)
        .await
        .map_err(|err| {
            tracing::warn!(error = %err, "API key lookup failed");
            ApiError::unavailable("credentials cannot be checked right now")
        })?;
        let caller = match row {
            None => None,
            Some(row) => Some(caller(&row).map_err(|err| {
                tracing::error!(error = %err, "an API key row does not parse");
                ApiError::internal("a stored API key is malformed")
            })?),
        };
        self.remember(hash, caller.clone());
        caller.ok_or_else(invalid)
    }

    fn cached(&self, hash: &[u8; 32]) -> Option<Option<Caller>> {
        let cache = self.cache.lock().ok()?;
        let (caller, at) = cache.get(hash)?;
        (at.elapsed() < self.cache_ttl).then(|| caller.clone())
    }

    fn remember(&self, hash: [u8; 32], caller: Option<Caller>) {
        let Ok(mut cache) = self.cache.lock() else { return };
        if cache.len() >= CACHE_ENTRIES {
            let ttl = self.cache_ttl;
            cache.retain(|_, (_, at)| at.elapsed() < ttl);
            if cache.len() >= CACHE_ENTRIES {
                cache.clear();
            }
        }
        cache.insert(hash, (caller, Instant::now()));
    }
}

fn invalid() -> ApiError {
    ApiError::unauthenticated("invalid or revoked API key")
}

fn caller(row: &sqlx::postgres::PgRow) -> anyhow::Result<Caller> {
    let id: String = row.try_get("id")?;
    let tenant = TenantId::parse(&row.try_get::<String, _>("tenant_id")?)?;
    let user = row.try_get::<Option<String>, _>("user_id")?.map(|u| UserId::parse(&u)).transpose()?;
    Ok(Caller { tenant, user, principal: format!("key:{id}"), admin: row.try_get("admin")? })
}

fn digest(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}
