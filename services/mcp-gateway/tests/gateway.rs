//! The gateway end to end over real transports: MCP clients on `/mcp` (streamable HTTP), the
//! gRPC API on loopback, a real MCP server downstream (the test kit's, over streamable HTTP,
//! serving MetaTool's 199 real tool descriptions, kept in tests/data), Redis and Postgres.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use serde_json::{Value, json};
use switchyard_mcp_gateway::{
    Stores,
    domain::{ShownMatch, UsageRecord},
    store::SessionKey,
};
use switchyard_proto::mcp::v1::{self as pb, mcp_gateway_service_client::McpGatewayServiceClient};
use switchyard_testkit::{
    KeyPrefix, Schema, eventually,
    mcp::{self, FixtureServer, tool},
};

/// MetaTool's real tool descriptions (tests/data/README.md), plus one tool with a required
/// parameter.
fn metatool_tools() -> Vec<rmcp::model::Tool> {
    let mut tools: Vec<_> = include_str!("data/metatool-tools.jsonl")
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .map(|v| tool(v["name"].as_str().unwrap(), v["description"].as_str().unwrap(), &[]))
        .collect();
    tools.push(tool("search_notes", "Searches the user's notes for a phrase.", &["phrase"]));
    tools
}

fn args(value: Value) -> Option<JsonObject> {
    value.as_object().cloned()
}

fn text_of(result: &CallToolResult) -> String {
    result.content.iter().filter_map(|c| c.as_text()).map(|t| t.text.clone()).collect::<Vec<_>>().join("\n")
}

async fn call(client: &mcp::Client, name: &str, arguments: Value) -> Result<CallToolResult, rmcp::ServiceError> {
    let mut params = CallToolRequestParams::new(name.to_owned());
    params.arguments = args(arguments);
    client.call_tool(params).await
}

