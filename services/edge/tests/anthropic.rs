//! Anthropic's Messages API on the edge, over real HTTP with the real router, sessions and
//! triggers behind it and the scripted vendor behind the router: the official Python
//! `anthropic` SDK (pinned by `scripts/install-tools.sh` in `.tools/venv`; the tests fail when
//! it is missing) for plain and streamed messages, `count_tokens`, its exception types and a
//! tool round trip; and raw HTTP for the wire details an SDK hides (event names and order, the
//! error shape and status of each kind of refusal).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use common::{Auth, Options, Stack, json, parse_events};
use serde_json::{Value, json};
use switchyard_testkit::{
    llm::{Recorded, Reply, ScriptedLlm},
    raw_http::RawConnection,
};

const ANSWER: &str = "Hello! Switchyard here, happy to help.";
const TOOL_ANSWER: &str = "It is 18 degrees and sunny in Paris.";

/// Runs `anthropic_check.py` on the tools venv with these steps; its JSON summary.
async fn sdk_check(stack: &Stack, key: &str, steps: &str, extra: &[&str]) -> Value {
    let root = switchyard_testkit::root();
    let python = root.join(".tools/venv/bin/python");
    assert!(python.exists(), "{} is missing: run scripts/install-tools.sh", python.display());
    let mut args = vec![
        root.join("services/edge/tests/clients/anthropic_check.py").display().to_string(),
        "--base-url".into(),
        stack.edge.url(),
        "--api-key".into(),
        key.to_owned(),
        "--steps".into(),
        steps.to_owned(),
    ];
    args.extend(extra.iter().map(|arg| (*arg).to_owned()));
    let output = tokio::task::spawn_blocking(move || Command::new(python).args(args).output())
        .await
        .unwrap()
        .expect("the client runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the anthropic client check failed:\n{stdout}\n{stderr}");
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("a JSON summary")
}

