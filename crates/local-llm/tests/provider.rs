//! The provider against the real model: completion, streaming, limits, concurrency,
//! cancellation, tool calls.

mod common;

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;
use switchyard_llm::{
    ChatRequest, ContentPart, ErrorKind, FinishReason, Image, Message, Provider, ResponseFormat, StreamEvent, ToolCall,
    ToolChoice, ToolSpec,
};
use switchyard_local_llm::{
    LocalOptions, LocalProvider, MODEL_NAME, NO_TOOL_CALL_PREFIX, PROVIDER_NAME, is_no_tool_call,
};

fn provider() -> LocalProvider {
    LocalProvider::with_options(common::model(), LocalOptions { seed: Some(7), ..LocalOptions::default() })
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest { model: MODEL_NAME.into(), messages: vec![Message::user(text)], ..ChatRequest::default() }
}

async fn collect(provider: &LocalProvider, request: ChatRequest) -> (Vec<String>, switchyard_llm::Completion) {
    let mut stream = provider.stream(request).await.expect("stream");
    let mut texts = Vec::new();
    while let Some(event) = stream.next().await {
        match event.expect("event") {
            StreamEvent::Text(text) => texts.push(text),
            StreamEvent::ToolCallStarted { .. } | StreamEvent::ToolCallDelta { .. } => {}
            StreamEvent::Done(completion) => {
                assert!(stream.next().await.is_none(), "Done is the last event");
                return (texts, completion);
            }
        }
    }
    panic!("the stream ended without Done");
}

#[tokio::test]
async fn complete_answers_in_text_with_usage() {
    let provider = provider();
    assert_eq!(provider.name(), PROVIDER_NAME);
    // (The model's own default system prompt is used; llama.cpp answers this prompt the
    // same way, "The capital of France is Paris.")
    let completion = provider.complete(ask("Which city is the capital of France?")).await.expect("complete");
    assert!(completion.content.contains("Paris"), "{:?}", completion.content);
    assert_eq!(completion.finish_reason, FinishReason::Stop);
    assert_eq!(completion.model, MODEL_NAME);
    assert!(completion.usage.prompt_tokens > 10 && completion.usage.completion_tokens > 0, "{:?}", completion.usage);
    assert!(completion.tool_calls.is_empty());
}

#[tokio::test]
async fn stream_yields_text_pieces_then_done_with_the_same_text() {
    let provider = provider();
    let (texts, completion) = collect(&provider, ask("Write two sentences about the sea.")).await;
    assert!(texts.len() > 3, "{texts:?}");
    assert_eq!(texts.concat(), completion.content);
    assert!(!completion.content.trim().is_empty());
}

#[tokio::test]
async fn max_tokens_and_temperature_are_honoured() {
    let provider = provider();
    let request = ChatRequest { max_tokens: Some(5), ..ask("Tell me a long story about a dragon.") };
    let completion = provider.complete(request).await.expect("complete");
    assert_eq!(completion.finish_reason, FinishReason::Length);
    assert_eq!(completion.usage.completion_tokens, 5);

    // Sampling with a fixed seed is reproducible; greedy is too, and differs from sampling
    // at a high temperature.
    let sampled = ChatRequest { max_tokens: Some(12), temperature: Some(1.5), ..ask("Name a colour.") };
    let first = provider.complete(sampled.clone()).await.expect("complete");
    let second = provider.complete(sampled).await.expect("complete");
    assert_eq!(first.content, second.content);
    assert!(!first.content.is_empty());
}

#[tokio::test]
async fn stop_strings_end_the_answer_before_them() {
    let provider = provider();
    let free = provider.complete(ask("Which city is the capital of France?")).await.expect("complete");
    let stop = "Paris".to_owned();
    assert!(free.content.contains(&stop), "{:?}", free.content);
    let request = ChatRequest { stop: vec![stop.clone()], ..ask("Which city is the capital of France?") };
    let (texts, completion) = collect(&provider, request).await;
    assert_eq!(completion.finish_reason, FinishReason::Stop);
    assert!(!completion.content.contains(&stop), "{:?}", completion.content);
    assert!(free.content.starts_with(&completion.content), "{:?} / {:?}", completion.content, free.content);
    assert_eq!(texts.concat(), completion.content);
}

