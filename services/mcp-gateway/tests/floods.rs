//! The MCP endpoint against floods, over real TCP: 10,000 connections that send the start of a
//! request head and then nothing (held by a process of their own), a body over the limit, and
//! tool arguments nested a hundred thousand deep. A gateway in memory in front of the test
//! kit's fixture MCP server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_mcp_gateway::{GatewayConfig, Stores};
use switchyard_proto::mcp::v1::{ListToolCallsRequest, mcp_gateway_service_client::McpGatewayServiceClient};
use switchyard_testkit::{
    eventually,
    idle_clients::{IdleClients, open_descriptors, resident_set_bytes},
    mcp::{FixtureServer, tool},
};

const IDLE: usize = 10_000;
/// A fresh client's answer while the idle connections are open.
const PROMPT: Duration = Duration::from_secs(2);
/// Resident memory the gateway may grow by while holding the idle connections (measured: see
/// docs/reliability.md).
const RSS_BOUND: u64 = 256 * 1024 * 1024;
/// The largest tool arguments in these tests; the endpoint takes bodies up to this plus 64 KiB
/// (`--max-argument-bytes`).
const MAX_ARGUMENTS: usize = 64 * 1024;
const BODY_LIMIT: usize = MAX_ARGUMENTS + 64 * 1024;

async fn gateway(configure: impl FnOnce(&mut GatewayConfig)) -> (FixtureServer, common::Running) {
    let fixture = FixtureServer::start(vec![tool("lookup", "Looks something up.", &["phrase"])]).await.unwrap();
    let mut config = common::config(&[format!("fx={}", fixture.url())]);
    configure(&mut config);
    let running = common::start(&config, Stores::in_memory(), None).await;
    running.ready(1).await;
    (fixture, running)
}

/// A stateless `tools/list` on a connection of its own; how long it took.
async fn fresh_list(url: &str) -> Duration {
    let started = Instant::now();
    let response = common::stateless_request(url, None, None, "tools/list", json!({})).await;
    assert_eq!(response.status(), 200);
    let answer = common::stateless_answer(response).await;
    assert!(answer["result"]["tools"].as_array().is_some_and(|tools| !tools.is_empty()), "{answer}");
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_unfinished_request_heads_leave_the_endpoint_answering_and_all_are_closed() {
    let header_timeout = Duration::from_secs(8);
    let (_fixture, running) = gateway(|config| config.mcp_header_timeout = header_timeout).await;
    // The default limit, below the flood: the newest connections take the places of the ones
    // idle longest (a head begun but not finished is no request in progress).
    let limit = switchyard_kit::http_server::HttpLimits::default().max_connections;
    assert!(limit < IDLE);
    let url = running.mcp_url();
    fresh_list(&url).await;
    let (rss_before, fds_before) = (resident_set_bytes(), open_descriptors());

    let head = format!("POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n", running.mcp);
    let opening = Instant::now();
    let idle = IdleClients::open(running.mcp, IDLE, head.as_bytes()).await;
    let opened_in = opening.elapsed();
    let held = open_descriptors().saturating_sub(fds_before);
    let fresh = fresh_list(&url).await;
    let rss_growth = resident_set_bytes().saturating_sub(rss_before);
    let made_room = idle.closed_by_server().await;
    eprintln!(
        "{IDLE} unfinished heads opened in {opened_in:?}: the gateway held {held} of them, {made_room} closed to \
         make room; a fresh tools/list took {fresh:?}; resident set grew {} KiB",
        rss_growth / 1024
    );
    assert!(held <= limit + 64, "the gateway held {held} descriptors more than before, past its limit of {limit}");
    assert!(fresh < PROMPT, "a fresh client waited {fresh:?} with {IDLE} idle connections open");
    assert!(rss_growth < RSS_BOUND, "the resident set grew {rss_growth} bytes under {IDLE} idle connections");

    // The ones left are closed at the header timeout (counted at the gateway, as at the edge:
    // the last of a flood can sit in the kernel's listen queue for a while before it is let in).
    eventually(header_timeout + Duration::from_secs(30), "the gateway back to its descriptors before", || async {
        let now = open_descriptors();
        if now <= fds_before + 16 { Ok(()) } else { Err(format!("{now} open, {fds_before} before")) }
    })
    .await;
    assert!(fresh_list(&url).await < PROMPT);
}

/// A stateless `tools/call` of the fixture's tool whose phrase is `phrase` (raw JSON), as text.
fn call_body(phrase: &str) -> String {
    format!(
        r#"{{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {{"name": "fx__lookup", "arguments": {{"phrase": {phrase}}},
        "_meta": {{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {{}}}}}}}}"#
    )
}

