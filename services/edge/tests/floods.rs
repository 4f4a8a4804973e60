//! The edge against floods: 10,000 connections that say nothing (held by a process of their
//! own), a body over the limit on every API it serves, hostile nesting in tool arguments, and
//! messages over the limit sent straight to each service's gRPC server. The real services on
//! loopback, the gateway with server-everything, the scripted LLM vendor.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Options, Stack, json};
use serde_json::{Value, json};
use switchyard_proto::{
    mcp::v1::{ListServersRequest, ListToolsRequest, mcp_gateway_service_client::McpGatewayServiceClient},
    router::v1::{ChatRequest, GetRoutingStatsRequest, router_service_client::RouterServiceClient},
    sessions::v1::{GetSessionRequest, session_service_client::SessionServiceClient},
    triggers::v1::{DetectTriggersRequest, trigger_service_client::TriggerServiceClient},
};
use switchyard_testkit::{
    eventually,
    idle_clients::{IdleClients, open_descriptors, resident_set_bytes},
    llm::{Reply, ScriptedLlm},
    raw_http::RawConnection,
};
use tonic::{Code, transport::Channel};

const IDLE: usize = 10_000;
/// A fresh client's answer while the idle connections are open.
const PROMPT: Duration = Duration::from_secs(2);
/// Resident memory the whole stack may grow by under the idle connections (measured: see
/// docs/reliability.md).
const RSS_BOUND: u64 = 256 * 1024 * 1024;
/// The body limit of the oversize tests: small, so the bodies are quick to send.
const LIMIT: usize = 16 * 1024;

/// A new client, so its request comes on a connection of its own.
fn fresh_client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_silent_connections_past_the_limit_leave_the_edge_answering_and_all_are_closed() {
    let header_timeout = Duration::from_secs(8);
    let llm = ScriptedLlm::start(|_| Reply::text("Hello.")).await;
    let options =
        Options { configure: Box::new(move |config| config.header_timeout = header_timeout), ..Options::default() };
    let stack = Stack::start(llm, options).await;
    // The default limit, below the flood: the newest connections take the places of the ones
    // idle longest.
    let limit = switchyard_kit::http_server::HttpLimits::default().max_connections;
    assert!(limit < IDLE);
    assert_eq!(json(stack.post("/api/v1/chat", None, &json!({"message": "warm up"})).await).await.0, 200);
    let (rss_before, fds_before) = (resident_set_bytes(), open_descriptors());

    let opening = Instant::now();
    let idle = IdleClients::open(stack.edge.addr, IDLE, b"").await;
    let opened_in = opening.elapsed();
    let held = open_descriptors().saturating_sub(fds_before);

    let started = Instant::now();
    let health = fresh_client().get(stack.url("/healthz")).send().await.unwrap();
    let health_took = started.elapsed();
    assert_eq!(health.status(), 200);
    let started = Instant::now();
    let chat = fresh_client().post(stack.url("/api/v1/chat")).json(&json!({"message": "Hi"})).send().await.unwrap();
    let (status, answer) = json(chat).await;
    let chat_took = started.elapsed();
    assert_eq!(status, 200, "{answer}");
    let rss_growth = resident_set_bytes().saturating_sub(rss_before);
    let made_room = idle.closed_by_server().await;
    eprintln!(
        "{IDLE} silent connections opened in {opened_in:?}: the edge held {held} of them, {made_room} closed to \
         make room; fresh /healthz {health_took:?}, fresh chat turn {chat_took:?}; resident set grew {} KiB",
        rss_growth / 1024
    );
    assert!(held <= limit + 64, "the edge held {held} descriptors more than before, past its limit of {limit}");
    assert!(health_took < PROMPT && chat_took < PROMPT, "a fresh client waited with {IDLE} idle connections open");
    assert!(rss_growth < RSS_BOUND, "the resident set grew {rss_growth} bytes under {IDLE} idle connections");

    // The ones left are closed at the header timeout: the edge holds no more descriptors than
    // before. (Counted at the edge: the last few hundred of a flood can sit in the kernel's
    // listen queue, or be let in by its SYN retries, for up to a minute before the edge sees
    // them; each is then closed at its own header timeout.)
    eventually(header_timeout + Duration::from_secs(30), "the edge back to its descriptors before", || async {
        let now = open_descriptors();
        if now <= fds_before + 16 { Ok(()) } else { Err(format!("{now} open, {fds_before} before")) }
    })
    .await;
    assert_eq!(fresh_client().get(stack.url("/healthz")).send().await.unwrap().status(), 200);
}

