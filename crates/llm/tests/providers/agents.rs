//! A caller's own agent loop on both wires: images, several tool calls and their results, a
//! named tool choice, parallel tool calls, a JSON response format, and tool calls streamed as
//! argument deltas.

use serde_json::json;
use switchyard_llm::{
    ChatRequest, Completion, ContentPart, ErrorKind, FinishReason, Image, Message, ResponseFormat, StreamEvent,
    ToolCall, ToolChoice, ToolSpec,
};
use switchyard_testkit::llm::{Reply, ScriptedLlm};

use crate::support::{MODES, Mode, Vendor, ask, question, streamed_text, weather_tool};

for_each_vendor!(
    deltas_of_several_calls_join_to_each_call,
    a_call_without_arguments_streams_what_done_carries,
    a_malformed_image_url_is_refused_naming_the_field_before_any_call
);

const PHOTO_URL: &str = "https://example.com/photo.jpg";
const CHART_DATA_URL: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUg==";

fn time_tool() -> ToolSpec {
    ToolSpec {
        name: "get_time".into(),
        description: "Current time in a zone".into(),
        parameters: json!({"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}),
    }
}

/// A conversation with images, an assistant turn of two tool calls and their two results (one
/// an error, one carrying an image), and every tool option set.
fn an_agent_turn() -> ChatRequest {
    ChatRequest {
        model: "test-model".into(),
        system: Some("You are terse.".into()),
        messages: vec![
            Message::user_parts(vec![
                ContentPart::Text("Where was this taken, and what time is it there?".into()),
                ContentPart::Image(Image { url: PHOTO_URL.into(), detail: Some("low".into()) }),
            ]),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![
                    ToolCall {
                        id: "call_1".into(),
                        name: "get_weather".into(),
                        arguments: r#"{"city":"Oslo"}"#.into(),
                    },
                    ToolCall { id: "call_2".into(), name: "get_time".into(), arguments: r#"{"zone":"Mars"}"#.into() },
                ],
            },
            Message::Tool {
                call_id: "call_1".into(),
                content: "4°C, snow".into(),
                is_error: false,
                parts: vec![ContentPart::Image(Image::url(CHART_DATA_URL))],
            },
            Message::tool_result("call_2", "unknown zone `Mars`", true),
        ],
        tools: vec![weather_tool(), time_tool()],
        tool_choice: ToolChoice::Function("get_time".into()),
        parallel_tool_calls: Some(false),
        response_format: None,
        max_tokens: Some(300),
        temperature: None,
        stop: vec!["END".into(), "STOP".into()],
        ..ChatRequest::default()
    }
}

#[tokio::test]
async fn openai_agent_turn_body() {
    let server = ScriptedLlm::start(|_| Reply::text("ok")).await;
    let provider = Vendor::OpenAi.on(&server);
    for mode in MODES {
        ask(provider.as_ref(), an_agent_turn(), mode).await.unwrap();
    }
    for recorded in server.requests() {
        let body = &recorded.body;
        assert_eq!(
            body["messages"],
            json!([
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": [
                    {"type": "text", "text": "Where was this taken, and what time is it there?"},
                    {"type": "image_url", "image_url": {"url": PHOTO_URL, "detail": "low"}},
                ]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{\"zone\":\"Mars\"}"}},
                ]},
                // No error flag in this API: the content says it. The results follow the calls
                // directly; a result's image, which only a user message may carry, after them.
                {"role": "tool", "tool_call_id": "call_1", "content": "4°C, snow"},
                {"role": "tool", "tool_call_id": "call_2", "content": "unknown zone `Mars`"},
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": CHART_DATA_URL}}]},
            ]),
            "{body}"
        );
        assert_eq!(body["tool_choice"], json!({"type": "function", "function": {"name": "get_time"}}));
        assert_eq!(body["parallel_tool_calls"], false);
        assert_eq!(body["stop"], json!(["END", "STOP"]));
        assert!(body.get("response_format").is_none());
    }
}

