//! Per-tool policies end to end: policies in a real servers file, a real MCP server downstream
//! (the test kit's, over streamable HTTP), the Python SDK as a client of both protocol
//! revisions, raw JSON-RPC for search mode, the gRPC API on loopback, and the ranking with the
//! MiniLM model for recall.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{path::Path, process::Command, time::Duration};

use serde_json::{Value, json};
use switchyard_mcp_gateway::{Stores, config::ToolMode, policy::Subject};
use switchyard_proto::mcp::v1::{self as pb, mcp_gateway_service_client::McpGatewayServiceClient};
use switchyard_testkit::{
    eventually,
    mcp::{FixtureServer, tool},
    peer_tool, root,
};

fn fixture_tools() -> Vec<rmcp::model::Tool> {
    vec![
        tool("outfit_ideas", "Suggests what to wear for an occasion and the weather.", &["occasion"]),
        tool("flight_search", "Finds flights between two airports on a date.", &["from", "to"]),
        tool("sql_from_text", "Turns a question into an SQL query for a database.", &["question"]),
        tool("sql_explain", "Explains what an SQL query does to a database.", &["query"]),
        tool("currency_convert", "Converts an amount between currencies.", &["amount"]),
        tool("debug_dump", "Dumps the server's internal state for debugging.", &[]),
    ]
}

const POLICIES: &str = r#"
[[policies]]
name = "contractors"
groups = ["contractors"]
deny_tools = ["fx__sql_*"]

[[policies]]
name = "everyone"
hide = ["fx__debug_dump"]
pin = ["fx__currency_convert"]
"#;

async fn gateway(policies: &Path, mode: ToolMode) -> (FixtureServer, common::Running) {
    let fixture = FixtureServer::start(fixture_tools()).await.unwrap();
    let mut config = common::config(&[format!("fx={}", fixture.url())]);
    config.config_file = Some(policies.to_owned());
    config.config_reload = Duration::from_millis(200);
    config.top_k = 2;
    config.tool_mode = mode;
    let running = common::start(&config, Stores::in_memory(), Some(common::embedder())).await;
    running.ready(6).await;
    (fixture, running)
}

