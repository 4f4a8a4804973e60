//! OpenAI's chat completions API, so OpenAI SDKs and agent frameworks use Switchyard unchanged:
//! the last user message is the query, earlier messages are the history (tool calls and tool
//! results included), the caller's function tools reach the model and its calls of them come
//! back in OpenAI's shape, and the model name picks a route (`switchyard-direct`,
//! `switchyard-mcp-agent`, `switchyard-multiagent`), lets the router decide (`switchyard`, or
//! anything unknown to us such as `gpt-4o`), or names a model the router knows
//! (`openai/gpt-4o-mini`, `local/smollm2-135m-instruct`). Routing metadata rides in
//! `_metadata`, which SDKs ignore. Errors come in OpenAI's error shape, `param` naming the field.

use std::{collections::HashSet, sync::Arc};

use axum::{
    body::Body,
    extract::State,
    response::{IntoResponse, Response, sse::Event},
};
use http::HeaderMap;
use serde_json::{Map, Value, json};
use switchyard_proto::router::v1::{
    self as router, RouteType, ToolChoiceMode, chat_stream_response::Event as ChatEvent, content_part, response_format,
    tool_choice,
};

use crate::{
    Edge,
    chat::{completion_json, finish_reason, metadata_json, usage_json},
    conversation::Conversation,
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

/// What a client API's model name asks for: a route (the route models), a model the router
/// knows (`provider/model`), or neither (`gpt-4o`, `claude-sonnet-4-5` and the like: an SDK's
/// or agent's default), when the router decides and its own model answers.
pub(crate) fn route_or_model(name: &str) -> (RouteType, Option<String>) {
    match ROUTE_MODELS.iter().find(|(route_model, _)| *route_model == name) {
        Some((_, route)) => (*route, None),
        None if name.split_once('/').is_some_and(|(p, m)| PROVIDERS.contains(&p) && !m.is_empty()) => {
            (RouteType::Unspecified, Some(name.to_owned()))
        }
        None => (RouteType::Unspecified, None),
    }
}

/// OpenAI takes at most four stop sequences.
const MAX_STOP: usize = 4;

/// OpenAI's limit on a function's (and a JSON schema format's) name.
const MAX_NAME_LEN: usize = 64;

/// A request as the router takes it, with what the answer needs from the request.
#[derive(Debug)]
struct Completion {
    chat: router::ChatRequest,
    model_name: String,
    stream: bool,
    include_usage: bool,
}

/// OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}`.
pub(crate) fn openai_error(error: ApiError) -> Response {
    openai_error_naming(error, param)
}

/// OpenAI's error shape with `param` as `param_of` names the error's field (the Responses API
/// names its fields itself).
pub(crate) fn openai_error_naming(error: ApiError, param_of: fn(&str) -> String) -> Response {
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
        "param": error.field().map(param_of),
        "code": crate::error::code_name(error.code()).to_ascii_lowercase(),
    }});
    // The edge's own error response (its status, `retry-after`, `www-authenticate`, and what
    // the failure log reads, so each error is logged once) with OpenAI's body.
    let mut response = error.into_response();
    *response.body_mut() = Body::from(body.to_string());
    response
}

