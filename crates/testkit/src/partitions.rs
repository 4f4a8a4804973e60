//! Checks the partition tests share: a table that a migration turned into a partitioned one,
//! and the rows a table (or one partition) holds.

use sqlx::PgPool;

/// Asserts that `table` (looked up on the pool's search path) is a partitioned table.
pub async fn assert_partitioned(pool: &PgPool, table: &str) {
    let kind: String = sqlx::query_scalar("SELECT relkind::text FROM pg_class WHERE oid = $1::regclass")
        .bind(table)
        .fetch_one(pool)
        .await
        .unwrap_or_else(|err| panic!("looking up table {table}: {err}"));
    assert_eq!(kind, "p", "{table} is a partitioned table");
}

/// The rows in `table` (a partitioned table counts its partitions' rows; a partition its own).
pub async fn count(pool: &PgPool, table: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
        .fetch_one(pool)
        .await
        .unwrap_or_else(|err| panic!("counting the rows of {table}: {err}"))
}
