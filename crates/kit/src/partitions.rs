//! Record tables partitioned by time (Postgres declarative range partitioning on the record's
//! timestamp), one partition per UTC day or per UTC month: the keeper creates each period's
//! partition ahead of time, and retention detaches and drops whole periods instead of deleting
//! rows one by one. Every partitioned table also has a DEFAULT partition, so a row of any
//! timestamp (a skewed clock, a late import, a date far in the past) is stored; a period's
//! partition created later takes its rows out of the default.
//!
//! Days suit analytics read by time window (a window reads only its days); months suit
//! history read per session or newest first, where every partition is probed once per read.
//!
//! Several replicas run the keeper at once: each table's changes are serialized by a
//! transaction-scoped advisory lock, and every step checks what already exists. Names are
//! relative to the connection's `search_path`, so the keeper works in whatever schema the
//! service's pool was opened in (see [`crate::postgres::connect_in_schema`]).

use chrono::{DateTime, Datelike, Months, NaiveDate, NaiveTime, Utc};
use sqlx::{AssertSqlSafe, PgExecutor, PgPool, Postgres, Transaction};

/// How long the keeper waits for a table lock before giving up until its next round: a
/// partition change queued behind a long query would otherwise hold up every insert queued
/// behind it.
const LOCK_TIMEOUT: &str = "3s";

/// How much time one partition holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    /// One UTC day, named `<table>_pYYYYMMDD`.
    Day,
    /// One UTC calendar month, named `<table>_pYYYYMM`.
    Month,
}

impl Granularity {
    /// The first day of the period holding `day`.
    pub fn start_of(self, day: NaiveDate) -> NaiveDate {
        match self {
            Self::Day => day,
            Self::Month => day.with_day(1).unwrap_or(day),
        }
    }

    /// The first day of the period after the one starting at `start`.
    fn next(self, start: NaiveDate) -> Option<NaiveDate> {
        match self {
            Self::Day => start.succ_opt(),
            Self::Month => start.checked_add_months(Months::new(1)),
        }
    }

    fn name_format(self) -> &'static str {
        match self {
            Self::Day => "%Y%m%d",
            Self::Month => "%Y%m",
        }
    }

    /// The period start a partition name's digits stand for.
    fn parse(self, digits: &str) -> Option<NaiveDate> {
        let expected = match self {
            Self::Day => 8,
            Self::Month => 6,
        };
        if digits.len() != expected || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        match self {
            Self::Day => NaiveDate::parse_from_str(digits, "%Y%m%d").ok(),
            Self::Month => NaiveDate::parse_from_str(&format!("{digits}01"), "%Y%m%d").ok(),
        }
    }
}

/// A table partitioned by range on one timestamp column, one partition per period (UTC day
/// or month, see [`Granularity`]) named after the period's start, plus `<table>_default`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimePartitions {
    table: String,
    column: String,
    grain: Granularity,
}

/// Day partitions: [`TimePartitions::new`] makes them.
pub type DailyPartitions = TimePartitions;

/// What a retention round removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    /// The periods whose partitions were detached and dropped, oldest first, each by its first
    /// day (for months, the 1st).
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

impl TimePartitions {
    /// Day partitions of `table` on `column`.
    pub fn new(table: &str, column: &str) -> Result<Self, PartitionError> {
        Self::with_granularity(table, column, Granularity::Day)
    }

    /// Month partitions of `table` on `column`.
    pub fn monthly(table: &str, column: &str) -> Result<Self, PartitionError> {
        Self::with_granularity(table, column, Granularity::Month)
    }

    pub fn with_granularity(table: &str, column: &str, grain: Granularity) -> Result<Self, PartitionError> {
        Ok(Self { table: checked_name(table)?.to_owned(), column: checked_name(column)?.to_owned(), grain })
    }

    pub fn granularity(&self) -> Granularity {
        self.grain
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    /// The name of the partition of the period holding `day`.
    pub fn partition_name(&self, day: NaiveDate) -> String {
        format!("{}_p{}", self.table, self.grain.start_of(day).format(self.grain.name_format()))
    }

    pub fn default_partition(&self) -> String {
        format!("{}_default", self.table)
    }

    /// The period start a partition name stands for, when it is one of this table's partitions.
    fn period_of(&self, partition: &str) -> Option<NaiveDate> {
        let digits = partition.strip_prefix(&self.table)?.strip_prefix("_p")?;
        self.grain.parse(digits)
    }

    /// The periods that have a partition, each by its first day, oldest first.
    pub async fn periods(&self, pool: &PgPool) -> Result<Vec<NaiveDate>, PartitionError> {
        self.days_with(pool).await
    }

    /// The days that have a partition, oldest first (for month partitions, their 1sts).
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
        let mut days: Vec<NaiveDate> = names.iter().filter_map(|name| self.period_of(name)).collect();
        days.sort_unstable();
        Ok(days)
    }

