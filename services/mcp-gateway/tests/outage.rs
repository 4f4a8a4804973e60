//! Postgres goes away under a serving gateway (connections cut by a real TCP proxy): tool calls
//! and set_context go on, their records wait in the bounded queue, and all of them reach
//! Postgres once it answers again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../../sessions/tests/common/proxy.rs"]
mod proxy;

use std::{sync::Arc, time::Duration};

use switchyard_mcp_gateway::{
    Stores,
    domain::UsageRecord,
    store::{UsageStore, memory::MemoryContextStore, postgres::PostgresUsageStore},
    testkit::{FixtureServer, tool},
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_wait_out_a_postgres_outage() {
    let schema = common::unique("gw");
    let result = tokio::spawn(outage(schema.clone())).await;
    common::drop_schema(&schema).await;
    if let Err(err) = result {
        std::panic::resume_unwind(err.into_panic());
    }
}

async fn outage(schema: String) {
    let fixture = FixtureServer::start(vec![tool("lookup", "Looks something up.", &[])]).await.unwrap();
    let proxy = proxy::TcpProxy::start(proxy::url_addr(&common::database_url())).await;
    let through_proxy = proxy::url_via(&common::database_url(), proxy.addr());
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
    let direct = PostgresUsageStore::connect(&common::database_url(), &schema).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let records = direct.session_records(&key, 10).await.unwrap();
        let calls = records.iter().filter(|r| matches!(r, UsageRecord::ToolCall { .. })).count();
        let contexts = records.iter().filter(|r| matches!(r, UsageRecord::SetContext { .. })).count();
        if (calls, contexts) == (3, 1) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "records after the outage: {records:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running.stop().await;
}
