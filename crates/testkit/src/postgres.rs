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
            // A second panic while unwinding would abort and hide the first failure.
            if std::thread::panicking() {
                eprintln!("dropping test schema {err}");
            } else {
                panic!("dropping test schema {err}");
            }
        }
    }
}

fn drop_schema(name: &str) -> Result<(), sqlx::Error> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let mut conn = sqlx::PgConnection::connect(&database_url()).await?;
        // A connection of the code under test left mid-transaction (a test that failed
        // halfway) would otherwise block the drop for ever.
        sqlx::query("SET lock_timeout = '10s'").execute(&mut conn).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE")))
            .execute(&mut conn)
            .await?;
        conn.close().await
    })
}
