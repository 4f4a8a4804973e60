//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, its server
//! scenarios) against the gateway, fronting a fixture server with the tools, resources and
//! prompts the scenarios call by exact name (tests/conformance/fixture_server.py, over stdio;
//! prefixing off so the names reach the suite unchanged).
//!
//! The run must match `tests/conformance/expected-failures.yml` exactly: a listed scenario
//! that starts passing fails the run too (the suite's "stale baseline"), so the README's
//! table stays true. Why each listed scenario fails is written there and in the README.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use switchyard_mcp_gateway::Stores;
use switchyard_testkit::{peer_tool, root};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_server_scenarios() {
    let fixture = root().join("services/mcp-gateway/tests/conformance/fixture_server.py");
    let baseline = root().join("services/mcp-gateway/tests/conformance/expected-failures.yml");
    let mut config = common::config(&[format!("fixture={} {}", peer_tool("mcp-python"), fixture.display())]);
    config.prefix_tools = false;
    let running = common::start(&config, Stores::in_memory(), None).await;
    running.ready(8).await;

    let conformance = peer_tool("mcp-conformance");
    let url = running.mcp_url();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(conformance)
            .args(["server", "--url", &url, "--expected-failures", &baseline.display().to_string()])
            .output()
            .expect("run mcp-conformance")
    })
    .await
    .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "conformance results differ from the expected failures:\n{text}");
    running.stop().await;
}
