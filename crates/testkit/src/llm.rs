//! A scripted LLM vendor for tests and benchmarks: a real HTTP server (axum, on a loopback
//! port) speaking OpenAI Chat Completions (`POST /v1/chat/completions`) and the Anthropic
//! Messages API (`POST /v1/messages`) in their exact wire formats, JSON or Server-Sent Events
//! as the request's `stream` field asks. Each test scripts the answers ([`Reply`]) and reads
//! back what was sent ([`Recorded`]). Built for load too: no sleeps unless scripted, no logs.

use std::{
    collections::VecDeque,
    convert::Infallible,
    net::SocketAddr,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::State,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::Response,
    routing::post,
    serve::ListenerExt,
};
use serde_json::{Map, Value, json};

use crate::Served;

/// Which vendor API a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    OpenAi,
    Anthropic,
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub wire: Wire,
    pub body: Value,
    pub headers: HeaderMap,
    pub received_at: Instant,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    pub fn model(&self) -> Option<&str> {
        self.body["model"].as_str()
    }

    pub fn is_stream(&self) -> bool {
        self.body["stream"].as_bool().unwrap_or(false)
    }

    pub fn messages(&self) -> &[Value] {
        self.body["messages"].as_array().map(Vec::as_slice).unwrap_or_default()
    }

    pub fn messages_len(&self) -> usize {
        self.messages().len()
    }

    /// The system prompt: OpenAI's leading `system` (or `developer`) message, Anthropic's
    /// top-level `system`.
    pub fn system(&self) -> Option<String> {
        match self.wire {
            Wire::OpenAi => self
                .messages()
                .iter()
                .find(|message| matches!(message["role"].as_str(), Some("system" | "developer")))
                .and_then(|message| text_of(&message["content"])),
            Wire::Anthropic => text_of(&self.body["system"]),
        }
    }

    /// The text of the last user message that has text (Anthropic's tool results are user
    /// messages too; they are skipped).
    pub fn last_user_text(&self) -> Option<String> {
        self.messages()
            .iter()
            .rev()
            .filter(|message| message["role"] == "user")
            .find_map(|message| text_of(&message["content"]))
    }

    /// The names of the tools offered, in order.
    pub fn tool_names(&self) -> Vec<String> {
        let tools = self.body["tools"].as_array().map(Vec::as_slice).unwrap_or_default();
        tools
            .iter()
            .filter_map(|tool| match self.wire {
                Wire::OpenAi => tool["function"]["name"].as_str(),
                Wire::Anthropic => tool["name"].as_str(),
            })
            .map(str::to_owned)
            .collect()
    }
}

/// A message content's text: a string, or the `text` parts of a content array joined.
fn text_of(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => {
            let texts: Vec<&str> =
                parts.iter().filter(|part| part["type"] == "text").filter_map(|part| part["text"].as_str()).collect();
            (!texts.is_empty()).then(|| texts.concat())
        }
        _ => None,
    }
}

/// What the server answers to one request.
#[derive(Debug, Clone)]
pub struct Reply {
    outcome: Outcome,
    model: Option<String>,
    usage: (u32, u32),
    /// Of the prompt tokens, those read from the vendor's prompt cache.
    cached: u32,
    finish: Option<String>,
    chunk_size: usize,
    delay: Duration,
    chunk_delay: Duration,
    retry_after: Option<u64>,
    stream_error: Option<String>,
}

#[derive(Debug, Clone)]
enum Outcome {
    Answer(Vec<Part>),
    Error { status: u16, message: String },
}

#[derive(Debug, Clone)]
enum Part {
    Text(String),
    ToolCall { name: String, arguments: String },
}

impl Reply {
    fn answer(part: Part) -> Self {
        Self {
            outcome: Outcome::Answer(vec![part]),
            model: None,
            usage: (10, 5),
            cached: 0,
            finish: None,
            chunk_size: 3,
            delay: Duration::ZERO,
            chunk_delay: Duration::ZERO,
            retry_after: None,
            stream_error: None,
        }
    }

    /// A text answer.
    pub fn text(text: impl Into<String>) -> Self {
        Self::answer(Part::Text(text.into()))
    }

    /// A tool call; `arguments` is sent verbatim, so malformed JSON can be scripted. (In a
    /// non-streaming Anthropic answer, where `input` must be JSON, arguments that do not parse
    /// are sent as a JSON string.)
    pub fn tool_call(name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self::answer(Part::ToolCall { name: name.into(), arguments: arguments.into() })
    }

