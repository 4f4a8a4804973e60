//! Tenant isolation across every API that holds a tenant's data, as one table: tenant A makes a
//! session with history, a routed chat turn, a stored Responses answer, an MCP context and a
//! tool call; then tenant B — its user and its administrator — tries to read, change, continue
//! or list each of them through the edge, with real keys, over the real suite (sessions in Redis
//! and Postgres, the router's analytics in Postgres, the MCP gateway with server-everything).
//! Nothing of A's is visible or changed, and A still has all of it afterwards. Roles and the
//! trigger registry have their own table in tests/auth.rs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Auth, Options, Stack, json};
use reqwest::Method;
use serde_json::{Value, json};
use switchyard_testkit::{
    eventually,
    llm::{Reply, ScriptedLlm},
};

/// A's text, which must never appear in an answer to B.
const A_SECRET: &str = "tenant-a-private-note-4411";

struct Probe {
    what: &'static str,
    method: Method,
    path: String,
    body: Value,
    /// The key that sends it: B's user or B's administrator.
    admin: bool,
    expected: u16,
}

/// A proto `uint64` in JSON: a string by the proto JSON mapping, a number from some encoders;
/// absent (the default) is zero.
fn count(value: &Value) -> u64 {
    value.as_u64().or_else(|| value.as_str().and_then(|s| s.parse().ok())).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_b_can_read_change_or_list_nothing_of_tenant_as() {
    let llm = ScriptedLlm::start(|_| Reply::text("Noted.")).await;
    let options =
        Options { gateway: true, durable_sessions: true, auth: Auth::Closed { jwks_file: None }, ..Options::default() };
    let stack = Stack::start(llm, options).await;
    let a_user = stack.key("tenant-a", "ann", false).await;
    let a_admin = stack.key("tenant-a", "root", true).await;
    let b_user = stack.key("tenant-b", "bob", false).await;
    let b_admin = stack.key("tenant-b", "boss", true).await;

    // Tenant A's data, one piece per API.
    let (status, created) = json(stack.post("/api/context/sessions", Some(&a_user), &json!({})).await).await;
    assert_eq!(status, 200, "{created}");
    let a_session = created["session"]["session_id"].as_str().unwrap().to_owned();
    let chat = json!({"message": format!("Remember {A_SECRET}"), "session_id": a_session});
    let (status, answered) = json(stack.post("/api/v1/chat", Some(&a_user), &chat).await).await;
    assert_eq!(status, 200, "{answered}");
    let a_chat_id = answered["id"].as_str().unwrap().to_owned();
    let stored = json!({"model": "openai/gpt-4o-mini", "input": format!("Keep {A_SECRET}"), "store": true});
    let (status, response) = json(stack.post("/v1/responses", Some(&a_user), &stored).await).await;
    assert_eq!(status, 200, "{response}");
    let a_response_id = response["id"].as_str().unwrap().to_owned();
    let context = json!({"session_id": a_session, "query": format!("add numbers for {A_SECRET}")});
    assert_eq!(json(stack.post("/api/mcp/context", Some(&a_user), &context).await).await.0, 200);
    let call = json!({"session_id": a_session, "arguments": {"a": 1, "b": 2}});
    let (status, called) =
        json(stack.post("/api/mcp/tools/everything__get-sum:call", Some(&a_user), &call).await).await;
    assert_eq!(status, 200, "{called}");
    let history_path = format!("/api/context/sessions/{a_session}/history");
    let session = format!("/api/context/sessions/{a_session}");
    let with_messages = format!("{session}?include_messages=true");
    let (_, read) = json(stack.get(&with_messages, Some(&a_user)).await).await;
    let a_messages = read["recent_messages"].as_array().map_or(0, Vec::len);
    assert!(a_messages >= 2, "the chat turn is in A's session: {read}");
    // The turn's decision is written in a batch; feedback needs it recorded.
    eventually(Duration::from_secs(10), "A's turn recorded", || async {
        let (_, stats) = json(stack.get("/api/v1/chat/stats", Some(&a_admin)).await).await;
        if count(&stats["total"]) > 0 { Ok(()) } else { Err(stats.to_string()) }
    })
    .await;

    let probes = [
        Probe {
            what: "read A's session",
            method: Method::GET,
            path: session.clone(),
            body: json!({}),
            admin: true,
            expected: 404,
        },
        Probe {
            what: "read A's history",
            method: Method::GET,
            path: history_path.clone(),
            body: json!({}),
            admin: true,
            expected: 404,
        },
        Probe {
            what: "append to A's history",
            method: Method::POST,
            path: format!("{session}/messages"),
            body: json!({"messages": [{"role": "MESSAGE_ROLE_USER", "content": "planted by B"}]}),
            admin: true,
            expected: 404,
        },
        Probe {
            what: "switch A's session",
            method: Method::POST,
            path: "/api/context/switch".into(),
            body: json!({"session_id": a_session, "new_role_id": "tech-expert"}),
            admin: true,
            expected: 404,
        },
        Probe {
            what: "process a query in A's session",
            method: Method::POST,
            path: "/api/context/process".into(),
            body: json!({"session_id": a_session, "query": "what did they say?"}),
            admin: false,
            expected: 404,
        },
        Probe {
            what: "chat in A's session",
            method: Method::POST,
            path: "/api/v1/chat".into(),
            body: json!({"message": "what did they say?", "session_id": a_session}),
            admin: false,
            expected: 404,
        },
        Probe {
            what: "judge A's answer",
            method: Method::POST,
            path: "/api/v1/chat/feedback".into(),
            body: json!({"response_id": a_chat_id, "helpful": false, "expected_route": "ROUTE_TYPE_MULTIAGENT"}),
            admin: true,
            expected: 404,
        },
        Probe {
            what: "retrieve A's stored response",
            method: Method::GET,
            path: format!("/v1/responses/{a_response_id}"),
            body: json!({}),
            admin: true,
            expected: 404,
        },
        Probe {
            what: "continue A's stored response",
            method: Method::POST,
            path: "/v1/responses".into(),
            body: json!({"model": "openai/gpt-4o-mini", "input": "go on", "previous_response_id": a_response_id}),
            admin: false,
            expected: 400,
        },
        Probe {
            what: "read A's tool calls by name",
            method: Method::POST,
            path: "/api/mcp/tool-calls/query".into(),
            body: json!({"tenant": "tenant-a"}),
            admin: true,
            expected: 403,
        },
        Probe {
            what: "read A's budgets by name",
            method: Method::GET,
            path: "/api/v1/budgets?tenant_id=tenant-a".into(),
            body: json!({}),
            admin: true,
            expected: 403,
        },
        Probe {
            what: "delete A's session",
            method: Method::DELETE,
            path: session.clone(),
            body: json!({}),
            admin: true,
            expected: 404,
        },
    ];
    let mut failures = Vec::new();
    for probe in &probes {
        let key = if probe.admin { &b_admin } else { &b_user };
        let response = if probe.method == Method::GET {
            stack.get(&probe.path, Some(key)).await
        } else {
            stack.send(probe.method.clone(), &probe.path, Some(key), &probe.body).await
        };
        let (status, body) = json(response).await;
        if status != probe.expected || body.to_string().contains(A_SECRET) {
            failures.push(format!(
                "{}: {} {} answered {status}, expected {}: {body}",
                probe.what, probe.method, probe.path, probe.expected
            ));
        }
    }
    // Listings answer, with none of A's in them.
    for (what, response) in [
        ("B's tool calls", stack.post("/api/mcp/tool-calls/query", Some(&b_admin), &json!({})).await),
        ("B's routing stats", stack.get("/api/v1/chat/stats", Some(&b_admin)).await),
        ("B's budgets", stack.get("/api/v1/budgets", Some(&b_admin)).await),
        ("B's roles", stack.get("/api/context/roles", Some(&b_user)).await),
    ] {
        let (status, body) = json(response).await;
        let text = body.to_string();
        if status != 200 || text.contains("tenant-a") || text.contains(A_SECRET) || text.contains(&a_session) {
            failures.push(format!("{what}: answered {status} with A's data: {body}"));
        }
    }
    let (_, stats) = json(stack.get("/api/v1/chat/stats", Some(&b_admin)).await).await;
    if count(&stats["total"]) != 0 {
        failures.push(format!("B's stats count A's turn: {stats}"));
    }
    assert!(failures.is_empty(), "tenant B reached tenant A's data:\n{}", failures.join("\n"));

    // A still has all of it, unchanged.
    let (status, read) = json(stack.get(&with_messages, Some(&a_user)).await).await;
    assert_eq!(status, 200, "A's session is still there: {read}");
    assert_eq!(
        read["recent_messages"].as_array().map_or(0, Vec::len),
        a_messages,
        "A's messages are unchanged: {read}"
    );
    assert!(!read.to_string().contains("planted by B"));
    let (status, history) = json(stack.get(&history_path, Some(&a_user)).await).await;
    assert_eq!(status, 200, "{history}");
    let (status, _) = json(stack.get(&format!("/v1/responses/{a_response_id}"), Some(&a_user)).await).await;
    assert_eq!(status, 200, "A's stored response is still there");
    let (status, calls) = json(stack.post("/api/mcp/tool-calls/query", Some(&a_admin), &json!({})).await).await;
    assert_eq!(status, 200, "{calls}");
    assert_eq!(calls["records"].as_array().map_or(0, Vec::len), 1, "A's one tool call: {calls}");
    let feedback = json!({"response_id": a_chat_id, "helpful": true});
    let (status, body) = json(stack.post("/api/v1/chat/feedback", Some(&a_user), &feedback).await).await;
    assert_eq!(status, 200, "A may judge its own answer: {body}");
}