/// A field as the caller sent it: the router names the gRPC request's fields, whose `history`
/// and `message` are this API's `messages` (same indexes: the history is the messages up to
/// the query, or all of them when the last one travels in the history; a user message's
/// `parts` are its content parts, in order), and whose tools and calls are flat.
fn param(field: &str) -> String {
    if field == "message" {
        return "messages".to_owned();
    }
    let field = field.strip_prefix("history").map_or_else(|| field.to_owned(), |rest| format!("messages{rest}"));
    let mut out = String::with_capacity(field.len() + 16);
    for (index, segment) in field.split('.').enumerate() {
        let within = |prefix: &str| field.starts_with(prefix);
        let renamed = match segment {
            _ if segment.starts_with("parts[") => format!("content[{}", &segment["parts[".len()..]),
            "image" if within("messages[") => "image_url.url".to_owned(),
            "name" | "description" if within("tools[") && index == 1 => format!("function.{segment}"),
            "parameters_json" if within("tools[") => "function.parameters".to_owned(),
            "name" if within("messages[") && field.contains(".tool_calls[") => "function.name".to_owned(),
            "arguments_json" => "function.arguments".to_owned(),
            "function" if field == "tool_choice.function" => "function.name".to_owned(),
            "schema_json" => "schema".to_owned(),
            _ => segment.to_owned(),
        };
        if index > 0 {
            out.push('.');
        }
        out.push_str(&renamed);
    }
    out
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
    let body: Value = parse_json(&bytes)?;
    let Completion { mut chat, model_name, stream, include_usage } = to_completion(&body)?;
    let conversation = Conversation::identify(
        &caller,
        headers,
        "session_id",
        Some(chat.session_id.as_str()),
        &system_text(&chat.history),
        &first_user_text(&chat),
    )?;
    chat.session_id = conversation.session_id;
    chat.conversation_key = conversation.conversation_key;
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
    let events = edge
        .upstreams
        .router()
        .chat_stream(upstream::request(stream_request(chat), &caller, None))
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

pub(crate) fn stream_request(chat: router::ChatRequest) -> router::ChatStreamRequest {
    router::ChatStreamRequest {
        message: chat.message,
        session_id: chat.session_id,
        model: chat.model,
        force_route: chat.force_route,
        max_tokens: chat.max_tokens,
        temperature: chat.temperature,
        history: chat.history,
        force_role_id: chat.force_role_id,
        custom_instructions: chat.custom_instructions,
        tools: chat.tools,
        tool_choice: chat.tool_choice,
        parallel_tool_calls: chat.parallel_tool_calls,
        response_format: chat.response_format,
        stop: chat.stop,
        conversation_key: chat.conversation_key,
        anthropic_version: chat.anthropic_version,
        anthropic_beta: chat.anthropic_beta,
    }
}

/// The system prompt a conversation opens with, for its key: every system message's text.
pub(crate) fn system_text(history: &[router::ChatMessage]) -> String {
    let system = history.iter().filter(|m| m.role() == router::ChatRole::System);
    system.map(message_text).collect::<Vec<_>>().join("\n")
}

/// The conversation's first user message's text, for its key (the query on a first request).
fn first_user_text(chat: &router::ChatRequest) -> String {
    chat.history.iter().find(|m| m.role() == router::ChatRole::User).map_or_else(|| chat.message.clone(), message_text)
}

pub(crate) fn message_text(message: &router::ChatMessage) -> String {
    if message.parts.is_empty() {
        return message.content.clone();
    }
    let texts = message.parts.iter().filter_map(|part| match &part.part {
        Some(content_part::Part::Text(text)) if !text.is_empty() => Some(text.as_str()),
        _ => None,
    });
    texts.collect::<Vec<_>>().join("\n")
}

/// The fields a request is read by. Any other field is ignored, as OpenAI's own SDKs send
/// fields a given model does not take (`user`, `seed`, `top_p`, `logprobs`, `metadata`,
/// `store`, `service_tier`, `reasoning_effort`, penalties…); README lists them.
fn to_completion(body: &Value) -> Result<Completion, ApiError> {
    let object = body.as_object().ok_or_else(|| ApiError::bad_request("body", "must be a JSON object"))?;
    let model_name = string(object, "model")?.ok_or_else(|| ApiError::bad_request("model", "is required"))?;
    if u32_field(object, "n")?.is_some_and(|n| n != 1) {
        return Err(ApiError::bad_request("n", "only one choice is generated"));
    }
    // The deprecated functions API: its answers (`message.function_call`, finish_reason
    // "function_call") differ from tools', and every current SDK sends tools.
    for legacy in ["functions", "function_call"] {
        if object.get(legacy).is_some_and(|v| !v.is_null()) {
            return Err(ApiError::bad_request(
                legacy,
                "the deprecated functions API is not supported; send `tools` and `tool_choice`",
            ));
        }
    }
    let (force_route, model) = route_or_model(&model_name);
    let tools = tools(object)?;
    let (message, history) = conversation(object)?;
    let include_usage = match object.get("stream_options").filter(|v| !v.is_null()) {
        None => false,
        Some(Value::Object(options)) => bool_field(options, "include_usage", "stream_options.")?.unwrap_or(false),
        Some(_) => return Err(ApiError::bad_request("stream_options", "must be an object")),
    };
    let chat = router::ChatRequest {
        message,
        session_id: string(object, "session_id")?.unwrap_or_default(),
        model,
        force_route: force_route as i32,
        max_tokens: u32_field(object, "max_completion_tokens")?.or(u32_field(object, "max_tokens")?),
        temperature: number(object, "temperature")?,
        history,
        tool_choice: tool_choice(object, &tools)?,
        parallel_tool_calls: bool_field(object, "parallel_tool_calls", "")?,
        response_format: response_format(object)?,
        stop: stop(object)?,
        tools,
        ..Default::default()
    };
    Ok(Completion { chat, model_name, stream: bool_field(object, "stream", "")?.unwrap_or(false), include_usage })
}

/// The query and the history. A conversation that ends in tool results continues the caller's
/// tool loop: the query is empty and every message is history. A last user message with images
/// is the query by its text (what routing reads) and travels whole, images included, as the
/// last history entry, since the query is text only.
fn conversation(object: &Map<String, Value>) -> Result<(String, Vec<router::ChatMessage>), ApiError> {
    let messages = match object.get("messages") {
        Some(Value::Array(messages)) if !messages.is_empty() => messages,
        Some(Value::Array(_)) => return Err(ApiError::bad_request("messages", "must not be empty")),
        None | Some(Value::Null) => return Err(ApiError::bad_request("messages", "is required")),
        Some(_) => return Err(ApiError::bad_request("messages", "must be an array of messages")),
    };
    let mut history =
        messages.iter().enumerate().map(|(index, m)| chat_message(m, index)).collect::<Result<Vec<_>, _>>()?;
    let last_index = history.len() - 1;
    let last = &history[last_index];
    match last.role() {
        router::ChatRole::Tool => Ok((String::new(), history)),
        router::ChatRole::User if last.parts.is_empty() => {
            let last = history.pop().unwrap_or_default();
            Ok((last.content, history))
        }
        router::ChatRole::User => {
            let text = message_text(last);
            Ok((text, history))
        }
        _ => Err(ApiError::bad_request(
            format!("messages[{last_index}].role"),
            "the last message must come from the user, or be a tool result",
        )),
    }
}

fn chat_message(message: &Value, index: usize) -> Result<router::ChatMessage, ApiError> {
    let at = |field: &str| format!("messages[{index}].{field}");
    let object =
        message.as_object().ok_or_else(|| ApiError::bad_request(format!("messages[{index}]"), "must be an object"))?;
    let role = match object.get("role") {
        Some(Value::String(role)) => role.as_str(),
        None | Some(Value::Null) => return Err(ApiError::bad_request(at("role"), "is required")),
        Some(_) => return Err(ApiError::bad_request(at("role"), "must be a string")),
    };
    let content = object.get("content").filter(|v| !v.is_null());
    let mut chat = router::ChatMessage::default();
    match role {
        "system" | "developer" => {
            chat.role = router::ChatRole::System as i32;
            chat.content = text_content(content, &at("content"))?;
        }
        "user" => {
            chat.role = router::ChatRole::User as i32;
            let parts = user_content(content, &at("content"))?;
            if parts.iter().all(|p| matches!(p.part, Some(content_part::Part::Text(_)))) {
                chat.content = parts
                    .into_iter()
                    .filter_map(|p| match p.part {
                        Some(content_part::Part::Text(text)) => Some(text),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
            } else {
                chat.parts = parts;
            }
        }
        "assistant" => {
            chat.role = router::ChatRole::Assistant as i32;
            chat.content = text_content(content, &at("content"))?;
            chat.tool_calls = match object.get("tool_calls").filter(|v| !v.is_null()) {
                None => Vec::new(),
                Some(Value::Array(calls)) => calls
                    .iter()
                    .enumerate()
                    .map(|(call, value)| tool_call(value, &format!("messages[{index}].tool_calls[{call}]")))
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err(ApiError::bad_request(at("tool_calls"), "must be an array")),
            };
        }
        "tool" => {
            chat.role = router::ChatRole::Tool as i32;
            chat.content = text_content(content, &at("content"))?;
            chat.tool_call_id = match object.get("tool_call_id") {
                Some(Value::String(id)) if !id.is_empty() => id.clone(),
                Some(Value::String(_)) | None | Some(Value::Null) => {
                    return Err(ApiError::bad_request(at("tool_call_id"), "is required in a tool message"));
                }
                Some(_) => return Err(ApiError::bad_request(at("tool_call_id"), "must be a string")),
            };
        }
        "function" => {
            return Err(ApiError::bad_request(
                at("role"),
                "`function` messages belong to the deprecated functions API; send `tool` messages",
            ));
        }
        other => return Err(ApiError::bad_request(at("role"), format!("unknown role `{other}`"))),
    }
    Ok(chat)
}

/// Content that can only be text: a string, or text parts (joined by newlines).
fn text_content(content: Option<&Value>, field: &str) -> Result<String, ApiError> {
    match content {
        None => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(index, part)| match part_kind(part, &format!("{field}[{index}]"))? {
                ("text", part) => part_text(part, &format!("{field}[{index}].text")),
                (kind, _) => Err(ApiError::bad_request(
                    format!("{field}[{index}].type"),
                    format!("content parts of type `{kind}` are not supported here; send text"),
                )),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|texts| texts.join("\n")),
        Some(_) => Err(ApiError::bad_request(field, "must be a string or an array of content parts")),
    }
}

/// A user message's content: text and images, in order.
fn user_content(content: Option<&Value>, field: &str) -> Result<Vec<router::ContentPart>, ApiError> {
    let text = |text: String| router::ContentPart { part: Some(content_part::Part::Text(text)) };
    match content {
        None => Ok(vec![text(String::new())]),
        Some(Value::String(content)) => Ok(vec![text(content.clone())]),
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(index, part)| {
                let at = format!("{field}[{index}]");
                match part_kind(part, &at)? {
                    ("text", part) => Ok(text(part_text(part, &format!("{at}.text"))?)),
                    ("image_url", part) => {
                        Ok(router::ContentPart { part: Some(content_part::Part::Image(image(part, &at)?)) })
                    }
                    (kind, _) => Err(ApiError::bad_request(
                        format!("{at}.type"),
                        format!("content parts of type `{kind}` are not supported; send text and image_url parts"),
                    )),
                }
            })
            .collect(),
        Some(_) => Err(ApiError::bad_request(field, "must be a string or an array of content parts")),
    }
}

pub(crate) fn part_kind<'a>(part: &'a Value, field: &str) -> Result<(&'a str, &'a Map<String, Value>), ApiError> {
    let object = part.as_object().ok_or_else(|| ApiError::bad_request(field, "must be a content part object"))?;
    match object.get("type") {
        Some(Value::String(kind)) => Ok((kind.as_str(), object)),
        _ => Err(ApiError::bad_request(format!("{field}.type"), "is required (a string)")),
    }
}

pub(crate) fn part_text(part: &Map<String, Value>, field: &str) -> Result<String, ApiError> {
    match part.get("text") {
        Some(Value::String(text)) => Ok(text.clone()),
        _ => Err(ApiError::bad_request(field, "is required (a string)")),
    }
}

/// An `image_url` part: an `https:` URL the vendor fetches or a `data:` URL with the bytes.
fn image(part: &Map<String, Value>, field: &str) -> Result<router::ImagePart, ApiError> {
    let (url, detail) = match part.get("image_url") {
        Some(Value::Object(image)) => (image.get("url"), image.get("detail").filter(|v| !v.is_null())),
        // Some clients send the URL itself.
        Some(url @ Value::String(_)) => (Some(url), None),
        _ => return Err(ApiError::bad_request(format!("{field}.image_url"), "is required (an object with `url`)")),
    };
    let url = match url {
        Some(Value::String(url)) => url,
        _ => return Err(ApiError::bad_request(format!("{field}.image_url.url"), "is required (a string)")),
    };
    let https = url.get(..8).is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"));
    let data = url
        .strip_prefix("data:image/")
        .is_some_and(|rest| rest.split_once(',').is_some_and(|(meta, _)| meta.ends_with(";base64")));
    if !(https || data) {
        return Err(ApiError::bad_request(
            format!("{field}.image_url.url"),
            "must be an https: URL or a data:image/…;base64, URL",
        ));
    }
    let detail = match detail {
        None => String::new(),
        Some(Value::String(detail)) if matches!(detail.as_str(), "auto" | "low" | "high") => detail.clone(),
        Some(_) => {
            return Err(ApiError::bad_request(format!("{field}.image_url.detail"), "must be `auto`, `low` or `high`"));
        }
    };
    Ok(router::ImagePart { url: url.clone(), detail })
}

/// An assistant message's tool call: `{"id", "type": "function", "function": {"name", "arguments"}}`.
fn tool_call(value: &Value, field: &str) -> Result<router::ToolCall, ApiError> {
    let call = value.as_object().ok_or_else(|| ApiError::bad_request(field, "must be a tool call object"))?;
    let id = match call.get("id") {
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        _ => return Err(ApiError::bad_request(format!("{field}.id"), "is required (a string)")),
    };
    if let Some(kind) = call.get("type").filter(|v| !v.is_null())
        && kind != "function"
    {
        return Err(ApiError::bad_request(format!("{field}.type"), "must be `function`"));
    }
    let function = match call.get("function") {
        Some(Value::Object(function)) => function,
        _ => return Err(ApiError::bad_request(format!("{field}.function"), "is required (an object)")),
    };
    let name = match function.get("name") {
        Some(Value::String(name)) if !name.is_empty() => name.clone(),
        _ => return Err(ApiError::bad_request(format!("{field}.function.name"), "is required (a string)")),
    };
    let arguments_json = match function.get("arguments") {
        Some(Value::String(arguments)) => arguments.clone(),
        None | Some(Value::Null) => "{}".to_owned(),
        // OpenAI sends the arguments as JSON text; some clients echo them back parsed.
        Some(arguments @ Value::Object(_)) => arguments.to_string(),
        Some(_) => {
            return Err(ApiError::bad_request(format!("{field}.function.arguments"), "must be a string of JSON"));
        }
    };
    Ok(router::ToolCall { id, name, arguments_json })
}

/// `tools`: function tools only, with unique valid names and an object schema.
fn tools(object: &Map<String, Value>) -> Result<Vec<router::ClientTool>, ApiError> {
    let tools = match object.get("tools") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(tools)) => tools,
        Some(_) => return Err(ApiError::bad_request("tools", "must be an array of tools")),
    };
    let mut names = HashSet::new();
    tools
        .iter()
        .enumerate()
        .map(|(index, tool)| {
            let at = |field: &str| format!("tools[{index}]{field}");
            let tool = tool.as_object().ok_or_else(|| ApiError::bad_request(at(""), "must be a tool object"))?;
            match tool.get("type") {
                Some(Value::String(kind)) if kind == "function" => {}
                Some(Value::String(kind)) => {
                    return Err(ApiError::bad_request(
                        at(".type"),
                        format!("tools of type `{kind}` are not supported; send `function` tools"),
                    ));
                }
                _ => return Err(ApiError::bad_request(at(".type"), "is required (`function`)")),
            }
            let function = match tool.get("function") {
                Some(Value::Object(function)) => function,
                _ => return Err(ApiError::bad_request(at(".function"), "is required (an object)")),
            };
            let name = match function.get("name") {
                Some(Value::String(name)) => name,
                _ => return Err(ApiError::bad_request(at(".function.name"), "is required (a string)")),
            };
            check_name(name, &at(".function.name"))?;
            if !names.insert(name.as_str()) {
                return Err(ApiError::bad_request(at(".function.name"), format!("`{name}` is defined twice")));
            }
            let description = match function.get("description") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(description)) => description.clone(),
                Some(_) => return Err(ApiError::bad_request(at(".function.description"), "must be a string")),
            };
            let parameters_json = match function.get("parameters") {
                None | Some(Value::Null) => String::new(),
                Some(parameters @ Value::Object(_)) => parameters.to_string(),
                Some(_) => {
                    return Err(ApiError::bad_request(at(".function.parameters"), "must be a JSON Schema object"));
                }
            };
            Ok(router::ClientTool { name: name.clone(), description, parameters_json })
        })
        .collect()
}