/// The vendor of a tool loop: the weather tool's result gets the final answer, a request that
/// offers the weather tool gets a call of it (arguments streamed four characters at a time),
/// anything else (the routing call of a plain message) the plain answer.
fn weather_vendor(request: &Recorded) -> Reply {
    // OpenAI's wire has `tool` messages; Anthropic's has user messages of `tool_result` blocks.
    let last_is_tool_result = request.messages().last().is_some_and(|m| {
        m["role"] == "tool"
            || m["content"].as_array().is_some_and(|blocks| blocks.iter().any(|b| b["type"] == "tool_result"))
    });
    if last_is_tool_result {
        Reply::text(TOOL_ANSWER).usage(30, 9)
    } else if request.tool_names().iter().any(|name| name == "get_weather") {
        Reply::tool_call("get_weather", r#"{"city": "Paris"}"#).chunk_size(4).usage(20, 8)
    } else {
        Reply::text(ANSWER).usage(11, 7)
    }
}

#[tokio::test]
async fn the_anthropic_python_sdk_works_unchanged() {
    let llm = ScriptedLlm::start(|_| Reply::text(ANSWER).usage(11, 7).chunk_size(6)).await;
    let stack = Stack::start(llm, Options { auth: Auth::Closed { jwks_file: None }, ..Options::default() }).await;
    let key = stack.key("acme", "sdk-user", false).await;
    let summary = sdk_check(
        &stack,
        &key,
        "plain,stream,beta,count_tokens,errors",
        &["--expect-content", "happy to help", "--bad-api-key", "sy_not_a_real_key"],
    )
    .await;
    assert_eq!(summary["plain"]["route_type"], "direct", "{summary}");
    assert_eq!(summary["errors"]["bad_key"], 401, "{summary}");
    assert!(summary["count_tokens"]["input_tokens"].as_u64().unwrap() > 0, "{summary}");
    // The SDK's three answers reached the vendor through the router; the refused requests and
    // the token counts did not.
    let asked = stack.llm.requests();
    assert_eq!(asked.len(), 3, "{asked:?}");
    assert!(
        asked.iter().all(|r| r.last_user_text().as_deref() == Some("Say hello and tell me what you can help with."))
    );
}

#[tokio::test]
async fn a_tool_round_trip_through_the_anthropic_sdk_streamed_and_not() {
    let llm = ScriptedLlm::start(weather_vendor).await;
    let stack = Stack::start(llm, Options { auth: Auth::Closed { jwks_file: None }, ..Options::default() }).await;
    let key = stack.key("acme", "agent", false).await;
    let summary = sdk_check(&stack, &key, "tools,tools_stream", &["--expect-tool-answer", "18 degrees"]).await;
    assert!(summary["tools_stream"]["input_json_events"].as_u64().unwrap() >= 2, "{summary}");
    assert_eq!(summary["tools"]["metadata"]["client_tools"], true, "{summary}");
    // Four model calls: a tool call and an answer, twice. Each saw the caller's one tool and
    // nothing of the router's own; the answers saw the tool's result.
    let asked = stack.llm.requests();
    assert_eq!(asked.len(), 4, "{asked:?}");
    for request in &asked {
        assert_eq!(request.tool_names(), ["get_weather"], "{:?}", request.body);
    }
    for answer in [&asked[1], &asked[3]] {
        let result = answer.messages().last().unwrap();
        assert_eq!(result["content"], "18 degrees and sunny", "{result}");
        let call = &answer.messages()[answer.messages_len() - 2]["tool_calls"][0];
        assert_eq!(call["function"]["name"], "get_weather");
        assert_eq!(call["id"], result["tool_call_id"]);
    }
}

/// The router's model on the scripted vendor's Anthropic wire.
fn anthropic_wire() -> Options {
    Options {
        configure_router: Box::new(|config| {
            // The scripted vendor serves Anthropic's wire at its root, OpenAI's under /v1.
            let root = config.providers.openai_base_url.clone().unwrap_or_default();
            config.providers.anthropic_base_url = Some(root.trim_end_matches("/v1").to_owned());
            config.providers.anthropic_api_key = Some(switchyard_kit::Secret::new("sk-ant-edge-test"));
            config.default_model = "anthropic/claude-test".parse().expect("model");
        }),
        ..Options::default()
    }
}

#[tokio::test]
async fn a_tool_round_trip_on_the_anthropic_wire_end_to_end() {
    let llm = ScriptedLlm::start(weather_vendor).await;
    let options = Options { auth: Auth::Closed { jwks_file: None }, ..anthropic_wire() };
    let stack = Stack::start(llm, options).await;
    let key = stack.key("acme", "agent", false).await;
    sdk_check(&stack, &key, "tools,tools_stream", &["--expect-tool-answer", "18 degrees"]).await;
    let asked = stack.llm.requests();
    assert_eq!(asked.len(), 4, "{asked:?}");
    for request in &asked {
        assert_eq!(request.wire, switchyard_testkit::llm::Wire::Anthropic);
        assert_eq!(request.tool_names(), ["get_weather"], "{:?}", request.body);
    }
    for answer in [&asked[1], &asked[3]] {
        let messages = answer.messages();
        let result = &messages[messages.len() - 1]["content"][0];
        assert_eq!(result["type"], "tool_result", "{result}");
        assert_eq!(result["content"], "18 degrees and sunny", "{result}");
        let call = &messages[messages.len() - 2]["content"]
            .as_array()
            .unwrap()
            .iter()
            .find(|block| block["type"] == "tool_use")
            .cloned()
            .unwrap();
        assert_eq!(call["input"], json!({"city": "Paris"}));
        assert_eq!(call["id"], result["tool_use_id"]);
    }
}

#[tokio::test]
async fn tool_results_followed_by_text_continue_the_loop() {
    let llm = ScriptedLlm::start(weather_vendor).await;
    let stack = Stack::start(llm, Options::default()).await;
    let tools = json!([{"name": "get_weather", "input_schema": {"type": "object"}}]);
    let first = json!({"model": "claude-sonnet-4-5", "max_tokens": 50, "tools": tools,
        "messages": [{"role": "user", "content": "Weather in Paris?"}]});
    let (status, one) = json(post(&stack, "/v1/messages", &[], first.to_string()).await).await;
    assert_eq!((status, &one["stop_reason"]), (200, &json!("tool_use")), "{one}");
    let call = one["content"].as_array().unwrap().iter().find(|b| b["type"] == "tool_use").unwrap().clone();
    // As Claude Code sends it: the tool's result, then a reminder in the same user message.
    let second = json!({"model": "claude-sonnet-4-5", "max_tokens": 50, "tools": tools, "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": one["content"]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call["id"], "content": "18 degrees and sunny"},
            {"type": "text", "text": "<system-reminder>Keep answers short.</system-reminder>"},
        ]},
    ]});
    let (status, two) = json(post(&stack, "/v1/messages", &[], second.to_string()).await).await;
    assert_eq!(status, 200, "{two}");
    assert_eq!(two["content"][0]["text"], TOOL_ANSWER, "{two}");
    assert_eq!(two["_metadata"]["continuation"], true, "{two}");
    assert_eq!(two["session_id"], one["session_id"]);
    // One model call for the continuation, which saw the result and the reminder after it.
    let asked = stack.llm.requests();
    assert_eq!(asked.len(), 2, "{asked:?}");
    let result = asked[1].messages().last().unwrap().to_string();
    assert!(result.contains("18 degrees and sunny") && result.contains("Keep answers short."), "{result}");
}

