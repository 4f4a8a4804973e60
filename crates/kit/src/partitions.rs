//! Record tables partitioned by day (Postgres declarative range partitioning on the record's
//! timestamp): the keeper creates each day's partition ahead of time, and retention detaches
//! and drops whole days instead of deleting rows one by one. Every partitioned table also has
//! a DEFAULT partition, so a row of any timestamp (a skewed clock, a late import, a date far in
//! the past) is stored; a day's partition created later takes its rows out of the default.
//!
//! Several replicas run the keeper at once: each table's changes are serialized by a
//! transaction-scoped advisory lock, and every step checks what already exists. Names are
//! relative to the connection's `search_path`, so the keeper works in whatever schema the
//! service's pool was opened in (see [`crate::postgres::connect_in_schema`]).

use chrono::{DateTime, Days, NaiveDate, NaiveTime, Utc};
use sqlx::{AssertSqlSafe, PgExecutor, PgPool, Postgres, Transaction};

/// How long the keeper waits for a table lock before giving up until its next round: a
/// partition change queued behind a long query would otherwise hold up every insert queued
/// behind it.
const LOCK_TIMEOUT: &str = "3s";

/// A table partitioned by range on one timestamp column, one partition per UTC day, named
/// `<table>_pYYYYMMDD`, plus `<table>_default`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DailyPartitions {
    table: String,
    column: String,
}

/// What a retention round removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    /// The days whose partitions were detached and dropped, oldest first.
    pub dropped_days: Vec<NaiveDate>,
    /// Rows removed: those of the dropped partitions plus those deleted from the partition
    /// the cut falls in and from the default partition.
    pub rows: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    #[error(
        "partitioned table `{0}`: a name must be 1 to 50 lowercase letters, digits or '_', not starting with a digit"
    )]
    InvalidName(String),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// An identifier safe to interpolate into SQL, short enough that `_pYYYYMMDD` and `_default`
/// still fit Postgres' 63-byte names.
fn checked_name(name: &str) -> Result<&str, PartitionError> {
    let valid = !name.is_empty()
        && name.len() <= 50
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if valid { Ok(name) } else { Err(PartitionError::InvalidName(name.to_owned())) }
}

impl DailyPartitions {
    pub fn new(table: &str, column: &str) -> Result<Self, PartitionError> {
        Ok(Self { table: checked_name(table)?.to_owned(), column: checked_name(column)?.to_owned() })
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    pub fn partition_name(&self, day: NaiveDate) -> String {
        format!("{}_p{}", self.table, day.format("%Y%m%d"))
    }

    pub fn default_partition(&self) -> String {
        format!("{}_default", self.table)
    }

    /// The day a partition name stands for, when it is one of this table's day partitions.
    fn day_of(&self, partition: &str) -> Option<NaiveDate> {
        let digits = partition.strip_prefix(&self.table)?.strip_prefix("_p")?;
        if digits.len() != 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        NaiveDate::parse_from_str(digits, "%Y%m%d").ok()
    }

    /// The days that have a partition, oldest first.
    pub async fn days(&self, pool: &PgPool) -> Result<Vec<NaiveDate>, PartitionError> {
        self.days_with(pool).await
    }

    async fn days_with<'c>(&self, db: impl PgExecutor<'c>) -> Result<Vec<NaiveDate>, PartitionError> {
        let names: Vec<String> = sqlx::query_scalar(
            "SELECT c.relname::text FROM pg_inherits i \
             JOIN pg_class c ON c.oid = i.inhrelid \
             JOIN pg_class p ON p.oid = i.inhparent \
             JOIN pg_namespace n ON n.oid = p.relnamespace \
             WHERE n.nspname = current_schema() AND p.relname = $1",
        )
        .bind(&self.table)
        .fetch_all(db)
        .await?;
        let mut days: Vec<NaiveDate> = names.iter().filter_map(|name| self.day_of(name)).collect();
        days.sort_unstable();
        Ok(days)
    }

    /// Makes sure `today` and the `days_ahead` days after it have their partitions; returns how
    /// many were created.
    pub async fn create_ahead(&self, pool: &PgPool, today: NaiveDate, days_ahead: u32) -> Result<u32, PartitionError> {
        let existing = self.days(pool).await?;
        let mut created = 0;
        for offset in 0..=u64::from(days_ahead) {
            let Some(day) = today.checked_add_days(Days::new(offset)) else { break };
            if !existing.contains(&day) && self.create_day(pool, day).await? {
                created += 1;
            }
        }
        Ok(created)
    }

