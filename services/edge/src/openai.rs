//! OpenAI's chat completions API, so OpenAI SDKs and tools use Switchyard unchanged: the last
//! user message is the query, earlier messages are the history, and the model name picks a
//! route (`switchyard-direct`, `switchyard-mcp-agent`, `switchyard-multiagent`), lets the
//! router decide (`switchyard`, or anything unknown to us such as `gpt-4o`), or names a model
//! the router knows (`openai/gpt-4o-mini`, `local/smollm2-135m-instruct`). Routing metadata
//! rides in `_metadata`, which SDKs ignore. Errors come in OpenAI's error shape.

use std::sync::Arc;

use axum::{
    body::Body,
    extract::State,
    response::{IntoResponse, Response, sse::Event},
};
use http::HeaderMap;
use serde::Deserialize;
use serde_json::{Value, json};
use switchyard_proto::router::v1::{self as router, RouteType, chat_stream_response::Event as ChatEvent};

use crate::{
    Edge,
    chat::{completion_json, finish_reason, metadata_json, usage_json},
    error::{ApiError, axum_json},
    rest::{self, parse_json, sse},
    upstream,
};

/// The model names that choose a route; `switchyard` lets the router decide.
const ROUTE_MODELS: &[(&str, RouteType)] = &[
    ("switchyard", RouteType::Unspecified),
    ("switchyard-direct", RouteType::Direct),
    ("switchyard-mcp-agent", RouteType::McpAgent),
    ("switchyard-multiagent", RouteType::Multiagent),
];

/// Providers whose `provider/model` names pass through to the router.
const PROVIDERS: &[&str] = &["openai", "anthropic", "local"];

#[derive(Debug, Deserialize)]
struct CompletionRequest {
    model: String,
    messages: Vec<Message>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    max_completion_tokens: Option<u32>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    n: Option<u32>,
    #[serde(default)]
    tools: Option<Value>,
    /// Switchyard's own: continue this session (its role and history) instead of sending the
    /// history in `messages`.
    #[serde(default)]
    session_id: Option<String>,
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Debug, Deserialize)]
struct Message {
    role: String,
    #[serde(default)]
    content: Content,
}

/// A message's content: text, or parts of which only text is understood.
#[derive(Debug, Default, Deserialize)]
#[serde(untagged)]
enum Content {
    #[default]
    Missing,
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
}

/// OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}`.
fn openai_error(error: ApiError) -> Response {
    let kind = match error.status() {
        400 | 404 | 405 | 409 | 413 | 415 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        429 => "rate_limit_exceeded",
        _ => "api_error",
    };
    let body = json!({"error": {
        "message": error.message(),
        "type": kind,
        "param": error.field(),
        "code": crate::error::code_name(error.code()).to_ascii_lowercase(),
    }});
    let retry_after = error.retry_after();
    let mut response = (error.http_status(), axum_json(&body)).into_response();
    if let Some(seconds) = retry_after {
        response.headers_mut().insert(http::header::RETRY_AFTER, seconds.into());
    }
    response
}

pub async fn models(State(edge): State<Arc<Edge>>, headers: HeaderMap) -> Response {
    if let Err(error) = edge.admit(&headers).await {
        return openai_error(error);
    }
    let data: Vec<Value> = ROUTE_MODELS
        .iter()
        .map(|(id, _)| json!({"id": id, "object": "model", "created": 0, "owned_by": "switchyard"}))
        .collect();
    axum_json(&json!({"object": "list", "data": data}))
}

pub async fn chat_completions(State(edge): State<Arc<Edge>>, headers: HeaderMap, body: Body) -> Response {
    match complete(&edge, &headers, body).await {
        Ok(response) => response,
        Err(error) => openai_error(error),
    }
}