#[tokio::test]
async fn browsers_and_busy_callers_get_what_anthropic_clients_expect() {
    let llm = ScriptedLlm::start(|_| Reply::text(ANSWER)).await;
    let options = Options {
        auth: Auth::Closed { jwks_file: None },
        configure: Box::new(|config| {
            config.cors_origins = vec!["https://chat.example".into()];
            (config.rate_limit, config.rate_burst) = (1, 1);
        }),
        ..Options::default()
    };
    let stack = Stack::start(llm, options).await;
    // A browser's preflight for the headers the Anthropic SDK sends from a page.
    let response = stack
        .http
        .request(reqwest::Method::OPTIONS, stack.url("/v1/messages"))
        .header("origin", "https://chat.example")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "x-api-key,content-type,anthropic-version,anthropic-beta,anthropic-dangerous-direct-browser-access",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let allowed = response.headers()["access-control-allow-headers"].to_str().unwrap().to_owned();
    for name in ["x-api-key", "anthropic-version", "anthropic-beta", "anthropic-dangerous-direct-browser-access"] {
        assert!(allowed.contains(name), "{name} is not allowed: {allowed}");
    }
    // Over the credential's rate: Anthropic's rate_limit_error, with Retry-After.
    let key = stack.key("acme", "ann", false).await;
    let body = json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let mut limited = None;
    for _ in 0..5 {
        let response = post(&stack, "/v1/messages", &[("x-api-key", key.as_str())], body.clone()).await;
        if response.status() == 429 {
            limited = Some(response);
            break;
        }
    }
    let response = limited.expect("a 429 within five requests at one a second");
    assert!(response.headers().contains_key("retry-after"));
    let (_, body) = json(response).await;
    assert_eq!((&body["type"], &body["error"]["type"]), (&json!("error"), &json!("rate_limit_error")), "{body}");
}

#[tokio::test]
async fn an_image_reaches_the_model_once_beside_its_text() {
    let llm = ScriptedLlm::start(|_| Reply::text("A cat.")).await;
    let stack = Stack::start(llm, Options::default()).await;
    let body = json!({"model": "switchyard-direct", "max_tokens": 20, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "text", "text": "What is in this picture?"},
    ]}]});
    let (status, answer) = json(post(&stack, "/v1/messages", &[], body.to_string()).await).await;
    assert_eq!(status, 200, "{answer}");
    let asked = stack.llm.requests();
    let sent = serde_json::to_string(asked.last().unwrap().messages()).unwrap();
    assert_eq!(sent.matches("data:image/png;base64,iVBORw0KGgo=").count(), 1, "{sent}");
    assert_eq!(sent.matches("What is in this picture?").count(), 1, "{sent}");
}

