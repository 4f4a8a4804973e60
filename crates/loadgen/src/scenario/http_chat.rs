//! `http-chat`: a chat turn over HTTP/1.1 keep-alive connections, as the SDKs send it, through
//! one of the client APIs of the edge — or of any OpenAI-compatible server (a peer gateway, a
//! vendor). `--api` picks the API: OpenAI chat completions, Anthropic Messages, OpenAI
//! Responses, or the edge's own REST chat (`/api/v1/chat`, streamed at `/api/v1/chat/stream`).
//! JSON, or with `--stream` Server-Sent Events read to their end; with `--first-token`, a call
//! ends at the API's own first text delta event (time to first token), and the rest of the
//! stream is read in the background before the connection takes its next request.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::{Value, json};
use tonic::{Code, Status};

use super::{Scenario, chat::DEFAULT_MESSAGE};
use crate::http1::{Lease, Pool};

/// The client APIs, by the path each is served at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Api {
    /// OpenAI chat completions: `POST /v1/chat/completions`.
    ChatCompletions,
    /// Anthropic Messages: `POST /v1/messages`.
    Messages,
    /// OpenAI Responses: `POST /v1/responses`.
    Responses,
    /// The edge's REST chat: `POST /api/v1/chat`, or `/api/v1/chat/stream` with `--stream`.
    RestChat,
}

#[derive(clap::Args)]
pub struct Args {
    /// The server's origin (`http://host:port`); the API's path is added to it.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub target: String,

    /// Which API to call.
    #[arg(long, value_enum, default_value = "chat-completions")]
    pub api: Api,

    /// The request path instead of the API's own (e.g. `/chat/completions` for a server
    /// without the `/v1` prefix).
    #[arg(long)]
    pub path: Option<String>,

    /// Model named in the request.
    #[arg(long, default_value = "switchyard")]
    pub model: String,

    /// Message sent on every call.
    #[arg(long, default_value = DEFAULT_MESSAGE)]
    pub message: String,

    /// A header sent with every request, `Name: value` (repeatable), e.g. an API key.
    #[arg(long = "header", value_parser = parse_header)]
    pub headers: Vec<(HeaderName, HeaderValue)>,

    /// Sessions created on the edge before the run (`POST /api/context/sessions`), named in
    /// each request (`x-session-id`; the REST chat's `session_id`), shared round-robin by the
    /// workers. 0: no session named; the edge derives the conversation from the messages.
    #[arg(long, default_value_t = 0)]
    pub sessions: usize,

    /// Ask for a streamed answer (Server-Sent Events).
    #[arg(long)]
    pub stream: bool,

    /// With --stream: a call ends at the first text delta (time to first token).
    #[arg(long, requires = "stream")]
    pub first_token: bool,
}

fn parse_header(text: &str) -> Result<(HeaderName, HeaderValue), String> {
    let (name, value) = text.split_once(':').ok_or_else(|| format!("`{text}` is not `Name: value`"))?;
    let name = HeaderName::try_from(name.trim()).map_err(|err| format!("header name in `{text}`: {err}"))?;
    let value = HeaderValue::try_from(value.trim()).map_err(|err| format!("header value in `{text}`: {err}"))?;
    Ok((name, value))
}

pub struct HttpChat {
    pool: Arc<Pool>,
    args: Args,
    path: String,
    session_ids: Vec<String>,
    /// The request body when no session goes in it (all but the REST chat with sessions).
    body: Bytes,
}

/// Reading what is left of a stream after its first token may take this long.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

impl HttpChat {
    pub fn new(args: Args, connections: usize) -> anyhow::Result<Self> {
        let pool = Pool::new(&args.target, connections)?;
        let path = args.path.clone().unwrap_or_else(|| default_path(args.api, args.stream).to_owned());
        if !path.starts_with('/') {
            bail!("--path `{path}` must start with `/`");
        }
        let body = Bytes::from(request_body(args.api, &args.model, &args.message, args.stream, None).to_string());
        Ok(Self { pool, args, path, session_ids: Vec::new(), body })
    }