fn policies_file(dir: &tempfile::TempDir, text: &str) -> std::path::PathBuf {
    let path = dir.path().join("servers.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn python(url: &str, groups: &str, denied: &str) -> Value {
    let script = root().join("services/mcp-gateway/tests/clients/python_policies.py");
    let output = Command::new(peer_tool("mcp-python"))
        .args([&script.display().to_string(), url, groups, denied])
        .output()
        .expect("mcp-python (scripts/install-tools.sh)");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "python client failed:\n{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|err| panic!("{err}: {stdout}"))
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_tool_is_never_listed_and_refused_on_call_for_both_revisions() {
    let dir = tempfile::tempdir().unwrap();
    let (_fixture, running) = gateway(&policies_file(&dir, POLICIES), ToolMode::Filtered).await;
    let url = running.mcp_url();

    let contractor = {
        let url = url.clone();
        tokio::task::spawn_blocking(move || python(&url, "contractors,staff", "fx__sql_from_text")).await.unwrap()
    };
    assert_eq!(contractor["protocol"], "2025-11-25", "{contractor}");
    assert_eq!(contractor["stateless_protocol"], "2026-07-28", "{contractor}");
    for list in ["all", "filtered", "stateless_all", "stateless_filtered"] {
        let names = strings(&contractor[list]);
        assert!(!names.iter().any(|n| n.starts_with("fx__sql_")), "{list}: a denied tool is listed: {names:?}");
        assert!(!names.contains(&"fx__debug_dump".to_owned()), "{list}: a hidden tool is listed: {names:?}");
        assert_eq!(names[..2], ["set_context", "fx__currency_convert"], "{list}: the pinned tool comes first");
    }
    // Policies apply before the ranking: the top 2 are made of tools the caller may use.
    assert_eq!(strings(&contractor["filtered"]).len(), 4, "{contractor}");
    assert_eq!(contractor["filtered"], contractor["stateless_filtered"], "{contractor}");
    for call in ["denied_call", "stateless_denied_call"] {
        let refused = &contractor[call];
        assert_eq!(refused["code"], -32003, "{call}: {refused}");
        let message = refused["message"].as_str().unwrap();
        assert!(
            message.contains("fx__sql_from_text") && message.contains("denied by policy `contractors`"),
            "{call}: {message}"
        );
        assert!(!message.contains("called with"), "the call reached the server: {message}");
    }
    assert_eq!(contractor["allowed_call"]["code"], Value::Null, "{contractor}");

    // Anyone else sees and may call the SQL tools (the hidden one stays unlisted).
    let other = tokio::task::spawn_blocking(move || python(&url, "", "fx__sql_from_text")).await.unwrap();
    for list in ["filtered", "stateless_filtered"] {
        let names = strings(&other[list]);
        assert_eq!(names[2], "fx__sql_from_text", "{list}: the SQL tool ranks first for a SQL question: {names:?}");
        assert!(!names.contains(&"fx__debug_dump".to_owned()), "{list}: {names:?}");
    }
    assert!(other["denied_call"]["message"].as_str().unwrap().contains("sql_from_text called with"), "{other}");
    running.stop().await;
}

/// One JSON-RPC request as a 2026-07-28 client of `groups` sends it.
async fn rpc(url: &str, groups: &str, method: &str, params: Value) -> (u16, Value) {
    let mut params = params;
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({});
    let mut request = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .header("x-switchyard-groups", groups);
    if let Some(name) = params.get("name").and_then(Value::as_str) {
        request = request.header("mcp-name", name);
    }
    let response =
        request.json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})).send().await.unwrap();
    (response.status().as_u16(), common::stateless_answer(response).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_mode_grpc_and_reloads_apply_the_policies() {
    let dir = tempfile::tempdir().unwrap();
    let path = policies_file(&dir, POLICIES);
    let (_fixture, running) = gateway(&path, ToolMode::Search).await;
    let url = running.mcp_url();

    // find_tools never offers a denied tool; call_tool and a direct call are refused.
    let query = json!({"query": "turn my question into an SQL query", "limit": 10});
    let (_, found) = rpc(&url, "contractors", "tools/call", json!({"name": "find_tools", "arguments": query})).await;
    let found: Vec<&str> = found["result"]["structuredContent"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{found}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(!found.iter().any(|n| n.starts_with("fx__sql_") || *n == "fx__debug_dump"), "{found:?}");
    assert_eq!(found.first(), Some(&"fx__currency_convert"), "pinned first: {found:?}");
    let (_, everyone) = rpc(&url, "", "tools/call", json!({"name": "find_tools", "arguments": query})).await;
    assert_eq!(everyone["result"]["structuredContent"]["tools"][1]["name"], "fx__sql_from_text", "{everyone}");

    let meta_call =
        json!({"name": "call_tool", "arguments": {"name": "fx__sql_explain", "arguments": {"query": "select 1"}}});
    let (_, refused) = rpc(&url, "contractors", "tools/call", meta_call.clone()).await;
    assert_eq!(refused["error"]["code"], -32003, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("fx__sql_explain"), "{refused}");
    let direct = json!({"name": "fx__sql_from_text", "arguments": {"question": "q"}});
    let (_, refused) = rpc(&url, "contractors", "tools/call", direct.clone()).await;
    assert_eq!(refused["error"]["code"], -32003, "{refused}");
    // Hidden: never listed, but callable by name.
    let (_, hidden) = rpc(&url, "contractors", "tools/call", json!({"name": "fx__debug_dump", "arguments": {}})).await;
    assert!(hidden["result"]["content"][0]["text"].as_str().unwrap().contains("debug_dump called with"), "{hidden}");

    // A malformed groups header is the client's mistake, named.
    let (status, bad) = rpc(&url, "not a group", "tools/list", json!({})).await;
    assert_eq!(status, 400, "{bad}");
    assert!(bad["error"]["message"].as_str().unwrap().contains("x-switchyard-groups"), "{bad}");

    // gRPC: the same policies, from metadata.
    let mut grpc = McpGatewayServiceClient::connect(format!("http://{}", running.grpc)).await.unwrap();
    fn as_contractor<T>(message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.metadata_mut().insert("x-switchyard-groups", "contractors".parse().unwrap());
        request
    }
    let listed = grpc
        .list_tools(as_contractor(pb::ListToolsRequest { session_id: "g1".into(), limit: 0 }))
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = listed.tools.iter().map(|t| t.tool.as_ref().unwrap().name.as_str()).collect();
    assert_eq!(names, ["fx__currency_convert", "fx__outfit_ideas", "fx__flight_search"]);
    assert_eq!(listed.total_tools, 3, "the caller's tools, not the catalog's");
    let denied = grpc
        .call_tool(as_contractor(pb::CallToolRequest {
            session_id: "g1".into(),
            name: "fx__sql_from_text".into(),
            arguments: None,
        }))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");
    assert!(denied.message().contains("denied by policy `contractors`"), "{denied:?}");
    let mut bad = tonic::Request::new(pb::ListToolsRequest { session_id: "g1".into(), limit: 0 });
    bad.metadata_mut().insert("x-switchyard-role", "Not A Role".parse().unwrap());
    let bad = grpc.list_tools(bad).await.unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument, "{bad:?}");
    assert!(bad.message().contains("x-switchyard-role"), "{bad:?}");

    // ListPolicies: the policies, and what a subject may do with each tool.
    let shown = grpc
        .list_policies(pb::ListPoliciesRequest {
            subject: Some(pb::PolicySubject { groups: vec!["contractors".into()], ..Default::default() }),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(shown.policies.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["contractors", "everyone"]);
    assert_eq!(shown.policies[0].deny_tools, ["fx__sql_*"]);
    assert_eq!(shown.applying, ["contractors", "everyone"]);
    let access = |name: &str| shown.tools.iter().find(|t| t.name == name).unwrap().clone();
    assert!(!access("fx__sql_explain").callable && access("fx__sql_explain").refusal.contains("contractors"));
    assert!(access("fx__debug_dump").callable && !access("fx__debug_dump").listed);
    assert!(access("fx__currency_convert").pinned);

    // The file changes: the new policies apply at once; a broken file keeps the last good ones.
    std::fs::write(&path, POLICIES.replace("fx__sql_*", "fx__flight_*")).unwrap();
    eventually(Duration::from_secs(10), "policies reloaded", || async {
        let (_, answer) = rpc(&url, "contractors", "tools/call", direct.clone()).await;
        if answer.get("result").is_some() { Ok(()) } else { Err(answer.to_string()) }
    })
    .await;
    std::fs::write(&path, "[[policies]]\nname = 'broken'\n").unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (_, still) = rpc(
        &url,
        "contractors",
        "tools/call",
        json!({"name": "fx__flight_search", "arguments": {"from": "LIS", "to": "CDG"}}),
    )
    .await;
    assert_eq!(still["error"]["code"], -32003, "the last good policies stay: {still}");
    running.stop().await;
}

/// MetaTool's real tool descriptions (tests/data/README.md).
fn metatool() -> Vec<(String, String)> {
    include_str!("data/metatool-tools.jsonl")
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .map(|v| (v["name"].as_str().unwrap().to_owned(), v["description"].as_str().unwrap().to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_with_semantic_filtering_keep_recall_for_the_allowed_tools() {
    let tools = metatool();
    let fixture = FixtureServer::start(tools.iter().map(|(name, description)| tool(name, description, &[])).collect())
        .await
        .unwrap();
    // The kids' group may not use a third of the catalog: every tool whose name starts with
    // one of these letters.
    let denied_letters = ["A", "B", "C", "D", "E", "F", "G", "H"];
    let deny: Vec<String> = denied_letters.iter().map(|l| format!("\"meta__{l}*\"")).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = policies_file(
        &dir,
        &format!("[[policies]]\nname = \"kids\"\ngroups = [\"kids\"]\ndeny_tools = [{}]\n", deny.join(", ")),
    );
    let mut config = common::config(&[format!("meta={}", fixture.url())]);
    config.config_file = Some(path);
    config.top_k = 5;
    let running = common::start(&config, Stores::in_memory(), Some(common::embedder())).await;
    running.ready(tools.len()).await;
    let gateway = running.gateway.clone();

    let kid = Subject { groups: vec!["kids".into()], ..Subject::default() };
    let anyone = Subject::default();
    let (mut allowed, mut found_open, mut found_kid) = (0, 0, 0);
    for (i, (name, description)) in tools.iter().enumerate() {
        let tool = format!("meta__{name}");
        if denied_letters.iter().any(|l| name.starts_with(l)) {
            continue;
        }
        allowed += 1;
        // The description's first sentence, as a request.
        let query = description.split(". ").next().unwrap().to_lowercase();
        let key = common::session_key("default", &format!("recall-{i}"));
        let (_, open) = gateway.set_context_as(&anyone, &key, &query, None).await.unwrap();
        let (_, kids) = gateway.set_context_as(&kid, &key, &query, None).await.unwrap();
        let names = |list: &switchyard_mcp_gateway::gateway::ToolList| {
            list.tools.iter().map(|t| t.tool.name.clone()).collect::<Vec<_>>()
        };
        let kids = names(&kids);
        assert!(
            !kids.iter().any(|n| denied_letters.iter().any(|l| n.starts_with(&format!("meta__{l}")))),
            "a denied tool was ranked for the kids: {kids:?}"
        );
        assert_eq!(kids.len(), 5, "the top-k is filled with allowed tools: {kids:?}");
        found_open += usize::from(names(&open).contains(&tool));
        found_kid += usize::from(kids.contains(&tool));
    }
    let recall_open = found_open as f64 / allowed as f64;
    let recall_kid = found_kid as f64 / allowed as f64;
    eprintln!("recall@5 of {allowed} allowed tools: {recall_open:.3} for anyone, {recall_kid:.3} under the policy");
    assert!(recall_kid >= recall_open, "policies cost recall: {recall_kid:.3} < {recall_open:.3}");
    assert!(recall_kid >= 0.9, "recall@5 under the policy is {recall_kid:.3}");
    running.stop().await;
}
