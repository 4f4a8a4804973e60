//! Falling back across models: the first model's provider fails or is missing, the next answers.

use futures::StreamExt;
use switchyard_llm::{
    ChatRequest, ContentPart, ErrorKind, Image, Message, ModelRef, ProviderConfig, Providers, ResponseFormat,
    StreamEvent,
};
use switchyard_testkit::llm::{Reply, ScriptedLlm, Wire};

use crate::support::{Vendor, question};

/// `openai` answering 503 (no retries, to keep it quick) and `anthropic` answering "from claude".
async fn openai_down_anthropic_up() -> (ScriptedLlm, Providers) {
    let server = ScriptedLlm::start(|recorded| match recorded.wire {
        Wire::OpenAi => Reply::error(503, "upstream unavailable"),
        Wire::Anthropic => Reply::text("from claude"),
    })
    .await;
    let mut providers = Providers::default();
    providers.insert(Vendor::OpenAi.provider(ProviderConfig { max_retries: 0, ..Vendor::OpenAi.config(&server) }));
    providers.insert(Vendor::Anthropic.on(&server));
    (server, providers)
}

fn models(names: &[&str]) -> Vec<ModelRef> {
    names.iter().map(|name| name.parse().unwrap()).collect()
}

#[tokio::test]
async fn the_next_model_answers_when_the_first_fails() {
    let (server, providers) = openai_down_anthropic_up().await;
    let order = models(&["nowhere/model-0", "openai/gpt-test", "anthropic/claude-test"]);
    let answered = providers.complete_with_fallback(&order, question("hi")).await.unwrap();
    assert_eq!(answered.model.to_string(), "anthropic/claude-test");
    assert_eq!(answered.output.content, "from claude");
    let failed: Vec<_> = answered.failed.iter().map(|f| (f.model.to_string(), f.error.kind)).collect();
    assert_eq!(
        failed,
        [("nowhere/model-0".to_owned(), ErrorKind::NotConfigured), ("openai/gpt-test".to_owned(), ErrorKind::Server)]
    );
    // Each provider was asked for its own model by its vendor name.
    let asked: Vec<_> = server.requests().iter().map(|r| (r.wire, r.model().unwrap_or_default().to_owned())).collect();
    assert_eq!(asked, [(Wire::OpenAi, "gpt-test".to_owned()), (Wire::Anthropic, "claude-test".to_owned())]);
}

#[tokio::test]
async fn a_stream_falls_back_while_opening() {
    let (_server, providers) = openai_down_anthropic_up().await;
    let order = models(&["openai/gpt-test", "anthropic/claude-test"]);
    let answered = providers.stream_with_fallback(&order, question("hi")).await.unwrap();
    assert_eq!(answered.model.to_string(), "anthropic/claude-test");
    assert_eq!(answered.failed.len(), 1);
    assert!(answered.failed[0].error.message.contains("upstream unavailable"));
    let events: Vec<_> = answered.output.collect().await;
    match events.last() {
        Some(Ok(StreamEvent::Done(completion))) => assert_eq!(completion.content, "from claude"),
        other => panic!("the stream did not finish: {other:?}"),
    }
}

#[tokio::test]
async fn when_every_model_fails_each_is_listed() {
    let server = ScriptedLlm::start(|recorded| match recorded.wire {
        Wire::OpenAi => Reply::error(500, "openai broke"),
        Wire::Anthropic => Reply::error(529, "Overloaded"),
    })
    .await;
    let mut providers = Providers::default();
    for vendor in [Vendor::OpenAi, Vendor::Anthropic] {
        providers.insert(vendor.provider(ProviderConfig { max_retries: 0, ..vendor.config(&server) }));
    }
    let order = models(&["openai/gpt-test", "anthropic/claude-test", "local/llama"]);
    let failed = providers.complete_with_fallback(&order, question("hi")).await.unwrap_err();
    assert_eq!(failed.failures.len(), 3);
    let shown = failed.to_string();
    for expected in [
        "openai/gpt-test: HTTP 500: openai broke",
        "anthropic/claude-test: HTTP 529: Overloaded",
        "local/llama: no provider `local` is configured",
    ] {
        assert!(shown.contains(expected), "`{expected}` missing from: {shown}");
    }
    let failed = providers.stream_with_fallback(&order, question("hi")).await.unwrap_err();
    assert_eq!(failed.failures.len(), 3);
    assert_eq!(failed.failures[1].error.kind, ErrorKind::Server);
    let none = providers.complete_with_fallback(&[], question("hi")).await.unwrap_err();
    assert_eq!(none.to_string(), "no model to try");
}

#[tokio::test]
async fn a_request_every_model_refuses_is_the_callers_mistake_not_an_outage() {
    let (server, providers) = openai_down_anthropic_up().await;
    let order = models(&["nowhere/model-0", "openai/gpt-test", "anthropic/claude-test"]);
    let picture = ContentPart::Image(Image::url("ftp://example.com/a.png"));
    let request = ChatRequest { messages: vec![Message::user_parts(vec![picture])], ..question("") };
    let failed = providers.complete_with_fallback(&order, request).await.unwrap_err();
    let refusal = failed.refusal().expect("every model tried refused it");
    assert_eq!(refusal.kind, ErrorKind::Unsupported);
    assert_eq!(refusal.field.as_deref(), Some("messages[0].parts[0]"));
    assert!(server.requests().is_empty());

    // One model down, the other refusing: an outage, which the caller cannot fix.
    let array_schema = ResponseFormat::JsonSchema {
        name: "numbers".into(),
        description: String::new(),
        schema: serde_json::json!({"type": "array"}),
        strict: false,
    };
    let request = ChatRequest { response_format: Some(array_schema), ..question("Numbers?") };
    let failed = providers.complete_with_fallback(&order, request).await.unwrap_err();
    let kinds: Vec<_> = failed.failures.iter().map(|failure| failure.error.kind).collect();
    assert_eq!(kinds, [ErrorKind::NotConfigured, ErrorKind::Server, ErrorKind::Unsupported]);
    assert!(failed.refusal().is_none());
}
