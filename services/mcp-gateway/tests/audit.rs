//! The audit trail end to end: tool calls through `/mcp` (stateless JSON-RPC requests carrying
//! the caller's headers, as an API gateway in front sets them) and gRPC, a real MCP server
//! downstream, the records written through the record buffer to the real Postgres (or memory),
//! and read back with `ListToolCalls` over gRPC.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use switchyard_mcp_gateway::Stores;
use switchyard_proto::mcp::v1::{self as pb, mcp_gateway_service_client::McpGatewayServiceClient};
use switchyard_testkit::{
    KeyPrefix, Schema,
    mcp::{FixtureServer, tool},
};
use tonic::transport::Channel;

const POLICIES: &str = r#"
[[policies]]
name = "contractors"
groups = ["contractors"]
deny_tools = ["fx__secret_*"]
"#;

async fn gateway(dir: &tempfile::TempDir, stores: Stores, keep_arguments: bool) -> (FixtureServer, common::Running) {
    let fixture = FixtureServer::start(vec![
        tool("lookup", "Looks a word up.", &["q"]),
        tool("secret_read", "Reads a secret.", &[]),
    ])
    .await
    .unwrap();
    let path = dir.path().join("servers.toml");
    std::fs::write(&path, POLICIES).unwrap();
    let mut config = common::config(&[format!("fx={}", fixture.url())]);
    config.config_file = Some(path);
    config.audit_arguments = keep_arguments;
    config.audit_redact = vec!["password".into(), "API_KEY".into()];
    let running = common::start(&config, stores, None).await;
    running.ready(2).await;
    (fixture, running)
}

/// A `tools/call` as a 2026-07-28 client of tenant acme, user ada, group contractors sends it.
async fn call(url: &str, name: &str, arguments: Value) -> Value {
    let params = json!({
        "name": name,
        "arguments": arguments,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}
        }
    });
    let response = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", name)
        .header("x-tenant-id", "acme")
        .header("x-user-id", "ada")
        .header("x-switchyard-groups", "contractors")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}))
        .send()
        .await
        .unwrap();
    common::stateless_answer(response).await
}

fn request<T>(message: T, tenant: &str, admin: bool) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert("x-tenant-id", tenant.parse().unwrap());
    if admin {
        request.metadata_mut().insert("x-switchyard-admin", "true".parse().unwrap());
    }
    request
}

