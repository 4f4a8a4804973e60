//! The guards against the real Postgres and Redis: a test's schema and keys are gone after the
//! guard is dropped — at the end of a test, and while a failing test unwinds out of its
//! runtime.
#![allow(clippy::unwrap_used, reason = "a panic in a test is the failure report")]

use sqlx::Connection;
use switchyard_testkit::{KeyPrefix, Schema, database_url, delete_redis_keys, redis_url};

async fn postgres() -> sqlx::PgConnection {
    sqlx::PgConnection::connect(&database_url())
        .await
        .unwrap_or_else(|err| panic!("postgres at {} (set DATABASE_URL): {err}", database_url()))
}

async fn create_schema(name: &str) {
    let mut conn = postgres().await;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA \"{name}\""))).execute(&mut conn).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE TABLE \"{name}\".t (id int)"))).execute(&mut conn).await.unwrap();
}

async fn schema_exists(name: &str) -> bool {
    let mut conn = postgres().await;
    sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM information_schema.schemata WHERE schema_name = $1)")
        .bind(name)
        .fetch_one(&mut conn)
        .await
        .unwrap()
}

async fn redis() -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(redis_url()).unwrap();
    client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|err| panic!("redis at {} (set REDIS_URL): {err}", redis_url()))
}

async fn set_keys(prefix: &str, count: usize) {
    let mut conn = redis().await;
    for n in 0..count {
        let _: () = redis::cmd("SET").arg(format!("{prefix}:{n}")).arg("x").query_async(&mut conn).await.unwrap();
    }
}

async fn key_exists(key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query_async::<bool>(&mut redis().await).await.unwrap()
}

#[tokio::test]
async fn a_schema_is_dropped_with_its_guard() {
    let schema = Schema::new("kit");
    let name = schema.to_string();
    assert!(name.starts_with("kit_") && name.len() > 10, "{name}");
    create_schema(&schema).await;
    assert!(schema_exists(&name).await);
    drop(schema);
    assert!(!schema_exists(&name).await, "{name} dropped");
    // Never created is fine too.
    drop(Schema::new("kit"));
}

#[tokio::test]
async fn a_schema_is_dropped_past_a_connection_left_in_a_transaction() {
    let schema = Schema::new("kit");
    create_schema(&schema).await;
    // What a pool's connection looks like while its rollback waits for the (blocked) runtime.
    let mut holder = postgres().await;
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("SELECT * FROM \"{schema}\".t"))).execute(&mut holder).await.unwrap();
    let name = schema.to_string();
    drop(schema);
    assert!(!schema_exists(&name).await, "{name} dropped");
}

#[test]
fn a_schema_is_dropped_when_its_test_panics() {
    let (sender, named) = std::sync::mpsc::channel();
    let failing = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let schema = Schema::new("kit");
            create_schema(&schema).await;
            sender.send(schema.to_string()).unwrap();
            panic!("a failing assertion");
        })
    });
    assert!(failing.join().is_err(), "the test thread panicked");
    let name = named.recv().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    assert!(!runtime.block_on(schema_exists(&name)), "{name} dropped while unwinding");
}

#[tokio::test]
async fn keys_under_a_prefix_are_deleted_with_its_guard_and_no_others() {
    let prefix = KeyPrefix::new("kit");
    let neighbour = KeyPrefix::new("kit");
    set_keys(&prefix, 2500).await;
    set_keys(&neighbour, 1).await;
    let first = format!("{prefix}:0");
    drop(prefix);
    assert!(!key_exists(&first).await, "{first} deleted");
    assert!(key_exists(&format!("{neighbour}:0")).await, "another prefix is untouched");
    assert_eq!(delete_redis_keys(&neighbour).await, 1, "the deleted keys are counted");
    assert_eq!(delete_redis_keys(&neighbour).await, 0);
}