async fn complete(edge: &Edge, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let caller = edge.admit(headers).await?;
    let bytes = edge.read_json_body(headers, body).await?;
    let request: CompletionRequest = parse_json(&bytes)?;
    let include_usage = request.stream_options.as_ref().is_some_and(|o| o.include_usage);
    let stream = request.stream;
    let model_name = request.model.clone();
    let chat = to_chat_request(request)?;
    if !stream {
        let response = edge
            .upstreams
            .router()
            .chat(upstream::request(chat, &caller, Some(edge.request_timeout)))
            .await
            .map_err(|status| ApiError::from_status(&status))?
            .into_inner();
        return Ok(axum_json(&completion_json(&response, Some(&model_name))));
    }
    let stream_request = router::ChatStreamRequest {
        message: chat.message,
        session_id: chat.session_id,
        model: chat.model,
        force_route: chat.force_route,
        max_tokens: chat.max_tokens,
        temperature: chat.temperature,
        history: chat.history,
        force_role_id: None,
        custom_instructions: None,
    };
    let events = edge
        .upstreams
        .router()
        .chat_stream(upstream::request(stream_request, &caller, None))
        .await
        .map_err(|status| ApiError::from_status(&status))?
        .into_inner();
    let mut chunks = Chunks::new(model_name, include_usage);
    // `[DONE]` only ends an answer that finished: after an error chunk the stream just ends,
    // as OpenAI's does (its SDKs raise on the error; a client reading up to `[DONE]` alone
    // would take a cut answer for a whole one).
    let done = Event::default().data("[DONE]");
    let events =
        rest::client_stream(events, edge.shutdown.clone(), move |item| chunks.next(item), error_chunk, Some(done));
    Ok(sse(events))
}