/// A request shaped as Claude Code 2.1 sends it (its fields, headers and message layout).
#[tokio::test]
async fn a_request_shaped_like_claude_codes_is_served() {
    let llm = ScriptedLlm::start(|_| Reply::text(ANSWER)).await;
    let stack = Stack::start(llm, Options::default()).await;
    let schema = json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
        "properties": {"command": {"type": "string"}}, "required": ["command"], "additionalProperties": false});
    let body = json!({
        "model": "claude-opus-4-8", "max_tokens": 16384, "stream": true,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197.1c0; cc_entrypoint=sdk-cli;"},
            {"type": "text", "text": "You are a Claude agent.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>Context.</system-reminder>"},
                {"type": "text", "text": "say hello", "cache_control": {"type": "ephemeral"}},
            ]},
            {"role": "system", "content": "Available agent types for the Agent tool: claude."},
        ],
        "tools": [{"name": "Bash", "description": "Runs a command", "input_schema": schema},
                  {"name": "mcp__ide__getDiagnostics", "description": "Diagnostics", "input_schema": {"type": "object"}}],
        "metadata": {"user_id": "{\"device_id\":\"7e5a\",\"session_id\":\"5f51\"}"},
        "thinking": {"type": "adaptive"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
    });
    let headers = [
        ("anthropic-version", "2023-06-01"),
        ("anthropic-beta", "claude-code-20250219,interleaved-thinking-2025-05-14,mid-conversation-system-2026-04-07"),
        ("anthropic-dangerous-direct-browser-access", "true"),
        ("x-api-key", "sk-anything"),
    ];
    let response = post(&stack, "/v1/messages?beta=true", &headers, body.to_string()).await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    let events = parse_events(&text);
    assert_eq!(events.last().map(|(name, _)| name.as_str()), Some("message_stop"), "{text}");
    let asked = stack.llm.requests();
    let request = asked.last().unwrap();
    let system = request.system().unwrap_or_default();
    assert!(system.contains("You are a Claude agent.") && system.contains("Available agent types"), "{system}");
    assert_eq!(request.tool_names(), ["Bash", "mcp__ide__getDiagnostics"]);
    assert_eq!(request.last_user_text().unwrap_or_default().matches("say hello").count(), 1);
}

/// Claude Code asks for up to 128 000 output tokens: a ceiling above the router's own
/// (`ROUTER_MAX_TOKENS_LIMIT`, 16 384) is lowered to it, not refused, and an answer the lower
/// ceiling cut says so.
#[tokio::test]
async fn a_max_tokens_above_the_routers_limit_is_lowered_to_it() {
    let llm = ScriptedLlm::start(|_| Reply::text(ANSWER).finish("length")).await;
    let stack = Stack::start(llm, Options::default()).await;
    let body = json!({"model": "switchyard-direct", "max_tokens": 128_000,
        "messages": [{"role": "user", "content": "Write a long story."}]});
    let (status, answer) = json(post(&stack, "/v1/messages", &[], body.to_string()).await).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["stop_reason"], "max_tokens", "{answer}");
    let chat = json!({"model": "switchyard-direct", "max_completion_tokens": 100_000,
        "messages": [{"role": "user", "content": "Write a long story."}]});
    let (status, answer) = json(post(&stack, "/v1/chat/completions", &[], chat.to_string()).await).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["choices"][0]["finish_reason"], "length", "{answer}");
    let asked = stack.llm.requests();
    assert_eq!(asked.len(), 2, "{asked:?}");
    for request in &asked {
        assert_eq!(request.body["max_tokens"], 16_384, "{}", request.body);
    }
    // Zero is still refused, naming the field.
    let zero = json!({"model": "m", "max_tokens": 0, "messages": [{"role": "user", "content": "hi"}]});
    let (status, refused) = json(post(&stack, "/v1/messages", &[], zero.to_string()).await).await;
    assert_eq!(status, 400, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("max_tokens"), "{refused}");
}

const BETAS: &str = "claude-code-20250219,interleaved-thinking-2025-05-14";