fn names(tools: &[rmcp::model::Tool]) -> Vec<String> {
    tools.iter().map(|t| t.name.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_are_filtered_recorded_and_continue_on_another_replica() {
    let fixture = FixtureServer::start(metatool_tools()).await.unwrap();
    let prefix = KeyPrefix::new("gw");
    let schema = Schema::new("gw");
    let mut config = common::config(&[format!("meta={}", fixture.url())]);
    config.top_k = 5;
    let first = common::start(&config, common::shared_stores(&prefix, &schema).await, Some(common::embedder())).await;
    let second = common::start(&config, common::shared_stores(&prefix, &schema).await, Some(common::embedder())).await;
    first.ready(200).await;
    second.ready(200).await;
    session_walkthrough(first, second, &schema).await;
}

async fn session_walkthrough(first: common::Running, second: common::Running, schema: &str) {
    let client = mcp::client(&first.mcp_url()).await;

    // No context yet: every tool, set_context first (docs/requirements.md#mcp-filtered-list).
    let all = client.list_all_tools().await.unwrap();
    assert_eq!(all.len(), 201, "200 tools and set_context");
    assert_eq!(all[0].name, "set_context");
    assert_eq!(all[0].input_schema["required"], json!(["query"]));
    assert!(names(&all).contains(&"meta__AI2sql".to_owned()));

    // set_context narrows the list to the top-k for the context.
    let set =
        call(&client, "set_context", json!({"query": "Turn this question into a SQL query", "intent": "databases"}))
            .await
            .unwrap();
    assert_ne!(set.is_error, Some(true));
    assert!(text_of(&set).contains("meta__AI2sql"), "{}", text_of(&set));
    let filtered = client.list_all_tools().await.unwrap();
    assert_eq!(filtered.len(), 6, "top 5 and set_context: {:?}", names(&filtered));
    assert_eq!(filtered[0].name, "set_context");
    assert_eq!(filtered[1].name, "meta__AI2sql", "the SQL tool ranks first: {:?}", names(&filtered));

    // Calls: one listed tool, one filtered out (still callable by name).
    let listed = call(&client, "meta__AI2sql", json!({"question": "top customers"})).await.unwrap();
    assert!(text_of(&listed).contains("AI2sql called with"), "routed to the server under its own name");
    assert!(!names(&filtered).contains(&"meta__ABCmouse".to_owned()));
    let unlisted = call(&client, "meta__ABCmouse", json!({})).await.unwrap();
    assert!(text_of(&unlisted).contains("ABCmouse called with"));

    // Bad input: unknown tool named; the server's own validation error passed back;
    // oversize arguments refused before they reach the server.
    let unknown = call(&client, "meta__NoSuchTool", json!({})).await.unwrap_err().to_string();
    assert!(unknown.contains("unknown tool `meta__NoSuchTool`"), "{unknown}");
    let malformed = call(&client, "meta__search_notes", json!({"phrase": 42})).await.unwrap_err().to_string();
    assert!(malformed.contains("argument `phrase` must be a string"), "{malformed}");
    let big = "x".repeat(1024 * 1024 + 1);
    let oversize = call(&client, "meta__AI2sql", json!({"question": big})).await.unwrap_err().to_string();
    assert!(oversize.contains("over the limit"), "{oversize}");
    let no_query = call(&client, "set_context", json!({"intent": "x"})).await.unwrap_err().to_string();
    assert!(no_query.contains("`query` is required"), "{no_query}");

    // A session started on the first replica continues on the second: same Mcp-Session-Id,
    // its context, its filtered list, and its calls recorded with that context.
    let mut raw = RawSession::initialize(&first.mcp_url()).await;
    raw.request("tools/call", json!({"name": "set_context", "arguments": {"query": "Turn this question into a SQL query", "intent": "databases"}})).await;
    raw.url = second.mcp_url();
    let listed_there = raw.request("tools/list", json!({})).await;
    let there: Vec<&str> =
        listed_there["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(there.len(), 6, "{there:?}");
    assert_eq!(there[1], "meta__AI2sql");
    let called_there = raw.request("tools/call", json!({"name": "meta__AI2sql", "arguments": {"q": "again"}})).await;
    assert!(called_there["content"][0]["text"].as_str().unwrap().contains("AI2sql called with"));
    let raw_key = common::session_key("default", &raw.session_id);
    let raw_records = wait_for_records(&second, &raw_key, 2).await;
    assert!(
        matches!(&raw_records[1], UsageRecord::ToolCall { tool, context_query: Some(q), shown: ShownMatch::InList, .. }
        if tool == "meta__AI2sql" && q == "Turn this question into a SQL query"),
        "{raw_records:?}"
    );

    // Postgres holds the set_context and every call that reached a server, with the context.
    let key = common::session_key("default", &client_session(schema, &raw.session_id).await);
    let records = wait_for_records(&first, &key, 4).await;
    let calls: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            UsageRecord::ToolCall { tool, context_query, shown, is_error, .. } => {
                Some((tool.as_str(), context_query.as_deref(), *shown, *is_error))
            }
            UsageRecord::SetContext { .. } | UsageRecord::Audit(_) => None,
        })
        .collect();
    let query = Some("Turn this question into a SQL query");
    assert_eq!(
        calls,
        [
            ("meta__AI2sql", query, ShownMatch::InList, false),
            ("meta__ABCmouse", query, ShownMatch::NotInList, false),
            ("meta__search_notes", query, ShownMatch::NotInList, true),
        ]
    );
    assert!(records.iter().any(|r| matches!(r, UsageRecord::SetContext { query, intent, .. }
        if query == "Turn this question into a SQL query" && intent.as_deref() == Some("databases"))));

    // The verification figures, over gRPC, from either replica: two sessions, both set a
    // context; every call came after a filtered list.
    let mut grpc = McpGatewayServiceClient::connect(format!("http://{}", second.grpc)).await.unwrap();
    let servers = grpc.list_servers(pb::ListServersRequest {}).await.unwrap().into_inner();
    let stats = servers.stats.unwrap();
    assert_eq!(stats.mcp_sessions, 2);
    assert_eq!(stats.set_context_session_share, 1.0);
    assert_eq!(stats.tool_calls, 4, "calls refused before reaching a server are not counted");
    assert_eq!(stats.filtered_hit_rate, 0.5, "2 of the 4 calls were of a listed tool");
    assert_eq!(servers.servers.len(), 1);
    assert_eq!(servers.servers[0].state(), pb::ServerState::Ready);
    assert_eq!(servers.servers[0].tool_count, 200);

    client.cancel().await.unwrap();
    first.stop().await;
    second.stop().await;
}

/// The rmcp client's session id: the session other than `raw`'s that set a context.
async fn client_session(schema: &str, raw: &str) -> String {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&switchyard_testkit::database_url()).await.unwrap();
    let sessions: Vec<String> =
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT DISTINCT session_id FROM \"{schema}\".context_events")))
            .fetch_all(&mut conn)
            .await
            .unwrap();
    sessions.into_iter().find(|id| id != raw).expect("the client's session")
}

async fn wait_for_records(gateway: &common::Running, key: &SessionKey, count: usize) -> Vec<UsageRecord> {
    eventually(Duration::from_secs(10), &format!("{count} records of {key:?}"), || async {
        let mut records = gateway.gateway.usage().session_records(key, 100).await.unwrap();
        if records.len() >= count {
            records.reverse();
            Ok(records)
        } else {
            Err(format!("records: {records:?}"))
        }
    })
    .await
}