#[tokio::test]
async fn anthropic_agent_turn_body() {
    let server = ScriptedLlm::start(|_| Reply::text("ok")).await;
    let provider = Vendor::Anthropic.on(&server);
    for mode in MODES {
        ask(provider.as_ref(), an_agent_turn(), mode).await.unwrap();
    }
    for recorded in server.requests() {
        let body = &recorded.body;
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [
                    {"type": "text", "text": "Where was this taken, and what time is it there?"},
                    {"type": "image", "source": {"type": "url", "url": PHOTO_URL}},
                ]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Oslo"}},
                    {"type": "tool_use", "id": "call_2", "name": "get_time", "input": {"zone": "Mars"}},
                ]},
                // Every result of the turn in one user message, the error flagged, the image inside.
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": [
                        {"type": "text", "text": "4°C, snow"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgoAAAANSUhEUg=="}},
                    ]},
                    {"type": "tool_result", "tool_use_id": "call_2", "content": "unknown zone `Mars`", "is_error": true},
                ]},
            ]),
            "{body}"
        );
        assert_eq!(body["tool_choice"], json!({"type": "tool", "name": "get_time", "disable_parallel_tool_use": true}));
        assert_eq!(body["stop_sequences"], json!(["END", "STOP"]));
        assert_eq!(recorded.tool_names(), ["get_weather", "get_time"]);
    }

    // Parallel calls allowed, and `none`, which takes no other field.
    let request = ChatRequest { tool_choice: ToolChoice::Auto, parallel_tool_calls: Some(true), ..an_agent_turn() };
    provider.complete(request).await.unwrap();
    let last = server.requests().pop().unwrap();
    assert_eq!(last.body["tool_choice"], json!({"type": "auto", "disable_parallel_tool_use": false}));
    let request = ChatRequest { tool_choice: ToolChoice::None, ..an_agent_turn() };
    provider.complete(request).await.unwrap();
    assert_eq!(server.requests().pop().unwrap().body["tool_choice"], json!({"type": "none"}));
}

