//! Hostile and malformed HTTP requests to `/mcp`, sent raw over loopback: bodies that are not
//! one JSON-RPC message get JSON-RPC errors (not the transport's plain-text 415), and a
//! browser `Origin` outside the allowlist is refused with 403 (DNS-rebinding protection),
//! while clients without an `Origin` and loopback pages keep working on both revisions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use serde_json::{Value, json};
use switchyard_mcp_gateway::Stores;

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}})
}

async fn post(
    url: &str,
    origin: Option<&str>,
    content_type: &str,
    body: impl Into<reqwest::Body>,
) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", content_type);
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    request.body(body).send().await.unwrap()
}

/// The JSON-RPC error of a refused request, after checking it is one: JSON, version 2.0, a
/// null id.
async fn jsonrpc_error(response: reqwest::Response) -> (u16, i64, String) {
    let status = response.status().as_u16();
    let content_type = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
    let text = response.text().await.unwrap();
    assert_eq!(content_type.as_deref(), Some("application/json"), "{status} {text}");
    let body: Value = serde_json::from_str(&text).unwrap_or_else(|err| panic!("{status} {text}: {err}"));
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert!(body.get("id").is_some_and(Value::is_null), "{body}");
    let code = body["error"]["code"].as_i64().unwrap_or_else(|| panic!("no error code: {body}"));
    (status, code, body["error"]["message"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_rpc_gets_json_rpc_errors() {
    let running = common::start(&common::config(&[]), Stores::in_memory(), None).await;
    let url = running.mcp_url();
    let json = "application/json";

    for (body, expected, what) in [
        ("[]", -32600, "an empty batch"),
        (r#"{"jsonrpc": "2.0", "id": 1, "method": "initial"#, -32700, "truncated JSON"),
        (r#"{"a": 1}"#, -32600, "an object that is not JSON-RPC"),
        ("not json at all", -32700, "text"),
        (r#"[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]"#, -32600, "a batch"),
        (r#"{"jsonrpc": "1.0", "id": 1, "method": "ping"}"#, -32600, "another JSON-RPC version"),
    ] {
        let (status, code, message) = jsonrpc_error(post(&url, None, json, body).await).await;
        assert_eq!((status, code), (400, expected), "{what}: {message}");
    }

    // A wrong Content-Type stays the transport's 415.
    let wrong = post(&url, None, "text/plain", initialize().to_string()).await;
    assert_eq!(wrong.status().as_u16(), 415);

    // Well-formed requests of both revisions still pass.
    let session = post(&url, None, json, initialize().to_string()).await;
    assert_eq!(session.status().as_u16(), 200, "{}", session.text().await.unwrap());
    let stateless = common::stateless_request(&url, None, None, "tools/list", json!({})).await;
    assert_eq!(stateless.status().as_u16(), 200);
    let answer = common::stateless_answer(stateless).await;
    assert!(answer["result"]["tools"].is_array(), "{answer}");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_origin_is_refused_and_loopback_or_none_pass() {
    let mut config = common::config(&[]);
    config.allowed_origins = vec!["https://console.example.com".into()];
    let running = common::start(&config, Stores::in_memory(), None).await;
    let url = running.mcp_url();
    let json = "application/json";

    for origin in ["http://evil.example", "null", "https://console.example.com:8443", "http://console.example.com"] {
        let (status, code, message) =
            jsonrpc_error(post(&url, Some(origin), json, initialize().to_string()).await).await;
        assert_eq!((status, code), (403, -32600), "{origin}: {message}");
    }
    // Not only on POST: a foreign page may not open the notification stream or end sessions.
    let get = reqwest::Client::new()
        .get(&url)
        .header("accept", "text/event-stream")
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(get.status().as_u16(), 403);
    let delete = reqwest::Client::new()
        .delete(&url)
        .header("mcp-session-id", "anything")
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(delete.status().as_u16(), 403);

    for origin in
        [None, Some("http://localhost:5173"), Some("http://127.0.0.1:8080"), Some("https://console.example.com")]
    {
        let response = post(&url, origin, json, initialize().to_string()).await;
        assert_eq!(response.status().as_u16(), 200, "{origin:?}: {}", response.text().await.unwrap());
    }
    running.stop().await;
}
