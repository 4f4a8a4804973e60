//! `/v1/chat/completions` over real HTTP, for what the official SDK's checks (clients.rs) do not
//! show byte for byte: the streamed tool-call chunks, a tool loop's continuation, the
//! conversation a stateless caller is kept in, and errors in OpenAI's shape.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Options, Stack, json, parse_events};
use serde_json::{Value, json};
use switchyard_testkit::llm::{Recorded, Reply, ScriptedLlm};

const WEATHER: &str = r#"{"city": "Paris"}"#;

/// Calls get_weather while the caller offers tools and has no result yet; then answers.
fn agent_model(request: &Recorded) -> Reply {
    let ends_in_result = request.messages().last().is_some_and(|m| m["role"] == "tool");
    if request.tool_names().iter().any(|name| name == "get_weather") && !ends_in_result {
        return Reply::tool_call("get_weather", WEATHER).chunk_size(4);
    }
    Reply::text("It is sunny in Paris.")
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})
}

async fn stack() -> Stack {
    Stack::start(ScriptedLlm::start(agent_model).await, Options::default()).await
}

#[tokio::test]
async fn a_streamed_tool_call_comes_in_openai_chunks_and_its_result_continues_the_loop() {
    let stack = stack().await;
    let opening =
        json!([{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Weather in Paris?"}]);
    let body = json!({"model": "switchyard", "stream": true, "messages": opening, "tools": [weather_tool()]});
    let response = stack.post("/v1/chat/completions", None, &body).await;
    assert_eq!(response.status(), 200);
    let events = parse_events(&response.text().await.unwrap());
    let chunks: Vec<&Value> = events.iter().map(|(_, data)| data).filter(|d| d.is_object()).collect();
    let calls: Vec<&Value> =
        chunks.iter().filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array()).flatten().collect();
    assert!(calls.len() >= 2, "the arguments stream in pieces: {calls:?}");
    // The first piece names the call; the others carry only argument text, at the same index.
    assert_eq!(calls[0]["index"], 0);
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    let id = calls[0]["id"].as_str().unwrap().to_owned();
    assert!(!id.is_empty());
    for piece in &calls[1..] {
        assert_eq!(piece["index"], 0);
        assert!(piece.get("id").is_none() && piece["function"].get("name").is_none(), "{piece}");
    }
    let arguments: String = calls.iter().map(|c| c["function"]["arguments"].as_str().unwrap()).collect();
    assert_eq!(serde_json::from_str::<Value>(&arguments).unwrap(), json!({"city": "Paris"}));
    let finishes: Vec<&str> = chunks.iter().filter_map(|c| c["choices"][0]["finish_reason"].as_str()).collect();
    assert_eq!(finishes, ["tool_calls"]);
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let first_metadata = &chunks[0]["_metadata"];
    assert_eq!(first_metadata["client_tools"], true, "{first_metadata}");

    // The caller ran the tool: its result continues the turn, answered by one model call.
    stack.llm.take_requests();
    let mut messages = opening.as_array().unwrap().clone();
    messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": id, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]}));
    messages.push(json!({"role": "tool", "tool_call_id": id, "content": "18C, sunny"}));
    let body = json!({"model": "switchyard", "messages": messages, "tools": [weather_tool()]});
    let (status, answer) = json(stack.post("/v1/chat/completions", None, &body).await).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["choices"][0]["message"]["content"], "It is sunny in Paris.");
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    assert_eq!(answer["_metadata"]["continuation"], true, "{answer}");
    let sent = stack.llm.take_requests();
    assert_eq!(sent.len(), 1, "a continuation is one model call, no routing call");
    assert_eq!(sent[0].messages().last().unwrap()["tool_call_id"], id.as_str());
}

#[tokio::test]
async fn a_non_streamed_tool_call_has_null_content_and_openai_tool_calls() {
    let stack = stack().await;
    let body = json!({"model": "switchyard", "tools": [weather_tool()],
        "messages": [{"role": "user", "content": "Weather in Paris?"}]});
    let (status, answer) = json(stack.post("/v1/chat/completions", None, &body).await).await;
    assert_eq!(status, 200, "{answer}");
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "get_weather");
    assert_eq!(call["function"]["arguments"], WEATHER);
    assert!(call["id"].as_str().is_some_and(|id| !id.is_empty()), "{call}");
    assert_eq!(answer["_metadata"]["client_tools_called"], json!(["get_weather"]), "{answer}");
}