/// OpenAI's rule for function names: 1 to 64 characters of `[A-Za-z0-9_-]`.
pub(crate) fn check_name(name: &str, field: &str) -> Result<(), ApiError> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(ApiError::bad_request(field, format!("must be 1 to {MAX_NAME_LEN} characters")));
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(ApiError::bad_request(field, "may hold only letters, digits, `_` and `-`"));
    }
    Ok(())
}

/// `tool_choice`: `auto`, `none`, `required`, or `{"type": "function", "function": {"name"}}`
/// naming one of the request's tools.
fn tool_choice(
    object: &Map<String, Value>,
    tools: &[router::ClientTool],
) -> Result<Option<router::ToolChoice>, ApiError> {
    let mode = |mode: ToolChoiceMode| Some(router::ToolChoice { choice: Some(tool_choice::Choice::Mode(mode as i32)) });
    let choice = match object.get("tool_choice") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(choice)) => match choice.as_str() {
            "auto" => mode(ToolChoiceMode::Auto),
            "none" => mode(ToolChoiceMode::None),
            "required" => mode(ToolChoiceMode::Required),
            other => {
                return Err(ApiError::bad_request(
                    "tool_choice",
                    format!("`{other}` is not `auto`, `none`, `required` or a function"),
                ));
            }
        },
        Some(Value::Object(choice)) => {
            if choice.get("type").and_then(Value::as_str) != Some("function") {
                return Err(ApiError::bad_request("tool_choice.type", "must be `function`"));
            }
            let name = choice.get("function").and_then(|f| f.get("name")).and_then(Value::as_str);
            let name = name.ok_or_else(|| ApiError::bad_request("tool_choice.function.name", "is required"))?;
            if !tools.iter().any(|tool| tool.name == name) {
                return Err(ApiError::bad_request(
                    "tool_choice.function.name",
                    format!("`{name}` is not one of the request's tools"),
                ));
            }
            Some(router::ToolChoice { choice: Some(tool_choice::Choice::Function(name.to_owned())) })
        }
        Some(_) => return Err(ApiError::bad_request("tool_choice", "must be a string or an object")),
    };
    // `auto` and `none` without tools mean what no tool_choice means; forcing a call needs tools.
    let forces = matches!(
        choice.as_ref().and_then(|c| c.choice.as_ref()),
        Some(tool_choice::Choice::Mode(m)) if *m == ToolChoiceMode::Required as i32
    );
    if tools.is_empty() && forces {
        return Err(ApiError::bad_request("tool_choice", "`required` needs `tools`"));
    }
    Ok(choice)
}

