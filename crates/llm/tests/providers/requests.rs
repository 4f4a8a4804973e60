//! What goes over the wire: headers, and the request body in each vendor's shape.

use serde_json::json;
use switchyard_llm::{AnthropicHeaders, ChatRequest, ErrorKind, Message, ProviderConfig, ToolCall, ToolChoice};
use switchyard_testkit::llm::{Reply, ScriptedLlm, Wire};

use crate::support::{KEY, MODES, Mode, Vendor, ask, question, weather_tool};

for_each_vendor!(headers_carry_the_key_and_version, a_plain_question_has_no_tools_and_no_tool_choice);

async fn headers_carry_the_key_and_version(vendor: Vendor) {
    let server = ScriptedLlm::start(|_| Reply::text("ok")).await;
    vendor.on(&server).complete(question("hi")).await.unwrap();
    let keyless = vendor.provider(ProviderConfig { api_key: None, ..vendor.config(&server) });
    keyless.complete(question("hi")).await.unwrap();

    let requests = server.requests();
    let (with_key, without_key) = (&requests[0], &requests[1]);
    assert_eq!(with_key.header("content-type"), Some("application/json"));
    match vendor {
        Vendor::OpenAi => {
            assert_eq!(with_key.wire, Wire::OpenAi);
            assert_eq!(with_key.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
            assert_eq!(without_key.header("authorization"), None, "local servers take no key");
        }
        Vendor::Anthropic => {
            assert_eq!(with_key.wire, Wire::Anthropic);
            assert_eq!(with_key.header("x-api-key"), Some(KEY));
            assert_eq!(with_key.header("anthropic-version"), Some("2023-06-01"));
            assert_eq!(with_key.header("authorization"), None);
            assert_eq!(without_key.header("x-api-key"), None);
        }
    }
}

async fn a_plain_question_has_no_tools_and_no_tool_choice(vendor: Vendor) {
    let server = ScriptedLlm::start(|_| Reply::text("ok")).await;
    let provider = vendor.on(&server);
    let request = ChatRequest { tools: Vec::new(), tool_choice: ToolChoice::Required, ..question("hi") };
    for mode in MODES {
        ask(provider.as_ref(), request.clone(), mode).await.unwrap();
    }
    for (recorded, mode) in server.requests().iter().zip(MODES) {
        assert!(recorded.body.get("tools").is_none(), "{mode:?}: {}", recorded.body);
        assert!(recorded.body.get("tool_choice").is_none(), "{mode:?}: {}", recorded.body);
        assert_eq!(recorded.is_stream(), mode == Mode::Stream);
        assert_eq!(recorded.system(), None);
        assert_eq!(recorded.last_user_text().as_deref(), Some("hi"));
    }
}

/// A conversation that has been through one tool call, with everything a request can carry.
fn after_a_tool_call() -> ChatRequest {
    ChatRequest {
        model: "test-model".into(),
        system: Some("You are terse.".into()),
        messages: vec![
            Message::user("Weather in Paris?"),
            Message::Assistant {
                content: "Checking.".into(),
                tool_calls: vec![ToolCall {
                    id: "call_1".into(),
                    name: "get_weather".into(),
                    arguments: r#"{"city":"Paris"}"#.into(),
                }],
            },
            Message::tool_result("call_1", "18°C, sunny", false),
            Message::tool_result("call_2", "no such city", true),
        ],
        tools: vec![weather_tool()],
        tool_choice: ToolChoice::Required,
        parallel_tool_calls: None,
        response_format: None,
        max_tokens: Some(256),
        temperature: Some(0.5),
        stop: vec!["END".into()],
        anthropic_headers: AnthropicHeaders {
            version: Some("2023-01-01".into()),
            beta: Some("claude-code-20250219,interleaved-thinking-2025-05-14".into()),
        },
    }
}

#[tokio::test]
async fn openai_request_body() {
    let server = ScriptedLlm::start(|_| Reply::text("ok")).await;
    let provider = Vendor::OpenAi.on(&server);
    for mode in MODES {
        ask(provider.as_ref(), after_a_tool_call(), mode).await.unwrap();
    }
    let requests = server.requests();
    let body = &requests[0].body;
    assert_eq!(body["model"], "test-model");
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "Checking.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18°C, sunny"},
            {"role": "tool", "tool_call_id": "call_2", "content": "no such city"},
        ])
    );
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": weather_tool().parameters,
        }}])
    );
    assert_eq!(body["tool_choice"], "required");
    assert_eq!((&body["max_tokens"], &body["temperature"], &body["stop"]), (&json!(256), &json!(0.5), &json!(["END"])));
    assert_eq!(body["stream"], false);
    assert!(body.get("stream_options").is_none());
    assert_eq!(requests[0].system().as_deref(), Some("You are terse."));
    assert_eq!(requests[0].tool_names(), ["get_weather"]);
    assert_eq!(requests[0].messages_len(), 5);

    let streamed = &requests[1].body;
    assert_eq!(streamed["stream"], true);
    assert_eq!(streamed["stream_options"], json!({"include_usage": true}));
    // The caller's Anthropic headers are not OpenAI's business.
    for request in &requests {
        assert_eq!(request.header("anthropic-version"), None);
        assert_eq!(request.header("anthropic-beta"), None);
    }
}

