//! What the workspace's tests and benches share: the repository and its installed peer tools,
//! the real Postgres and Redis with a fresh schema or key prefix per test (cleaned up on every
//! exit), servers on their own task, a TCP proxy that cuts connections for outage tests, raw
//! HTTP/1.1 connections for slow and idle clients, thousands of idle connections from a
//! process of their own, a fixture MCP server, one polling helper and the fuzz suites'
//! settings. A dev-dependency only; no service compiles it into its binary.

pub mod catalog;
pub mod fuzz;
pub mod grpc;
pub mod idle_clients;
pub mod latency;
pub mod llm;
pub mod mcp;
pub mod oauth;
pub mod partitions;
mod paths;
mod poll;
pub mod postgres;
pub mod process;
pub mod prometheus;
pub mod proxy;
pub mod raw_http;
pub mod redis;
mod served;

pub use grpc::{ClosedPort, closed_port, wait_serving};
pub use paths::{grpcurl, model_dir, peer_tool, root};
pub use poll::{Outcome, eventually};
pub use postgres::{Schema, database_url};
pub use redis::{ClusterKeyPrefix, KeyPrefix, OwnCluster, delete_redis_keys, redis_cluster_url, redis_url};
pub use served::{Served, Shutdown};

/// A unique lowercase name (usable as a Postgres schema or a Redis key prefix).
pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

/// A guard's cleanup failed: a failure of the test, unless the test is failing already (a
/// second panic while unwinding would abort and hide the first failure).
fn cleanup_failed(message: &str) {
    if std::thread::panicking() {
        eprintln!("{message}");
    } else {
        panic!("{message}");
    }
}

/// A free loopback port, for peers that take a port rather than binding port 0.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}