/// `anthropic-version` and `anthropic-beta` pass through to an Anthropic upstream: on every
/// model call of the turn (here the routing call that answers a plain message, and a client-tools
/// answer, streamed), the caller's version instead of the router's own and its betas as given
/// (several header lines are one list); without them the router's version and no betas.
#[tokio::test]
async fn the_callers_anthropic_headers_reach_an_anthropic_upstream() {
    let stack = Stack::start(ScriptedLlm::start(weather_vendor).await, anthropic_wire()).await;
    let plain = json!({"model": "claude-sonnet-4-5", "max_tokens": 50,
        "messages": [{"role": "user", "content": "Hello there"}]});
    let headers = [("anthropic-version", "2023-01-01"), ("anthropic-beta", BETAS)];
    let (status, answer) = json(post(&stack, "/v1/messages", &headers, plain.to_string()).await).await;
    assert_eq!(status, 200, "{answer}");
    let tools = json!({"model": "claude-sonnet-4-5", "max_tokens": 50, "stream": true,
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": "Weather in Paris?"}]});
    let response = stack
        .http
        .post(stack.url("/v1/messages?beta=true"))
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-01-01")
        .header("anthropic-beta", "claude-code-20250219")
        .header("anthropic-beta", "interleaved-thinking-2025-05-14")
        .body(tools.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.text().await.unwrap().contains("message_stop"));
    let asked = stack.llm.take_requests();
    assert_eq!(asked.len(), 2, "{asked:?}");
    for request in &asked {
        assert_eq!(request.wire, switchyard_testkit::llm::Wire::Anthropic);
        assert_eq!(request.header("anthropic-version"), Some("2023-01-01"), "{:?}", request.headers);
        assert_eq!(request.header("anthropic-beta"), Some(BETAS), "{:?}", request.headers);
    }
    let (status, answer) = json(post(&stack, "/v1/messages", &[], plain.to_string()).await).await;
    assert_eq!(status, 200, "{answer}");
    let asked = stack.llm.take_requests();
    assert_eq!(asked[0].header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(asked[0].header("anthropic-beta"), None);
}

/// An OpenAI-wire model gets no Anthropic headers; headers the router cannot send on are
/// refused in Anthropic's shape naming the header, before any model call.
#[tokio::test]
async fn anthropic_headers_stay_off_other_wires_and_bad_ones_are_refused() {
    let stack = Stack::start(ScriptedLlm::start(weather_vendor).await, Options::default()).await;
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 50,
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": "Weather in Paris?"}]})
    .to_string();
    let headers = [("anthropic-version", "2023-06-01"), ("anthropic-beta", BETAS)];
    let (status, answer) = json(post(&stack, "/v1/messages", &headers, body.clone()).await).await;
    assert_eq!(status, 200, "{answer}");
    let asked = stack.llm.take_requests();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].wire, switchyard_testkit::llm::Wire::OpenAi);
    assert!(asked[0].headers.keys().all(|name| !name.as_str().starts_with("anthropic-")), "{:?}", asked[0].headers);
    let long_beta = "b".repeat(1025);
    let cases: [(&str, reqwest::header::HeaderValue); 4] = [
        ("anthropic-version", reqwest::header::HeaderValue::from_static("2023-06-01\tx")),
        ("anthropic-beta", reqwest::header::HeaderValue::from_str(&long_beta).unwrap()),
        ("anthropic-beta", reqwest::header::HeaderValue::from_bytes(b"caf\xc3\xa9-2025").unwrap()),
        ("anthropic-version", reqwest::header::HeaderValue::from_str(&"2".repeat(65)).unwrap()),
    ];
    for (name, value) in cases {
        let response = stack
            .http
            .post(stack.url("/v1/messages"))
            .header("content-type", "application/json")
            .header(name, value.clone())
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let (status, refused) = json(response).await;
        assert_eq!(status, 400, "{name}: {value:?}: {refused}");
        assert_eq!((&refused["type"], &refused["error"]["type"]), (&json!("error"), &json!("invalid_request_error")));
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(&format!("{name}: ")), "{name}: {value:?}: {refused}");
    }
    // A CR, LF or NUL inside a header value ends at the HTTP parser: 400 before the edge reads
    // the request (no client library sends one; written here by hand).
    for bad in ["2023-06-01\rx", "a\0b"] {
        let mut connection = RawConnection::connect(stack.edge.addr).await;
        let head = format!(
            "POST /v1/messages HTTP/1.1\r\nHost: edge\r\ncontent-type: application/json\r\n\
             anthropic-version: {bad}\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        connection.send_raw(head.as_bytes()).await;
        let (status, _) = connection.response(std::time::Duration::from_secs(5)).await.expect("an answer");
        assert_eq!(status, 400, "{bad:?}");
    }
    assert!(stack.llm.requests().is_empty(), "no refused request reached the vendor");
}

async fn post(stack: &Stack, path: &str, headers: &[(&str, &str)], body: String) -> reqwest::Response {
    let mut request = stack.http.post(stack.url(path)).header("content-type", "application/json").body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("edge reachable")
}

#[tokio::test]
async fn the_stream_sends_anthropics_events_in_order_with_their_names() {
    let llm = ScriptedLlm::start(weather_vendor).await;
    let stack = Stack::start(llm, Options::default()).await;
    let body = json!({
        "model": "claude-sonnet-4-5", "max_tokens": 50, "stream": true,
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
    });
    let response =
        post(&stack, "/v1/messages?beta=true", &[("anthropic-version", "2023-06-01")], body.to_string()).await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    let events = parse_events(&text);
    for (name, data) in &events {
        assert_eq!(data["type"], name.as_str(), "each event's name is its data's type: {text}");
    }
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    let deltas = names.iter().filter(|n| **n == "content_block_delta").count();
    assert!(deltas >= 2, "{text}");
    let mut expected = vec!["message_start", "ping", "content_block_start"];
    expected.extend(std::iter::repeat_n("content_block_delta", deltas));
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(names, expected, "{text}");
    let (_, start) = &events[2];
    assert_eq!(start["content_block"]["type"], "tool_use");
    assert_eq!(start["content_block"]["name"], "get_weather");
    let arguments: String = events
        .iter()
        .filter(|(name, _)| name == "content_block_delta")
        .map(|(_, data)| {
            assert_eq!(data["delta"]["type"], "input_json_delta");
            data["delta"]["partial_json"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&arguments).unwrap(), json!({"city": "Paris"}));
    let (_, delta) = &events[events.len() - 2];
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(delta["usage"]["output_tokens"], 8);
}

/// What is sent (a name for it, headers, body) and what must come back (status, Anthropic's
/// error type, text the message must hold).
type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, String, u16, &'a str, &'a str);

#[tokio::test]
async fn refusals_come_in_anthropics_error_shape_with_its_status_codes() {
    let llm = ScriptedLlm::start(|_| Reply::text(ANSWER)).await;
    let stack = Stack::start(
        llm,
        Options {
            auth: Auth::Closed { jwks_file: None },
            configure: Box::new(|config| config.max_body_bytes = 4096),
            ..Options::default()
        },
    )
    .await;
    let key = stack.key("acme", "ann", false).await;
    let auth = [("x-api-key", key.as_str())];
    let ok = json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    let cases: Vec<Case> = vec![
        ("no key", vec![], ok.to_string(), 401, "authentication_error", "credential"),
        ("bad key", vec![("x-api-key", "sy_nope_nope")], ok.to_string(), 401, "authentication_error", ""),
        ("not JSON", auth.to_vec(), "{\"model\": ".into(), 400, "invalid_request_error", ""),
        (
            "wrong type",
            auth.to_vec(),
            json!({"model": 5, "max_tokens": 1, "messages": []}).to_string(),
            400,
            "invalid_request_error",
            "model",
        ),
        (
            "no max_tokens",
            auth.to_vec(),
            json!({"model": "m", "messages": ok["messages"]}).to_string(),
            400,
            "invalid_request_error",
            "max_tokens",
        ),
        (
            "a tool without a schema",
            auth.to_vec(),
            json!({"model": "m", "max_tokens": 1, "messages": ok["messages"], "tools": [{"name": "t"}]}).to_string(),
            400,
            "invalid_request_error",
            "tools[0].input_schema",
        ),
        (
            "a bad image",
            auth.to_vec(),
            json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "file", "file_id": "f"}}]}]})
            .to_string(),
            400,
            "invalid_request_error",
            "messages[0].content[0].source.type",
        ),
        (
            "oversize",
            auth.to_vec(),
            json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user",
            "content": "x".repeat(5000)}]})
            .to_string(),
            413,
            "request_too_large",
            "",
        ),
        (
            "count_tokens without messages",
            auth.to_vec(),
            json!({"model": "m"}).to_string(),
            400,
            "invalid_request_error",
            "messages",
        ),
    ];
    for (what, headers, body, status, kind, named) in cases {
        let path = if what.starts_with("count_tokens") { "/v1/messages/count_tokens" } else { "/v1/messages" };
        let (got, body) = json(post(&stack, path, &headers, body).await).await;
        assert_eq!(got, status, "{what}: {body}");
        assert_eq!(body["type"], "error", "{what}: {body}");
        assert_eq!(body["error"]["type"], kind, "{what}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(named), "{what}: the message does not name {named}: {body}");
    }
    // What the router refuses, in Anthropic's shape and naming the field as this request has it
    // (the router says `history[1].tool_call_id`, `history[0].parts[1].image.url`,
    // `tools[0].parameters_json`): a tool result answering a call the conversation never made,
    // an image at a plain http URL, a tool name the vendors refuse, a tool_choice naming no tool.
    let tool = json!({"name": "t", "input_schema": {"type": "object"}});
    let routed: [(Value, &str); 4] = [
        (
            json!({"tools": [tool], "messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_nowhere", "content": "x"}]}]}),
            "messages[1].content[0].tool_use_id",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "what is this?"},
                {"type": "image", "source": {"type": "url", "url": "http://example.com/a.png"}}]}]}),
            "messages[0].content[1].source",
        ),
        (json!({"tools": [{"name": "no spaces", "input_schema": {}}], "messages": ok["messages"]}), "tools[0].name"),
        (
            json!({"tools": [tool], "tool_choice": {"type": "tool", "name": "other"}, "messages": ok["messages"]}),
            "tool_choice.name",
        ),
    ];
    for (mut body, field) in routed {
        body["model"] = json!("m");
        body["max_tokens"] = json!(10);
        let (status, body) = json(post(&stack, "/v1/messages", &auth, body.to_string()).await).await;
        assert_eq!((status, &body["error"]["type"]), (400, &json!("invalid_request_error")), "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(&format!("{field}: ")), "{field}: {body}");
    }
    assert!(stack.llm.requests().is_empty(), "no refused request reached the vendor");
}

