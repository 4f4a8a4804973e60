//! Every model call is a span in the OpenTelemetry GenAI semantic conventions, so a GenAI-aware
//! trace viewer shows it without our docs: `chat {model}`, a client span with
//! `gen_ai.operation.name`, `gen_ai.provider.name`, the requested and the answering model, the
//! token usage and the finish reasons, and `error.type` when it failed. Message content goes on
//! the span only when `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` (the
//! convention's own switch): prompts and answers are the tenants' data. The convention's
//! client metrics (`gen_ai.client.token.usage`, `gen_ai.client.operation.duration`) are
//! recorded from the same calls.

use std::{sync::OnceLock, time::Instant};

use futures::StreamExt;
use opentelemetry::{Array, KeyValue, StringValue, Value, metrics::Histogram, trace::Status};
use serde_json::{Value as Json, json};
use tracing::{Span, field::Empty};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::{
    ChatRequest, Completion, ContentPart, ErrorKind, EventStream, FinishReason, Message, ProviderError, StreamEvent,
};

/// The convention's switch for recording prompts and answers on spans.
pub const CAPTURE_CONTENT_ENV: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

/// Whether message content goes on spans (read once: it is a deployment's setting).
fn capture_content() -> bool {
    static CAPTURE: OnceLock<bool> = OnceLock::new();
    *CAPTURE
        .get_or_init(|| std::env::var(CAPTURE_CONTENT_ENV).is_ok_and(|value| value.trim().eq_ignore_ascii_case("true")))
}

/// The convention's client metrics: token usage and call duration, by operation, provider and
/// requested model (names the operator configured, never caller text).
struct Instruments {
    tokens: Histogram<u64>,
    duration: Histogram<f64>,
}

fn instruments() -> &'static Instruments {
    // Made at the first call, after the service's telemetry setup installed the meter provider.
    static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();
    INSTRUMENTS.get_or_init(|| {
        let meter = opentelemetry::global::meter("switchyard-llm");
        Instruments {
            tokens: meter
                .u64_histogram("gen_ai.client.token.usage")
                .with_unit("{token}")
                .with_description(
                    "Tokens per model call, by provider, requested and answering model and token type (input, output)",
                )
                .with_boundaries(vec![
                    16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
                ])
                .build(),
            duration: meter
                .f64_histogram("gen_ai.client.operation.duration")
                .with_unit("s")
                .with_description(
                    "Model call duration (a stream: to its last event), by provider, requested model and error type",
                )
                .with_boundaries(vec![
                    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
                ])
                .build(),
        }
    })
}

/// One model call as telemetry sees it: its span (not entered: the caller instruments the
/// call's future with it and, for a stream, keeps it with the stream) and what its metrics name.
pub(crate) struct CallTrace {
    pub span: Span,
    provider: String,
    model: String,
    started: Instant,
}

impl CallTrace {
    pub fn start(provider: &str, request: &ChatRequest) -> Self {
        Self {
            span: call_span(provider, request),
            provider: provider.to_owned(),
            model: request.model.clone(),
            started: Instant::now(),
        }
    }

    fn labels(&self) -> [KeyValue; 3] {
        [
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.provider.name", self.provider.clone()),
            KeyValue::new("gen_ai.request.model", self.model.clone()),
        ]
    }

    pub fn completed(&self, completion: &Completion) {
        record_completion(&self.span, completion);
        let instruments = instruments();
        let mut labels = self.labels().to_vec();
        // The answering model, as the vendor named it (a dated version of the requested one):
        // a short list per vendor, never caller text.
        if !completion.model.is_empty() {
            labels.push(KeyValue::new("gen_ai.response.model", completion.model.clone()));
        }
        instruments.duration.record(self.started.elapsed().as_secs_f64(), &labels);
        for (kind, count) in [("input", completion.usage.prompt_tokens), ("output", completion.usage.completion_tokens)]
        {
            labels.push(KeyValue::new("gen_ai.token.type", kind));
            instruments.tokens.record(u64::from(count), &labels);
            labels.pop();
        }
    }

    pub fn failed(&self, error: &ProviderError) {
        record_error(&self.span, error);
        let [operation, provider, model] = self.labels();
        let labels = [operation, provider, model, KeyValue::new("error.type", error_type(error.kind))];
        instruments().duration.record(self.started.elapsed().as_secs_f64(), &labels);
    }
}