#[tokio::test]
async fn anthropic_request_body() {
    let server = ScriptedLlm::start(|_| Reply::text("ok")).await;
    let provider = Vendor::Anthropic.on(&server);
    for mode in MODES {
        ask(provider.as_ref(), after_a_tool_call(), mode).await.unwrap();
    }
    let requests = server.requests();
    let body = &requests[0].body;
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["system"], "You are terse.");
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
            ]},
            // Both results in one user message: the API requires the roles to alternate.
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "18°C, sunny"},
                {"type": "tool_result", "tool_use_id": "call_2", "content": "no such city", "is_error": true},
            ]},
        ])
    );
    assert_eq!(
        body["tools"],
        json!([{
            "name": "get_weather",
            "description": "Current weather for a city",
            "input_schema": weather_tool().parameters,
        }])
    );
    assert_eq!(body["tool_choice"], json!({"type": "any"}));
    assert_eq!((&body["max_tokens"], &body["temperature"]), (&json!(256), &json!(0.5)));
    assert_eq!(body["stop_sequences"], json!(["END"]));
    assert!(body.get("stream").is_none() || body["stream"] == false);
    assert_eq!(requests[0].system().as_deref(), Some("You are terse."));
    assert_eq!(requests[0].last_user_text().as_deref(), Some("Weather in Paris?"));
    assert_eq!(requests[0].tool_names(), ["get_weather"]);
    assert_eq!(requests[0].messages_len(), 3);

    let streamed = &requests[1].body;
    assert_eq!(streamed["stream"], true);
    assert!(streamed.get("stream_options").is_none());
    // The caller's `anthropic-version` instead of ours, and its betas as it gave them, streamed or not.
    for request in &requests {
        assert_eq!(request.header("anthropic-version"), Some("2023-01-01"));
        assert_eq!(request.header("anthropic-beta"), Some("claude-code-20250219,interleaved-thinking-2025-05-14"));
    }

    // Without max_tokens the API's required field gets our default; tool choices map to its names.
    for (choice, name) in [(ToolChoice::Auto, "auto"), (ToolChoice::None, "none")] {
        let request = ChatRequest {
            max_tokens: None,
            tool_choice: choice,
            anthropic_headers: AnthropicHeaders::default(),
            ..after_a_tool_call()
        };
        provider.complete(request).await.unwrap();
        let last = server.requests().pop().unwrap();
        assert_eq!(last.body["max_tokens"], 4096);
        assert_eq!(last.body["tool_choice"], json!({"type": name}));
        // Without the caller's: our version, no betas.
        assert_eq!(last.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(last.header("anthropic-beta"), None);
    }
    // A value no header can carry is the caller's mistake, named, and never sent.
    let request = ChatRequest {
        anthropic_headers: AnthropicHeaders { version: None, beta: Some("a\r\nx-injected: 1".into()) },
        ..after_a_tool_call()
    };
    let sent = server.requests().len();
    let err = provider.complete(request).await.unwrap_err();
    assert_eq!((err.kind, err.field.as_deref()), (ErrorKind::Unsupported, Some("anthropic-beta")), "{err}");
    assert_eq!(server.requests().len(), sent);
}
