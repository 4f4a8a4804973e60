//! Postgres goes away under a serving gateway (connections cut by a real TCP proxy): tool calls
//! and set_context go on, their records wait in the bounded queue, and all of them reach
//! Postgres once it answers again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{sync::Arc, time::Duration};

use switchyard_mcp_gateway::{
    Stores,
    domain::UsageRecord,
    store::{UsageStore, memory::MemoryContextStore, postgres::PostgresUsageStore},
};
use switchyard_testkit::{
    Schema, database_url, eventually,
    mcp::{FixtureServer, tool},
    postgres::{database_addr, database_url_via},
    proxy::TcpProxy,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_wait_out_a_postgres_outage() {
    let schema = Schema::new("gw");
    let fixture = FixtureServer::start(vec![tool("lookup", "Looks something up.", &[])]).await.unwrap();
    let proxy = TcpProxy::start(database_addr()).await;
    let through_proxy = database_url_via(proxy.addr());
    let usage = PostgresUsageStore::connect(&through_proxy, &schema).await.expect("postgres through the proxy");
    let stores = Stores { contexts: Arc::new(MemoryContextStore::default()), usage: Arc::new(usage) };
    let running = common::start(&common::config(&[format!("fx={}", fixture.url())]), stores, None).await;
    running.ready(1).await;
    let gateway = running.gateway.clone();

    proxy.cut();
    let key = common::session_key("default", "during-outage");
    gateway.set_context(&key, "look this up", None).await.expect("set_context serves without Postgres");
    for _ in 0..3 {
        let outcome = gateway.call_tool(Some(&key), "fx__lookup", None).await.expect("calls serve without Postgres");
        let rmcp::model::CallToolResponse::Complete(result) = outcome.response else { panic!("a complete result") };
        assert_ne!(result.is_error, Some(true));
    }
    assert_eq!(gateway.stats().await.unwrap().records_dropped, 0, "held, not dropped");

    proxy.restore();
    // Read back directly, not through the proxy.
    let direct = PostgresUsageStore::connect(&database_url(), &schema).await.unwrap();
    eventually(Duration::from_secs(20), "every record written after the outage", || async {
        let records = direct.session_records(&key, 10).await.unwrap();
        let calls = records.iter().filter(|r| matches!(r, UsageRecord::ToolCall { .. })).count();
        let contexts = records.iter().filter(|r| matches!(r, UsageRecord::SetContext { .. })).count();
        if (calls, contexts) == (3, 1) { Ok(()) } else { Err(format!("records after the outage: {records:?}")) }
    })
    .await;
    running.stop().await;
}