    fn request(&self, worker: usize) -> Request<Full<Bytes>> {
        let session =
            (!self.session_ids.is_empty()).then(|| self.session_ids[worker % self.session_ids.len()].as_str());
        let body = match (self.args.api, session) {
            (Api::RestChat, Some(session)) => Bytes::from(
                request_body(self.args.api, &self.args.model, &self.args.message, self.args.stream, Some(session))
                    .to_string(),
            ),
            _ => self.body.clone(),
        };
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(self.path.as_str())
            .header(header::HOST, self.pool.authority())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, if self.args.stream { "text/event-stream" } else { "application/json" })
            .body(Full::new(body))
            .expect("a request from valid parts");
        let headers = request.headers_mut();
        if self.args.api == Api::Messages {
            headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
        }
        if let Some(session) = session
            && self.args.api != Api::RestChat
            && let Ok(value) = HeaderValue::try_from(session)
        {
            headers.insert("x-session-id", value);
        }
        for (name, value) in &self.args.headers {
            headers.insert(name.clone(), value.clone());
        }
        request
    }

    /// Creates the benchmark's sessions on the edge, over one of the pool's connections.
    async fn create_sessions(&mut self) -> anyhow::Result<()> {
        for _ in 0..self.args.sessions {
            let mut lease = self.pool.lease().await.map_err(|status| anyhow::anyhow!("{}", status.message()))?;
            let request = Request::builder()
                .method(Method::POST)
                .uri("/api/context/sessions")
                .header(header::HOST, self.pool.authority())
                .header(header::CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from_static(b"{}")))
                .expect("a request from valid parts");
            let response = lease.sender().send_request(request).await.context("creating a session")?;
            let status = response.status();
            let body = response.into_body().collect().await.context("reading the created session")?.to_bytes();
            if !status.is_success() {
                bail!("creating a session: HTTP {status}: {}", String::from_utf8_lossy(&body));
            }
            let created: Value = serde_json::from_slice(&body).context("the created session is not JSON")?;
            let id = find_session_id(&created).context("the created session has no session id")?;
            self.session_ids.push(id);
        }
        Ok(())
    }
}

/// The first `session_id` (or `sessionId`) string anywhere in a JSON value.
fn find_session_id(value: &Value) -> Option<String> {
    match value {
        Value::Object(object) => object
            .get("session_id")
            .or_else(|| object.get("sessionId"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| object.values().find_map(find_session_id)),
        Value::Array(items) => items.iter().find_map(find_session_id),
        _ => None,
    }
}

fn default_path(api: Api, stream: bool) -> &'static str {
    match (api, stream) {
        (Api::ChatCompletions, _) => "/v1/chat/completions",
        (Api::Messages, _) => "/v1/messages",
        (Api::Responses, _) => "/v1/responses",
        (Api::RestChat, false) => "/api/v1/chat",
        (Api::RestChat, true) => "/api/v1/chat/stream",
    }
}

/// The request body of one turn: one user message, as each API takes it.
fn request_body(api: Api, model: &str, message: &str, stream: bool, session: Option<&str>) -> Value {
    match api {
        Api::ChatCompletions => {
            json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": message}]})
        }
        Api::Messages => json!({
            "model": model, "max_tokens": 256, "stream": stream,
            "messages": [{"role": "user", "content": message}],
        }),
        Api::Responses => json!({"model": model, "stream": stream, "input": message}),
        Api::RestChat => match session {
            Some(session) => json!({"message": message, "session_id": session}),
            None => json!({"message": message}),
        },
    }
}

/// How an HTTP status counts in the report (the runner counts failures by gRPC code).
fn code_of(status: StatusCode) -> Code {
    match status.as_u16() {
        400 | 413 | 422 => Code::InvalidArgument,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::NotFound,
        408 | 504 => Code::DeadlineExceeded,
        429 => Code::ResourceExhausted,
        502 | 503 => Code::Unavailable,
        500..=599 => Code::Internal,
        _ => Code::Unknown,
    }
}