/// The error shapes of the edge's APIs.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// `{"error": {"code", "status", "message"}}` (REST, transcoded and streamed).
    Rest,
    /// `{"error": {"message", "type", "param", "code"}}`.
    OpenAi,
    /// `{"type": "error", "error": {"type", "message"}}`.
    Anthropic,
}

/// A route and a body for it whose one free text is `filler`.
type Body = fn(&str) -> Value;

/// Every route taking a body: its error shape and a body for it.
fn routes() -> Vec<(&'static str, Shape, Body)> {
    vec![
        (
            "/api/context/sessions",
            Shape::Rest,
            |x| json!({"session_id": "sized-1", "initial_role_id": "tech-expert", "metadata": {"note": x}}),
        ),
        ("/api/context/process", Shape::Rest, |x| json!({"session_id": "sized-2", "query": x})),
        ("/api/context/process/stream", Shape::Rest, |x| json!({"session_id": "sized-3", "query": x})),
        ("/api/v1/chat", Shape::Rest, |x| json!({"message": x})),
        ("/api/v1/chat/stream", Shape::Rest, |x| json!({"message": x})),
        ("/api/mcp/context", Shape::Rest, |x| json!({"session_id": "sized-4", "query": x})),
        (
            "/api/mcp/tools/everything__echo:call",
            Shape::Rest,
            |x| json!({"session_id": "sized-5", "arguments": {"message": x}}),
        ),
        (
            "/v1/chat/completions",
            Shape::OpenAi,
            |x| json!({"model": "s", "messages": [{"role": "user", "content": x}]}),
        ),
        ("/v1/responses", Shape::OpenAi, |x| json!({"model": "s", "input": x})),
        (
            "/v1/messages",
            Shape::Anthropic,
            |x| json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": x}]}),
        ),
        (
            "/v1/messages/count_tokens",
            Shape::Anthropic,
            |x| json!({"model": "m", "messages": [{"role": "user", "content": x}]}),
        ),
    ]
}

/// `body`'s JSON text grown to exactly `size` bytes by its filler.
fn sized(body: Body, size: usize) -> String {
    let empty = body("").to_string().len();
    let text = body(&"x".repeat(size - empty)).to_string();
    assert_eq!(text.len(), size);
    text
}