fn to_chat_request(request: CompletionRequest) -> Result<router::ChatRequest, ApiError> {
    if request.n.is_some_and(|n| n != 1) {
        return Err(ApiError::bad_request("n", "only one choice is generated"));
    }
    if request.tools.as_ref().is_some_and(|t| !t.is_null() && t.as_array().is_none_or(|a| !a.is_empty())) {
        return Err(ApiError::bad_request(
            "tools",
            "client-side tools are not supported: Switchyard's agent calls the MCP gateway's tools itself",
        ));
    }
    let (force_route, model) = match ROUTE_MODELS.iter().find(|(name, _)| *name == request.model) {
        Some((_, route)) => (*route, None),
        None if request.model.split_once('/').is_some_and(|(p, m)| PROVIDERS.contains(&p) && !m.is_empty()) => {
            (RouteType::Unspecified, Some(request.model.clone()))
        }
        // `gpt-4o` and the like: an SDK's default; the router's own model answers.
        None => (RouteType::Unspecified, None),
    };
    let mut messages = request.messages;
    let last = messages.pop().ok_or_else(|| ApiError::bad_request("messages", "must not be empty"))?;
    if last.role != "user" {
        return Err(ApiError::bad_request("messages", "the last message must come from the user"));
    }
    let message = text(&last.content, messages.len())?;
    let history = messages
        .iter()
        .enumerate()
        .map(|(index, m)| {
            let role = match m.role.as_str() {
                "system" | "developer" => router::ChatRole::System,
                "user" => router::ChatRole::User,
                "assistant" => router::ChatRole::Assistant,
                "tool" => router::ChatRole::Tool,
                other => {
                    return Err(ApiError::bad_request(
                        format!("messages[{index}].role"),
                        format!("unknown role `{other}`"),
                    ));
                }
            };
            Ok(router::ChatMessage { role: role as i32, content: text(&m.content, index)? })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(router::ChatRequest {
        message,
        session_id: request.session_id.unwrap_or_default(),
        model,
        force_route: force_route as i32,
        max_tokens: request.max_completion_tokens.or(request.max_tokens),
        temperature: request.temperature,
        history,
        force_role_id: None,
        custom_instructions: None,
    })
}

fn text(content: &Content, index: usize) -> Result<String, ApiError> {
    match content {
        Content::Text(text) => Ok(text.clone()),
        Content::Missing => Ok(String::new()),
        Content::Parts(parts) => parts
            .iter()
            .map(|part| match (part.kind.as_str(), &part.text) {
                ("text", Some(text)) => Ok(text.as_str()),
                (kind, _) => Err(ApiError::bad_request(
                    format!("messages[{index}].content"),
                    format!("content parts of type `{kind}` are not supported; send text"),
                )),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|texts| texts.join("\n")),
    }
}

/// An error in the middle of a stream, as OpenAI sends one: a `data:` chunk in its error shape.
fn error_chunk(error: &ApiError) -> Event {
    Event::default().data(
        json!({"error": {
            "message": error.message(), "type": "api_error", "param": null,
            "code": crate::error::code_name(error.code()).to_ascii_lowercase(),
        }})
        .to_string(),
    )
}

/// Turns the router's stream into `chat.completion.chunk`s.
struct Chunks {
    id: String,
    model: String,
    created: i64,
    include_usage: bool,
    started: bool,
}

impl Chunks {
    fn new(model: String, include_usage: bool) -> Self {
        Self {
            id: format!("chatcmpl-{}", uuid::Uuid::new_v4()),
            model,
            created: chrono::Utc::now().timestamp(),
            include_usage,
            started: false,
        }
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    }

    fn next(&mut self, item: router::ChatStreamResponse) -> Vec<Event> {
        let Some(event) = item.event else { return Vec::new() };
        let mut out = Vec::new();
        match event {
            ChatEvent::Route(route) => {
                if let Some(id) = Some(&route.id).filter(|id| !id.is_empty()) {
                    self.id.clone_from(id);
                }
                if !self.started {
                    self.started = true;
                    let mut first = self.chunk(json!({"role": "assistant", "content": ""}), None);
                    if let Some(metadata) = &route.metadata {
                        first["_metadata"] = metadata_json(metadata);
                    }
                    first["session_id"] = json!(route.session_id);
                    out.push(first);
                }
            }
            ChatEvent::Delta(delta) => {
                if !delta.content.is_empty() {
                    out.push(self.chunk(json!({"content": delta.content}), None));
                }
            }
            // Tool activity is the router's own business; OpenAI clients see the answer.
            ChatEvent::Tool(_) => {}
            ChatEvent::Completed(done) => {
                let mut last = self.chunk(json!({}), Some(finish_reason(&done.finish_reason)));
                if let Some(metadata) = &done.metadata {
                    last["_metadata"] = metadata_json(metadata);
                }
                out.push(last);
                if self.include_usage {
                    let mut usage = self.chunk(json!({}), None);
                    usage["choices"] = json!([]);
                    usage["usage"] = usage_json(done.usage.as_ref());
                    out.push(usage);
                }
            }
        }
        out.into_iter().map(|chunk| Event::default().data(chunk.to_string())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(json: Value) -> Result<router::ChatRequest, ApiError> {
        to_chat_request(serde_json::from_value(json).unwrap())
    }

    #[test]
    fn messages_become_query_and_history() {
        let chat = request(json!({"model": "switchyard", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": [{"type": "text", "text": "What is"}, {"type": "text", "text": "Rust?"}]},
        ]}))
        .unwrap();
        assert_eq!(chat.message, "What is\nRust?");
        assert_eq!(chat.history.len(), 3);
        assert_eq!(chat.history[0].role(), router::ChatRole::System);
        assert_eq!(chat.history[2].content, "Hello!");
        assert_eq!(chat.force_route(), RouteType::Unspecified);
        assert_eq!(chat.model, None);
    }

    #[test]
    fn model_names_pick_routes_or_models() {
        let one =
            |model: &str| request(json!({"model": model, "messages": [{"role": "user", "content": "x"}]})).unwrap();
        assert_eq!(one("switchyard-multiagent").force_route(), RouteType::Multiagent);
        assert_eq!(one("switchyard-mcp-agent").force_route(), RouteType::McpAgent);
        assert_eq!(one("openai/gpt-4o").model.as_deref(), Some("openai/gpt-4o"));
        assert_eq!(one("gpt-4o").model, None);
    }

    #[test]
    fn unsupported_requests_name_the_field() {
        let err = request(json!({"model": "switchyard", "messages": []})).unwrap_err();
        assert_eq!(err.field(), Some("messages"));
        let err =
            request(json!({"model": "switchyard", "messages": [{"role": "assistant", "content": "x"}]})).unwrap_err();
        assert_eq!(err.field(), Some("messages"));
        let err = request(json!({"model": "switchyard", "n": 2, "messages": [{"role": "user", "content": "x"}]}))
            .unwrap_err();
        assert_eq!(err.field(), Some("n"));
        let err = request(
            json!({"model": "s", "tools": [{"type": "function"}], "messages": [{"role": "user", "content": "x"}]}),
        )
        .unwrap_err();
        assert_eq!(err.field(), Some("tools"));
        let err = request(json!({"model": "s", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}))
            .unwrap_err();
        assert_eq!(err.field(), Some("messages[0].content"));
        let err = request(
            json!({"model": "s", "messages": [{"role": "robot", "content": "a"}, {"role": "user", "content": "b"}]}),
        )
        .unwrap_err();
        assert_eq!(err.field(), Some("messages[0].role"));
    }
}
