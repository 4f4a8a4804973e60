//! API keys: `sy_<id>_<secret>`, 256 random bits of secret, kept in Postgres as a SHA-256
//! digest only. `switchyard keys create|list|revoke` manages them; the edge and the MCP
//! gateway check each presented key against the same table, remembering answers (including "no such key") for a short
//! time so a busy key costs no query per request. A revoked key stops working within that
//! time on every replica.
//!
//! When the table cannot be read, the edge does not wait on it request after request: the
//! first failure marks the store down, a background probe watches for its return, and until
//! then keys it accepted within the max staleness are served from that last good answer while
//! any other key gets a fast [`KeyError::Unavailable`]. Once the store answers again every key is checked afresh,
//! so a key revoked meanwhile stops at once.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError, Weak},
    time::{Duration, Instant},
};

use base64::Engine;
use chrono::{DateTime, Utc};
use rand::RngCore;
use sha2::{Digest, Sha256};
use sqlx::{PgPool, Row};
use switchyard_kit::{TenantId, UserId, postgres::connect_in_schema};

/// Answers remembered at most; past it, expired ones go, then everything.
const CACHE_ENTRIES: usize = 10_000;
/// How long keys accepted before an outage are served from their last check by default.
pub const DEFAULT_MAX_STALENESS: Duration = Duration::from_secs(15 * 60);
/// How often a store marked down is tried again, and how long one try may take.
const PROBE_EVERY: Duration = Duration::from_secs(1);
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

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

/// The prefix of every Switchyard API key, so a key is told from a JWT at a glance.
pub const KEY_PREFIX: &str = "sy_";

/// Whom a live key stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyHolder {
    /// The key's id (the `<id>` of `sy_<id>_<secret>`), never its secret.
    pub id: String,
    pub tenant: TenantId,
    pub user: Option<UserId>,
    pub admin: bool,
}

/// Why a presented key is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// No live key has this text: unknown, revoked, or mistyped.
    #[error("invalid or revoked API key")]
    Invalid,
    /// The key table cannot be read and this key was not accepted recently enough to serve it
    /// from memory (an unknown key may have been created since, so it is not called invalid).
    #[error("credentials cannot be checked right now: the API key store is unreachable; retry shortly")]
    Unavailable,
    /// A row of the key table does not parse (logged where it is found).
    #[error("a stored API key is malformed")]
    Malformed,
}

/// Answers by key digest: the holder (or none, for an unknown key) and when it was looked up.
type Answers = HashMap<[u8; 32], (Option<KeyHolder>, Instant)>;

pub struct KeyStore {
    pool: PgPool,
    cache_ttl: Duration,
    max_staleness: Duration,
    cache: Mutex<Answers>,
    outage: Arc<Outage>,
}

/// Whether the key table is known to be unreachable: since when, and the error that said so.
#[derive(Debug, Default)]
struct Outage {
    down: Mutex<Option<(Instant, String)>>,
}

impl Outage {
    fn since(&self) -> Option<(Instant, String)> {
        self.down.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Marks the store down; true when it was up until now.
    fn begin(&self, error: String) -> bool {
        let mut down = self.down.lock().unwrap_or_else(PoisonError::into_inner);
        if down.is_some() {
            return false;
        }
        *down = Some((Instant::now(), error));
        true
    }

    /// Marks the store up; when it went down, if it was.
    fn end(&self) -> Option<Instant> {
        self.down.lock().unwrap_or_else(PoisonError::into_inner).take().map(|(since, _)| since)
    }
}

/// The key table as readiness reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyStoreHealth {
    Up,
    /// Unreachable for `down_for`; `servable` keys are within the max staleness of their last
    /// good check and are still served.
    Down {
        down_for: Duration,
        error: String,
        servable: usize,
        max_staleness: Duration,
    },
}

impl std::fmt::Debug for KeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyStore")
            .field("cache_ttl", &self.cache_ttl)
            .field("max_staleness", &self.max_staleness)
            .finish_non_exhaustive()
    }
}

impl KeyStore {
    /// Opens the key table in `schema` (created, with its migrations, on first use).
    pub async fn connect(database_url: &str, schema: &str, cache_ttl: Duration) -> anyhow::Result<Self> {
        let pool = connect_in_schema(database_url, schema, 4).await?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        Ok(Self {
            pool,
            cache_ttl,
            max_staleness: DEFAULT_MAX_STALENESS,
            cache: Mutex::new(HashMap::new()),
            outage: Arc::default(),
        })
    }

    /// How long, while the table cannot be read, a key it accepted is still served from that
    /// answer (zero: none is).
    #[must_use]
    pub fn with_max_staleness(mut self, max_staleness: Duration) -> Self {
        self.max_staleness = max_staleness;
        self
    }

    pub async fn ping(&self) -> Result<(), sqlx::Error> {
        sqlx::query("SELECT 1").execute(&self.pool).await.map(|_| ())
    }