    /// A vendor-shaped error answer with this status.
    pub fn error(status: u16, message: impl Into<String>) -> Self {
        Self { outcome: Outcome::Error { status, message: message.into() }, ..Self::text("") }
    }

    pub fn and_text(mut self, text: impl Into<String>) -> Self {
        self.push(Part::Text(text.into()));
        self
    }

    pub fn and_tool_call(mut self, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        self.push(Part::ToolCall { name: name.into(), arguments: arguments.into() });
        self
    }

    /// The usage object of an OpenAI answer (or of the last streamed chunk).
    fn openai_usage(&self) -> Value {
        let (prompt, completion) = self.usage;
        let mut usage =
            json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion});
        if self.cached > 0 {
            usage["prompt_tokens_details"] = json!({"cached_tokens": self.cached});
        }
        usage
    }

    /// The usage object of an Anthropic answer (or of `message_start`, with this output count).
    fn anthropic_usage(&self, output: u32) -> Value {
        let (prompt, _) = self.usage;
        let cached = self.cached.min(prompt);
        let mut usage = json!({"input_tokens": prompt - cached, "output_tokens": output});
        if cached > 0 {
            usage["cache_read_input_tokens"] = json!(cached);
        }
        usage
    }

    fn push(&mut self, part: Part) {
        if let Outcome::Answer(parts) = &mut self.outcome {
            parts.push(part);
        }
    }

    /// Token counts reported (default 10 prompt, 5 completion).
    pub fn usage(mut self, prompt: u32, completion: u32) -> Self {
        self.usage = (prompt, completion);
        self
    }

    /// Of the prompt tokens, this many were read from the prompt cache (default none): sent as
    /// OpenAI's `usage.prompt_tokens_details.cached_tokens`, and as Anthropic's
    /// `cache_read_input_tokens` beside `input_tokens` (the rest of the prompt).
    pub fn cached(mut self, tokens: u32) -> Self {
        self.cached = tokens;
        self
    }

    /// The model named in the answer (default: the model asked for).
    pub fn model(mut self, name: impl Into<String>) -> Self {
        self.model = Some(name.into());
        self
    }

    /// The finish reason: `stop`, `length` or `tool_calls` (each sent in the vendor's own
    /// terms: Anthropic's `end_turn`, `max_tokens`, `tool_use`); anything else verbatim.
    /// Default: `tool_calls` when the answer has tool calls, else `stop`.
    pub fn finish(mut self, reason: impl Into<String>) -> Self {
        self.finish = Some(reason.into());
        self
    }

    /// Streamed text and tool-call arguments go out in pieces of this many characters, each
    /// its own SSE event (default 3, so that assembly is exercised; 0 sends each whole).
    pub fn chunk_size(mut self, chars: usize) -> Self {
        self.chunk_size = chars;
        self
    }

    /// Wait before sending the response headers.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Wait between two SSE events.
    pub fn chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = delay;
        self
    }

    /// Send `Retry-After: <secs>` (with an error reply).
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    /// End a streamed answer, after its content, with the vendor's in-stream error (OpenAI's
    /// `data: {"error":…}`, Anthropic's `event: error`) instead of finishing; a non-streaming
    /// request gets a 500 with this message.
    pub fn fail_mid_stream(mut self, message: impl Into<String>) -> Self {
        self.stream_error = Some(message.into());
        self
    }

    fn parts(&self) -> &[Part] {
        match &self.outcome {
            Outcome::Answer(parts) => parts,
            Outcome::Error { .. } => &[],
        }
    }

    fn has_tool_calls(&self) -> bool {
        self.parts().iter().any(|part| matches!(part, Part::ToolCall { .. }))
    }

    fn finish_for(&self, wire: Wire) -> String {
        let neutral = self
            .finish
            .clone()
            .unwrap_or_else(|| if self.has_tool_calls() { "tool_calls".to_owned() } else { "stop".to_owned() });
        match (wire, neutral.as_str()) {
            (Wire::Anthropic, "stop") => "end_turn".to_owned(),
            (Wire::Anthropic, "length") => "max_tokens".to_owned(),
            (Wire::Anthropic, "tool_calls") => "tool_use".to_owned(),
            _ => neutral,
        }
    }

    fn pieces<'a>(&self, text: &'a str) -> Vec<&'a str> {
        if self.chunk_size == 0 || text.is_empty() {
            return if text.is_empty() { Vec::new() } else { vec![text] };
        }
        let mut pieces = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let end = rest.char_indices().nth(self.chunk_size).map_or(rest.len(), |(at, _)| at);
            let (piece, tail) = rest.split_at(end);
            pieces.push(piece);
            rest = tail;
        }
        pieces
    }
}