#[tokio::test]
async fn a_stream_that_fails_midway_ends_with_an_anthropic_error_event() {
    let llm = ScriptedLlm::start(|_| Reply::text("Partial answer").fail_mid_stream("vendor fell over")).await;
    let stack = Stack::start(llm, Options::default()).await;
    let body = json!({"model": "m", "max_tokens": 10, "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let response = post(&stack, "/v1/messages", &[], body.to_string()).await;
    assert_eq!(response.status(), 200);
    let events = parse_events(&response.text().await.unwrap());
    let (name, data) = events.last().unwrap();
    assert_eq!(name, "error", "{events:?}");
    assert_eq!(data["type"], "error");
    assert!(data["error"]["type"].as_str().unwrap().ends_with("_error"), "{data}");
    assert!(!events.iter().any(|(name, _)| name == "message_stop"), "a failed answer does not stop as if whole");
}

#[tokio::test]
async fn a_stateless_conversation_keeps_its_session_across_requests() {
    let llm = ScriptedLlm::start(|_| Reply::text(ANSWER)).await;
    let stack = Stack::start(llm, Options::default()).await;
    let ask = |messages: Value| {
        json!({"model": "claude-sonnet-4-5", "max_tokens": 50, "system": "Be brief.", "messages": messages}).to_string()
    };
    let first = json!([{"role": "user", "content": "Plan my trip to Lisbon"}]);
    let (status, one) = json(post(&stack, "/v1/messages", &[], ask(first)).await).await;
    assert_eq!(status, 200, "{one}");
    // The client resends the whole conversation with its next message, naming no session.
    let again = json!([
        {"role": "user", "content": "Plan my trip to Lisbon"},
        {"role": "assistant", "content": one["content"]},
        {"role": "user", "content": "And the museums?"},
    ]);
    let (status, two) = json(post(&stack, "/v1/messages", &[], ask(again)).await).await;
    assert_eq!(status, 200, "{two}");
    let session = one["session_id"].as_str().unwrap();
    assert!(!session.is_empty(), "{one}");
    assert_eq!(two["session_id"], session, "the same conversation: the same session");
    let other = json!([{"role": "user", "content": "Plan my trip to Oslo"}]);
    let (_, three) = json(post(&stack, "/v1/messages", &[], ask(other)).await).await;
    assert_ne!(three["session_id"], session, "another conversation: another session");
    // A session named in the header wins over the derived key.
    let oslo = three["session_id"].as_str().unwrap();
    let named = json!([{"role": "user", "content": "Plan my trip to Lisbon"}]);
    let (_, four) = json(post(&stack, "/v1/messages", &[("x-session-id", oslo)], ask(named)).await).await;
    assert_eq!(four["session_id"], oslo, "{four}");
}