    /// The table's state: a store already known down is not asked again (its probe is), an up
    /// one is pinged within `timeout` and marked down when that fails.
    pub async fn health(&self, timeout: Duration) -> KeyStoreHealth {
        if self.outage.since().is_none() {
            let error = match tokio::time::timeout(timeout, self.ping()).await {
                Ok(Ok(())) => return KeyStoreHealth::Up,
                Ok(Err(err)) => err.to_string(),
                Err(_) => format!("no answer within {timeout:?}"),
            };
            self.store_failed(error);
        }
        let Some((since, error)) = self.outage.since() else { return KeyStoreHealth::Up };
        let servable = self
            .cache
            .lock()
            .map(|cache| cache.values().filter(|(caller, at)| caller.is_some() && self.servable(*at)).count())
            .unwrap_or(0);
        KeyStoreHealth::Down { down_for: since.elapsed(), error, servable, max_staleness: self.max_staleness }
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

    /// Whom a presented key stands for: [`KeyError::Invalid`] for an unknown or revoked key;
    /// while the key table cannot be read, the last good answer for a key it accepted within
    /// the max staleness, else [`KeyError::Unavailable`].
    pub async fn verify(&self, presented: &str) -> Result<KeyHolder, KeyError> {
        let hash = digest(presented);
        let remembered = self.remembered(&hash);
        if let Some((answer, at)) = &remembered
            && at.elapsed() < self.cache_ttl
        {
            return answer.clone().ok_or(KeyError::Invalid);
        }
        // Known down: answer now rather than wait out the pool's acquire timeout again.
        if self.outage.since().is_some() {
            return self.stale(remembered);
        }
        let row = sqlx::query(
            "SELECT id, tenant_id, user_id, admin FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL",
        )
        .bind(hash.as_slice())
        .fetch_optional(&self.pool)
        .await;
        let row = match row {
            Ok(row) => row,
            Err(err) => {
                self.store_failed(err.to_string());
                return self.stale(remembered);
            }
        };
        let holder = match row {
            None => None,
            Some(row) => Some(holder(&row).map_err(|err| {
                tracing::error!(error = %err, "an API key row does not parse");
                KeyError::Malformed
            })?),
        };
        self.remember(hash, holder.clone());
        holder.ok_or(KeyError::Invalid)
    }

    /// The answer while the table cannot be read: a key accepted recently enough, else 503 (an
    /// unknown key may have been created since, so it is not called invalid).
    fn stale(&self, remembered: Option<(Option<KeyHolder>, Instant)>) -> Result<KeyHolder, KeyError> {
        match remembered {
            Some((Some(holder), at)) if self.servable(at) => Ok(holder),
            // Logged once with the request id where the front answers it.
            _ => Err(KeyError::Unavailable),
        }
    }

    fn servable(&self, checked_at: Instant) -> bool {
        checked_at.elapsed() < self.max_staleness
    }

    /// Marks the store down (once per outage: logged, and a probe started that marks it up
    /// again when it answers).
    fn store_failed(&self, error: String) {
        if !self.outage.begin(error.clone()) {
            return;
        }
        tracing::warn!(
            %error,
            max_staleness = ?self.max_staleness,
            "api key store unreachable: serving keys it accepted within the max staleness from their last check, \
             503 for any other key, until it answers again"
        );
        tokio::spawn(probe(self.pool.clone(), Arc::downgrade(&self.outage)));
    }

    fn remembered(&self, hash: &[u8; 32]) -> Option<(Option<KeyHolder>, Instant)> {
        let cache = self.cache.lock().ok()?;
        cache.get(hash).cloned()
    }

    fn remember(&self, hash: [u8; 32], holder: Option<KeyHolder>) {
        let Ok(mut cache) = self.cache.lock() else { return };
        if cache.len() >= CACHE_ENTRIES {
            let (ttl, staleness) = (self.cache_ttl, self.max_staleness);
            // Accepted keys stay as long as an outage could still serve them.
            cache.retain(|_, (caller, at)| at.elapsed() < ttl || (caller.is_some() && at.elapsed() < staleness));
            if cache.len() >= CACHE_ENTRIES {
                cache.clear();
            }
        }
        cache.insert(hash, (holder, Instant::now()));
    }
}

/// Tries a store marked down until it answers, then marks it up; every key is then checked
/// afresh (an answer served stale is older than the cache time by then). Ends with the store.
async fn probe(pool: PgPool, outage: Weak<Outage>) {
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        let Some(outage) = outage.upgrade() else { return };
        let answered =
            matches!(tokio::time::timeout(PROBE_TIMEOUT, sqlx::query("SELECT 1").execute(&pool)).await, Ok(Ok(_)));
        if answered {
            if let Some(since) = outage.end() {
                tracing::info!(down_for = ?since.elapsed(), "api key store reachable again: checking keys afresh");
            }
            return;
        }
    }
}

fn holder(row: &sqlx::postgres::PgRow) -> anyhow::Result<KeyHolder> {
    let id: String = row.try_get("id")?;
    let tenant = TenantId::parse(&row.try_get::<String, _>("tenant_id")?)?;
    let user = row.try_get::<Option<String>, _>("user_id")?.map(|u| UserId::parse(&u)).transpose()?;
    Ok(KeyHolder { id, tenant, user, admin: row.try_get("admin")? })
}

fn digest(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}