async fn records(
    grpc: &mut McpGatewayServiceClient<Channel>,
    query: pb::ListToolCallsRequest,
) -> Vec<pb::ToolCallRecord> {
    grpc.list_tool_calls(request(query, "acme", false)).await.unwrap().into_inner().records
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_is_audited_in_postgres_with_digest_outcome_and_redacted_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let (prefix, schema) = (KeyPrefix::new("gw"), Schema::new("gw"));
    let (_fixture, running) = gateway(&dir, common::shared_stores(&prefix, &schema).await, true).await;
    let url = running.mcp_url();

    let arguments = json!({"q": "hello", "password": "hunter2", "nested": [{"api_key": "k-1", "keep": 1}]});
    let ok = call(&url, "fx__lookup", arguments.clone()).await;
    assert!(ok["result"]["content"][0]["text"].as_str().unwrap().contains("lookup called with"), "{ok}");
    let denied = call(&url, "fx__secret_read", json!({})).await;
    assert_eq!(denied["error"]["code"], -32003, "{denied}");
    let failed = call(&url, "fx__lookup", json!({"q": "x", "fail": true})).await;
    assert_eq!(failed["result"]["isError"], true, "{failed}");
    let unknown = call(&url, "fx__nope", json!({})).await;
    assert!(unknown["error"]["message"].as_str().unwrap().contains("unknown tool"), "{unknown}");
    // gRPC calls are audited too, as their caller.
    let mut grpc = McpGatewayServiceClient::connect(format!("http://{}", running.grpc)).await.unwrap();
    let q = json!({"q": "w"}).as_object().cloned().unwrap();
    let grpc_call = pb::CallToolRequest {
        session_id: "g1".into(),
        name: "fx__lookup".into(),
        arguments: Some(switchyard_kit::proto_json::to_struct(&q)),
    };
    grpc.call_tool(request(grpc_call, "acme", false)).await.unwrap();
    running.gateway.flush_records().await.unwrap();

    let all = records(&mut grpc, pb::ListToolCallsRequest::default()).await;
    let outcomes: Vec<&str> = all.iter().map(|r| r.outcome.as_str()).collect();
    assert_eq!(outcomes, ["ok", "unknown_tool", "tool_error", "denied", "ok"], "newest first: {all:?}");

    let first = &all[4];
    let sent: serde_json::Map<String, Value> = serde_json::from_value(arguments).unwrap();
    let compact = serde_json::to_vec(&sent).unwrap();
    assert_eq!(first.arguments_sha256, sha256(&compact), "the digest of the arguments as sent, unredacted");
    assert_eq!(first.arguments_bytes, compact.len() as u64);
    assert_eq!((first.tenant.as_str(), first.user_id.as_str()), ("acme", "ada"));
    assert_eq!(first.groups, ["contractors"]);
    assert_eq!((first.server.as_str(), first.tool.as_str()), ("fx", "fx__lookup"));
    assert!(first.session_id.starts_with("user:"), "a stateless caller's context key: {first:?}");
    let kept = first.arguments.clone().expect("arguments kept with --audit-arguments");
    let kept = switchyard_kit::proto_json::from_struct(&kept);
    assert_eq!(
        Value::Object(kept),
        json!({"q": "hello", "password": "[redacted]", "nested": [{"api_key": "[redacted]", "keep": 1}]}),
        "the configured fields redacted, at any depth, without case"
    );

    let refused = &all[3];
    assert_eq!((refused.server.as_str(), refused.policy.as_str()), ("fx", "contractors"));
    assert!(refused.error.contains("denied by policy `contractors`"), "{refused:?}");
    assert_eq!(refused.arguments_sha256, sha256(b"{}"));
    assert_eq!(all[1].server, "", "an unknown tool has no server");
    assert_eq!((all[0].session_id.as_str(), all[0].user_id.as_str()), ("g1", ""));

    // Filters, pages, and who may read whose records.
    let only_denied =
        records(&mut grpc, pb::ListToolCallsRequest { outcome: "denied".into(), ..Default::default() }).await;
    assert_eq!(only_denied.len(), 1);
    let ada = records(&mut grpc, pb::ListToolCallsRequest { user_id: "ada".into(), ..Default::default() }).await;
    assert_eq!(ada.len(), 4);
    let page = |token: String| pb::ListToolCallsRequest { page_size: 2, page_token: token, ..Default::default() };
    let one = grpc.list_tool_calls(request(page(String::new()), "acme", false)).await.unwrap().into_inner();
    let two =
        grpc.list_tool_calls(request(page(one.next_page_token.clone()), "acme", false)).await.unwrap().into_inner();
    let three =
        grpc.list_tool_calls(request(page(two.next_page_token.clone()), "acme", false)).await.unwrap().into_inner();
    let paged: Vec<String> =
        [one.records, two.records, three.records.clone()].concat().into_iter().map(|r| r.id).collect();
    assert_eq!(paged, all.iter().map(|r| r.id.clone()).collect::<Vec<_>>());
    assert!(three.next_page_token.is_empty() && three.records.len() == 1);
    let window = pb::ListToolCallsRequest {
        start_time: Some(switchyard_kit::proto_time::timestamp(chrono::Utc::now() + chrono::Duration::hours(1))),
        ..Default::default()
    };
    assert!(records(&mut grpc, window).await.is_empty(), "nothing in a window after the calls");
    let other = grpc.list_tool_calls(request(pb::ListToolCallsRequest::default(), "other", false)).await.unwrap();
    assert!(other.into_inner().records.is_empty(), "another tenant's caller sees none of acme's");
    let nosy = pb::ListToolCallsRequest { tenant: "acme".into(), ..Default::default() };
    let refused = grpc.list_tool_calls(request(nosy.clone(), "other", false)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    // Another tenant's administrator is still another tenant: the edge gives every tenant
    // administrators. Only the operator (an administrator of the default tenant) reads across.
    let refused = grpc.list_tool_calls(request(nosy.clone(), "other", true)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    let everyone = grpc.list_tool_calls(request(pb::ListToolCallsRequest::default(), "other", true)).await.unwrap();
    assert!(everyone.into_inner().records.is_empty(), "an empty tenant is its own tenant for a tenant's administrator");
    let operator = grpc.list_tool_calls(request(nosy, "default", true)).await.unwrap().into_inner();
    assert_eq!(operator.records.len(), 5, "the operator reads any tenant's");
    for (bad, field) in [
        (pb::ListToolCallsRequest { outcome: "meh".into(), ..Default::default() }, "outcome"),
        (pb::ListToolCallsRequest { page_size: 5000, ..Default::default() }, "page_size"),
        (pb::ListToolCallsRequest { page_token: "junk".into(), ..Default::default() }, "page_token"),
    ] {
        let err = grpc.list_tool_calls(request(bad, "acme", false)).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains(field), "{err:?}");
    }
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_audit_arguments_only_the_digest_is_kept_in_memory_too() {
    let dir = tempfile::tempdir().unwrap();
    let (_fixture, running) = gateway(&dir, Stores::in_memory(), false).await;
    let arguments = json!({"q": "hello", "password": "hunter2"});
    call(&running.mcp_url(), "fx__lookup", arguments.clone()).await;
    call(&running.mcp_url(), "fx__secret_read", json!({})).await;
    running.gateway.flush_records().await.unwrap();
    let mut grpc = McpGatewayServiceClient::connect(format!("http://{}", running.grpc)).await.unwrap();
    let all = records(&mut grpc, pb::ListToolCallsRequest::default()).await;
    assert_eq!(all.iter().map(|r| r.outcome.as_str()).collect::<Vec<_>>(), ["denied", "ok"]);
    assert!(all[1].arguments.is_none(), "arguments are not kept unless enabled");
    assert_eq!(all[1].arguments_sha256, sha256(&serde_json::to_vec(&arguments).unwrap()));
    assert_eq!(all[0].policy, "contractors");
    running.stop().await;
}
