//! Shared test setup: the real Redis (REDIS_URL) and Postgres (DATABASE_URL), with a fresh key
//! prefix or schema per test so tests never see each other's data. Tests fail, never skip,
//! when either is unreachable.
#![allow(dead_code)]

pub mod proxy;

pub fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// A unique lowercase name (usable as a Postgres schema or a Redis key prefix).
pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

pub async fn drop_schema(schema: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&database_url()).await.expect("connect to postgres");
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE")))
        .execute(&mut conn)
        .await
        .expect("drop test schema");
}