async fn post_text(stack: &Stack, path: &str, text: String) -> (u16, String) {
    let response =
        stack.http.post(stack.url(path)).header("content-type", "application/json").body(text).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// The field a 400 names, in each API's shape.
fn named_field(shape: Shape, body: &Value) -> Option<String> {
    let text = match shape {
        Shape::Rest => body["error"]["details"][0]["field_violations"][0]["field"].as_str(),
        Shape::OpenAi => body["error"]["param"].as_str(),
        Shape::Anthropic => body["error"]["message"].as_str().and_then(|m| m.split_once(": ")).map(|(field, _)| field),
    };
    text.map(str::to_owned)
}

fn assert_too_large(path: &str, shape: Shape, status: u16, text: &str) {
    assert_eq!(status, 413, "{path}: {text}");
    let body: Value = serde_json::from_str(text).unwrap_or_else(|err| panic!("{path}: not JSON ({err}): {text}"));
    let limit = LIMIT.to_string();
    let message = match shape {
        Shape::Rest => {
            assert_eq!(
                (body["error"]["code"].as_u64(), body["error"]["status"].as_str()),
                (Some(413), Some("INVALID_ARGUMENT")),
                "{path}: {body}"
            );
            &body["error"]["message"]
        }
        Shape::OpenAi => {
            assert_eq!(body["error"]["type"], "invalid_request_error", "{path}: {body}");
            &body["error"]["message"]
        }
        Shape::Anthropic => {
            assert_eq!(
                (body["type"].as_str(), body["error"]["type"].as_str()),
                (Some("error"), Some("request_too_large")),
                "{path}: {body}"
            );
            &body["error"]["message"]
        }
    };
    assert!(message.as_str().is_some_and(|m| m.contains(&limit)), "{path}: the message names the limit: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_is_a_413_in_each_apis_shape_and_one_at_the_limit_is_read() {
    let llm = ScriptedLlm::start(|_| Reply::text("Fine.")).await;
    let options =
        Options { gateway: true, configure: Box::new(|config| config.max_body_bytes = LIMIT), ..Options::default() };
    let stack = Stack::start(llm, options).await;

    // One byte over, with its length announced: refused before it is read.
    for (path, shape, body) in routes() {
        let (status, text) = post_text(&stack, path, sized(body, LIMIT + 1)).await;
        assert_too_large(path, shape, status, &text);
    }
    // Over, in chunks with no length announced: refused once the limit is passed.
    let mut raw = RawConnection::connect(stack.edge.addr).await;
    let chunk = "x".repeat(16 * 1024);
    let mut request = format!(
        "POST /api/v1/chat HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        stack.edge.addr
    );
    request.push_str(&format!("{:x}\r\n{{\"message\": \"\r\n", "{\"message\": \"".len()));
    for _ in 0..(LIMIT / chunk.len() + 1) {
        request.push_str(&format!("{:x}\r\n{chunk}\r\n", chunk.len()));
    }
    request.push_str("2\r\n\"}\r\n0\r\n\r\n");
    raw.send_raw(request.as_bytes()).await;
    let (status, answer) = raw.response(Duration::from_secs(10)).await.expect("an answer to the chunked body");
    assert_too_large("/api/v1/chat (chunked)", Shape::Rest, status, &String::from_utf8_lossy(&answer));

    // Nothing of them reached a model, a session or the records.
    assert!(stack.llm.requests().is_empty(), "a refused body reached the model");
    for session in ["sized-1", "sized-2", "sized-3"] {
        let (status, body) = json(stack.get(&format!("/api/context/sessions/{session}"), None).await).await;
        assert_eq!(status, 404, "{session}: {body}");
    }
    let (status, stats) = json(stack.get("/api/v1/chat/stats?since=2020-01-01T00:00:00Z", None).await).await;
    assert_eq!((status, &stats["total"]), (200, &json!("0")), "{stats}");

    // Exactly at the limit (the processing routes given their sessions): read, then served, or
    // refused naming the field over its own limit (a metadata value's 1 KiB, the MCP context
    // query's 8 KiB); the same client, its connections after the refusals.
    for session in ["sized-2", "sized-3"] {
        let created = json!({"session_id": session, "initial_role_id": "tech-expert"});
        assert_eq!(json(stack.post("/api/context/sessions", None, &created).await).await.0, 200);
    }
    for (path, shape, body) in routes() {
        let (status, text) = post_text(&stack, path, sized(body, LIMIT)).await;
        let shown = &text[..text.len().min(600)];
        if status != 200 {
            assert_eq!(status, 400, "{path} at the limit: {shown}");
            let field = named_field(shape, &serde_json::from_str(&text).unwrap());
            assert!(field.is_some_and(|f| !f.is_empty() && f != "body"), "{path}: a field named: {shown}");
        }
        eprintln!("{path} at the limit: {status} {}", &text[..text.len().min(160)]);
    }
}

/// `[[[...]]]`, `depth` deep.
fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_arguments_nested_a_hundred_thousand_deep_are_refused_naming_the_field() {
    let llm = ScriptedLlm::start(|_| Reply::text("Fine.")).await;
    let stack = Stack::start(llm, Options { gateway: true, ..Options::default() }).await;
    let deep = nested(100_000);

    // As JSON in the body: a tool call through the MCP REST route, Anthropic's tool_use input.
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "/api/mcp/tools/everything__echo:call",
            format!(r#"{{"session_id": "deep-1", "arguments": {{"message": {deep}}}}}"#),
            "arguments.message",
        ),
        (
            "/v1/messages",
            format!(
                r#"{{"model": "m", "max_tokens": 10, "messages": [{{"role": "user", "content": "hi"}},
                {{"role": "assistant", "content": [{{"type": "tool_use", "id": "t1", "name": "f", "input": {{"x": {deep}}}}}]}},
                {{"role": "user", "content": [{{"type": "tool_result", "tool_use_id": "t1", "content": "r"}}]}}]}}"#
            ),
            "messages[1].content[0].input.x",
        ),
    ];
    for (path, body, field) in cases {
        let (status, text) = post_text(&stack, path, body).await;
        assert_eq!(status, 400, "{path}: {text}");
        assert!(text.contains(&format!("{field}: nests deeper than 100 levels")), "{path}: names {field}: {text}");
    }
    // As a JSON string, OpenAI's function arguments: text to pass on, or refused by name.
    let body = json!({"model": "s", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": deep}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ]});
    let (status, text) = post_text(&stack, "/v1/chat/completions", body.to_string()).await;
    assert!(
        status == 200 || (status == 400 && text.contains("messages[1].tool_calls[0].function.arguments")),
        "{status}: {}",
        &text[..text.len().min(600)]
    );
    // Every service is still there.
    assert_eq!(json(stack.post("/api/v1/chat", None, &json!({"message": "Hi"})).await).await.0, 200);
    let (status, tools) = json(stack.get("/api/mcp/tools?session_id=deep-2", None).await).await;
    assert_eq!(status, 200, "{tools}");
}

async fn channel(url: String) -> Channel {
    Channel::from_shared(url).unwrap().connect().await.unwrap()
}

/// Asserts a status is tonic's answer to a message over the 4 MiB default limit (OUT_OF_RANGE,
/// "decoded message length too large: found N bytes, the limit is: 4194304 bytes").
fn assert_over_limit(service: &str, status: &tonic::Status) {
    assert_eq!(status.code(), Code::OutOfRange, "{service}: {status:?}");
    assert!(status.message().contains(&(4 * 1024 * 1024).to_string()), "{service}: the limit named: {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_limit_is_out_of_range_naming_the_limit_on_every_grpc_server_which_serves_on() {
    let llm = ScriptedLlm::start(|_| Reply::text("Fine.")).await;
    let stack = Stack::start(llm, Options { gateway: true, ..Options::default() }).await;
    let big = "x".repeat(5 * 1024 * 1024);

    let mut triggers = TriggerServiceClient::new(channel(stack.triggers.url()).await);
    let over = triggers.detect_triggers(DetectTriggersRequest { query: big.clone() }).await.unwrap_err();
    assert_over_limit("triggers", &over);
    triggers.detect_triggers(DetectTriggersRequest { query: "invest in tech startups".into() }).await.unwrap();

    let mut sessions = SessionServiceClient::new(channel(stack.sessions.url()).await);
    let over = sessions.get_session(GetSessionRequest { session_id: big.clone(), ..Default::default() }).await;
    assert_over_limit("sessions", &over.unwrap_err());
    let missing = sessions.get_session(GetSessionRequest { session_id: "no-such".into(), ..Default::default() }).await;
    assert_eq!(missing.unwrap_err().code(), Code::NotFound);

    let mut router = RouterServiceClient::new(channel(stack.router.url()).await);
    let over = router.chat(ChatRequest { message: big.clone(), ..Default::default() }).await.unwrap_err();
    assert_over_limit("router", &over);
    router.get_routing_stats(GetRoutingStatsRequest::default()).await.unwrap();
    assert!(stack.llm.requests().is_empty(), "the oversize chat reached the model");

    let gateway = stack.gateway.as_ref().expect("the gateway");
    let mut mcp = McpGatewayServiceClient::new(channel(gateway.url()).await);
    let over = mcp.list_tools(ListToolsRequest { session_id: big.clone(), ..Default::default() }).await.unwrap_err();
    assert_over_limit("mcp-gateway", &over);
    mcp.list_servers(ListServersRequest {}).await.unwrap();
}
