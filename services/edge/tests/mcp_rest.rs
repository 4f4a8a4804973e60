//! The MCP gateway's policies and audit trail over REST through the edge
//! (`POST /api/mcp/policies/query`, `POST /api/mcp/tool-calls/query`): the real edge with API
//! keys of two tenants, the real gateway behind it over gRPC on loopback, with server-everything
//! and a servers file of policies. A tenant reads its own tool calls and never another's; a
//! field the request does not have is a 400 naming it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Auth, Options, Stack, json};
use serde_json::{Value, json};
use switchyard_testkit::{eventually, llm::ScriptedLlm};

const POLICIES: &str = r#"
[[policies]]
name = "finance-no-env"
roles = ["finance-expert"]
deny_tools = ["everything__get-env", "everything__print*"]

[[policies]]
name = "everyone"
pin = ["everything__echo"]
"#;

fn violation(body: &Value) -> Option<&str> {
    body["error"]["details"][0]["field_violations"][0]["field"].as_str()
}

async fn stack(dir: &tempfile::TempDir) -> Stack {
    let path = dir.path().join("servers.toml");
    std::fs::write(&path, POLICIES).unwrap();
    let options = Options {
        gateway: true,
        auth: Auth::Closed { jwks_file: None },
        configure_gateway: Box::new(move |config| config.config_file = Some(path)),
        ..Options::default()
    };
    Stack::start(ScriptedLlm::start(|_| switchyard_testkit::llm::Reply::text("unused")).await, options).await
}

#[tokio::test]
async fn policies_and_tool_calls_read_through_the_edge_per_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let stack = stack(&dir).await;
    let alice = stack.key("acme", "alice", false).await;
    let bob = stack.key("globex", "bob", false).await;

    // The policies in force, and what one role may do with each tool.
    let (status, body) = json(stack.post("/api/mcp/policies/query", Some(&alice), &json!({})).await).await;
    assert_eq!(status, 200, "{body}");
    let names: Vec<&str> = body["policies"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["finance-no-env", "everyone"], "{body}");
    assert!(body.get("tools").is_none_or(|t| t.as_array().unwrap().is_empty()), "no subject, no tools: {body}");

    let query = json!({"subject": {"role": "finance-expert"}});
    let (status, body) = json(stack.post("/api/mcp/policies/query", Some(&alice), &query).await).await;
    assert_eq!(status, 200, "{body}");
    let tools = body["tools"].as_array().unwrap();
    let tool = |name: &str| tools.iter().find(|t| t["name"] == name).unwrap_or_else(|| panic!("{name} in {body}"));
    assert_eq!(tool("everything__get-env")["callable"], false, "{body}");
    assert!(tool("everything__get-env")["refusal"].as_str().unwrap().contains("finance-no-env"), "{body}");
    assert_eq!(tool("everything__get-sum")["callable"], true, "{body}");
    assert_eq!(tool("everything__echo")["pinned"], true, "{body}");
    assert_eq!(body["applying"], json!(["finance-no-env", "everyone"]), "{body}");
    // Another role is not denied it.
    let query = json!({"subject": {"role": "tech-expert"}});
    let (_, body) = json(stack.post("/api/mcp/policies/query", Some(&alice), &query).await).await;
    let env = body["tools"].as_array().unwrap().iter().find(|t| t["name"] == "everything__get-env").unwrap();
    assert_eq!(env["callable"], true, "{body}");

    // A call by acme's alice, through the edge.
    let call = json!({"session_id": "rest-audit-1", "arguments": {"a": 2, "b": 3}});
    let (status, body) = json(stack.post("/api/mcp/tools/everything__get-sum:call", Some(&alice), &call).await).await;
    assert_eq!(status, 200, "{body}");

    // acme reads it back (the record buffer writes it off the request path).
    let records = eventually(Duration::from_secs(20), "acme's tool call recorded", || async {
        let (status, body) = json(stack.post("/api/mcp/tool-calls/query", Some(&alice), &json!({})).await).await;
        let records = body["records"].as_array().cloned().unwrap_or_default();
        if status == 200 && !records.is_empty() { Ok(records) } else { Err(format!("{status} {body}")) }
    })
    .await;
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(record["tenant"], "acme", "{record}");
    assert_eq!(record["user_id"], "alice", "{record}");
    assert_eq!(record["tool"], "everything__get-sum", "{record}");
    assert_eq!(record["outcome"], "ok", "{record}");
    // Filters by caller and tool.
    let filter = json!({"user_id": "alice", "tool": "everything__get-sum", "page_size": 10});
    let (status, body) = json(stack.post("/api/mcp/tool-calls/query", Some(&alice), &filter).await).await;
    assert_eq!((status, body["records"].as_array().map(Vec::len)), (200, Some(1)), "{body}");

    // globex sees none of acme's calls, and may not ask for acme's.
    let (status, body) = json(stack.post("/api/mcp/tool-calls/query", Some(&bob), &json!({})).await).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.get("records").is_none_or(|r| r.as_array().unwrap().is_empty()), "{body}");
    let (status, body) =
        json(stack.post("/api/mcp/tool-calls/query", Some(&bob), &json!({"tenant": "acme"})).await).await;
    assert_eq!(status, 403, "{body}");

    // A field the request does not have: 400 naming it.
    let (status, body) =
        json(stack.post("/api/mcp/tool-calls/query", Some(&alice), &json!({"caller": "alice"})).await).await;
    assert_eq!((status, violation(&body)), (400, Some("caller")), "{body}");
    let (status, body) =
        json(stack.post("/api/mcp/policies/query", Some(&alice), &json!({"subject": {"rôle": "x"}})).await).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("rôle"), "{body}");
    // A value of the wrong type is refused too (the transcoder names the body, not the field).
    let (status, body) =
        json(stack.post("/api/mcp/tool-calls/query", Some(&alice), &json!({"page_size": "many"})).await).await;
    assert_eq!(status, 400, "{body}");
    // Without a credential: 401.
    let (status, _) = json(stack.post("/api/mcp/tool-calls/query", None, &json!({})).await).await;
    assert_eq!(status, 401);
}