#[tokio::test]
async fn other_models_are_rejected() {
    let provider = provider();
    let request = ChatRequest { model: "gpt-4o".into(), ..ask("hi") };
    let err = provider.complete(request).await.expect_err("unknown model");
    assert_eq!(err.kind, ErrorKind::Rejected);
    assert!(err.message.contains("gpt-4o") && err.message.contains(MODEL_NAME), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_generations_both_finish() {
    let provider = std::sync::Arc::new(provider());
    let requests = [ask("Describe a cat."), ask("Describe a dog.")];
    let runs = requests.map(|request| {
        let provider = provider.clone();
        tokio::spawn(async move { collect(&provider, ChatRequest { max_tokens: Some(40), ..request }).await })
    });
    for run in runs {
        let (texts, completion) = run.await.expect("task");
        assert!(!completion.content.is_empty());
        assert_eq!(texts.concat(), completion.content);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_stream_stops_its_generation() {
    // One generation at a time: the second request can only start once the first stopped.
    let provider =
        LocalProvider::with_options(common::model(), LocalOptions { max_concurrent: 1, ..LocalOptions::default() });
    let long = ChatRequest { max_tokens: Some(1500), ..ask("Write a very long essay about the history of Europe.") };
    let mut stream = provider.stream(long).await.expect("stream");
    let mut pieces = 0;
    while pieces < 3 {
        if let Some(Ok(StreamEvent::Text(_))) = stream.next().await {
            pieces += 1;
        }
    }
    drop(stream);
    let started = Instant::now();
    let next = provider.complete(ChatRequest { max_tokens: Some(3), ..ask("Hi") }).await.expect("complete");
    // 1500 tokens would take many seconds; a stopped generation frees the permit at once.
    assert!(started.elapsed() < Duration::from_secs(5), "waited {:?}", started.elapsed());
    assert!(next.usage.completion_tokens <= 3);
}

fn calculator_tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "echo".into(),
            description: "Repeats a message back.".into(),
            parameters: json!({"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}),
        },
        ToolSpec {
            name: "add".into(),
            description: "Adds two numbers.".into(),
            parameters: json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
        },
    ]
}

#[tokio::test]
async fn a_tool_is_chosen_among_the_candidates_with_schema_valid_arguments() {
    let provider = provider();
    let request = ChatRequest { tools: calculator_tools(), tool_choice: ToolChoice::Required, ..ask("add 2 and 3") };
    let mut stream = provider.stream(request).await.expect("stream");
    let mut started = None;
    let mut deltas = Vec::new();
    let mut done = None;
    while let Some(event) = stream.next().await {
        match event.expect("event") {
            StreamEvent::ToolCallStarted { id, name } => started = Some((id, name)),
            StreamEvent::ToolCallDelta { index, id, name, arguments } => deltas.push((index, id, name, arguments)),
            StreamEvent::Done(completion) => done = Some(completion),
            StreamEvent::Text(text) => panic!("unexpected text {text:?}"),
        }
    }
    let completion = done.expect("done");
    assert_eq!(completion.finish_reason, FinishReason::ToolCalls);
    let [call] = completion.tool_calls.as_slice() else { panic!("one call: {completion:?}") };
    assert_eq!(call.name, "add", "{call:?}");
    assert_eq!(started, Some((call.id.clone(), call.name.clone())));
    assert_eq!(deltas, [(0, Some(call.id.clone()), Some(call.name.clone()), call.arguments.clone())]);
    let arguments = call.parsed_arguments().expect("JSON object");
    assert_eq!(arguments.get("a").and_then(|v| v.as_f64()), Some(2.0), "{arguments:?}");
    assert_eq!(arguments.get("b").and_then(|v| v.as_f64()), Some(3.0), "{arguments:?}");

    // A string argument, with `auto`.
    let request = ChatRequest { tools: calculator_tools(), ..ask("Please echo the message: good morning") };
    let completion = provider.complete(request).await.expect("complete");
    let [call] = completion.tool_calls.as_slice() else { panic!("one call: {completion:?}") };
    assert_eq!(call.name, "echo");
    let message = call.parsed_arguments().expect("JSON")["message"].as_str().map(str::to_lowercase);
    assert!(message.as_deref().is_some_and(|m| m.contains("good morning")), "{message:?}");
}

#[tokio::test]
async fn after_a_tool_result_the_model_answers_in_text() {
    let provider = provider();
    let call = ToolCall { id: "call_1".into(), name: "add".into(), arguments: r#"{"a": 2, "b": 3}"#.into() };
    let request = ChatRequest {
        tools: calculator_tools(),
        messages: vec![
            Message::user("add 2 and 3"),
            Message::Assistant { content: String::new(), tool_calls: vec![call] },
            Message::tool_result("call_1", "5", false),
        ],
        max_tokens: Some(40),
        ..ask("")
    };
    let completion = provider.complete(request).await.expect("complete");
    assert!(completion.tool_calls.is_empty(), "{completion:?}");
    assert!(completion.content.contains('5'), "{:?}", completion.content);
    assert!(!is_no_tool_call(&completion));
}

#[tokio::test]
async fn when_no_valid_call_can_be_made_the_answer_says_so() {
    let provider = provider();
    let tools = vec![ToolSpec {
        name: "tag_items".into(),
        description: "Tags a list of items.".into(),
        parameters: json!({"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}}}, "required": ["items"]}),
    }];
    let request = ChatRequest { tools, ..ask("Tag apples and pears.") };
    let completion = provider.complete(request).await.expect("complete");
    assert!(is_no_tool_call(&completion), "{completion:?}");
    assert!(completion.content.starts_with(NO_TOOL_CALL_PREFIX));
    assert_eq!(completion.finish_reason, FinishReason::Other);
    assert!(completion.tool_calls.is_empty());

    // No tools, or tool_choice none: plain text.
    let request = ChatRequest {
        tools: calculator_tools(),
        tool_choice: ToolChoice::None,
        max_tokens: Some(10),
        ..ask("add 2 and 3")
    };
    let completion = provider.complete(request).await.expect("complete");
    assert!(completion.tool_calls.is_empty() && !is_no_tool_call(&completion));
}

fn unsupported(result: Result<switchyard_llm::Completion, switchyard_llm::ProviderError>) -> (String, String) {
    let error = result.expect_err("refused");
    assert_eq!(error.kind, ErrorKind::Unsupported, "{error}");
    (error.field.expect("the field at fault"), error.message)
}

#[tokio::test]
async fn what_the_local_model_cannot_serve_is_refused_naming_the_field() {
    let provider = provider();
    // Images: it reads text only.
    let picture = ContentPart::Image(Image::url("data:image/png;base64,iVBORw0KGgo="));
    let request = ChatRequest {
        messages: vec![
            Message::user("hi"),
            Message::assistant("hello"),
            Message::user_parts(vec![ContentPart::Text("what is this?".into()), picture]),
        ],
        ..ask("")
    };
    let (field, message) = unsupported(provider.complete(request).await);
    assert_eq!(field, "messages[2].parts[1]");
    assert!(message.contains("image"), "{message}");

    // A JSON answer it cannot promise.
    let request = ChatRequest { response_format: Some(ResponseFormat::JsonObject), ..ask("a JSON object, please") };
    assert_eq!(unsupported(provider.complete(request).await).0, "response_format");

    // A tool call it must make but cannot build (a required array argument).
    let tag = ToolSpec {
        name: "tag_items".into(),
        description: "Tags a list of items.".into(),
        parameters: json!({"type": "object", "properties": {"items": {"type": "array"}}, "required": ["items"]}),
    };
    let request =
        ChatRequest { tools: vec![tag.clone()], tool_choice: ToolChoice::Required, ..ask("Tag apples and pears.") };
    let (field, message) = unsupported(provider.complete(request).await);
    assert_eq!(field, "tools");
    assert!(message.contains("`items`") && message.contains("array"), "{message}");
    let tools = [calculator_tools(), vec![tag]].concat();
    let request =
        ChatRequest { tools, tool_choice: ToolChoice::Function("tag_items".into()), ..ask("Tag apples and pears.") };
    assert_eq!(unsupported(provider.complete(request).await).0, "tools[2].parameters");

    // A named tool that is not among the tools.
    let request =
        ChatRequest { tools: calculator_tools(), tool_choice: ToolChoice::Function("mul".into()), ..ask("2 times 3") };
    assert_eq!(unsupported(provider.complete(request).await).0, "tool_choice");
}

#[tokio::test]
async fn a_named_tool_is_the_one_called() {
    let provider = provider();
    // `echo` is listed first, the likelier pick for this prompt, but `add` is named.
    let request =
        ChatRequest { tools: calculator_tools(), tool_choice: ToolChoice::Function("add".into()), ..ask("echo hello") };
    let completion = provider.complete(request).await.expect("complete");
    let [call] = completion.tool_calls.as_slice() else { panic!("one call: {completion:?}") };
    assert_eq!(call.name, "add");
    assert_eq!(completion.finish_reason, FinishReason::ToolCalls);
}