#[tokio::test]
async fn a_stateless_conversation_keeps_its_session_and_a_named_one_wins() {
    let stack = stack().await;
    let ask = |messages: Value| json!({"model": "switchyard", "messages": messages});
    let session_of = |answer: &Value| answer["session_id"].as_str().unwrap().to_owned();
    let first = [json!({"role": "system", "content": "Be brief."}), json!({"role": "user", "content": "Hi there"})];
    let (status, one) = json(stack.post("/v1/chat/completions", None, &ask(json!(first))).await).await;
    assert_eq!(status, 200, "{one}");
    // The same conversation, resent whole with one more exchange: the same session.
    let mut longer = first.to_vec();
    longer.extend([json!({"role": "assistant", "content": "Hello!"}), json!({"role": "user", "content": "And now?"})]);
    let (_, two) = json(stack.post("/v1/chat/completions", None, &ask(json!(longer))).await).await;
    assert_eq!(session_of(&two), session_of(&one), "{two}");
    // Another conversation (another first message): another session.
    let other = [json!({"role": "system", "content": "Be brief."}), json!({"role": "user", "content": "Hi again"})];
    let (_, three) = json(stack.post("/v1/chat/completions", None, &ask(json!(other))).await).await;
    assert_ne!(session_of(&three), session_of(&one));
    // A session named in the x-session-id header wins over the key.
    let named = stack
        .http
        .post(stack.url("/v1/chat/completions"))
        .header("x-session-id", session_of(&three))
        .json(&ask(json!(first)))
        .send()
        .await
        .unwrap();
    let (status, four) = json(named).await;
    assert_eq!(status, 200, "{four}");
    assert_eq!(session_of(&four), session_of(&three));
    // A body and a header naming different sessions: which one is meant is not guessed.
    let mut body = ask(json!(first));
    body["session_id"] = json!(session_of(&one));
    let both = stack
        .http
        .post(stack.url("/v1/chat/completions"))
        .header("x-session-id", session_of(&three))
        .json(&body)
        .send()
        .await
        .unwrap();
    let (status, error) = json(both).await;
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["param"], "session_id");
}

#[tokio::test]
async fn bad_input_is_a_4xx_in_openai_shape_naming_the_param() {
    let options = Options { configure: Box::new(|config| config.max_body_bytes = 4096), ..Options::default() };
    let stack = Stack::start(ScriptedLlm::start(agent_model).await, options).await;
    let user = json!({"role": "user", "content": "Hi"});
    let cases = [
        (
            json!({"model": "s", "messages": [user], "tools": [{"type": "function", "function": {"name": "a\u{0}b"}}]}),
            "tools[0].function.name",
        ),
        (json!({"model": "s", "messages": [user], "tools": "get_weather"}), "tools"),
        (
            json!({"model": "s", "messages": [user], "tool_choice": {"type": "function", "function": {"name": "x"}}}),
            "tool_choice.function.name",
        ),
        (json!({"model": "s", "messages": [user], "response_format": {"type": "xml"}}), "response_format.type"),
        (json!({"model": "s", "messages": [user], "stop": ["a", "b", "c", "d", "e"]}), "stop"),
        (json!({"model": "s", "messages": [user], "function_call": "auto"}), "function_call"),
        (
            json!({"model": "s", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]}),
            "messages[0].content[0].image_url.url",
        ),
        // The router finds these; the caller's field is named, as the caller sent it.
        (
            json!({"model": "s", "messages": [user, {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "no spaces allowed", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "r"}]}),
            "messages[1].tool_calls[0].function.name",
        ),
        (
            json!({"model": "s", "messages": [user, {"role": "assistant", "content": "ok"}, {"role": "tool", "tool_call_id": "call_9", "content": "r"}]}),
            "messages[2].tool_call_id",
        ),
    ];
    for (body, param) in cases {
        let (status, error) = json(stack.post("/v1/chat/completions", None, &body).await).await;
        assert_eq!(status, 400, "{param}: {error}");
        assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
        assert_eq!(error["error"]["param"], param, "{error}");
    }
    let huge = json!({"model": "s", "messages": [{"role": "user", "content": "x".repeat(8192)}]});
    let (status, error) = json(stack.post("/v1/chat/completions", None, &huge).await).await;
    assert_eq!(status, 413, "{error}");
    assert_eq!(error["error"]["type"], "invalid_request_error");
}