type Responder = dyn Fn(&Recorded) -> Reply + Send + Sync;

struct Shared {
    responder: Box<Responder>,
    /// Off for long benchmark runs, which would otherwise hold every request in memory.
    keep_requests: bool,
    requests: Mutex<Vec<Recorded>>,
    answered: AtomicU64,
}

/// The running server; stopped when dropped.
pub struct ScriptedLlm {
    shared: Arc<Shared>,
    served: Served,
}

impl ScriptedLlm {
    /// Serves on 127.0.0.1 (a free port), answering each request with `responder`'s reply.
    pub async fn start(responder: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> Self {
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        Self::start_on(loopback, true, responder).await.expect("a loopback port for the scripted LLM")
    }

    /// Serves on `addr`; with `keep_requests` off, [`Self::requests`] stays empty (for the
    /// benchmark's long runs).
    pub async fn start_on(
        addr: SocketAddr,
        keep_requests: bool,
        responder: impl Fn(&Recorded) -> Reply + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            responder: Box::new(responder),
            keep_requests,
            requests: Mutex::default(),
            answered: AtomicU64::new(0),
        });
        let router = Router::new()
            .route("/v1/chat/completions", post(openai))
            .route("/v1/messages", post(anthropic))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        // As a vendor's front end does: a streamed answer's events go out as they are written,
        // not held by Nagle's algorithm for the client's acknowledgement (axum::serve leaves it on).
        let listener = listener.tap_io(|stream| {
            let _ = stream.set_nodelay(true);
        });
        let served = Served::spawn(addr, |shutdown| async move {
            axum::serve(listener, router).with_graceful_shutdown(shutdown).await.map_err(Into::into)
        });
        Ok(Self { shared, served })
    }

    /// Answers with `replies` in order, then with a 500 saying the script ran out.
    pub async fn queue(replies: Vec<Reply>) -> Self {
        let queued = replies.len();
        let replies = Mutex::new(VecDeque::from(replies));
        Self::start(move |_| {
            replies.lock().unwrap_or_else(PoisonError::into_inner).pop_front().unwrap_or_else(|| {
                Reply::error(500, format!("ScriptedLlm: all {queued} queued replies have been used"))
            })
        })
        .await
    }

    pub fn addr(&self) -> SocketAddr {
        self.served.addr
    }

    /// The base URL as OpenAI's SDK takes it: `http://127.0.0.1:<port>/v1`.
    pub fn openai_base_url(&self) -> String {
        format!("{}/v1", self.served.url())
    }

    /// The base URL as Anthropic's SDK takes it: `http://127.0.0.1:<port>`.
    pub fn anthropic_base_url(&self) -> String {
        self.served.url()
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The requests received so far, forgetting them (for long benchmark runs).
    pub fn take_requests(&self) -> Vec<Recorded> {
        std::mem::take(&mut *self.shared.requests.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// How many requests have been answered (cheap; nothing is cloned).
    pub fn answered(&self) -> u64 {
        self.shared.answered.load(Ordering::Relaxed)
    }
}

async fn openai(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    respond(&shared, Wire::OpenAi, headers, &body).await
}

async fn anthropic(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    respond(&shared, Wire::Anthropic, headers, &body).await
}

async fn respond(shared: &Shared, wire: Wire, headers: HeaderMap, body: &[u8]) -> Response {
    let body: Value = match serde_json::from_slice(body) {
        Ok(body) => body,
        Err(err) => return error_response(wire, 400, &format!("the request body is not JSON: {err}"), None),
    };
    let recorded = Recorded { wire, body, headers, received_at: Instant::now() };
    let reply = (shared.responder)(&recorded);
    let number = shared.answered.fetch_add(1, Ordering::Relaxed);
    let answer = Answer {
        reply: &reply,
        wire,
        number,
        model: reply.model.clone().or_else(|| recorded.model().map(str::to_owned)).unwrap_or_default(),
        include_usage: recorded.body["stream_options"]["include_usage"].as_bool().unwrap_or(false),
        created: SystemTime::now().duration_since(UNIX_EPOCH).map(|since| since.as_secs()).unwrap_or_default(),
    };
    let stream = recorded.is_stream();
    if shared.keep_requests {
        shared.requests.lock().unwrap_or_else(PoisonError::into_inner).push(recorded);
    }

    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    match (&reply.outcome, &reply.stream_error) {
        (Outcome::Error { status, message }, _) => error_response(wire, *status, message, reply.retry_after),
        (Outcome::Answer(_), Some(message)) if !stream => error_response(wire, 500, message, reply.retry_after),
        (Outcome::Answer(_), _) if stream => sse_response(answer.events(), reply.chunk_delay),
        (Outcome::Answer(_), _) => json_response(StatusCode::OK, &answer.json(), None),
    }
}

/// One scripted answer rendered in one vendor's format.
struct Answer<'a> {
    reply: &'a Reply,
    wire: Wire,
    number: u64,
    model: String,
    include_usage: bool,
    created: u64,
}

impl Answer<'_> {
    fn text(&self) -> String {
        self.reply
            .parts()
            .iter()
            .filter_map(|part| match part {
                Part::Text(text) => Some(text.as_str()),
                Part::ToolCall { .. } => None,
            })
            .collect()
    }

    /// The tool calls with their ids, in order.
    fn tool_calls(&self) -> Vec<(String, &str, &str)> {
        let prefix = match self.wire {
            Wire::OpenAi => "call",
            Wire::Anthropic => "toolu",
        };
        self.reply
            .parts()
            .iter()
            .filter_map(|part| match part {
                Part::ToolCall { name, arguments } => Some((name.as_str(), arguments.as_str())),
                Part::Text(_) => None,
            })
            .enumerate()
            .map(|(position, (name, arguments))| (format!("{prefix}_{}_{position}", self.number), name, arguments))
            .collect()
    }

    fn json(&self) -> Value {
        let (_, completion) = self.reply.usage;
        let finish = self.reply.finish_for(self.wire);
        match self.wire {
            Wire::OpenAi => {
                let text = self.text();
                let calls: Vec<Value> = self
                    .tool_calls()
                    .into_iter()
                    .map(|(id, name, arguments)| {
                        json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
                    })
                    .collect();
                let mut message = Map::new();
                message.insert("role".into(), json!("assistant"));
                let content = if text.is_empty() && !calls.is_empty() { Value::Null } else { json!(text) };
                message.insert("content".into(), content);
                if !calls.is_empty() {
                    message.insert("tool_calls".into(), Value::Array(calls));
                }
                json!({
                    "id": format!("chatcmpl-{}", self.number),
                    "object": "chat.completion",
                    "created": self.created,
                    "model": self.model,
                    "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
                    "usage": self.reply.openai_usage(),
                })
            }
            Wire::Anthropic => {
                let mut calls = self.tool_calls().into_iter();
                let content: Vec<Value> = self
                    .reply
                    .parts()
                    .iter()
                    .filter_map(|part| match part {
                        Part::Text(text) => Some(json!({"type": "text", "text": text})),
                        Part::ToolCall { .. } => calls.next().map(|(id, name, arguments)| {
                            // A call without arguments has the empty object as its input, as the API sends it.
                            let input = if arguments.trim().is_empty() {
                                json!({})
                            } else {
                                serde_json::from_str::<Value>(arguments)
                                    .unwrap_or_else(|_| Value::String(arguments.to_owned()))
                            };
                            json!({"type": "tool_use", "id": id, "name": name, "input": input})
                        }),
                    })
                    .collect();
                json!({
                    "id": format!("msg_{}", self.number),
                    "type": "message",
                    "role": "assistant",
                    "model": self.model,
                    "content": content,
                    "stop_reason": finish,
                    "stop_sequence": null,
                    "usage": self.reply.anthropic_usage(completion),
                })
            }
        }
    }

    /// The SSE events, each a whole frame.
    fn events(&self) -> Vec<String> {
        match self.wire {
            Wire::OpenAi => self.openai_events(),
            Wire::Anthropic => self.anthropic_events(),
        }
    }

    fn openai_chunk(&self, choices: Value) -> String {
        let mut chunk = json!({
            "id": format!("chatcmpl-{}", self.number),
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        });
        if self.include_usage {
            chunk["usage"] = Value::Null;
        }
        format!("data: {chunk}\n\n")
    }

    fn openai_delta(&self, delta: Value) -> String {
        self.openai_chunk(json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": null}]))
    }

    fn openai_events(&self) -> Vec<String> {
        let mut events = vec![self.openai_delta(json!({"role": "assistant", "content": ""}))];
        let mut calls = self.tool_calls().into_iter().enumerate();
        for part in self.reply.parts() {
            match part {
                Part::Text(text) => {
                    for piece in self.reply.pieces(text) {
                        events.push(self.openai_delta(json!({"content": piece})));
                    }
                }
                Part::ToolCall { .. } => {
                    let Some((index, (id, name, arguments))) = calls.next() else { continue };
                    events.push(self.openai_delta(json!({"tool_calls": [{
                        "index": index, "id": id, "type": "function", "function": {"name": name, "arguments": ""},
                    }]})));
                    for piece in self.reply.pieces(arguments) {
                        events.push(
                            self.openai_delta(
                                json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                            ),
                        );
                    }
                }
            }
        }
        if let Some(message) = &self.reply.stream_error {
            let error = json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}});
            events.push(format!("data: {error}\n\n"));
            return events;
        }
        let finish = self.reply.finish_for(Wire::OpenAi);
        events.push(self.openai_chunk(json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": finish}])));
        if self.include_usage {
            let mut last = json!({
                "id": format!("chatcmpl-{}", self.number),
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
            });
            last["usage"] = self.reply.openai_usage();
            events.push(format!("data: {last}\n\n"));
        }
        events.push("data: [DONE]\n\n".to_owned());
        events
    }

    fn anthropic_events(&self) -> Vec<String> {
        let frame = |data: Value| {
            let name = data["type"].as_str().unwrap_or("message").to_owned();
            format!("event: {name}\ndata: {data}\n\n")
        };
        let (_, completion) = self.reply.usage;
        let mut events = vec![
            frame(json!({"type": "message_start", "message": {
                "id": format!("msg_{}", self.number), "type": "message", "role": "assistant", "model": self.model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": self.reply.anthropic_usage(1),
            }})),
            frame(json!({"type": "ping"})),
        ];
        let mut calls = self.tool_calls().into_iter();
        for (index, part) in self.reply.parts().iter().enumerate() {
            match part {
                Part::Text(text) => {
                    let start = json!({"type": "text", "text": ""});
                    events.push(frame(json!({"type": "content_block_start", "index": index, "content_block": start})));
                    for piece in self.reply.pieces(text) {
                        let delta = json!({"type": "text_delta", "text": piece});
                        events.push(frame(json!({"type": "content_block_delta", "index": index, "delta": delta})));
                    }
                }
                Part::ToolCall { .. } => {
                    let Some((id, name, arguments)) = calls.next() else { continue };
                    let start = json!({"type": "tool_use", "id": id, "name": name, "input": {}});
                    events.push(frame(json!({"type": "content_block_start", "index": index, "content_block": start})));
                    for piece in self.reply.pieces(arguments) {
                        let delta = json!({"type": "input_json_delta", "partial_json": piece});
                        events.push(frame(json!({"type": "content_block_delta", "index": index, "delta": delta})));
                    }
                }
            }
            events.push(frame(json!({"type": "content_block_stop", "index": index})));
        }
        if let Some(message) = &self.reply.stream_error {
            events.push(frame(json!({"type": "error", "error": {"type": "overloaded_error", "message": message}})));
            return events;
        }
        let stop_reason = self.reply.finish_for(Wire::Anthropic);
        events.push(frame(json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": completion},
        })));
        events.push(frame(json!({"type": "message_stop"})));
        events
    }
}