    /// Makes sure the period holding `today` and the `ahead` periods after it (days or months)
    /// have their partitions; returns how many were created.
    pub async fn create_ahead(&self, pool: &PgPool, today: NaiveDate, ahead: u32) -> Result<u32, PartitionError> {
        let existing = self.days(pool).await?;
        let mut created = 0;
        let mut period = Some(self.grain.start_of(today));
        for _ in 0..=ahead {
            let Some(start) = period else { break };
            if !existing.contains(&start) && self.create_period(pool, start).await? {
                created += 1;
            }
            period = self.grain.next(start);
        }
        Ok(created)
    }

    /// Creates `day`'s partition: see [`Self::create_period`].
    pub async fn create_day(&self, pool: &PgPool, day: NaiveDate) -> Result<bool, PartitionError> {
        self.create_period(pool, day).await
    }

    /// Creates the partition of the period holding `day` unless it exists (another replica
    /// may have just made it); rows of that period already in the default partition move into
    /// it. Returns whether this call created it.
    pub async fn create_period(&self, pool: &PgPool, day: NaiveDate) -> Result<bool, PartitionError> {
        let day = self.grain.start_of(day);
        let Some(next) = self.grain.next(day) else { return Ok(false) };
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

    /// Removes every row older than `cut`: the partitions of periods wholly before it are
    /// detached and dropped; the rows before the cut in the period it falls in, and in the
    /// default partition, are deleted. Each step runs under the keeper lock, so keepers at
    /// once drop each period once and count each row once.
    pub async fn prune_before(&self, pool: &PgPool, cut: DateTime<Utc>) -> Result<Pruned, PartitionError> {
        let table = &self.table;
        let mut pruned = Pruned::default();
        let mut tx = self.locked(pool).await?;
        // A period is wholly before the cut when the next one starts at or before it.
        let past: Vec<NaiveDate> = self
            .days_with(&mut *tx)
            .await?
            .into_iter()
            .filter(|start| self.grain.next(*start).is_some_and(|next| next.and_time(NaiveTime::MIN).and_utc() <= cut))
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
            tracing::info!(table = %table, partitions = past.len(), rows = pruned.rows, "partitions past the retention dropped");
        }
        pruned.dropped_days = past;

        // What is left before the cut lies in one period's partition and the default: Postgres
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

    /// Removes whole periods only: every row before the start of the period `cut` falls in —
    /// the partitions of the periods before it dropped, and the default partition's rows
    /// before it deleted. The rows of the period the cut falls in all stay until that period
    /// is wholly past, so a row is kept for up to one period longer than `cut` implies.
    pub async fn prune_whole_periods_before(
        &self,
        pool: &PgPool,
        cut: DateTime<Utc>,
    ) -> Result<Pruned, PartitionError> {
        let boundary = self.grain.start_of(cut.date_naive()).and_time(NaiveTime::MIN).and_utc();
        self.prune_before(pool, boundary).await
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

/// Tables one keeper looks after together (a service's history, its usage): each keeps the
/// period holding today and `ahead` periods after it, and loses whole periods to retention.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptTables {
    tables: Vec<TimePartitions>,
    ahead: u32,
}

impl KeptTables {
    pub fn new(tables: Vec<TimePartitions>, ahead: u32) -> Self {
        Self { tables, ahead }
    }

    /// The current and coming periods' partitions of every table (another replica may be
    /// making them at the same time); how many were created.
    pub async fn create_ahead(&self, pool: &PgPool) -> Result<u32, PartitionError> {
        let today = Utc::now().date_naive();
        let mut created = 0;
        for table in &self.tables {
            created += table.create_ahead(pool, today, self.ahead).await?;
        }
        Ok(created)
    }

    /// One keeper round: the coming periods' partitions first, whose failure is logged and does
    /// not hold up the retention (the current period's were made before); then, with a `cut`,
    /// every table's whole periods before it removed. Returns the rows removed.
    pub async fn keep(&self, pool: &PgPool, cut: Option<DateTime<Utc>>) -> Result<u64, PartitionError> {
        if let Err(err) = self.create_ahead(pool).await {
            let tables = self.tables.iter().map(TimePartitions::table).collect::<Vec<_>>().join(", ");
            tracing::warn!(error = %err, tables, "creating the coming partitions; retrying within the hour");
        }
        let Some(cut) = cut else { return Ok(0) };
        let mut removed = 0;
        for table in &self.tables {
            removed += table.prune_whole_periods_before(pool, cut).await?.rows;
        }
        Ok(removed)
    }
}
