//! The router's gateway tools beside the caller's (`ROUTER_GATEWAY_TOOLS_TENANTS`), seen from
//! an OpenAI client over real HTTP: the edge, the router, sessions, triggers and the real MCP
//! gateway with server-everything, the scripted vendor behind. The caller gets only its own
//! tool's call, streamed or not; `_metadata` names the gateway's tools offered and called.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Options, Stack, json, parse_events};
use serde_json::{Value, json};
use switchyard_testkit::llm::{Recorded, Reply, ScriptedLlm};

/// Calls the gateway's get-sum first, then the caller's get_weather, then answers.
fn model(request: &Recorded) -> Reply {
    let results: Vec<String> = request
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    let sum = request.tool_names().into_iter().find(|t| t.ends_with("get-sum"));
    match (results.iter().any(|r| r.contains("42")), sum) {
        (false, Some(sum)) => Reply::tool_call(sum, r#"{"a": 17, "b": 25}"#),
        _ => Reply::tool_call("get_weather", r#"{"city": "Paris"}"#).chunk_size(4),
    }
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})
}

#[tokio::test]
async fn an_openai_client_gets_only_its_own_call_and_the_metadata_names_the_gateways_tools() {
    let options = Options {
        gateway: true,
        configure_router: Box::new(|config| config.gateway_tools_tenants = vec!["*".to_owned()]),
        ..Options::default()
    };
    let stack = Stack::start(ScriptedLlm::start(model).await, options).await;
    let messages = json!([{"role": "user", "content": "add 17 and 25, then tell me the weather in Paris"}]);

    let body = json!({"model": "switchyard", "messages": messages, "tools": [weather_tool()]});
    let (status, answer) = json(stack.post("/v1/chat/completions", None, &body).await).await;
    assert_eq!(status, 200, "{answer}");
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{answer}");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    let metadata = &answer["_metadata"];
    assert_eq!(metadata["client_tools_called"], json!(["get_weather"]), "{metadata}");
    let called = metadata["gateway_tool_calls"].as_array().unwrap();
    assert!(called.len() == 1 && called[0].as_str().unwrap().ends_with("get-sum"), "{metadata}");
    let offered = metadata["gateway_tools_offered"].as_array().unwrap();
    assert!(offered.contains(&called[0]), "{metadata}");
    // The gateway's tool ran: its result reached the vendor's second request.
    let sent = stack.llm.take_requests();
    assert_eq!(sent.len(), 2);
    assert!(sent[1].messages().iter().any(|m| m["role"] == "tool" && m["content"].as_str().unwrap().contains("42")));

    // Streamed: the chunks carry the caller's call only, at index 0.
    let body = json!({"model": "switchyard", "stream": true, "messages": messages, "tools": [weather_tool()]});
    let response = stack.post("/v1/chat/completions", None, &body).await;
    assert_eq!(response.status(), 200);
    let events = parse_events(&response.text().await.unwrap());
    let chunks: Vec<&Value> = events.iter().map(|(_, data)| data).filter(|d| d.is_object()).collect();
    let pieces: Vec<&Value> =
        chunks.iter().filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array()).flatten().collect();
    assert!(!pieces.is_empty(), "{chunks:?}");
    assert_eq!(pieces[0]["function"]["name"], "get_weather");
    assert!(pieces.iter().all(|p| p["index"] == 0), "{pieces:?}");
    let names: Vec<&str> = pieces.iter().filter_map(|p| p["function"]["name"].as_str()).collect();
    assert_eq!(names, ["get_weather"], "no gateway call in the stream: {pieces:?}");
    let last_metadata = chunks.iter().rev().find_map(|c| c.get("_metadata")).expect("metadata in the stream");
    assert_eq!(last_metadata["gateway_tool_calls"], metadata["gateway_tool_calls"], "{last_metadata}");
}