fn json_response(status: StatusCode, body: &Value, retry_after: Option<u64>) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(secs) = retry_after {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// An error in the vendor's shape (OpenAI `{"error":{message,type}}`, Anthropic
/// `{"type":"error","error":{type,message}}`).
fn error_response(wire: Wire, status: u16, message: &str, retry_after: Option<u64>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = match wire {
        Wire::OpenAi => {
            let kind = match status.as_u16() {
                401 => "invalid_request_error",
                429 => "rate_limit_exceeded",
                400..=499 => "invalid_request_error",
                _ => "server_error",
            };
            json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
        }
        Wire::Anthropic => {
            let kind = match status.as_u16() {
                400 => "invalid_request_error",
                401 => "authentication_error",
                403 => "permission_error",
                404 => "not_found_error",
                413 => "request_too_large",
                429 => "rate_limit_error",
                529 => "overloaded_error",
                _ => "api_error",
            };
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
    };
    json_response(status, &body, retry_after)
}

fn sse_response(events: Vec<String>, chunk_delay: Duration) -> Response {
    let body = if chunk_delay.is_zero() {
        Body::from(events.concat())
    } else {
        // Each event its own write, the first at once and each later one after the delay.
        let events = futures::stream::unfold((events.into_iter(), true), move |(mut events, first)| async move {
            let event = events.next()?;
            if !first {
                tokio::time::sleep(chunk_delay).await;
            }
            Some((Ok::<_, Infallible>(Bytes::from(event)), (events, false)))
        });
        Body::from_stream(events)
    };
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