    /// Creates `day`'s partition unless it exists (another replica may have just made it);
    /// rows of that day already in the default partition move into it. Returns whether this
    /// call created it.
    pub async fn create_day(&self, pool: &PgPool, day: NaiveDate) -> Result<bool, PartitionError> {
        let Some(next) = day.succ_opt() else { return Ok(false) };
        let (table, column, partition, default) =
            (&self.table, &self.column, self.partition_name(day), self.default_partition());
        let mut tx = self.locked(pool).await?;
        if self.days_with(&mut *tx).await?.contains(&day) {
            return Ok(false);
        }
        // Built as a table of its own and attached, rather than created as a partition (which
        // locks out queries too): the parent is locked against writes only, for the time of the
        // move and the attach. Without that lock an insert already routed to the default
        // partition would land there after the attach and fail its new bound.
        let (from, to) = (day_start(day), day_start(next));
        for statement in [
            format!("LOCK TABLE \"{table}\" IN SHARE ROW EXCLUSIVE MODE"),
            format!("CREATE TABLE \"{partition}\" (LIKE \"{table}\" INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"),
            format!(
                "WITH moved AS (DELETE FROM \"{default}\" WHERE \"{column}\" >= '{from}' AND \"{column}\" < '{to}' \
                 RETURNING *) INSERT INTO \"{partition}\" SELECT * FROM moved"
            ),
            format!("ALTER TABLE \"{table}\" ATTACH PARTITION \"{partition}\" FOR VALUES FROM ('{from}') TO ('{to}')"),
        ] {
            sqlx::query(AssertSqlSafe(statement)).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        tracing::debug!(table = %table, partition = %partition, "partition created");
        Ok(true)
    }

    /// Removes every row older than `cut`: the partitions of days wholly before it are
    /// detached and dropped; the rows before the cut in the day it falls in, and in the
    /// default partition, are deleted. Each step runs under the keeper lock, so keepers at
    /// once drop each day once and count each row once.
    pub async fn prune_before(&self, pool: &PgPool, cut: DateTime<Utc>) -> Result<Pruned, PartitionError> {
        let table = &self.table;
        let mut pruned = Pruned::default();
        let mut tx = self.locked(pool).await?;
        // A day is wholly before the cut when the next day starts at or before it.
        let past: Vec<NaiveDate> = self
            .days_with(&mut *tx)
            .await?
            .into_iter()
            .filter(|day| day.succ_opt().is_some_and(|next| next.and_time(NaiveTime::MIN).and_utc() <= cut))
            .collect();
        // Counted first, each locked against writes, so the lock on the parent that the
        // detaches take is held only for the catalog changes.
        for day in &past {
            let partition = self.partition_name(*day);
            sqlx::query(AssertSqlSafe(format!("LOCK TABLE \"{partition}\" IN SHARE MODE"))).execute(&mut *tx).await?;
            let rows: i64 = sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM \"{partition}\"")))
                .fetch_one(&mut *tx)
                .await?;
            pruned.rows += u64::try_from(rows).unwrap_or(0);
        }
        for day in &past {
            let partition = self.partition_name(*day);
            for statement in [
                format!("ALTER TABLE \"{table}\" DETACH PARTITION \"{partition}\""),
                format!("DROP TABLE \"{partition}\""),
            ] {
                sqlx::query(AssertSqlSafe(statement)).execute(&mut *tx).await?;
            }
        }
        tx.commit().await?;
        if !past.is_empty() {
            tracing::info!(table = %table, days = past.len(), rows = pruned.rows, "partitions past the retention dropped");
        }
        pruned.dropped_days = past;

        // What is left before the cut lies in one day's partition and the default: Postgres
        // leaves the other partitions out of this statement.
        let mut tx = self.locked(pool).await?;
        let deleted = sqlx::query(AssertSqlSafe(format!("DELETE FROM \"{table}\" WHERE \"{}\" < $1", self.column)))
            .bind(cut)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        pruned.rows += deleted;
        Ok(pruned)
    }

    /// A transaction holding this table's keeper lock, with a bounded wait for table locks.
    async fn locked(&self, pool: &PgPool) -> Result<Transaction<'static, Postgres>, PartitionError> {
        let mut tx = pool.begin().await?;
        sqlx::query(AssertSqlSafe(format!("SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))).execute(&mut *tx).await?;
        sqlx::query(
            "SELECT pg_advisory_xact_lock(hashtext('switchyard.partitions.' || current_schema() || '.' || $1))",
        )
        .bind(&self.table)
        .execute(&mut *tx)
        .await?;
        Ok(tx)
    }
}

/// Midnight UTC starting `day`, as a Postgres timestamptz literal.
fn day_start(day: NaiveDate) -> String {
    format!("{} 00:00:00+00", day.format("%Y-%m-%d"))
}
