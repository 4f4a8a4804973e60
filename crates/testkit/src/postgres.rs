//! The real Postgres the tests use (`DATABASE_URL`) and a schema per test, dropped when its
//! guard goes out of scope — on success, on a failed assertion, on an early return.

use std::{fmt, net::SocketAddr, ops::Deref};

use sqlx::Connection;

use crate::proxy;

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

pub fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// `host:port` of the Postgres in `DATABASE_URL`.
pub fn database_addr() -> SocketAddr {
    proxy::url_addr(&database_url(), 5432)
}

/// `DATABASE_URL` pointed at `addr` instead (a proxy in front of the same Postgres).
pub fn database_url_via(addr: SocketAddr) -> String {
    proxy::url_via(&database_url(), addr)
}

/// A schema name no other test uses; the schema (created by the store under test, whose
/// migrations run in it) is dropped with everything in it when the guard is dropped.
pub struct Schema {
    name: String,
}

impl Schema {
    pub fn new(prefix: &str) -> Self {
        Self { name: crate::unique(prefix) }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Deref for Schema {
    type Target = str;
    fn deref(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        // sqlx needs a runtime, and the test's may be gone (a panic unwinding out of
        // `block_on`) or be the one thread that must not block on itself: the drop runs on a
        // thread of its own with its own runtime.
        let name = std::mem::take(&mut self.name);
        let dropped = std::thread::spawn(move || drop_schema(&name).map_err(|err| format!("{name}: {err}")))
            .join()
            .unwrap_or_else(|_| Err("the thread dropping the test schema panicked".to_owned()));
        if let Err(err) = dropped {
            crate::cleanup_failed(&format!("dropping test schema {err}"));
        }
    }
}

fn drop_schema(name: &str) -> Result<(), sqlx::Error> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let mut conn = sqlx::PgConnection::connect(&database_url()).await?;
        let drop = format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE");
        sqlx::query("SET lock_timeout = '1s'").execute(&mut conn).await?;
        match sqlx::query(sqlx::AssertSqlSafe(drop.clone())).execute(&mut conn).await {
            Err(err) if is_lock_timeout(&err) => {
                // A connection of the code under test still holds a lock in the schema: its
                // pool hands a finished transaction's rollback to a task of the test's runtime,
                // which cannot run while this guard blocks that runtime's thread (or after a
                // failed test left it mid-transaction). The test is done with the schema, so
                // those connections are closed and the drop tried again.
                sqlx::query(LOCK_HOLDERS).bind(name).execute(&mut conn).await?;
                sqlx::query("SET lock_timeout = '10s'").execute(&mut conn).await?;
                sqlx::query(sqlx::AssertSqlSafe(drop)).execute(&mut conn).await?;
            }
            other => {
                other?;
            }
        }
        conn.close().await
    })
}

/// Ends every other session holding a lock on the schema or on anything in it.
const LOCK_HOLDERS: &str = "SELECT pg_terminate_backend(pid) FROM (
    SELECT DISTINCT l.pid FROM pg_locks l
    JOIN pg_namespace n ON n.nspname = $1
    LEFT JOIN pg_class c ON c.oid = l.relation
    WHERE l.pid <> pg_backend_pid()
      AND (c.relnamespace = n.oid OR (l.classid = 'pg_namespace'::regclass AND l.objid = n.oid))
) holders";

fn is_lock_timeout(err: &sqlx::Error) -> bool {
    // 55P03: lock_not_available, what `lock_timeout` raises.
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("55P03"))
}
