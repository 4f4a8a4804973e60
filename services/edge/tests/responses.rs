//! OpenAI's Responses API on the edge, over real HTTP with the real router, sessions and
//! triggers behind it and the scripted vendor behind the router: the official Python `openai`
//! SDK (pinned by `scripts/install-tools.sh` in `.tools/venv`; the test fails when it is
//! missing) for a function tool round trip streamed and not, continued by
//! `previous_response_id`, `retrieve` and its exception types; and raw HTTP for what the SDK
//! hides (event names, order and sequence numbers, whose stored responses a caller sees, the
//! error shape and `param` of each kind of refusal).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use common::{Auth, Options, Stack, events, json};
use serde_json::{Value, json};
use switchyard_testkit::llm::{Recorded, Reply, ScriptedLlm};

const ANSWER: &str = "Hello! Switchyard here, happy to help.";

/// A call of get_weather while the request offers it and does not end in a tool result; the
/// result's text once it does; anything else (a routing call) the plain answer.
fn weather_vendor(request: &Recorded) -> Reply {
    let last = request.messages().last().cloned().unwrap_or_default();
    // OpenAI's wire has `tool` messages; Anthropic's user messages of `tool_result` blocks.
    let anthropic_result = last["content"].as_array().and_then(|blocks| {
        blocks.iter().find(|b| b["type"] == "tool_result").map(|b| match &b["content"] {
            Value::String(text) => text.clone(),
            blocks => blocks[0]["text"].as_str().unwrap_or_default().to_owned(),
        })
    });
    if last["role"] == "tool" || anthropic_result.is_some() {
        let result = anthropic_result.unwrap_or_else(|| last["content"].as_str().unwrap_or_default().to_owned());
        return Reply::text(format!("It is {result} in Paris.")).chunk_size(5).usage(30, 9);
    }
    if request.tool_names().iter().any(|name| name == "get_weather") {
        return Reply::tool_call("get_weather", r#"{"city": "Paris"}"#).chunk_size(4).usage(20, 8);
    }
    Reply::text(ANSWER).chunk_size(6).usage(11, 7)
}

fn weather_tool() -> Value {
    json!({"type": "function", "name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}})
}

async fn closed_stack() -> Stack {
    let llm = ScriptedLlm::start(weather_vendor).await;
    Stack::start(llm, Options { auth: Auth::Closed { jwks_file: None }, ..Options::default() }).await
}

/// Runs `openai_responses_check.py` against the stack as a new key of `acme`.
async fn sdk_check(stack: &Stack) -> Value {
    let key = stack.key("acme", "agent", false).await;
    let root = switchyard_testkit::root();
    let python = root.join(".tools/venv/bin/python");
    assert!(python.exists(), "{} is missing: run scripts/install-tools.sh", python.display());
    let args = vec![
        root.join("services/edge/tests/clients/openai_responses_check.py").display().to_string(),
        "--base-url".into(),
        format!("{}/v1", stack.edge.url()),
        "--api-key".into(),
        key,
    ];
    let output = tokio::task::spawn_blocking(move || Command::new(python).args(args).output())
        .await
        .unwrap()
        .expect("the client runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the openai responses check failed:\n{stdout}\n{stderr}");
    serde_json::from_str(stdout.lines().last().unwrap()).expect("a JSON summary")
}

#[tokio::test]
async fn the_openai_python_sdk_runs_a_tool_loop_over_the_responses_api() {
    let stack = closed_stack().await;
    let summary = sdk_check(&stack).await;
    assert!(summary["plain"]["answer"].as_str().unwrap().contains("18C and sunny"), "{summary}");
    // The caller's tool reached the model alone, never the routing tools beside it.
    let requests = stack.llm.requests();
    for request in requests.iter().filter(|r| r.tool_names().contains(&"get_weather".to_owned())) {
        assert!(request.tool_names().iter().all(|name| !name.starts_with("use_")), "{:?}", request.tool_names());
        assert_eq!(request.body["tools"][0]["function"]["description"], "The current weather in a city.");
    }
    // A second turn sent only the tool's output; the vendor saw the whole conversation: the
    // instructions, the question, the call and its result.
    let continued = requests
        .iter()
        .find(|r| r.messages().last().is_some_and(|m| m["role"] == "tool"))
        .expect("a request ending in the tool result");
    let messages = continued.messages();
    assert!(messages.iter().any(|m| m["role"] == "user" && m["content"] == "What is the weather in Paris?"));
    let asked = &messages[messages.len() - 2];
    assert_eq!(asked["tool_calls"][0]["function"]["name"], "get_weather");
    assert_eq!(asked["tool_calls"][0]["id"], messages.last().unwrap()["tool_call_id"]);
}

#[tokio::test]
async fn events_come_in_order_with_their_types_and_sequence_numbers() {
    let stack = Stack::start(ScriptedLlm::start(weather_vendor).await, Options::default()).await;
    let body = json!({"model": "switchyard", "input": "Hi there", "stream": true});
    let text = events(stack.post("/v1/responses", None, &body).await).await;
    let names: Vec<&str> = text.iter().map(|(name, _)| name.as_str()).collect();
    let deltas = names.iter().filter(|n| **n == "response.output_text.delta").count();
    assert!(deltas >= 2, "the text streams in pieces: {names:?}");
    let mut expected =
        vec!["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"];
    expected.extend(std::iter::repeat_n("response.output_text.delta", deltas));
    expected.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(names, expected);
    for (index, (name, data)) in text.iter().enumerate() {
        assert_eq!(data["type"], name.as_str());
        assert_eq!(data["sequence_number"], index);
    }
    let joined: String = text.iter().filter_map(|(_, d)| d["delta"].as_str()).collect();
    assert_eq!(joined, ANSWER);
    let created = &text[0].1["response"];
    assert_eq!(created, &text[1].1["response"], "created and in_progress carry the same response");
    for (member, value) in [
        ("object", json!("response")),
        ("status", json!("in_progress")),
        ("error", Value::Null),
        ("incomplete_details", Value::Null),
        ("output", json!([])),
        ("usage", Value::Null),
        ("model", json!("switchyard")),
        ("tools", json!([])),
    ] {
        assert_eq!(created[member], value, "response.created's {member}");
    }
    let delta = &text[4].1;
    assert_eq!(delta["item_id"], text[2].1["item"]["id"]);
    assert_eq!((delta["output_index"].as_u64(), delta["content_index"].as_u64()), (Some(0), Some(0)));
    assert_eq!(delta["logprobs"], json!([]));
    let completed = &text.last().unwrap().1["response"];
    assert_eq!(completed["status"], "completed");
    assert_eq!(completed["output"][0]["content"][0]["text"], ANSWER);
    assert_eq!(completed["usage"]["output_tokens"], 7);

    // A call of the caller's tool: its item, argument pieces, their whole, the item done.
    let body = json!({"model": "switchyard", "input": "Weather in Paris?", "stream": true, "tools": [weather_tool()]});
    let text = events(stack.post("/v1/responses", None, &body).await).await;
    let names: Vec<&str> = text.iter().map(|(name, _)| name.as_str()).collect();
    let pieces = names.iter().filter(|n| **n == "response.function_call_arguments.delta").count();
    assert!(pieces >= 2, "{names:?}");
    let mut expected = vec!["response.created", "response.in_progress", "response.output_item.added"];
    expected.extend(std::iter::repeat_n("response.function_call_arguments.delta", pieces));
    expected.extend(["response.function_call_arguments.done", "response.output_item.done", "response.completed"]);
    assert_eq!(names, expected);
    let added = &text[2].1["item"];
    assert_eq!((added["type"].as_str(), added["name"].as_str()), (Some("function_call"), Some("get_weather")));
    let done = &text[text.len() - 2].1["item"];
    assert_eq!(serde_json::from_str::<Value>(done["arguments"].as_str().unwrap()).unwrap(), json!({"city": "Paris"}));
    assert_eq!(done["call_id"], added["call_id"]);
    assert_eq!(text.last().unwrap().1["response"]["output"][0], *done);
}

#[tokio::test]
async fn a_stored_response_continues_its_session_and_belongs_to_its_caller() {
    let stack = closed_stack().await;
    let ann = stack.key("acme", "ann", false).await;
    let bob = stack.key("acme", "bob", false).await;
    let other_tenant = stack.key("globex", "ann", false).await;
    let first = json!({"model": "switchyard", "input": "Weather in Paris?", "tools": [weather_tool()]});
    let (status, first) = json(stack.post("/v1/responses", Some(&ann), &first).await).await;
    assert_eq!(status, 200, "{first}");
    let id = first["id"].as_str().unwrap();
    let call_id = first["output"][0]["call_id"].as_str().unwrap();
    let (status, got) = json(stack.get(&format!("/v1/responses/{id}"), Some(&ann)).await).await;
    assert_eq!((status, &got), (200, &first));
    for stranger in [&bob, &other_tenant] {
        let (status, body) = json(stack.get(&format!("/v1/responses/{id}"), Some(stranger)).await).await;
        assert_eq!(status, 404, "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error");
    }
    let next = json!({"model": "switchyard", "previous_response_id": id, "tools": [weather_tool()],
        "input": [{"type": "function_call_output", "call_id": call_id, "output": "18C"}]});
    let (status, body) = json(stack.post("/v1/responses", Some(&other_tenant), &next).await).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "previous_response_id");
    let (status, second) = json(stack.post("/v1/responses", Some(&ann), &next).await).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["output"][0]["content"][0]["text"], "It is 18C in Paris.");
    assert_eq!(second["session_id"], first["session_id"], "the same Switchyard session");
    assert_eq!(second["_metadata"]["continuation"], true, "a tool loop's continuation: {second}");
    // Not stored: nothing to retrieve or continue.
    let unstored = json!({"model": "switchyard", "input": "Hi", "store": false});
    let (_, unstored) = json(stack.post("/v1/responses", Some(&ann), &unstored).await).await;
    let path = format!("/v1/responses/{}", unstored["id"].as_str().unwrap());
    assert_eq!(stack.get(&path, Some(&ann)).await.status(), 404);
}

#[tokio::test]
async fn a_stateless_conversation_keeps_its_session() {
    let stack = Stack::start(ScriptedLlm::start(weather_vendor).await, Options::default()).await;
    let opening = json!([{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Weather?"}]);
    let (_, first) = json(stack.post("/v1/responses", None, &json!({"model": "s", "input": opening})).await).await;
    let mut longer = opening.as_array().unwrap().clone();
    longer.extend([
        json!({"role": "assistant", "content": [{"type": "output_text", "text": "Where?"}]}),
        json!({"role": "user", "content": "Paris"}),
    ]);
    let (_, second) = json(stack.post("/v1/responses", None, &json!({"model": "s", "input": longer})).await).await;
    assert!(!first["session_id"].as_str().unwrap().is_empty());
    assert_eq!(first["session_id"], second["session_id"], "{first} {second}");
    let other = json!([{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Other topic"}]);
    let (_, third) = json(stack.post("/v1/responses", None, &json!({"model": "s", "input": other})).await).await;
    assert_ne!(first["session_id"], third["session_id"]);
}

#[tokio::test]
async fn bad_input_is_a_4xx_in_openai_shape_naming_the_param() {
    let llm = ScriptedLlm::start(weather_vendor).await;
    let options = Options { configure: Box::new(|config| config.max_body_bytes = 4096), ..Options::default() };
    let stack = Stack::start(llm, options).await;
    let cases = [
        (json!({"model": "s"}), 400, "input"),
        (json!({"model": "s", "input": {"role": "user"}}), 400, "input"),
        (json!({"model": "s", "input": "x", "tools": [{"type": "file_search"}]}), 400, "tools[0].type"),
        (
            json!({"model": "s", "input": [{"type": "function_call_output", "call_id": "c", "output": "r"}]}),
            400,
            "input[0].call_id",
        ),
        (
            json!({"model": "s", "input": [{"role": "user", "content": [{"type": "input_text", "text": "see"},
                {"type": "input_image", "image_url": "http://example.com/a.png"}]}]}),
            400,
            "input[0].content[1].image_url",
        ),
        (json!({"model": "s", "input": "x", "tools": [{"type": "function", "name": "a\u{0}b"}]}), 400, "tools[0].name"),
        (json!({"model": "s", "input": "x", "temperature": "hot"}), 400, "temperature"),
        (
            json!({"model": "s", "tools": [weather_tool()], "input": [{"role": "user", "content": "Weather?"},
                {"type": "function_call", "call_id": "c\u{0}1", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c\u{0}1", "output": "18C"}]}),
            400,
            "input[1].call_id",
        ),
        (json!({"model": "s", "input": "x", "previous_response_id": "resp_gone"}), 400, "previous_response_id"),
        (json!({"model": "s", "input": "x".repeat(5000)}), 413, ""),
    ];
    for (body, status, param) in cases {
        let (got, error) = json(stack.post("/v1/responses", None, &body).await).await;
        assert_eq!(got, status, "{body}: {error}");
        assert_eq!(error["error"]["param"].as_str().unwrap_or_default(), param, "{error}");
        assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
    }
    let response =
        stack.http.post(stack.url("/v1/responses")).header("content-type", "application/json").body("{").send();
    let (status, error) = json(response.await.unwrap()).await;
    assert_eq!(status, 400, "{error}");
    assert!(error["error"]["message"].is_string());
    assert!(stack.llm.requests().is_empty(), "no refused request reached the vendor");
}

#[tokio::test]
async fn with_redis_a_stored_response_is_continued_and_retrieved_through_another_replica() {
    let prefix = switchyard_testkit::KeyPrefix::new("edge_responses");
    let redis = |config: &mut switchyard_edge::EdgeConfig, prefix: &str| {
        config.redis_url = Some(switchyard_kit::Secret::new(switchyard_testkit::redis_url()));
        config.redis_prefix = prefix.to_owned();
    };
    let options = Options {
        configure: Box::new({
            let prefix = prefix.to_string();
            move |config| redis(config, &prefix)
        }),
        ..Options::default()
    };
    let stack = Stack::start(ScriptedLlm::start(weather_vendor).await, options).await;
    // A second edge replica in front of the same services, sharing the Redis.
    let urls = switchyard_edge::clients::UpstreamUrls {
        router: stack.router.url(),
        sessions: stack.sessions.url(),
        triggers: stack.triggers.url(),
        mcp_gateway: "http://127.0.0.1:1".into(),
    };
    let mut config = switchyard_edge::EdgeConfig::open(common::loopback(), &urls);
    redis(&mut config, &prefix);
    let other = switchyard_edge::EdgeServer::bind(&config).await.expect("the second edge binds");
    let other = switchyard_testkit::Served::spawn(other.local_addr(), |stop| other.serve(stop));

    let first = json!({"model": "switchyard", "input": "Weather in Paris?", "tools": [weather_tool()]});
    let (status, first) = json(stack.post("/v1/responses", None, &first).await).await;
    assert_eq!(status, 200, "{first}");
    let id = first["id"].as_str().unwrap();
    let call_id = first["output"][0]["call_id"].as_str().unwrap();
    let got = stack.http.get(format!("{}/v1/responses/{id}", other.url())).send().await.unwrap();
    let (status, got) = json(got).await;
    assert_eq!((status, &got), (200, &first), "the other replica returns it");
    let next = json!({"model": "switchyard", "previous_response_id": id, "tools": [weather_tool()], "stream": true,
        "input": [{"type": "function_call_output", "call_id": call_id, "output": "18C"}]});
    let streamed = stack.http.post(format!("{}/v1/responses", other.url())).json(&next).send().await.unwrap();
    let streamed = events(streamed).await;
    let completed = &streamed.last().unwrap().1["response"];
    assert_eq!(completed["output"][0]["content"][0]["text"], "It is 18C in Paris.", "{completed}");
    assert_eq!(completed["session_id"], first["session_id"], "the same Switchyard session");
    // The streamed answer was kept too, before response.completed reached the client.
    let path = format!("/v1/responses/{}", completed["id"].as_str().unwrap());
    let (status, again) = json(stack.get(&path, None).await).await;
    assert_eq!((status, &again["output"]), (200, &completed["output"]));
}

#[tokio::test]
async fn a_stream_that_fails_midway_ends_with_response_failed() {
    let llm = ScriptedLlm::start(|_| Reply::text("Partial answer").fail_mid_stream("vendor fell over")).await;
    let stack = Stack::start(llm, Options::default()).await;
    let body = json!({"model": "switchyard-direct", "input": "hi", "stream": true});
    let text = events(stack.post("/v1/responses", None, &body).await).await;
    let (name, data) = text.last().unwrap();
    assert_eq!(name, "response.failed", "{text:?}");
    assert_eq!(data["type"], "response.failed");
    assert_eq!(data["sequence_number"], text.len() - 1, "numbered after the events before it");
    assert_eq!(data["response"]["status"], "failed");
    assert!(data["response"]["error"]["message"].is_string(), "{data}");
    assert!(!text.iter().any(|(name, _)| name == "response.completed"), "a failed answer does not complete");
    // Nothing was kept of it.
    let path = format!("/v1/responses/{}", data["response"]["id"].as_str().unwrap());
    assert_eq!(stack.get(&path, None).await.status(), 404);
}

#[tokio::test]
async fn the_openai_python_sdk_runs_its_tool_loop_on_an_anthropic_wire_model() {
    let options = Options {
        auth: Auth::Closed { jwks_file: None },
        configure_router: Box::new(|config| {
            // The scripted vendor serves Anthropic's wire at its root, OpenAI's under /v1.
            let root = config.providers.openai_base_url.clone().unwrap_or_default();
            config.providers.anthropic_base_url = Some(root.trim_end_matches("/v1").to_owned());
            config.providers.anthropic_api_key = Some(switchyard_kit::Secret::new("sk-ant-edge-test"));
            config.default_model = "anthropic/claude-test".parse().expect("model");
        }),
        ..Options::default()
    };
    let stack = Stack::start(ScriptedLlm::start(weather_vendor).await, options).await;
    let summary = sdk_check(&stack).await;
    assert_eq!(summary["plain"]["answer"], "It is 18C and sunny in Paris.", "{summary}");
    let asked = stack.llm.requests();
    assert_eq!(asked.len(), 4, "two round trips, nothing for the refused requests: {asked:?}");
    for request in &asked {
        assert_eq!(request.wire, switchyard_testkit::llm::Wire::Anthropic);
        assert_eq!(request.tool_names(), ["get_weather"], "{:?}", request.body);
    }
    // The instructions reached the model as its system prompt.
    assert!(asked[0].body["system"].to_string().contains("weather assistant"), "{}", asked[0].body);
    // The second turn of each round trip: the call as a tool_use block, its output as the
    // tool_result answering it.
    for answer in [&asked[1], &asked[3]] {
        let messages = answer.messages();
        let result = &messages[messages.len() - 1]["content"][0];
        assert_eq!(result["type"], "tool_result", "{result}");
        let call = messages[messages.len() - 2]["content"]
            .as_array()
            .unwrap()
            .iter()
            .find(|block| block["type"] == "tool_use")
            .cloned()
            .unwrap();
        assert_eq!(call["name"], "get_weather");
        assert_eq!(call["input"], json!({"city": "Paris"}));
        assert_eq!(call["id"], result["tool_use_id"]);
    }
}