fn transport(err: impl std::fmt::Display) -> Status {
    Status::unavailable(err.to_string())
}

impl Scenario for HttpChat {
    const NAME: &'static str = "http-chat";

    async fn setup(&mut self) -> anyhow::Result<()> {
        self.pool.open_all().await?;
        self.create_sessions().await?;
        // The server answers this API with a whole turn.
        self.call(0, 0).await.map_err(|status| anyhow::anyhow!("probe call: {}", status.message()))
    }

    fn call(&self, worker: usize, _seq: u64) -> impl Future<Output = Result<(), Status>> + Send {
        let pool = self.pool.clone();
        let request = self.request(worker);
        let (api, stream, first_token) = (self.args.api, self.args.stream, self.args.first_token);
        async move {
            let mut lease = pool.lease().await?;
            let response = lease.sender().send_request(request).await.map_err(transport)?;
            let status = response.status();
            let mut body = response.into_body();
            if !status.is_success() {
                let text = read_to_end(&mut body).await.unwrap_or_default();
                return Err(Status::new(code_of(status), format!("HTTP {status}: {}", String::from_utf8_lossy(&text))));
            }
            if !stream {
                let text = read_to_end(&mut body).await?;
                return answer_in_json(api, &text);
            }
            let mut events = SseReader::default();
            let mut seen = Seen::default();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(transport)?;
                let Some(data) = frame.data_ref() else { continue };
                for event in events.push(data) {
                    seen.note(api, &event);
                }
                if seen.first_token && first_token {
                    // The rest of the answer is read before the connection is reused, off the
                    // clock, as an SDK would read it.
                    tokio::spawn(drain(body, lease));
                    return Ok(());
                }
            }
            match (seen.first_token, seen.end) {
                (true, true) => Ok(()),
                (false, _) => Err(Status::data_loss("the stream ended without a text delta")),
                (true, false) => Err(Status::data_loss("the stream ended without its final event")),
            }
        }
    }
}

async fn read_to_end(body: &mut Incoming) -> Result<Bytes, Status> {
    let mut all = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Some(data) = frame.map_err(transport)?.data_ref() {
            all.extend_from_slice(data);
        }
    }
    Ok(Bytes::from(all))
}

/// Reads what is left of a response, then gives its connection back to the pool.
async fn drain(mut body: Incoming, lease: Lease) {
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, read_to_end(&mut body)).await;
    drop(lease);
}

/// A whole (non-streamed) answer must be JSON with the API's answer text in it.
fn answer_in_json(api: Api, body: &[u8]) -> Result<(), Status> {
    let value: Value =
        serde_json::from_slice(body).map_err(|err| Status::data_loss(format!("the answer is not JSON: {err}")))?;
    let text = match api {
        Api::ChatCompletions => value["choices"][0]["message"]["content"].as_str().is_some_and(|t| !t.is_empty()),
        Api::Messages => value["content"]
            .as_array()
            .is_some_and(|blocks| blocks.iter().any(|block| block["text"].as_str().is_some_and(|t| !t.is_empty()))),
        Api::Responses => value["output"].as_array().is_some_and(|items| {
            items.iter().any(|item| {
                item["content"]
                    .as_array()
                    .is_some_and(|parts| parts.iter().any(|part| part["text"].as_str().is_some_and(|t| !t.is_empty())))
            })
        }),
        // The REST chat answers in the chat completion's shape (its message's content).
        Api::RestChat => [&value["choices"][0]["message"]["content"], &value["message"]["content"]]
            .iter()
            .any(|content| content.as_str().is_some_and(|t| !t.is_empty())),
    };
    if text { Ok(()) } else { Err(Status::data_loss(format!("no answer text in {}", truncate(&value.to_string())))) }
}

fn truncate(text: &str) -> &str {
    text.char_indices().nth(300).map_or(text, |(at, _)| &text[..at])
}