/// `response_format`: `text` (the default), `json_object`, or `json_schema`.
fn response_format(object: &Map<String, Value>) -> Result<Option<router::ResponseFormat>, ApiError> {
    let format = match object.get("response_format") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(format)) => format,
        Some(_) => return Err(ApiError::bad_request("response_format", "must be an object")),
    };
    let format = match format.get("type").and_then(Value::as_str) {
        Some("text") => return Ok(None),
        Some("json_object") => response_format::Format::JsonObject(true),
        Some("json_schema") => {
            let schema = match format.get("json_schema") {
                Some(Value::Object(schema)) => schema,
                _ => return Err(ApiError::bad_request("response_format.json_schema", "is required (an object)")),
            };
            let name = match schema.get("name") {
                Some(Value::String(name)) => name.clone(),
                _ => return Err(ApiError::bad_request("response_format.json_schema.name", "is required (a string)")),
            };
            check_name(&name, "response_format.json_schema.name")?;
            let description = match schema.get("description") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(description)) => description.clone(),
                Some(_) => {
                    return Err(ApiError::bad_request("response_format.json_schema.description", "must be a string"));
                }
            };
            let schema_json = match schema.get("schema") {
                None | Some(Value::Null) => String::new(),
                Some(schema @ Value::Object(_)) => schema.to_string(),
                Some(_) => {
                    return Err(ApiError::bad_request(
                        "response_format.json_schema.schema",
                        "must be a JSON Schema object",
                    ));
                }
            };
            let strict = bool_field(schema, "strict", "response_format.json_schema.")?.unwrap_or(false);
            response_format::Format::JsonSchema(router::JsonSchemaFormat { name, description, schema_json, strict })
        }
        _ => {
            return Err(ApiError::bad_request(
                "response_format.type",
                "must be `text`, `json_object` or `json_schema`",
            ));
        }
    };
    Ok(Some(router::ResponseFormat { format: Some(format) }))
}