#[tokio::test]
async fn openai_response_format_goes_as_is() {
    let server = ScriptedLlm::start(|_| Reply::text(r#"{"city":"Oslo"}"#)).await;
    let provider = Vendor::OpenAi.on(&server);
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    let formats = [
        (ResponseFormat::JsonObject, json!({"type": "json_object"})),
        (
            ResponseFormat::JsonSchema {
                name: "place".into(),
                description: String::new(),
                schema: schema.clone(),
                strict: true,
            },
            json!({"type": "json_schema", "json_schema": {"name": "place", "schema": schema, "strict": true}}),
        ),
    ];
    for (format, wire) in formats {
        let request = ChatRequest { response_format: Some(format), ..question("Where?") };
        let completion = provider.complete(request).await.unwrap();
        assert_eq!(completion.content, r#"{"city":"Oslo"}"#);
        let recorded = server.requests().pop().unwrap();
        assert_eq!(recorded.body["response_format"], wire);
        assert_eq!(recorded.tool_names(), ["get_weather"], "the tools are left as they are");
    }
}

/// The answer tool's call, with every stream event, in both modes.
async fn answered_by_tool(
    provider: &dyn switchyard_llm::Provider,
    request: &ChatRequest,
) -> Vec<(Completion, Vec<StreamEvent>)> {
    let mut answers = Vec::new();
    for mode in MODES {
        answers.push(ask(provider, request.clone(), mode).await.unwrap());
    }
    answers
}

#[tokio::test]
async fn anthropic_response_format_is_met_by_a_forced_tool_whose_input_is_the_answer() {
    let answer = r#"{"city": "Oslo", "country": "Norway"}"#;
    let server = ScriptedLlm::start(move |recorded| {
        // The model calls whichever tool it is forced to: the answer tool.
        let forced = recorded.body["tool_choice"]["name"].as_str().unwrap_or("json_answer").to_owned();
        Reply::tool_call(forced, answer).chunk_size(4)
    })
    .await;
    let provider = Vendor::Anthropic.on(&server);
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    let request = ChatRequest {
        tools: Vec::new(),
        response_format: Some(ResponseFormat::JsonSchema {
            name: "place".into(),
            description: "Where the photo was taken".into(),
            schema: schema.clone(),
            strict: true,
        }),
        ..question("Where?")
    };
    for (completion, events) in answered_by_tool(provider.as_ref(), &request).await {
        assert_eq!(serde_json::from_str::<serde_json::Value>(&completion.content).unwrap()["country"], "Norway");
        assert!(completion.tool_calls.is_empty(), "{completion:?}");
        assert_eq!(completion.finish_reason, FinishReason::Stop);
        // Streamed, the answer is text as it comes, and no tool call shows.
        if !events.is_empty() {
            assert_eq!(streamed_text(&events), answer);
            assert!(events.len() > 5 && events.iter().all(|event| matches!(event, StreamEvent::Text(_))), "{events:?}");
        }
    }
    for recorded in server.requests() {
        assert_eq!(
            recorded.body["tools"],
            json!([{"name": "place", "description": "Where the photo was taken", "input_schema": schema}])
        );
        assert_eq!(recorded.body["tool_choice"], json!({"type": "tool", "name": "place"}));
    }

    // `json_object`, beside the caller's tool: one of them must be called.
    let request = ChatRequest { response_format: Some(ResponseFormat::JsonObject), ..question("Where?") };
    let (completion, _) = ask(provider.as_ref(), request, Mode::Stream).await.unwrap();
    assert_eq!(completion.content, answer);
    let recorded = server.requests().pop().unwrap();
    assert_eq!(recorded.tool_names(), ["get_weather", "json_answer"]);
    assert_eq!(recorded.body["tool_choice"], json!({"type": "any"}));
}

#[tokio::test]
async fn anthropic_response_format_beside_tools_still_returns_the_real_tool_calls() {
    let server = ScriptedLlm::start(|_| Reply::tool_call("get_weather", r#"{"city":"Oslo"}"#)).await;
    let provider = Vendor::Anthropic.on(&server);
    let request = ChatRequest { response_format: Some(ResponseFormat::JsonObject), ..question("Weather?") };
    for (completion, _) in answered_by_tool(provider.as_ref(), &request).await {
        assert_eq!(completion.content, "");
        assert_eq!(completion.tool_calls.len(), 1);
        assert_eq!(completion.finish_reason, FinishReason::ToolCalls);
    }
}

#[tokio::test]
async fn anthropic_response_format_that_cannot_be_met_is_refused() {
    let server = ScriptedLlm::start(|_| Reply::text("never")).await;
    let provider = Vendor::Anthropic.on(&server);
    let not_an_object = ResponseFormat::JsonSchema {
        name: "numbers".into(),
        description: String::new(),
        schema: json!({"type": "array", "items": {"type": "number"}}),
        strict: false,
    };
    let clash = ResponseFormat::JsonSchema {
        name: "get_weather".into(),
        description: String::new(),
        schema: json!({"type": "object"}),
        strict: false,
    };
    for (format, field) in [(not_an_object, "response_format.json_schema.schema"), (clash, "response_format")] {
        for mode in MODES {
            let request = ChatRequest { response_format: Some(format.clone()), ..question("Numbers?") };
            let error = ask(provider.as_ref(), request, mode).await.unwrap_err();
            assert_eq!(error.kind, ErrorKind::Unsupported, "{error}");
            assert_eq!(error.field.as_deref(), Some(field), "{error}");
        }
    }
    assert!(server.requests().is_empty(), "refused before any call");
}

async fn deltas_of_several_calls_join_to_each_call(vendor: Vendor) {
    let server = ScriptedLlm::start(|_| {
        Reply::text("Checking both.")
            .and_tool_call("get_weather", r#"{"city":"Paris"}"#)
            .and_tool_call("get_time", r#"{"zone":"Europe/Paris"}"#)
            .chunk_size(3)
    })
    .await;
    let provider = vendor.on(&server);
    let (completion, events) = ask(provider.as_ref(), question("Weather and time?"), Mode::Stream).await.unwrap();
    let mut joined = vec![String::new(); completion.tool_calls.len()];
    let mut firsts = Vec::new();
    for event in &events {
        match event {
            StreamEvent::ToolCallDelta { index, id, name, arguments } => {
                let index = *index as usize;
                if let (Some(id), Some(name)) = (id, name) {
                    assert!(joined[index].is_empty(), "the first piece of call {index} comes first: {events:?}");
                    firsts.push((index, id.clone(), name.clone()));
                }
                joined[index].push_str(arguments);
            }
            StreamEvent::ToolCallStarted { .. } | StreamEvent::Text(_) => {}
            StreamEvent::Done(_) => unreachable!(),
        }
    }
    let calls: Vec<_> = completion
        .tool_calls
        .iter()
        .enumerate()
        .map(|(index, call)| (index, call.id.clone(), call.name.clone()))
        .collect();
    assert_eq!(firsts, calls, "one first piece per call, with its id and name, in order");
    let arguments: Vec<_> = completion.tool_calls.iter().map(|call| call.arguments.clone()).collect();
    assert_eq!(joined, arguments);
    assert_eq!(arguments, [r#"{"city":"Paris"}"#, r#"{"zone":"Europe/Paris"}"#]);
    // Each call's pieces come after its start: call 0's all before call 1's first.
    let order: Vec<u32> = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::ToolCallDelta { index, .. } => Some(*index),
            _ => None,
        })
        .collect();
    assert!(order.windows(2).all(|pair| pair[0] <= pair[1]), "{order:?}");
}

async fn a_call_without_arguments_streams_what_done_carries(vendor: Vendor) {
    let server = ScriptedLlm::start(|_| Reply::tool_call("list_cities", "")).await;
    let provider = vendor.on(&server);
    let (completion, _) = ask(provider.as_ref(), question("Which cities?"), Mode::Complete).await.unwrap();
    assert!(completion.tool_calls[0].parsed_arguments().unwrap().is_empty(), "{completion:?}");
    let (completion, events) = ask(provider.as_ref(), question("Which cities?"), Mode::Stream).await.unwrap();
    let joined: String = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::ToolCallDelta { arguments, .. } => Some(arguments.as_str()),
            _ => None,
        })
        .collect();
    let [call] = completion.tool_calls.as_slice() else { panic!("one call: {completion:?}") };
    assert_eq!(joined, call.arguments, "{events:?}");
    assert!(call.parsed_arguments().unwrap().is_empty());
}

async fn a_malformed_image_url_is_refused_naming_the_field_before_any_call(vendor: Vendor) {
    let server = ScriptedLlm::start(|_| Reply::text("never")).await;
    let provider = vendor.on(&server);
    let bad =
        ["file:///etc/passwd", "data:text/plain;base64,aGk=", "data:image/png,not-base64", "data:image/png;base64,"];
    for url in bad {
        for mode in MODES {
            let request = ChatRequest {
                messages: vec![
                    Message::user("first"),
                    Message::user_parts(vec![ContentPart::Text("look".into()), ContentPart::Image(Image::url(url))]),
                ],
                ..question("")
            };
            let error = ask(provider.as_ref(), request, mode).await.unwrap_err();
            assert_eq!(error.kind, ErrorKind::Unsupported, "{url}: {error}");
            assert_eq!(error.field.as_deref(), Some("messages[1].parts[1]"), "{url}: {error}");
            assert!(!error.kind.is_retryable());
        }
    }
    assert!(server.requests().is_empty(), "refused before any call");
}