/// One Server-Sent Event: its name (`event:`) and its data lines joined.
#[derive(Debug, Default, PartialEq)]
struct SseEvent {
    name: String,
    data: String,
}

/// Splits a byte stream into events at blank lines, whatever the chunking; `\r` is ignored.
#[derive(Debug, Default)]
struct SseReader {
    pending: Vec<u8>,
}

impl SseReader {
    fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.pending.extend(bytes.iter().copied().filter(|&byte| byte != b'\r'));
        let mut events = Vec::new();
        while let Some(end) = self.pending.windows(2).position(|pair| pair == b"\n\n") {
            let block: Vec<u8> = self.pending.drain(..end + 2).collect();
            let mut event = SseEvent::default();
            for line in String::from_utf8_lossy(&block).lines() {
                let (field, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                match field {
                    "event" => event.name = value.to_owned(),
                    "data" => {
                        if !event.data.is_empty() {
                            event.data.push('\n');
                        }
                        event.data.push_str(value);
                    }
                    _ => {} // comments (keep-alives), id, retry
                }
            }
            if !event.name.is_empty() || !event.data.is_empty() {
                events.push(event);
            }
        }
        events
    }
}

/// What a stream has shown so far: a text delta, and its final event.
#[derive(Debug, Default)]
struct Seen {
    first_token: bool,
    end: bool,
}