/// `stop`: a string or up to four strings.
fn stop(object: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    let stops = match object.get("stop") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(stop)) => vec![stop.clone()],
        Some(Value::Array(stops)) => stops
            .iter()
            .enumerate()
            .map(|(index, stop)| {
                stop.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| ApiError::bad_request(format!("stop[{index}]"), "must be a string"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(ApiError::bad_request("stop", "must be a string or an array of strings")),
    };
    if stops.len() > MAX_STOP {
        return Err(ApiError::bad_request("stop", format!("at most {MAX_STOP} stop sequences")));
    }
    if let Some(index) = stops.iter().position(String::is_empty) {
        return Err(ApiError::bad_request(format!("stop[{index}]"), "must not be empty"));
    }
    Ok(stops)
}

pub(crate) fn string(object: &Map<String, Value>, field: &str) -> Result<Option<String>, ApiError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(ApiError::bad_request(field, "must be a string")),
    }
}

pub(crate) fn bool_field(object: &Map<String, Value>, field: &str, prefix: &str) -> Result<Option<bool>, ApiError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(value)) => Ok(Some(*value)),
        Some(_) => Err(ApiError::bad_request(format!("{prefix}{field}"), "must be true or false")),
    }
}

pub(crate) fn u32_field(object: &Map<String, Value>, field: &str) -> Result<Option<u32>, ApiError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(number)) => number
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| ApiError::bad_request(field, "must be a whole number from 0 to 4294967295")),
        Some(_) => Err(ApiError::bad_request(field, "must be a number")),
    }
}