/// Plain JSON-RPC over HTTP with a given `Mcp-Session-Id`, as any MCP client sends it.
struct RawSession {
    url: String,
    session_id: String,
    http: reqwest::Client,
}

impl RawSession {
    /// `initialize` and `notifications/initialized`, keeping the session id the server gives.
    async fn initialize(url: &str) -> Self {
        let http = reqwest::Client::new();
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
        let response =
            http.post(url).header("accept", "application/json, text/event-stream").json(&body).send().await.unwrap();
        assert!(response.status().is_success(), "initialize: {}", response.status());
        let session_id = response.headers()["mcp-session-id"].to_str().unwrap().to_owned();
        let _ = response.text().await.unwrap();
        let session = Self { url: url.to_owned(), session_id, http };
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let response = session.post(&note).await;
        assert_eq!(response.status(), reqwest::StatusCode::ACCEPTED);
        session
    }

    async fn post(&self, body: &Value) -> reqwest::Response {
        self.http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &self.session_id)
            .header("mcp-protocol-version", "2025-11-25")
            .json(body)
            .send()
            .await
            .unwrap()
    }

    async fn request(&self, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let response = self.post(&body).await;
        let status = response.status();
        let text = response.text().await.unwrap();
        assert!(status.is_success(), "{method}: {status} {text}");
        // A JSON body, or an SSE stream whose data lines carry JSON-RPC messages.
        let message = if text.trim_start().starts_with('{') {
            serde_json::from_str::<Value>(&text).unwrap()
        } else {
            text.lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
                .find(|m| m.get("id").is_some())
                .unwrap_or_else(|| panic!("{method}: no response in {text}"))
        };
        assert!(message.get("error").is_none(), "{method}: {message}");
        message["result"].clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_s_tool_list_changes_are_followed() {
    let fixture = FixtureServer::start(vec![tool("alpha", "First tool.", &[])]).await.unwrap();
    let config = common::config(&[format!("fx={}", fixture.url())]);
    let running = common::start(&config, Stores::in_memory(), None).await;
    running.ready(1).await;
    let client = mcp::client(&running.mcp_url()).await;
    assert_eq!(names(&client.list_all_tools().await.unwrap()), ["set_context", "fx__alpha"]);

    fixture.set_tools(vec![tool("alpha", "First tool.", &[]), tool("beta", "Second tool.", &[])]).await;
    eventually(Duration::from_secs(10), "list_changed followed", || async { running.gateway.catalog().len() >= 2 })
        .await;
    assert_eq!(names(&client.list_all_tools().await.unwrap()), ["set_context", "fx__alpha", "fx__beta"]);
    let result = call(&client, "fx__beta", json!({})).await.unwrap();
    assert!(text_of(&result).contains("beta called with"));
    client.cancel().await.unwrap();
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_usage_prior_raises_tools_used_for_similar_contexts() {
    let fixture = FixtureServer::start(metatool_tools()).await.unwrap();
    let mut config = common::config(&[format!("meta={}", fixture.url())]);
    config.top_k = 10;
    let running = common::start(&config, Stores::in_memory(), Some(common::embedder())).await;
    running.ready(200).await;
    let gateway = running.gateway.clone();
    let query = "help me plan what to cook for dinner this week";

    // Before any use: where does a tool that descriptions alone rank low stand?
    let learner = common::session_key("default", "learner");
    let (_, before) = gateway.set_context(&learner, query, None).await.unwrap();
    let before: Vec<String> = before.tools.iter().map(|t| t.tool.name.clone()).collect();
    let chosen = before.last().unwrap().clone();
    assert_ne!(before[0], chosen);

    // Sessions with contexts like this one kept calling `chosen`.
    for (i, asked) in
        ["plan my dinners for the week", "what should I cook tonight", "weekly dinner ideas"].iter().enumerate()
    {
        let key = common::session_key("default", &format!("user-{i}"));
        gateway.set_context(&key, asked, None).await.unwrap();
        gateway.call_tool(Some(&key), &chosen, None).await.unwrap();
    }
    // Records are written off the request path: wait until all three are in the record.
    eventually(Duration::from_secs(10), "the calls recorded", || async {
        gateway.usage().history(10).await.unwrap().len() >= 3
    })
    .await;
    assert_eq!(gateway.refresh_history().await.unwrap(), 3);

    let (_, after) = gateway.set_context(&learner, query, None).await.unwrap();
    let after: Vec<String> = after.tools.iter().map(|t| t.tool.name.clone()).collect();
    let rank = after.iter().position(|name| *name == chosen).map(|i| i + 1);
    // Usage lifts `chosen` above every tool that only its description recommends, except the
    // one that fits the request best: a tool nobody has used yet competes with a share of its
    // cold-start standing in place of votes (`PriorParams::unseen_share`), so a catalog's new
    // tools are not buried under the used ones (BENCHMARKS.md, "tool-disjoint" splits).
    assert!(matches!(rank, Some(1 | 2)), "usage moved `{chosen}` from #{} to #{rank:?}: {after:?}", before.len());
    if rank == Some(2) {
        assert_eq!(after[0], before[0], "only the best-fitting never-used tool stays above it: {after:?}");
    }
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_api_sets_context_lists_scores_and_calls() {
    let fixture = FixtureServer::start(metatool_tools()).await.unwrap();
    let config = common::config(&[format!("meta={}", fixture.url())]);
    let running = common::start(&config, Stores::in_memory(), Some(common::embedder())).await;
    running.ready(200).await;
    let mut grpc = McpGatewayServiceClient::connect(format!("http://{}", running.grpc)).await.unwrap();

    let all = grpc.list_tools(pb::ListToolsRequest { session_id: "g1".into(), limit: 0 }).await.unwrap().into_inner();
    assert!(!all.filtered);
    assert_eq!((all.tools.len(), all.total_tools), (200, 200));

    let set = grpc
        .set_context(pb::SetContextRequest {
            session_id: "g1".into(),
            query: "What should I wear today?".into(),
            intent: Some("fashion advice".into()),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let context = set.context.unwrap();
    assert_eq!(context.current_query, "What should I wear today?");
    assert_eq!(context.current_intent.as_deref(), Some("fashion advice"));
    assert_eq!(set.tools.len(), 8, "the configured top-k");
    assert_eq!(set.tools[0].tool.as_ref().unwrap().name, "meta__AbleStyle");
    // With a `limit`, the answer carries that many, ranked as ListTools ranks them: a caller
    // with its own top-k needs no second call.
    let set_context = |limit: u32| pb::SetContextRequest {
        session_id: "g1".into(),
        query: "What should I wear today?".into(),
        intent: Some("fashion advice".into()),
        limit,
    };
    let three = grpc.set_context(set_context(3)).await.unwrap().into_inner();
    let names = |tools: &[pb::ScoredTool]| -> Vec<String> {
        tools.iter().map(|t| t.tool.as_ref().unwrap().name.clone()).collect()
    };
    assert_eq!(names(&three.tools), names(&set.tools[..3]), "the configured top-k's first three");
    let twenty = grpc.set_context(set_context(20)).await.unwrap().into_inner();
    assert_eq!(twenty.tools.len(), 20, "over the configured top-k when asked");
    let all = grpc.set_context(set_context(1000)).await.unwrap().into_inner();
    assert_eq!(all.tools.len(), 200, "at most the catalog");
    let status = grpc.set_context(set_context(1001)).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().starts_with("limit") && status.message().contains("1000"), "{status:?}");

    let listed =
        grpc.list_tools(pb::ListToolsRequest { session_id: "g1".into(), limit: 3 }).await.unwrap().into_inner();
    assert!(listed.filtered);
    assert_eq!(listed.tools.len(), 3);
    let scores: Vec<f64> = listed.tools.iter().map(|t| t.score.unwrap().score).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "best first: {scores:?}");
    let best = listed.tools[0].score.unwrap();
    assert!(best.embedding > 0.0, "the semantic signal is on: {best:?}");
    assert!((best.bm25 + best.embedding + best.usage_prior - best.score).abs() < 1e-6, "the parts sum to the score");
    let tool = listed.tools[0].tool.as_ref().unwrap();
    assert_eq!((tool.server.as_str(), tool.upstream_name.as_str()), ("meta", "AbleStyle"));

    let arguments = switchyard_kit::proto_json::to_struct(json!({"phrase": "blue shirt", "n": 3}).as_object().unwrap());
    let called = grpc
        .call_tool(pb::CallToolRequest {
            session_id: "g1".into(),
            name: "meta__search_notes".into(),
            arguments: Some(arguments),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!called.is_error);
    assert_eq!(called.server, "meta");
    let Some(pb::content::Kind::Text(text)) = &called.content[0].kind else { panic!("text content") };
    assert!(text.contains(r#""n":3"#), "whole numbers stay integers: {text}");
    let context = running.gateway.context(&common::session_key("default", "g1")).await.unwrap();
    assert_eq!(context.unwrap().tools_used, ["meta__search_notes"]);

    // Bad input: named fields and the right codes.
    let status = grpc
        .set_context(pb::SetContextRequest { session_id: "g1".into(), query: " ".into(), intent: None, limit: 0 })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().starts_with("query"), "{status:?}");
    let status = grpc
        .set_context(pb::SetContextRequest { session_id: String::new(), query: "x".into(), intent: None, limit: 0 })
        .await
        .unwrap_err();
    assert!(status.message().starts_with("session_id"), "{status:?}");
    let status = grpc
        .set_context(pb::SetContextRequest { session_id: "g1".into(), query: "q".repeat(9000), intent: None, limit: 0 })
        .await
        .unwrap_err();
    assert!(status.message().contains("over the limit"), "{status:?}");
    let status = grpc
        .call_tool(pb::CallToolRequest { session_id: "g1".into(), name: "meta__Nope".into(), arguments: None })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound);
    assert!(status.message().contains("meta__Nope"));
    let status = grpc
        .call_tool(pb::CallToolRequest { session_id: "g1".into(), name: "meta__search_notes".into(), arguments: None })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "the server's validation error: {status:?}");
    assert!(status.message().contains("missing required argument `phrase`"));
    let status = grpc.list_tools(pb::ListToolsRequest { session_id: "bad id!".into(), limit: 0 }).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    let status = grpc.list_tools(pb::ListToolsRequest { session_id: "g1".into(), limit: 5000 }).await.unwrap_err();
    assert!(status.message().starts_with("limit"));
    let mut request = tonic::Request::new(pb::ListToolsRequest { session_id: "g1".into(), limit: 0 });
    request.metadata_mut().insert("x-tenant-id", "other".parse().unwrap());
    let other = grpc.list_tools(request).await.unwrap().into_inner();
    assert!(!other.filtered, "another tenant does not see this session's context");
    // A `:` would let tenant "a:b" + session "c" share a store key with tenant "a" + "b:c".
    let mut request = tonic::Request::new(pb::ListToolsRequest { session_id: "c".into(), limit: 0 });
    request.metadata_mut().insert("x-tenant-id", "a:b".parse().unwrap());
    let status = grpc.list_tools(request).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().starts_with("x-tenant-id"), "{status:?}");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_ends_a_session_everywhere_and_answers_204_then_404() {
    let fixture = FixtureServer::start(vec![tool("alpha", "First tool.", &[])]).await.unwrap();
    let prefix = KeyPrefix::new("gw-end");
    let schema = Schema::new("gw_end");
    let config = common::config(&[format!("fx={}", fixture.url())]);
    let running = common::start(&config, common::shared_stores(&prefix, &schema).await, None).await;
    running.ready(1).await;
    let raw = RawSession::initialize(&running.mcp_url()).await;
    raw.request("tools/call", json!({"name": "set_context", "arguments": {"query": "greek letters"}})).await;
    raw.request("tools/list", json!({})).await;
    let key = common::session_key("default", &raw.session_id);
    let contexts = running.gateway.contexts().clone();
    assert!(contexts.get(&key).await.unwrap().is_some(), "the context is stored while the session lives");
    assert!(contexts.load_transport(&raw.session_id).await.unwrap().is_some());

    let delete = || {
        raw.http
            .delete(&raw.url)
            .header("mcp-session-id", &raw.session_id)
            .header("mcp-protocol-version", "2025-11-25")
            .send()
    };
    let response = delete().await.unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::NO_CONTENT);
    // Its state is gone from the shared store: the transport record, the context and the
    // list it was last shown.
    assert!(contexts.get(&key).await.unwrap().is_none());
    assert!(contexts.load_transport(&raw.session_id).await.unwrap().is_none());
    // The session is unknown from now on.
    let response = raw.post(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {}})).await;
    assert_eq!(response.status(), reqwest::StatusCode::NOT_FOUND);
    assert_eq!(delete().await.unwrap().status(), reqwest::StatusCode::NOT_FOUND);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_mode_offers_find_tools_and_calls_by_name_for_clients_that_list_once() {
    let fixture = FixtureServer::start(metatool_tools()).await.unwrap();
    let mut config = common::config(&[format!("meta={}", fixture.url())]);
    config.tool_mode = switchyard_mcp_gateway::config::ToolMode::Search;
    config.top_k = 5;
    let running = common::start(&config, Stores::in_memory(), Some(common::embedder())).await;
    running.ready(200).await;
    let client = mcp::client(&running.mcp_url()).await;

    // A small fixed surface, whatever the context.
    let surface = ["set_context", "find_tools", "call_tool"];
    assert_eq!(names(&client.list_all_tools().await.unwrap()), surface);

    let found =
        call(&client, "find_tools", json!({"query": "search my notes for the word budget", "limit": 3})).await.unwrap();
    let structured = found.structured_content.clone().expect("structured tools");
    let tools = structured["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 3, "{structured}");
    assert_eq!(structured["total_tools"], 200);
    assert_eq!(tools[0]["name"], "meta__search_notes", "the ranking puts the notes search first: {structured}");
    assert_eq!(tools[0]["input_schema"]["required"][0], "phrase", "schemas come with the tools");
    let score = &tools[0]["score"];
    assert!(score["total"].as_f64().unwrap() > 0.0 && score["bm25"].is_number() && score["embedding"].is_number());
    assert!(text_of(&found).contains("meta__search_notes"));
    // The list did not change with the context.
    assert_eq!(names(&client.list_all_tools().await.unwrap()), surface);

    // Calls by name, through call_tool or directly.
    let result = call(&client, "call_tool", json!({"name": "meta__search_notes", "arguments": {"phrase": "budget"}}))
        .await
        .unwrap();
    assert!(text_of(&result).contains("search_notes called with"), "{}", text_of(&result));
    let result = call(&client, "meta__search_notes", json!({"phrase": "budget"})).await.unwrap();
    assert!(text_of(&result).contains("search_notes called with"));

    // Mistakes are named.
    for (arguments, expected) in [(json!({"query": "x", "limit": 0}), "limit"), (json!({"limit": 2}), "query")] {
        let err = call(&client, "find_tools", arguments).await.unwrap_err().to_string();
        assert!(err.contains(expected), "{err}");
    }
    let err = call(&client, "call_tool", json!({"arguments": {}})).await.unwrap_err().to_string();
    assert!(err.contains("name"), "{err}");

    // The call found through find_tools is learned from like any other: recorded with the
    // context find_tools set, and counted as in the list shown.
    eventually(Duration::from_secs(10), "the calls recorded with their context", || async {
        let pairs = running.gateway.usage().history(10).await.unwrap();
        if pairs.iter().filter(|p| p.tool == "meta__search_notes").count() >= 2 {
            Ok(())
        } else {
            Err(format!("{pairs:?}"))
        }
    })
    .await;
    running.stop().await;
}

/// `_meta` carrying a stateless context handle.
fn handle_meta(handle: &str) -> rmcp::model::RequestMetaObject {
    let mut meta = rmcp::model::RequestMetaObject::default();
    meta.insert("io.switchyard/context".to_owned(), json!(handle));
    meta
}

async fn list_with(client: &mcp::Client, handle: Option<&str>) -> Result<rmcp::model::ListToolsResult, String> {
    let params = handle.map(|h| {
        let mut params = rmcp::model::PaginatedRequestParams::default();
        params.meta = Some(handle_meta(h));
        params
    });
    client.list_tools(params).await.map_err(|err| err.to_string())
}

/// One stateless JSON-RPC request as a 2026-07-28 client sends it (see
/// [`common::stateless_request`]), for tenant `tenant` (and `user`, when an API gateway named
/// one); its JSON-RPC response.
async fn stateless_raw(url: &str, tenant: &str, user: Option<&str>, method: &str, params: Value) -> Value {
    let response = common::stateless_request(url, Some(tenant), user, method, params).await;
    assert!(response.headers().get("mcp-session-id").is_none(), "no session on the stateless revision");
    common::stateless_answer(response).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateless_clients_keep_a_context_by_handle_beside_session_clients() {
    let fixture = FixtureServer::start(metatool_tools()).await.unwrap();
    let prefix = KeyPrefix::new("gw-stateless");
    let schema = Schema::new("gw_stateless");
    let mut config = common::config(&[format!("meta={}", fixture.url())]);
    config.top_k = 5;
    let running = common::start(&config, common::shared_stores(&prefix, &schema).await, Some(common::embedder())).await;
    running.ready(200).await;
    let url = running.mcp_url();
    let stateless = mcp::stateless_client(&url).await;
    let session = mcp::client(&url).await;

    // server/discover answered: the newest revision, and where a context lives without a session.
    let info = stateless.peer_info().expect("discovered");
    assert_eq!(info.protocol_version.as_str(), "2026-07-28");
    assert!(info.instructions.as_deref().unwrap_or_default().contains("io.switchyard/context"), "{info:?}");

    // Without a context every tool is listed, and that list may be cached by anyone.
    let all = list_with(&stateless, None).await.unwrap();
    assert_eq!(all.tools.len(), 201);
    assert_eq!(all.cache_scope, Some(rmcp::model::CacheScope::Public));

    // set_context mints a handle; sent back in `_meta`, it narrows the list to this context.
    let set = call(&stateless, "set_context", json!({"query": "search my notes for the word budget"})).await.unwrap();
    let handle = set.structured_content.as_ref().unwrap()["context"].as_str().expect("a handle").to_owned();
    assert!(handle.starts_with("ctx-"), "{handle}");
    assert_eq!(set.meta.as_ref().unwrap().get("io.switchyard/context"), Some(&json!(handle)));
    assert!(text_of(&set).contains(&handle), "the model is told the handle too: {}", text_of(&set));
    let narrowed = list_with(&stateless, Some(&handle)).await.unwrap();
    let listed = names(&narrowed.tools);
    assert_eq!(listed.len(), 6, "{listed:?}");
    assert_eq!(listed[1], "meta__search_notes", "{listed:?}");
    assert_eq!(narrowed.cache_scope, Some(rmcp::model::CacheScope::Private), "a filtered list is the caller's own");
    assert_eq!(narrowed.ttl_ms, Some(0), "it changes with the context");

    // A session-based client on the same gateway keeps its own, independent context.
    assert_eq!(session.list_all_tools().await.unwrap().len(), 201, "the handle is not a session's context");
    call(&session, "set_context", json!({"query": "weather forecast for Paris tomorrow"})).await.unwrap();
    let session_list = names(&session.list_all_tools().await.unwrap());
    assert_eq!(session_list.len(), 6);
    assert!(!session_list.contains(&"meta__search_notes".to_owned()), "{session_list:?}");
    assert_eq!(names(&list_with(&stateless, Some(&handle)).await.unwrap().tools), listed, "unchanged by the session");

    // A call with the handle is recorded with the handle's context, as the usage learning needs.
    let mut params = CallToolRequestParams::new("meta__search_notes");
    params.arguments = args(json!({"phrase": "budget"}));
    params.meta = Some(handle_meta(&handle));
    let result = stateless.call_tool(params).await.unwrap();
    assert!(text_of(&result).contains("search_notes called with"), "{}", text_of(&result));
    let key = common::session_key("default", &handle);
    let records = wait_for_records(&running, &key, 2).await;
    let called = records.iter().find_map(|r| match r {
        UsageRecord::ToolCall { tool, context_query, .. } => Some((tool.clone(), context_query.clone())),
        _ => None,
    });
    assert_eq!(
        called,
        Some(("meta__search_notes".to_owned(), Some("search my notes for the word budget".to_owned()))),
        "{records:?}"
    );

    // set_context with the handle updates that context instead of minting another.
    let mut params = CallToolRequestParams::new("set_context");
    params.arguments = args(json!({"query": "weather forecast for Paris tomorrow"}));
    params.meta = Some(handle_meta(&handle));
    let again = stateless.call_tool(params).await.unwrap();
    assert_eq!(again.structured_content.as_ref().unwrap()["context"], json!(handle));
    assert_eq!(names(&list_with(&stateless, Some(&handle)).await.unwrap().tools), session_list);

    // Handles the gateway did not mint, or another tenant's, are refused by name.
    let err = list_with(&stateless, Some("not-a-handle")).await.unwrap_err();
    assert!(err.contains("io.switchyard/context"), "{err}");
    let err = list_with(&stateless, Some("ctx-00000000-0000-4000-8000-000000000000")).await.unwrap_err();
    assert!(err.contains("unknown or expired"), "{err}");
    let with_handle = json!({"_meta": {"io.switchyard/context": handle}});
    let other = stateless_raw(&url, "tenant-b", None, "tools/list", with_handle.clone()).await;
    assert_eq!(other["error"]["code"], -32602, "another tenant cannot use the handle: {other}");
    let mine = stateless_raw(&url, "default", None, "tools/list", with_handle).await;
    assert_eq!(mine["result"]["tools"].as_array().map(Vec::len), Some(6), "{mine}");
    assert_eq!(mine["result"]["cacheScope"], "private", "{mine}");

    // Without a handle, a caller the API gateway authenticated has one context of its own.
    let set_context = json!({"name": "set_context", "arguments": {"query": "search my notes for the word budget"}});
    let set = stateless_raw(&url, "default", Some("alice@example.com"), "tools/call", set_context).await;
    assert!(set["result"]["structuredContent"].get("context").is_none(), "no handle for a caller's context: {set}");
    let alice = stateless_raw(&url, "default", Some("alice@example.com"), "tools/list", json!({})).await;
    assert_eq!(alice["result"]["tools"].as_array().map(Vec::len), Some(6), "{alice}");
    let bob = stateless_raw(&url, "default", Some("bob@example.com"), "tools/list", json!({})).await;
    assert_eq!(bob["result"]["tools"].as_array().map(Vec::len), Some(201), "{bob}");
    running.stop().await;
}

/// Recorded usage teaches a query adapter and a word classifier once there is enough of it
/// (20 pairs, two tools), and the gateway picks its base adapter as `--base-adapter` says:
/// the shipped one for this model, none, or a file — a file that is missing or made for
/// another model stops start-up with the reason, rather than ranking silently without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_adapter_is_learned_from_usage_and_the_base_adapter_is_chosen_by_flag() {
    let fixture = FixtureServer::start(metatool_tools()).await.unwrap();
    let config = common::config(&[format!("meta={}", fixture.url())]);
    let running = common::start(&config, Stores::in_memory(), Some(common::embedder())).await;
    running.ready(200).await;
    let gateway = running.gateway.clone();
    let shipped = gateway.settings().base_adapter.clone().expect("the shipped adapter fits MiniLM");
    assert_eq!((shipped.dimensions(), shipped.provenance().tools), (384, 199));

    let requests = [
        ("meta__ExchangeTool", ["how many yen is 50 euros", "convert 200 dollars to pounds", "usd to inr rate now"]),
        (
            "meta__EarthquakeTool",
            ["any tremors near tokyo today", "was there a quake in chile", "seismic activity this week"],
        ),
    ];
    let mut recorded = 0;
    for round in 0..4 {
        for (tool, asked) in &requests {
            for (i, context) in asked.iter().enumerate() {
                let key = common::session_key("default", &format!("adapter-{round}-{tool}-{i}"));
                gateway.set_context(&key, &format!("{context} (#{round})"), None).await.unwrap();
                gateway.call_tool(Some(&key), tool, None).await.unwrap();
                recorded += 1;
            }
        }
    }
    eventually(Duration::from_secs(10), "the calls recorded", || async {
        gateway.usage().history(100).await.unwrap().len() >= recorded
    })
    .await;
    assert!(!gateway.catalog().adapted, "no history, no adapter");
    assert_eq!(gateway.refresh_history().await.unwrap(), recorded);
    let catalog = gateway.catalog();
    assert_eq!((catalog.learned_pairs, catalog.adapted), (24, true));
    assert!(catalog.word_features > 10, "a word classifier was learned too: {catalog:?}");
    // A request phrased like the recorded ones: the tool they used is shown, with votes.
    let key = common::session_key("default", "adapter-after");
    let (_, shown) = gateway.set_context(&key, "convert 75 swiss francs to dollars", None).await.unwrap();
    let exchange = shown.tools.iter().position(|t| t.tool.name == "meta__ExchangeTool");
    let parts: Vec<_> = shown.tools.iter().map(|t| (&t.tool.name, t.score.as_ref().map(|s| s.usage_prior))).collect();
    assert!(matches!(exchange, Some(0 | 1)), "{parts:?}");
    let earthquake = shown.tools.iter().find(|t| t.tool.name == "meta__EarthquakeTool");
    let prior = |i: usize| shown.tools[i].score.as_ref().map_or(0.0, |s| s.usage_prior);
    assert!(prior(exchange.unwrap_or_default()) > 4.0, "votes for the used tool: {parts:?}");
    assert!(earthquake.is_none(), "the other used tool is not pushed on an unrelated request: {parts:?}");
    running.stop().await;

    let mut none = config.clone();
    none.base_adapter = "none".into();
    let running = common::start(&none, Stores::in_memory(), Some(common::embedder())).await;
    assert!(running.gateway.settings().base_adapter.is_none());
    running.stop().await;

    let dir = tempfile::tempdir().unwrap();
    let mut missing = config.clone();
    missing.base_adapter = dir.path().join("absent.bin").display().to_string();
    let err = switchyard_mcp_gateway::GatewayServer::bind_with(&missing, Stores::in_memory(), Some(common::embedder()))
        .await
        .err()
        .expect("a missing adapter file stops start-up");
    assert!(format!("{err:#}").contains("absent.bin"), "{err:#}");

    let other_model = dir.path().join("other.bin");
    let foreign = switchyard_models::cache_file::ModelDigest::from_bytes([9; 32]);
    std::fs::write(&other_model, shipped.to_bytes(&foreign)).unwrap();
    let mut wrong = config.clone();
    wrong.base_adapter = other_model.display().to_string();
    let err = switchyard_mcp_gateway::GatewayServer::bind_with(&wrong, Stores::in_memory(), Some(common::embedder()))
        .await
        .err()
        .expect("an adapter for another model stops start-up");
    assert!(format!("{err:#}").contains("another embedding model"), "{err:#}");

    // The same file made for this model is taken as it is.
    let model = switchyard_models::cache_file::ModelDigest::of_dir(&switchyard_testkit::model_dir()).unwrap();
    std::fs::write(&other_model, shipped.to_bytes(&model)).unwrap();
    let running = common::start(&wrong, Stores::in_memory(), Some(common::embedder())).await;
    assert_eq!(running.gateway.settings().base_adapter.as_ref().map(|a| a.provenance()), Some(shipped.provenance()));
    running.stop().await;
}