impl Seen {
    fn note(&mut self, api: Api, event: &SseEvent) {
        let data = || serde_json::from_str::<Value>(&event.data).unwrap_or(Value::Null);
        // The event's type: its `event:` name, or (for servers that send data lines only) the
        // `type` in its data.
        let kind = |data: &Value| {
            if event.name.is_empty() {
                data["type"].as_str().unwrap_or_default().to_owned()
            } else {
                event.name.clone()
            }
        };
        match api {
            Api::ChatCompletions => {
                if event.data == "[DONE]" {
                    self.end = true;
                } else if !self.first_token {
                    let data = data();
                    self.first_token = data["choices"][0]["delta"]["content"].as_str().is_some_and(|t| !t.is_empty());
                }
            }
            Api::Messages => {
                let data = data();
                match kind(&data).as_str() {
                    "content_block_delta" => {
                        self.first_token |= data["delta"]["type"] == "text_delta"
                            && data["delta"]["text"].as_str().is_some_and(|t| !t.is_empty());
                    }
                    "message_stop" => self.end = true,
                    _ => {}
                }
            }
            Api::Responses => {
                let data = data();
                match kind(&data).as_str() {
                    "response.output_text.delta" => {
                        self.first_token |= data["delta"].as_str().is_some_and(|t| !t.is_empty());
                    }
                    "response.completed" => self.end = true,
                    _ => {}
                }
            }
            Api::RestChat => match event.name.as_str() {
                "delta" => self.first_token |= data()["content"].as_str().is_some_and(|t| !t.is_empty()),
                "completed" => self.end = true,
                _ => {}
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(api: Api, stream: &str) -> Seen {
        let mut reader = SseReader::default();
        let mut seen = Seen::default();
        // Byte by byte: events split across reads are still found.
        for byte in stream.as_bytes() {
            for event in reader.push(std::slice::from_ref(byte)) {
                seen.note(api, &event);
            }
        }
        seen
    }

    #[test]
    fn events_are_split_at_blank_lines_whatever_the_chunking() {
        let mut reader = SseReader::default();
        assert!(reader.push(b"event: delta\r\ndata: {\"a\":").is_empty());
        let events = reader.push(b"1}\r\n\r\n: keep-alive\n\ndata: x\ndata: y\n\n");
        assert_eq!(
            events,
            [
                SseEvent { name: "delta".into(), data: "{\"a\":1}".into() },
                SseEvent { name: String::new(), data: "x\ny".into() },
            ]
        );
    }

    #[test]
    fn chat_completions_first_token_is_the_first_content_delta() {
        let role_only = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
        let s = seen(Api::ChatCompletions, role_only);
        assert!(!s.first_token && !s.end);
        let s = seen(
            Api::ChatCompletions,
            &format!("{role_only}data: {{\"choices\":[{{\"delta\":{{\"content\":\"Hi\"}}}}]}}\n\ndata: [DONE]\n\n"),
        );
        assert!(s.first_token && s.end);
    }

    #[test]
    fn messages_first_token_is_a_text_delta() {
        let stream = "event: message_start\ndata: {\"type\":\"message_start\"}\n\n\
            event: content_block_start\ndata: {\"type\":\"content_block_start\"}\n\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\"}}\n\n";
        assert!(!seen(Api::Messages, stream).first_token, "a tool call's arguments are not text");
        let text = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n\
            event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let s = seen(Api::Messages, &format!("{stream}{text}"));
        assert!(s.first_token && s.end);
        // Data lines only: the type in the data names the event.
        let s = seen(Api::Messages, &text.replace("event: content_block_delta\n", ""));
        assert!(s.first_token);
    }

    #[test]
    fn responses_first_token_is_an_output_text_delta() {
        let stream = "event: response.created\ndata: {\"type\":\"response.created\"}\n\n\
            event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n\
            event: response.completed\ndata: {\"type\":\"response.completed\"}\n\n";
        let s = seen(Api::Responses, stream);
        assert!(s.first_token && s.end);
        assert!(!seen(Api::Responses, "event: response.created\ndata: {}\n\n").first_token);
    }

    #[test]
    fn rest_chat_first_token_is_a_delta_event() {
        let s = seen(
            Api::RestChat,
            "event: route\ndata: {\"routeType\":\"ROUTE_TYPE_DIRECT\"}\n\nevent: delta\ndata: {\"content\":\"Hi\"}\n\n",
        );
        assert!(s.first_token && !s.end);
        assert!(seen(Api::RestChat, "event: completed\ndata: {}\n\n").end);
    }

    #[test]
    fn whole_answers_need_their_text() {
        assert!(answer_in_json(Api::ChatCompletions, br#"{"choices":[{"message":{"content":"Hi"}}]}"#).is_ok());
        assert!(answer_in_json(Api::ChatCompletions, br#"{"choices":[{"message":{"content":""}}]}"#).is_err());
        assert!(answer_in_json(Api::Messages, br#"{"content":[{"type":"text","text":"Hi"}]}"#).is_ok());
        let responses = br#"{"output":[{"type":"message","content":[{"type":"output_text","text":"Hi"}]}]}"#;
        assert!(answer_in_json(Api::Responses, responses).is_ok());
        assert!(answer_in_json(Api::Responses, b"not json").is_err());
        assert!(answer_in_json(Api::RestChat, br#"{"choices":[{"message":{"content":"Hi"}}]}"#).is_ok());
    }

    #[test]
    fn headers_are_name_colon_value() {
        let (name, value) = parse_header("Authorization: Bearer sk-1").unwrap();
        assert_eq!(name, "authorization");
        assert_eq!(value, "Bearer sk-1");
        assert!(parse_header("no colon").is_err());
        assert!(parse_header("bad name: x").is_err());
    }

    #[test]
    fn session_ids_are_found_in_either_spelling_at_any_depth() {
        assert_eq!(find_session_id(&json!({"session": {"sessionId": "s-1"}})).as_deref(), Some("s-1"));
        assert_eq!(find_session_id(&json!({"session_id": "s-2"})).as_deref(), Some("s-2"));
        assert_eq!(find_session_id(&json!({"x": 1})), None);
    }

    #[test]
    fn paths_follow_the_api_and_the_stream_flag() {
        assert_eq!(default_path(Api::RestChat, true), "/api/v1/chat/stream");
        assert_eq!(default_path(Api::RestChat, false), "/api/v1/chat");
        assert_eq!(default_path(Api::Messages, true), "/v1/messages");
    }
}