pub(crate) fn number(object: &Map<String, Value>, field: &str) -> Result<Option<f64>, ApiError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(number)) => Ok(number.as_f64()),
        Some(_) => Err(ApiError::bad_request(field, "must be a number")),
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
    /// The indexes of the tool calls whose pieces were sent: a call the router reports only
    /// whole, at the end, is sent whole then.
    calls_sent: HashSet<u32>,
}

impl Chunks {
    fn new(model: String, include_usage: bool) -> Self {
        Self {
            id: format!("chatcmpl-{}", uuid::Uuid::new_v4()),
            model,
            created: chrono::Utc::now().timestamp(),
            include_usage,
            started: false,
            calls_sent: HashSet::new(),
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

    /// A piece of a tool call as OpenAI streams it: the first piece with the call's id, type
    /// and name, then argument text.
    fn tool_call_chunk(&mut self, index: u32, id: &str, name: &str, arguments: &str) -> Value {
        let mut call = json!({"index": index, "function": {"arguments": arguments}});
        if !id.is_empty() || !self.calls_sent.contains(&index) {
            call["id"] = json!(id);
            call["type"] = json!("function");
            call["function"]["name"] = json!(name);
        }
        self.calls_sent.insert(index);
        self.chunk(json!({"tool_calls": [call]}), None)
    }

    fn next(&mut self, item: router::ChatStreamResponse) -> Vec<Event> {
        self.chunks(item).into_iter().map(|chunk| Event::default().data(chunk.to_string())).collect()
    }

    fn chunks(&mut self, item: router::ChatStreamResponse) -> Vec<Value> {
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
            ChatEvent::ToolCall(piece) => {
                out.push(self.tool_call_chunk(piece.index, &piece.id, &piece.name, &piece.arguments_delta));
            }
            // Tool activity of the gateway's tools is the router's own business; OpenAI
            // clients see the answer and the calls of their own tools.
            ChatEvent::Tool(_) => {}
            ChatEvent::Completed(done) => {
                for (index, call) in (0u32..).zip(&done.tool_calls) {
                    if !self.calls_sent.contains(&index) {
                        out.push(self.tool_call_chunk(index, &call.id, &call.name, &call.arguments_json));
                    }
                }
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
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(json: Value) -> Result<router::ChatRequest, ApiError> {
        to_completion(&json).map(|completion| completion.chat)
    }

    fn user(text: &str) -> Value {
        json!({"role": "user", "content": text})
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
        assert!(chat.tools.is_empty() && chat.tool_choice.is_none() && chat.response_format.is_none());
    }

    #[test]
    fn model_names_pick_routes_or_models() {
        let one = |model: &str| request(json!({"model": model, "messages": [user("x")]})).unwrap();
        assert_eq!(one("switchyard-multiagent").force_route(), RouteType::Multiagent);
        assert_eq!(one("switchyard-mcp-agent").force_route(), RouteType::McpAgent);
        assert_eq!(one("openai/gpt-4o").model.as_deref(), Some("openai/gpt-4o"));
        assert_eq!(one("gpt-4o").model, None);
    }

    #[test]
    fn tools_and_their_options_reach_the_router_unchanged() {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
        let chat = request(json!({
            "model": "switchyard",
            "messages": [user("Weather in Paris?")],
            "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather now", "parameters": schema}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "parallel_tool_calls": false,
            "stop": "END",
            "response_format": {"type": "json_schema", "json_schema": {"name": "weather", "schema": {"type": "object"}, "strict": true}},
            "seed": 7, "user": "ann", "top_p": 0.5,
        }))
        .unwrap();
        assert_eq!(chat.tools.len(), 1);
        assert_eq!(chat.tools[0].name, "get_weather");
        assert_eq!(chat.tools[0].description, "Weather now");
        assert_eq!(serde_json::from_str::<Value>(&chat.tools[0].parameters_json).unwrap(), schema);
        assert_eq!(chat.tool_choice.unwrap().choice, Some(tool_choice::Choice::Function("get_weather".into())));
        assert_eq!(chat.parallel_tool_calls, Some(false));
        assert_eq!(chat.stop, ["END"]);
        let Some(response_format::Format::JsonSchema(format)) = chat.response_format.unwrap().format else {
            panic!("a json_schema format")
        };
        assert_eq!(
            (format.name.as_str(), format.schema_json.as_str(), format.strict),
            ("weather", "{\"type\":\"object\"}", true)
        );
        let chat = request(json!({"model": "s", "messages": [user("x")], "tool_choice": "none", "stop": ["a", "b"],
            "response_format": {"type": "json_object"}}))
        .unwrap();
        assert_eq!(chat.tool_choice.unwrap().choice, Some(tool_choice::Choice::Mode(ToolChoiceMode::None as i32)));
        assert_eq!(chat.stop, ["a", "b"]);
        assert_eq!(chat.response_format.unwrap().format, Some(response_format::Format::JsonObject(true)));
    }

    #[test]
    fn a_tool_round_trip_is_history_and_ends_in_a_continuation() {
        let chat = request(json!({"model": "switchyard", "messages": [
            {"role": "system", "content": "Use tools."},
            user("Weather in Paris?"),
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "noon"}]},
        ]}))
        .unwrap();
        assert_eq!(chat.message, "", "a conversation ending in tool results continues the loop");
        assert_eq!(chat.history.len(), 5);
        let assistant = &chat.history[2];
        assert_eq!(assistant.role(), router::ChatRole::Assistant);
        assert_eq!(assistant.content, "");
        assert_eq!(assistant.tool_calls[0].id, "call_1");
        assert_eq!(assistant.tool_calls[0].name, "get_weather");
        assert_eq!(assistant.tool_calls[0].arguments_json, "{\"city\":\"Paris\"}");
        assert_eq!(assistant.tool_calls[1].name, "get_time");
        assert_eq!(chat.history[3].role(), router::ChatRole::Tool);
        assert_eq!(chat.history[3].tool_call_id, "call_1");
        assert_eq!(chat.history[3].content, "18C, sunny");
        assert_eq!(chat.history[4].content, "noon");
    }

