//! Every model call is a span in the OpenTelemetry GenAI semantic conventions, read back from an
//! in-memory span exporter after real calls to the scripted vendor (both wire formats, streamed
//! and not): the operation, provider, requested and answering model, token usage and finish
//! reasons; `error.type` on a failure; message content only with
//! `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a panic in a test is the failure report")]

use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use opentelemetry::{Array, Value, trace::TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use switchyard_kit::Secret;
use switchyard_llm::{
    Anthropic, ChatRequest, Message, OpenAi, Provider, ProviderConfig, StreamEvent, telemetry::CAPTURE_CONTENT_ENV,
};
use switchyard_testkit::llm::{Reply, ScriptedLlm};
use tracing_subscriber::layer::SubscriberExt;

/// Spans recorded while `run` makes its calls on this thread.
async fn spans_of<F: Future<Output = ()>>(run: impl FnOnce() -> F) -> Vec<SpanData> {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    // Thread-local: the test's current-thread runtime makes every call on this thread.
    let guard = tracing::subscriber::set_default(subscriber);
    run().await;
    drop(guard);
    provider.force_flush().unwrap();
    exporter.get_finished_spans().unwrap()
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| &kv.value)
}

fn text(span: &SpanData, key: &str) -> String {
    attribute(span, key).map(|v| v.as_str().into_owned()).unwrap_or_else(|| panic!("no {key} on {span:?}"))
}

fn int(span: &SpanData, key: &str) -> i64 {
    match attribute(span, key) {
        Some(Value::I64(value)) => *value,
        other => panic!("{key} is {other:?}, not an integer, on {span:?}"),
    }
}

fn providers(server: &ScriptedLlm) -> Vec<(&'static str, Arc<dyn Provider>)> {
    let config = |url: String| ProviderConfig {
        backoff_initial: Duration::from_millis(10),
        backoff_max: Duration::from_millis(20),
        max_retries: 0,
        ..ProviderConfig::new(url).with_api_key(Some(Secret::new("sk-test-genai")))
    };
    vec![
        ("openai", Arc::new(OpenAi::new(config(server.openai_base_url())).unwrap())),
        ("anthropic", Arc::new(Anthropic::new(config(server.anthropic_base_url())).unwrap())),
    ]
}

fn request() -> ChatRequest {
    ChatRequest {
        model: "test-model".into(),
        system: Some("be brief".into()),
        messages: vec![Message::user("what is 2+2? secret-prompt-text")],
        max_tokens: Some(64),
        ..ChatRequest::default()
    }
}

async fn call(provider: &dyn Provider, stream: bool) {
    if stream {
        let mut events = provider.stream(request()).await.unwrap();
        while let Some(event) = events.next().await {
            if matches!(event.unwrap(), StreamEvent::Done(_)) {
                break;
            }
        }
    } else {
        provider.complete(request()).await.unwrap();
    }
}

#[tokio::test]
async fn a_model_call_is_a_genai_chat_span() {
    let server =
        ScriptedLlm::start(|_| Reply::text("4, secret-answer-text").usage(21, 7).model("test-model-2026-01")).await;
    for (name, provider) in providers(&server) {
        for stream in [false, true] {
            let spans = spans_of(|| call(provider.as_ref(), stream)).await;
            let chat: Vec<&SpanData> = spans.iter().filter(|s| s.name.starts_with("chat ")).collect();
            assert_eq!(chat.len(), 1, "{name} stream={stream}: one chat span, got {spans:?}");
            let span = chat[0];
            assert_eq!(span.name, "chat test-model");
            assert_eq!(span.span_kind, opentelemetry::trace::SpanKind::Client);
            assert_eq!(text(span, "gen_ai.operation.name"), "chat");
            assert_eq!(text(span, "gen_ai.provider.name"), name);
            assert_eq!(text(span, "gen_ai.request.model"), "test-model");
            assert_eq!(text(span, "gen_ai.response.model"), "test-model-2026-01");
            assert_eq!(int(span, "gen_ai.usage.input_tokens"), 21, "{name} stream={stream}");
            assert_eq!(int(span, "gen_ai.usage.output_tokens"), 7, "{name} stream={stream}");
            assert_eq!(int(span, "gen_ai.request.max_tokens"), 64);
            assert_eq!(
                attribute(span, "gen_ai.response.finish_reasons"),
                Some(&Value::Array(Array::String(vec!["stop".into()]))),
                "{name} stream={stream}"
            );
            assert!(attribute(span, "error.type").is_none());
            // Content is off unless the convention's variable turns it on.
            for kv in &span.attributes {
                let value = kv.value.as_str();
                assert!(
                    !value.contains("secret-prompt-text") && !value.contains("secret-answer-text"),
                    "{name}: message content on the span without being enabled: {kv:?}"
                );
            }
        }
    }
}

#[tokio::test]
async fn a_failed_call_names_its_error_type() {
    let server = ScriptedLlm::start(|_| Reply::error(401, "bad key")).await;
    for (name, provider) in providers(&server) {
        let spans = spans_of(|| async {
            assert!(provider.complete(request()).await.is_err());
        })
        .await;
        let span = spans.iter().find(|s| s.name == "chat test-model").expect("the chat span");
        assert_eq!(text(span, "error.type"), "auth", "{name}");
        assert!(matches!(span.status, opentelemetry::trace::Status::Error { .. }), "{name}: {:?}", span.status);
        assert!(attribute(span, "gen_ai.usage.input_tokens").is_none());
    }
}

/// The switch is read once per process, so the test runs itself again in a process of its own
/// with the variable set, and that run checks the spans.
#[test]
fn message_content_is_captured_only_when_enabled() {
    if std::env::var(CAPTURE_CONTENT_ENV).as_deref() == Ok("true") {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(content_is_captured());
        return;
    }
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["message_content_is_captured_only_when_enabled", "--exact", "--nocapture"])
        .env(CAPTURE_CONTENT_ENV, "true")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "the child failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("1 passed"), "the child test did not run:\n{stdout}");
}

async fn content_is_captured() {
    assert_eq!(std::env::var(CAPTURE_CONTENT_ENV).as_deref(), Ok("true"));
    let server = ScriptedLlm::start(|_| Reply::text("4, secret-answer-text")).await;
    for (name, provider) in providers(&server) {
        let spans = spans_of(|| call(provider.as_ref(), true)).await;
        let span = spans.iter().find(|s| s.name == "chat test-model").expect("the chat span");
        let input: serde_json::Value = serde_json::from_str(&text(span, "gen_ai.input.messages")).unwrap();
        assert_eq!(
            input,
            serde_json::json!([{"role": "user", "parts": [{"type": "text", "content": "what is 2+2? secret-prompt-text"}]}]),
            "{name}"
        );
        let output: serde_json::Value = serde_json::from_str(&text(span, "gen_ai.output.messages")).unwrap();
        assert_eq!(output[0]["role"], "assistant", "{name}");
        assert_eq!(output[0]["parts"][0]["content"], "4, secret-answer-text", "{name}");
        assert!(text(span, "gen_ai.system_instructions").contains("be brief"), "{name}");
    }
}