/// [`call_body`] with a string phrase, grown to exactly `size` bytes.
fn sized_call(size: usize) -> String {
    let empty = call_body("\"\"").len();
    let body = call_body(&format!("\"{}\"", "x".repeat(size - empty)));
    assert_eq!(body.len(), size);
    body
}

async fn post(url: &str, body: String) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "fx__lookup")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// The JSON-RPC message of an answer (plain JSON, or the one with an id in an event stream).
fn message(text: &str) -> Value {
    if text.trim_start().starts_with('{') {
        serde_json::from_str(text).unwrap_or_else(|err| panic!("{err}: {text}"))
    } else {
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .find(|m| m.get("id").is_some())
            .unwrap_or_else(|| panic!("no response in {text}"))
    }
}

/// The outcomes of the tool calls recorded, in any order.
async fn recorded_calls(running: &common::Running) -> Vec<String> {
    let mut grpc = McpGatewayServiceClient::connect(format!("http://{}", running.grpc)).await.unwrap();
    let records = grpc.list_tool_calls(ListToolCallsRequest::default()).await.unwrap().into_inner().records;
    let mut outcomes: Vec<String> = records.into_iter().map(|record| record.outcome).collect();
    outcomes.sort();
    outcomes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_is_a_413_json_rpc_error_naming_it_and_nothing_is_called() {
    let (_fixture, running) = gateway(|config| config.max_argument_bytes = MAX_ARGUMENTS).await;
    let url = running.mcp_url();

    let (status, text) = post(&url, sized_call(BODY_LIMIT + 1)).await;
    assert_eq!(status, 413, "{text}");
    let error = message(&text);
    assert_eq!(error["jsonrpc"], "2.0", "{error}");
    assert!(error["error"]["message"].as_str().unwrap().contains(&BODY_LIMIT.to_string()), "names the limit: {error}");
    // Nothing of it was called or recorded.
    assert_eq!(recorded_calls(&running).await, Vec::<String>::new());

    // At the limit the body is read; its arguments are over theirs, which is named, and the
    // refusal recorded (the gateway's audit of calls it refused).
    let (status, text) = post(&url, sized_call(BODY_LIMIT)).await;
    let answer = message(&text);
    assert_ne!(status, 413, "{answer}");
    let refusal = answer.to_string();
    assert!(refusal.contains("argument") && refusal.contains(&MAX_ARGUMENTS.to_string()), "{status}: {answer}");
    let outcomes = eventually(Duration::from_secs(10), "the refusal recorded", || async {
        let outcomes = recorded_calls(&running).await;
        if outcomes.len() == 1 { Ok(outcomes) } else { Err(format!("{outcomes:?}")) }
    })
    .await;
    assert_ne!(outcomes[0], "ok", "arguments over their limit were not called");

    // Arguments at their limit are called.
    let (status, text) = post(&url, sized_call(MAX_ARGUMENTS)).await;
    let answer = message(&text);
    assert_eq!(status, 200, "{answer}");
    assert!(answer["result"]["content"].is_array(), "{answer}");
    eventually(Duration::from_secs(10), "the call recorded", || async {
        recorded_calls(&running).await.contains(&"ok".to_owned())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_arguments_nested_a_hundred_thousand_deep_are_refused_and_the_gateway_serves_on() {
    let (_fixture, running) = gateway(|_| {}).await;
    let url = running.mcp_url();
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));

    let (status, text) = post(&url, call_body(&deep)).await;
    let answer = message(&text);
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
    assert_eq!(answer["error"]["code"], -32602, "invalid params: {answer}");
    assert_eq!(answer["error"]["message"], "`params.arguments.phrase` nests deeper than 100 levels", "{answer}");
    assert_eq!(recorded_calls(&running).await, Vec::<String>::new());
    // Served as before.
    assert!(fresh_list(&url).await < PROMPT);
}