    #[test]
    fn image_parts_travel_in_order_with_the_last_user_message_in_the_history() {
        let chat = request(json!({"model": "switchyard", "messages": [
            user("Hi"),
            {"role": "user", "content": [
                {"type": "text", "text": "What is in"},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ]},
        ]}))
        .unwrap();
        assert_eq!(chat.message, "What is in", "the text is the query routing reads");
        assert_eq!(chat.history.len(), 2);
        let last = &chat.history[1];
        assert_eq!(last.role(), router::ChatRole::User);
        assert_eq!(last.content, "");
        assert_eq!(last.parts.len(), 3);
        assert_eq!(last.parts[0].part, Some(content_part::Part::Text("What is in".into())));
        let Some(content_part::Part::Image(image)) = &last.parts[1].part else { panic!("an image") };
        assert_eq!((image.url.as_str(), image.detail.as_str()), ("https://example.com/cat.png", "low"));
        let Some(content_part::Part::Image(image)) = &last.parts[2].part else { panic!("an image") };
        assert!(image.url.starts_with("data:image/png") && image.detail.is_empty());
        assert_eq!(message_text(last), "What is in");
    }

    #[test]
    fn bad_requests_name_the_field() {
        let field = |body: Value| request(body).unwrap_err().field().map(str::to_owned).unwrap_or_default();
        let with = |extra: Value| {
            let mut body = json!({"model": "s", "messages": [user("x")]});
            body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            field(body)
        };
        assert_eq!(field(json!({"model": "s", "messages": []})), "messages");
        assert_eq!(field(json!({"model": "s", "messages": "hi"})), "messages");
        assert_eq!(field(json!({"messages": [user("x")]})), "model");
        assert_eq!(field(json!({"model": 4, "messages": [user("x")]})), "model");
        assert_eq!(
            field(json!({"model": "s", "messages": [{"role": "assistant", "content": "x"}]})),
            "messages[0].role"
        );
        assert_eq!(
            field(json!({"model": "s", "messages": [{"role": "robot", "content": "a"}, user("b")]})),
            "messages[0].role"
        );
        assert_eq!(field(json!({"model": "s", "messages": [{"content": "a"}]})), "messages[0].role");
        assert_eq!(field(json!({"model": "s", "messages": [{"role": "user", "content": 5}]})), "messages[0].content");
        assert_eq!(
            field(json!({"model": "s", "messages": [{"role": "user", "content": [{"type": "input_audio"}]}]})),
            "messages[0].content[0].type"
        );
        assert_eq!(
            field(
                json!({"model": "s", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}]}]})
            ),
            "messages[0].content[0].image_url.url"
        );
        assert_eq!(
            field(
                json!({"model": "s", "messages": [{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://x"}}]}, user("b")]})
            ),
            "messages[0].content[0].type"
        );
        assert_eq!(
            field(json!({"model": "s", "messages": [{"role": "tool", "content": "r"}]})),
            "messages[0].tool_call_id"
        );
        assert_eq!(
            field(
                json!({"model": "s", "messages": [user("a"), {"role": "assistant", "tool_calls": [{"type": "function"}]}, {"role": "tool", "tool_call_id": "c", "content": "r"}]})
            ),
            "messages[1].tool_calls[0].id"
        );
        assert_eq!(with(json!({"n": 2})), "n");
        assert_eq!(with(json!({"tools": {"a": 1}})), "tools");
        assert_eq!(with(json!({"tools": [{"type": "custom", "custom": {"name": "x"}}]})), "tools[0].type");
        assert_eq!(with(json!({"tools": [{"type": "function"}]})), "tools[0].function");
        assert_eq!(
            with(json!({"tools": [{"type": "function", "function": {"name": "a b"}}]})),
            "tools[0].function.name"
        );
        assert_eq!(
            with(
                json!({"tools": [{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "a"}}]})
            ),
            "tools[1].function.name"
        );
        assert_eq!(
            with(json!({"tools": [{"type": "function", "function": {"name": "a", "parameters": "{}"}}]})),
            "tools[0].function.parameters"
        );
        assert_eq!(with(json!({"tool_choice": "sometimes"})), "tool_choice");
        assert_eq!(with(json!({"tool_choice": "required"})), "tool_choice");
        assert_eq!(
            with(
                json!({"tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": {"type": "function", "function": {"name": "b"}}})
            ),
            "tool_choice.function.name"
        );
        assert_eq!(with(json!({"parallel_tool_calls": "yes"})), "parallel_tool_calls");
        assert_eq!(with(json!({"stop": ["a", "b", "c", "d", "e"]})), "stop");
        assert_eq!(with(json!({"stop": [1]})), "stop[0]");
        assert_eq!(with(json!({"response_format": {"type": "yaml"}})), "response_format.type");
        assert_eq!(with(json!({"response_format": {"type": "json_schema"}})), "response_format.json_schema");
        assert_eq!(
            with(json!({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}})),
            "response_format.json_schema.name"
        );
        assert_eq!(with(json!({"functions": [{"name": "f"}]})), "functions");
        assert_eq!(with(json!({"function_call": "auto"})), "function_call");
        assert_eq!(with(json!({"max_tokens": -1})), "max_tokens");
        assert_eq!(with(json!({"temperature": "hot"})), "temperature");
        assert_eq!(with(json!({"stream": "yes"})), "stream");
        assert_eq!(with(json!({"stream_options": {"include_usage": 1}})), "stream_options.include_usage");
    }

    #[test]
    fn router_fields_are_named_as_the_caller_sent_them() {
        assert_eq!(param("history[3].tool_call_id"), "messages[3].tool_call_id");
        assert_eq!(param("message"), "messages");
        assert_eq!(param("history[1].parts[2].image"), "messages[1].content[2].image_url.url");
        assert_eq!(param("history[1].parts[0]"), "messages[1].content[0]");
        assert_eq!(param("history[2].tool_calls[1].name"), "messages[2].tool_calls[1].function.name");
        assert_eq!(param("history[2].tool_calls[1].arguments_json"), "messages[2].tool_calls[1].function.arguments");
        assert_eq!(param("tools[0].name"), "tools[0].function.name");
        assert_eq!(param("tools[3].parameters_json"), "tools[3].function.parameters");
        assert_eq!(param("tool_choice.function"), "tool_choice.function.name");
        assert_eq!(param("response_format.json_schema.schema_json"), "response_format.json_schema.schema");
        assert_eq!(param("response_format.json_schema.schema"), "response_format.json_schema.schema");
        assert_eq!(param("stop[1]"), "stop[1]");
        assert_eq!(param("session_id"), "session_id");
    }

    #[test]
    fn streamed_tool_calls_have_openai_pieces_and_finish_reason() {
        let mut chunks = Chunks::new("switchyard".into(), false);
        let event = |event: ChatEvent| router::ChatStreamResponse { event: Some(event) };
        let piece = |index: u32, id: &str, name: &str, arguments: &str| {
            event(ChatEvent::ToolCall(router::ToolCallDelta {
                index,
                id: id.into(),
                name: name.into(),
                arguments_delta: arguments.into(),
            }))
        };
        let opening = chunks.chunks(piece(0, "call_1", "get_weather", ""));
        let call = &opening[0]["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!((call["index"].as_u64(), call["id"].as_str()), (Some(0), Some("call_1")));
        assert_eq!(call["function"]["name"], "get_weather");
        let first = chunks.tool_call_chunk(1, "call_2", "get_time", "{}");
        assert_eq!(first["choices"][0]["delta"]["tool_calls"][0]["id"], "call_2");
        assert_eq!(first["choices"][0]["delta"]["tool_calls"][0]["type"], "function");
        assert_eq!(first["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "get_time");
        let more = chunks.tool_call_chunk(0, "", "", "{\"city\":");
        let call = &more["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(call["index"], 0);
        assert_eq!(call["function"]["arguments"], "{\"city\":");
        assert!(call.get("id").is_none() && call["function"].get("name").is_none(), "{call}");
        // A call reported only whole at the end is sent whole before the last chunk.
        let done = event(ChatEvent::Completed(router::ChatCompleted {
            finish_reason: "tool_calls".into(),
            tool_calls: vec![
                router::ToolCall { id: "call_1".into(), name: "get_weather".into(), arguments_json: "{}".into() },
                router::ToolCall { id: "call_2".into(), name: "get_time".into(), arguments_json: "{}".into() },
                router::ToolCall { id: "call_3".into(), name: "get_date".into(), arguments_json: "{}".into() },
            ],
            ..Default::default()
        }));
        let last = chunks.chunks(done);
        assert_eq!(last.len(), 2, "the unsent third call, then the finish: {last:?}");
        assert_eq!(last[0]["choices"][0]["delta"]["tool_calls"][0]["id"], "call_3");
        assert_eq!(last[0]["choices"][0]["delta"]["tool_calls"][0]["index"], 2);
        assert_eq!(last[1]["choices"][0]["finish_reason"], "tool_calls");
    }
}
