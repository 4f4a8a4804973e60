//! The gateway as desktop MCP clients run it: launched as a child process with `--stdio`,
//! speaking MCP on stdin/stdout (logs on stderr), fronting a real server over streamable HTTP.
//! And the HTTP endpoint's Host check, configured for a name other than loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use rmcp::{
    ServiceExt,
    model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion},
    transport::TokioChildProcess,
};
use serde_json::json;
use switchyard_mcp_gateway::Stores;
use switchyard_testkit::mcp::{FixtureServer, tool};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_mode_serves_a_launching_client() {
    let fixture = FixtureServer::start(vec![
        tool("read_notes", "Reads the user's notes.", &[]),
        tool("send_email", "Sends an email to a contact.", &["to"]),
    ])
    .await
    .unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard-mcp-gateway"));
    command.args(["--stdio", "--in-memory", "--no-embeddings", "--server", &format!("fx={}", fixture.url())]);
    let transport = TokioChildProcess::new(command).expect("start the gateway in stdio mode");
    let client = ClientConfig::new(ClientCapabilities::default(), Implementation::new("desktop", "0"))
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
        .serve(transport)
        .await
        .expect("initialize over stdio");

    let names: Vec<String> = client.list_all_tools().await.unwrap().iter().map(|t| t.name.to_string()).collect();
    assert_eq!(names, ["set_context", "fx__read_notes", "fx__send_email"]);

    let mut set = CallToolRequestParams::new("set_context");
    set.arguments = json!({"query": "email my notes to Ana"}).as_object().cloned();
    assert_ne!(client.call_tool(set).await.unwrap().is_error, Some(true));
    let mut send = CallToolRequestParams::new("fx__send_email");
    send.arguments = json!({"to": "ana@example.com"}).as_object().cloned();
    let result = client.call_tool(send).await.unwrap();
    let text = result.content[0].as_text().unwrap().text.clone();
    assert!(text.contains("send_email called with"), "{text}");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_hosts_are_configurable() {
    let mut config = common::config(&[]);
    config.allowed_hosts = vec!["mcp-gateway.tools.svc.cluster.local".into()];
    let running = common::start(&config, Stores::in_memory(), None).await;
    let http = reqwest::Client::new();
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "k8s", "version": "0"}}});
    let post = |host: &'static str| {
        http.post(running.mcp_url())
            .header("host", host)
            .header("accept", "application/json, text/event-stream")
            .json(&initialize)
            .send()
    };
    let allowed = post("mcp-gateway.tools.svc.cluster.local:8081").await.unwrap();
    assert!(allowed.status().is_success(), "the Service's name is accepted: {}", allowed.status());
    let foreign = post("evil.example.com").await.unwrap();
    assert!(foreign.status().is_client_error(), "a foreign Host is refused: {}", foreign.status());
    let loopback = post("127.0.0.1").await.unwrap();
    assert!(loopback.status().is_client_error(), "only the configured hosts: {}", loopback.status());
    running.stop().await;
}
