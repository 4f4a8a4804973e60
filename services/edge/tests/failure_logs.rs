//! Every error answered to a caller is logged once, by the service that decided it, with the
//! request id the edge answered in `x-request-id`: a Redis outage's 503 (sessions' Redis behind
//! the test kit's cuttable proxy, the chat going edge → router → sessions) is one error line at
//! the sessions service and none at the router or the edge; an error the edge decides itself
//! is the edge's one line, and a caller's mistake found by triggers behind sessions is the
//! triggers service's. The whole suite runs in this process, its logs captured in memory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};

use common::{Options, Stack};
use serde_json::json;
use switchyard_testkit::{llm::ScriptedLlm, proxy::TcpProxy, redis};

/// Everything this process logs (see [`common::captured_logs`]).
fn logs() -> Arc<Mutex<Vec<u8>>> {
    common::captured_logs(tracing::Level::INFO)
}

/// The log lines about a failure of request `id` (the failure log's, and an internal error's).
fn failure_lines(logs: &Mutex<Vec<u8>>, id: &str) -> Vec<String> {
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    text.lines()
        .filter(|line| line.contains(id))
        .filter(|line| ["request failed", "request refused", "internal error"].iter().any(|m| line.contains(m)))
        .map(str::to_owned)
        .collect()
}

fn request_id(response: &reqwest::Response) -> String {
    let id = response.headers().get("x-request-id").expect("the edge answers a request id");
    id.to_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_is_logged_once_where_it_was_decided() {
    let logs = logs();
    let proxy = TcpProxy::start(redis::redis_addr()).await;
    let options = Options {
        durable_sessions: true,
        sessions_redis_url: Some(redis::redis_url_via(proxy.addr())),
        ..Options::default()
    };
    let stack = Stack::start(ScriptedLlm::queue(vec![]).await, options).await;

    // A caller's mistake found two services down (a regex the triggers service refuses, in a
    // role sent to sessions) is logged by the triggers service only, at info.
    let role = json!({"id": "escrow-expert", "name": "Escrow expert", "system_prompt": "You know escrow.",
        "custom_triggers": [{"pattern": "(escrow", "kind": "TRIGGER_KIND_REGEX", "priority": 5}]});
    let response = stack.send(reqwest::Method::POST, "/api/context/roles", None, &role).await;
    let id = request_id(&response);
    assert_eq!(response.status().as_u16(), 400, "{:?}", response.text().await);
    let lines = failure_lines(&logs, &id);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains(" INFO ") && lines[0].contains("switchyard.triggers.v1.TriggerService"), "{}", lines[0]);

    proxy.cut();
    let response = stack.send(reqwest::Method::POST, "/api/v1/chat", None, &json!({"message": "hello"})).await;
    assert_eq!(response.status().as_u16(), 503, "{:?}", response.text().await);
    let id = request_id(&response);
    let lines = failure_lines(&logs, &id);
    assert_eq!(lines.len(), 1, "one line, at the service that decided it: {lines:#?}");
    let line = &lines[0];
    assert!(line.contains(" ERROR "), "a server-side failure is an error: {line}");
    assert!(line.contains("switchyard.sessions.v1.SessionService"), "decided by sessions: {line}");
    assert!(line.contains("UNAVAILABLE"), "{line}");

    // A mistake the edge finds itself is the edge's line, at info.
    let response = stack
        .http
        .post(stack.url("/api/v1/chat"))
        .header("content-type", "application/json")
        .body("{\"message\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let id = request_id(&response);
    let lines = failure_lines(&logs, &id);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains(" INFO ") && lines[0].contains("/api/v1/chat"), "{}", lines[0]);

    // A service the edge cannot reach (no gateway in this stack) is the edge's error line.
    let response = stack.get("/api/mcp/servers", None).await;
    assert_eq!(response.status().as_u16(), 503);
    let id = request_id(&response);
    let lines = failure_lines(&logs, &id);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains(" ERROR ") && lines[0].contains("switchyard_edge"), "{}", lines[0]);

    // A caller's own request id is kept, answered and logged.
    let response = stack
        .http
        .post(stack.url("/api/v1/chat"))
        .header("x-request-id", "caller-chosen-7")
        .json(&json!({"message": "hello again"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    assert_eq!(request_id(&response), "caller-chosen-7");
    assert_eq!(failure_lines(&logs, "caller-chosen-7").len(), 1);
    proxy.restore();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_api_error_is_logged_once_where_it_was_decided() {
    let logs = logs();
    let stack = Stack::start(ScriptedLlm::queue(vec![]).await, Options::default()).await;
    // The edge's own refusal, in Anthropic's shape: the edge's one line, at info, with the code.
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let response = stack.post("/v1/messages", None, &body).await;
    assert_eq!(response.status().as_u16(), 400);
    let id = request_id(&response);
    let lines = failure_lines(&logs, &id);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains(" INFO ") && lines[0].contains("INVALID_ARGUMENT"), "{}", lines[0]);
    // The router's refusal (a tool result answering no call), renamed to the caller's field on
    // the way out: the router's one line, none at the edge.
    let body = json!({"model": "m", "max_tokens": 5, "tools": [{"name": "t", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "r"}]}]});
    let response = stack.post("/v1/messages", None, &body).await;
    assert_eq!(response.status().as_u16(), 400);
    let id = request_id(&response);
    let lines = failure_lines(&logs, &id);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains("switchyard.router.v1.RouterService"), "{}", lines[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_api_error_is_logged_once_where_it_was_decided() {
    let logs = logs();
    let stack = Stack::start(ScriptedLlm::queue(vec![]).await, Options::default()).await;
    for path in ["/v1/responses", "/v1/chat/completions"] {
        // The edge's own refusal, in OpenAI's shape: the edge's one line, at info, with the code.
        let response = stack.post(path, None, &json!({"model": "m"})).await;
        assert_eq!(response.status().as_u16(), 400);
        let id = request_id(&response);
        let lines = failure_lines(&logs, &id);
        assert_eq!(lines.len(), 1, "{lines:#?}");
        assert!(lines[0].contains(" INFO ") && lines[0].contains("INVALID_ARGUMENT"), "{}", lines[0]);
    }
    // The router's refusal (a tool result answering no call), renamed to the caller's field on
    // the way out: the router's one line, none at the edge.
    let results = [
        (
            "/v1/responses",
            json!({"model": "m", "input": [{"type": "function_call_output", "call_id": "c", "output": "r"}]}),
        ),
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": [{"role": "tool", "tool_call_id": "c", "content": "r"}]}),
        ),
    ];
    for (path, body) in results {
        let response = stack.post(path, None, &body).await;
        assert_eq!(response.status().as_u16(), 400);
        let id = request_id(&response);
        let lines = failure_lines(&logs, &id);
        assert_eq!(lines.len(), 1, "{path}: {lines:#?}");
        assert!(lines[0].contains("switchyard.router.v1.RouterService"), "{}", lines[0]);
    }
}