/// The span of one call of `provider` for `request`.
fn call_span(provider: &str, request: &ChatRequest) -> Span {
    let span = tracing::info_span!(
        "gen_ai.chat",
        otel.name = %format_args!("chat {}", request.model),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = %provider,
        gen_ai.request.model = %request.model,
        gen_ai.request.max_tokens = Empty,
        gen_ai.request.temperature = Empty,
        gen_ai.response.model = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        error.type = Empty,
    );
    if let Some(max_tokens) = request.max_tokens {
        span.record("gen_ai.request.max_tokens", i64::from(max_tokens));
    }
    if let Some(temperature) = request.temperature {
        span.record("gen_ai.request.temperature", temperature);
    }
    if capture_content() && !span.is_disabled() {
        if let Some(system) = &request.system {
            let instructions = json!([{"type": "text", "content": system}]);
            span.set_attribute("gen_ai.system_instructions", instructions.to_string());
        }
        let messages: Vec<Json> = request.messages.iter().map(message_json).collect();
        span.set_attribute("gen_ai.input.messages", Json::Array(messages).to_string());
    }
    span
}

/// Records what the vendor answered.
fn record_completion(span: &Span, completion: &Completion) {
    if span.is_disabled() {
        return;
    }
    if !completion.model.is_empty() {
        span.record("gen_ai.response.model", completion.model.as_str());
    }
    span.record("gen_ai.usage.input_tokens", i64::from(completion.usage.prompt_tokens));
    span.record("gen_ai.usage.output_tokens", i64::from(completion.usage.completion_tokens));
    let reason = finish_reason(completion.finish_reason);
    span.set_attribute("gen_ai.response.finish_reasons", Value::Array(Array::String(vec![StringValue::from(reason)])));
    if capture_content() {
        let mut parts = Vec::new();
        if !completion.content.is_empty() {
            parts.push(json!({"type": "text", "content": completion.content}));
        }
        parts.extend(
            completion.tool_calls.iter().map(
                |call| json!({"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}),
            ),
        );
        let output = json!([{"role": "assistant", "parts": parts, "finish_reason": reason}]);
        span.set_attribute("gen_ai.output.messages", output.to_string());
    }
}

/// Records why the call failed.
fn record_error(span: &Span, error: &ProviderError) {
    if span.is_disabled() {
        return;
    }
    span.record("error.type", error_type(error.kind));
    span.set_status(Status::error(error.message.clone()));
}

/// `stream` with its call recording the answer (or the failure); the span ends with the stream.
pub(crate) fn traced_stream(call: CallTrace, stream: EventStream) -> EventStream {
    stream
        .inspect(move |item| match item {
            Ok(StreamEvent::Done(completion)) => call.completed(completion),
            Err(error) => call.failed(error),
            Ok(_) => {}
        })
        .boxed()
}

/// The convention's finish reason values.
fn finish_reason(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_call",
        FinishReason::Other => "content_filter",
    }
}

pub(crate) fn error_type(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Connect => "connect",
        ErrorKind::Timeout => "timeout",
        ErrorKind::RateLimited => "rate_limited",
        ErrorKind::Server => "server",
        ErrorKind::Auth => "auth",
        ErrorKind::Rejected => "rejected",
        ErrorKind::Protocol => "protocol",
        ErrorKind::NotConfigured => "not_configured",
        ErrorKind::Unsupported => "unsupported",
        ErrorKind::CircuitOpen => "circuit_open",
        ErrorKind::Cooling => "deployments_cooling",
    }
}

/// A message in the convention's JSON shape (role and typed parts); images are named, not
/// copied (a data URL can be megabytes).
fn message_json(message: &Message) -> Json {
    let part = |part: &ContentPart| match part {
        ContentPart::Text(text) => json!({"type": "text", "content": text}),
        ContentPart::Image(_) => json!({"type": "image"}),
    };
    match message {
        Message::User { content, parts } => {
            let mut all: Vec<Json> = Vec::new();
            if !content.is_empty() {
                all.push(json!({"type": "text", "content": content}));
            }
            all.extend(parts.iter().map(part));
            json!({"role": "user", "parts": all})
        }
        Message::Assistant { content, tool_calls } => {
            let mut all: Vec<Json> = Vec::new();
            if !content.is_empty() {
                all.push(json!({"type": "text", "content": content}));
            }
            all.extend(tool_calls.iter().map(
                |call| json!({"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}),
            ));
            json!({"role": "assistant", "parts": all})
        }
        Message::Tool { call_id, content, parts, .. } => {
            let mut all = vec![json!({"type": "tool_call_response", "id": call_id, "response": content})];
            all.extend(parts.iter().map(part));
            json!({"role": "tool", "parts": all})
        }
    }
}
