//! Postgres for a service's own schema. Services may share one database; each keeps its
//! tables — and sqlx's migration bookkeeping — in a schema of its own, created on first start
//! and set as the connections' `search_path`. Statements are bounded so a connection that
//! stops answering cannot hold a request for long.

use std::{str::FromStr, time::Duration};

use sqlx::{
    Connection, PgConnection,
    postgres::{PgConnectOptions, PgPool, PgPoolOptions},
};

/// How long a request may wait for a pooled connection: an outage fails fast.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest statement, in milliseconds.
const STATEMENT_TIMEOUT_MS: &str = "5000";

#[derive(Debug, thiserror::Error)]
pub enum SchemaPoolError {
    #[error("schema `{0}` must be 1 to 63 lowercase letters, digits or '_', not starting with a digit")]
    InvalidSchema(String),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// A schema name safe to interpolate into SQL.
pub fn checked_schema(schema: &str) -> Result<&str, SchemaPoolError> {
    let valid = !schema.is_empty()
        && schema.len() <= 63
        && schema.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && schema.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if valid { Ok(schema) } else { Err(SchemaPoolError::InvalidSchema(schema.to_owned())) }
}

/// A pool whose connections work in `schema` (created if missing). Run the service's
/// migrations on it next.
pub async fn connect_in_schema(url: &str, schema: &str, max_connections: u32) -> Result<PgPool, SchemaPoolError> {
    let schema = checked_schema(schema)?;
    let base = PgConnectOptions::from_str(url)?;
    create_schema(&base, schema).await?;
    let options = base.options([("search_path", schema), ("statement_timeout", STATEMENT_TIMEOUT_MS)]);
    Ok(PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_with(options)
        .await?)
}

async fn create_schema(options: &PgConnectOptions, schema: &str) -> Result<(), SchemaPoolError> {
    let mut conn = PgConnection::connect_with(options).await?;
    let statement = format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"");
    if let Err(err) = sqlx::query(sqlx::AssertSqlSafe(statement)).execute(&mut conn).await {
        // Two replicas creating the schema at once: one loses the race; fine if it exists.
        let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
            .bind(schema)
            .fetch_one(&mut conn)
            .await?;
        if !exists {
            return Err(err.into());
        }
    }
    conn.close().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_schema_names_are_accepted() {
        assert!(checked_schema("triggers").is_ok());
        assert!(checked_schema("_t1").is_ok());
        for bad in ["", "1abc", "Upper", "semi;colon", "quote\"", &"a".repeat(64)] {
            assert!(checked_schema(bad).is_err(), "{bad}");
        }
    }
}
