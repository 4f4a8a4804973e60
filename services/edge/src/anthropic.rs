//! Anthropic's Messages API (`POST /v1/messages`, `POST /v1/messages/count_tokens`), so the
//! Anthropic SDKs and agent CLIs such as Claude Code use Switchyard unchanged. A request maps
//! onto the router's chat: the last user message is the query (none when the conversation ends
//! in tool results: that continues the caller's tool loop), earlier messages are the history,
//! the caller's tools travel as client tools, and the model name picks a route or a model as
//! on `/v1/chat/completions`. Answers, streamed or not, come back as Anthropic's message object
//! and events; errors in Anthropic's error shape. The body is read by hand, not by serde
//! derive, so that every refusal names the field (`messages[2].content[0].source.data`).

use std::{collections::HashMap, sync::Arc};

use axum::{
    body::Body,
    extract::State,
    response::{IntoResponse, Response, sse::Event},
};
use http::HeaderMap;
use serde_json::{Map, Value, json};
use switchyard_proto::router::v1::{
    self as router, chat_stream_response::Event as ChatEvent, content_part::Part, tool_choice::Choice,
};

use crate::{
    Edge,
    auth::Caller,
    chat::metadata_json,
    conversation::Conversation,
    error::{ApiError, axum_json},
    openai::{route_or_model, stream_request},
    rest::{self, parse_json, sse},
    upstream,
};

type Object = Map<String, Value>;

/// Tokens counted for one image by `count_tokens`: Anthropic's own figure for an image at the
/// largest size it takes unscaled (about 1.15 megapixels, `width * height / 750`), since the
/// edge does not decode images to learn their size.
const IMAGE_TOKENS: u64 = 1_600;

/// A `/v1/messages` request, checked.
#[derive(Debug, Clone, PartialEq)]
struct MessagesRequest {
    model: String,
    max_tokens: u32,
    system: String,
    /// The whole conversation, in the router's terms, in order.
    messages: Vec<router::ChatMessage>,
    /// Where each of `messages` came from.
    origins: Vec<Origin>,
    tools: Vec<router::ClientTool>,
    tool_choice: Option<router::ToolChoice>,
    parallel_tool_calls: Option<bool>,
    temperature: Option<f64>,
    stop: Vec<String>,
    stream: bool,
    /// Switchyard's own: continue this session (`x-session-id` works too).
    session_id: Option<String>,
}

impl MessagesRequest {
    fn parse(body: &Value) -> Result<Self, ApiError> {
        let body = object(body, "body")?;
        let model = required_str(body, "model", "model")?.to_owned();
        let max_tokens = match body.get("max_tokens") {
            None | Some(Value::Null) => return Err(ApiError::bad_request("max_tokens", "is required")),
            Some(value) => value
                .as_u64()
                .filter(|n| *n >= 1)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| ApiError::bad_request("max_tokens", "must be a whole number from 1"))?,
        };
        let system = match body.get("system") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(text)) => text.clone(),
            Some(Value::Array(blocks)) => blocks
                .iter()
                .enumerate()
                .map(|(i, block)| text_block(block, &format!("system[{i}]")))
                .collect::<Result<Vec<_>, _>>()?
                .join("\n"),
            Some(_) => return Err(ApiError::bad_request("system", "must be a string or an array of text blocks")),
        };
        let raw_messages = match body.get("messages") {
            Some(Value::Array(messages)) if !messages.is_empty() => messages,
            Some(Value::Array(_)) => return Err(ApiError::bad_request("messages", "must not be empty")),
            None | Some(Value::Null) => return Err(ApiError::bad_request("messages", "is required")),
            Some(_) => return Err(ApiError::bad_request("messages", "must be an array")),
        };
        let mut messages = Vec::new();
        let mut origins = Vec::new();
        for (i, message) in raw_messages.iter().enumerate() {
            for (message, origin) in conversation_message(message, i)? {
                messages.push(message);
                origins.push(origin);
            }
        }
        let tools = match body.get("tools") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(tools)) => {
                tools.iter().enumerate().map(|(i, tool)| client_tool(tool, i)).collect::<Result<_, _>>()?
            }
            Some(_) => return Err(ApiError::bad_request("tools", "must be an array")),
        };
        let (tool_choice, parallel_tool_calls) = match body.get("tool_choice") {
            None | Some(Value::Null) => (None, None),
            Some(choice) => tool_choice(choice)?,
        };
        let temperature = match body.get("temperature") {
            None | Some(Value::Null) => None,
            Some(value) => Some(
                value
                    .as_f64()
                    .filter(|t| (0.0..=1.0).contains(t))
                    .ok_or_else(|| ApiError::bad_request("temperature", "must be a number from 0 to 1"))?,
            ),
        };
        let stop = match body.get("stop_sequences") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    item.as_str().filter(|s| !s.is_empty()).map(str::to_owned).ok_or_else(|| {
                        ApiError::bad_request(format!("stop_sequences[{i}]"), "must be a non-empty string")
                    })
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(ApiError::bad_request("stop_sequences", "must be an array of strings")),
        };
        // `metadata.user_id` is Anthropic's opaque id for abuse detection; the credential says
        // who the caller is here, so it is checked for shape and not used.
        match body.get("metadata") {
            None | Some(Value::Null) => {}
            Some(Value::Object(metadata)) => {
                optional_str(metadata, "user_id", "metadata.user_id")?;
            }
            Some(_) => return Err(ApiError::bad_request("metadata", "must be an object")),
        }
        let stream = match body.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(stream)) => *stream,
            Some(_) => return Err(ApiError::bad_request("stream", "must be true or false")),
        };
        let session_id = optional_str(body, "session_id", "session_id")?.map(str::to_owned);
        Ok(Self {
            model,
            max_tokens,
            system,
            messages,
            origins,
            tools,
            tool_choice,
            parallel_tool_calls,
            temperature,
            stop,
            stream,
            session_id,
        })
    }

    /// The text of the conversation's first user message, which with the system prompt keys a
    /// stateless caller's conversation.
    fn first_user_text(&self) -> String {
        self.messages.iter().find(|m| m.role() == router::ChatRole::User).map(message_text).unwrap_or_default()
    }

    /// The router's request, and how to name the fields it may refuse as this request did.
    fn into_chat(self, conversation: Conversation) -> Result<(router::ChatRequest, Fields), ApiError> {
        let (force_route, model) = route_or_model(&self.model);
        let mut history = self.messages;
        let mut origins = self.origins;
        // System messages after the last user message or tool results: the router reads every
        // system message as instructions wherever it stands, so they move to the front and the
        // turn ends with what the user (or the tools) said.
        let mut trailing = 0;
        while history.len() > trailing + 1 && history[history.len() - 1 - trailing].role() == router::ChatRole::System {
            trailing += 1;
        }
        history.rotate_right(trailing);
        origins.rotate_right(trailing);
        let message_field = origins.last().map(|o| format!("{}.content", o.path)).unwrap_or_else(|| "messages".into());
        fold_text_after_results(&mut history, &mut origins);
        if !self.system.is_empty() {
            origins.insert(0, Origin::new("system".into()));
            history.insert(
                0,
                router::ChatMessage {
                    role: router::ChatRole::System as i32,
                    content: self.system,
                    ..Default::default()
                },
            );
        }
        let message = match history.last().map(router::ChatMessage::role) {
            // Tool results: the caller's tool loop goes on, with no new user message.
            Some(router::ChatRole::Tool) => String::new(),
            // Text alone is the query; a message with images stays in the history, whole, with
            // its text as the query (as on /v1/chat/completions).
            Some(router::ChatRole::User) if history.last().is_some_and(|m| m.parts.is_empty()) => {
                history.pop().unwrap_or_default().content
            }
            Some(router::ChatRole::User) => history.last().map(message_text).unwrap_or_default(),
            _ => {
                return Err(ApiError::bad_request(
                    "messages",
                    "the last message must come from the user (a user message or tool results); \
                     continuing a prefilled assistant message is not supported",
                ));
            }
        };
        let chat = router::ChatRequest {
            message,
            session_id: conversation.session_id,
            model,
            force_route: force_route as i32,
            max_tokens: Some(self.max_tokens),
            temperature: self.temperature,
            history,
            force_role_id: None,
            custom_instructions: None,
            tools: self.tools,
            tool_choice: self.tool_choice,
            parallel_tool_calls: self.parallel_tool_calls,
            response_format: None,
            stop: self.stop,
            conversation_key: conversation.conversation_key,
            anthropic_version: None,
            anthropic_beta: None,
        };
        Ok((chat, Fields { history: origins, message: message_field }))
    }
}

/// A last message that answers tool calls and then says more (agents such as Claude Code add
/// text blocks after the `tool_result` blocks) still continues the tool loop, as Anthropic
/// reads it: its text and images join the last tool result, so the model sees them right after
/// the results, rather than becoming a new user message that would route the turn anew.
fn fold_text_after_results(history: &mut Vec<router::ChatMessage>, origins: &mut Vec<Origin>) {
    let n = history.len();
    if n < 2 || history[n - 1].role() != router::ChatRole::User || history[n - 2].role() != router::ChatRole::Tool {
        return;
    }
    let same_message = origins[n - 2].path.starts_with(&format!("{}.content[", origins[n - 1].path));
    if !same_message {
        return;
    }
    let (Some(user), Some(user_origin)) = (history.pop(), origins.pop()) else { return };
    let result = &mut history[n - 2];
    let result_origin = &mut origins[n - 2];
    if result.parts.is_empty() {
        // Its text blocks were joined into one text: one part, named after the first block.
        if result.content.is_empty() {
            result_origin.parts.clear();
        } else {
            result.parts.push(text_part(std::mem::take(&mut result.content)));
            result_origin.parts.truncate(1);
        }
    }
    if user.parts.is_empty() {
        result.parts.push(text_part(user.content));
        result_origin.parts.push(user_origin.parts.first().cloned().unwrap_or(user_origin.path));
    } else {
        result.parts.extend(user.parts);
        result_origin.parts.extend(user_origin.parts);
    }
}

fn text_part(text: String) -> router::ContentPart {
    router::ContentPart { part: Some(Part::Text(text)) }
}

/// Where a message of the router's history came from in the caller's request.
#[derive(Debug, Clone, PartialEq, Default)]
struct Origin {
    /// `messages[i]`; `messages[i].content[b]` for a tool result; `system`.
    path: String,
    /// The block each of the router message's parts came from.
    parts: Vec<String>,
    /// The `tool_use` block each of its tool calls came from.
    tool_calls: Vec<String>,
}

impl Origin {
    fn new(path: String) -> Self {
        Self { path, ..Self::default() }
    }
}

/// Names a field of the router's request as the caller's request has it: the router checks
/// tools, tool calls and results, and images, and names what it refuses in its own terms
/// (`history[3].tool_call_id`, `tools[0].parameters_json`).
#[derive(Debug, Clone, PartialEq, Default)]
struct Fields {
    history: Vec<Origin>,
    /// The field the router's `message` came from.
    message: String,
}

impl Fields {
    fn rename(&self, error: ApiError) -> ApiError {
        match error.field().and_then(|field| self.caller_field(field)) {
            Some(field) => error.with_field(field),
            None => error,
        }
    }

    fn caller_field(&self, field: &str) -> Option<String> {
        let renamed = match field {
            "message" => self.message.clone(),
            "history" => "messages".to_owned(),
            "parallel_tool_calls" => "tool_choice.disable_parallel_tool_use".to_owned(),
            "tool_choice.function" => "tool_choice.name".to_owned(),
            "tool_choice.mode" => "tool_choice.type".to_owned(),
            "anthropic_version" => "anthropic-version".to_owned(),
            "anthropic_beta" => "anthropic-beta".to_owned(),
            _ if field.starts_with("tools[") => field.replace(".parameters_json", ".input_schema"),
            _ if field.starts_with("stop[") => format!("stop_sequences{}", &field[4..]),
            _ => {
                let rest = field.strip_prefix("history[")?;
                let (index, rest) = rest.split_once(']')?;
                let origin = self.history.get(index.parse::<usize>().ok()?)?;
                return Some(origin_field(origin, rest));
            }
        };
        Some(renamed)
    }
}

/// `rest` of a router history field (`.tool_calls[0].arguments_json`) under its origin.
fn origin_field(origin: &Origin, rest: &str) -> String {
    let indexed = |rest: &str, name: &str, paths: &[String]| -> Option<(String, String)> {
        let rest = rest.strip_prefix(name)?.strip_prefix('[')?;
        let (index, tail) = rest.split_once(']')?;
        let path = paths.get(index.parse::<usize>().ok()?)?;
        Some((path.clone(), tail.to_owned()))
    };
    if let Some((path, tail)) = indexed(rest, ".tool_calls", &origin.tool_calls) {
        let tail = tail.replace(".arguments_json", ".input");
        return format!("{path}{tail}");
    }
    if let Some((path, tail)) = indexed(rest, ".parts", &origin.parts) {
        // An image part's URL is the image block's source.
        let tail = if tail.starts_with(".image") { ".source".to_owned() } else { tail };
        return format!("{path}{tail}");
    }
    match rest {
        ".tool_call_id" => format!("{}.tool_use_id", origin.path),
        ".tool_calls" | ".parts" => format!("{}.content", origin.path),
        _ => format!("{}{rest}", origin.path),
    }
}

fn object<'a>(value: &'a Value, field: &str) -> Result<&'a Object, ApiError> {
    value.as_object().ok_or_else(|| ApiError::bad_request(field, "must be an object"))
}

fn optional_str<'a>(object: &'a Object, key: &str, field: &str) -> Result<Option<&'a str>, ApiError> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(ApiError::bad_request(field, "must be a string")),
    }
}

fn required_str<'a>(object: &'a Object, key: &str, field: &str) -> Result<&'a str, ApiError> {
    optional_str(object, key, field)?.ok_or_else(|| ApiError::bad_request(field, "is required"))
}

/// The `type` of a content block.
fn block_type<'a>(block: &'a Value, field: &str) -> Result<(&'a Object, &'a str), ApiError> {
    let block = object(block, field)?;
    Ok((block, required_str(block, "type", &format!("{field}.type"))?))
}

fn text_block(block: &Value, field: &str) -> Result<String, ApiError> {
    match block_type(block, field)? {
        (block, "text") => Ok(required_str(block, "text", &format!("{field}.text"))?.to_owned()),
        (_, other) => Err(ApiError::bad_request(format!("{field}.type"), format!("must be `text`, not `{other}`"))),
    }
}

/// An `image` block's source as the URL the router takes (`data:` for base64).
fn image_part(block: &Object, field: &str) -> Result<router::ContentPart, ApiError> {
    let source_field = format!("{field}.source");
    let source = object(block.get("source").unwrap_or(&Value::Null), &source_field)?;
    let url = match required_str(source, "type", &format!("{source_field}.type"))? {
        "base64" => {
            let media_type = required_str(source, "media_type", &format!("{source_field}.media_type"))?;
            if !media_type.starts_with("image/") {
                return Err(ApiError::bad_request(format!("{source_field}.media_type"), "must be an image/ type"));
            }
            let data = required_str(source, "data", &format!("{source_field}.data"))?;
            if data.is_empty() {
                return Err(ApiError::bad_request(format!("{source_field}.data"), "must not be empty"));
            }
            format!("data:{media_type};base64,{data}")
        }
        "url" => required_str(source, "url", &format!("{source_field}.url"))?.to_owned(),
        other => {
            return Err(ApiError::bad_request(
                format!("{source_field}.type"),
                format!("must be `base64` or `url`, not `{other}`"),
            ));
        }
    };
    Ok(router::ContentPart { part: Some(Part::Image(router::ImagePart { url, detail: String::new() })) })
}

/// Text and image blocks as the router's parts (text alone as plain content).
fn content_message(role: router::ChatRole, parts: Vec<router::ContentPart>) -> router::ChatMessage {
    let mut message = router::ChatMessage { role: role as i32, ..Default::default() };
    if parts.iter().all(|p| matches!(p.part, Some(Part::Text(_)))) {
        message.content = parts
            .into_iter()
            .filter_map(|p| match p.part {
                Some(Part::Text(text)) => Some(text),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
    } else {
        message.parts = parts;
    }
    message
}

/// A message's text: its content, or its text parts joined.
fn message_text(message: &router::ChatMessage) -> String {
    if message.parts.is_empty() {
        return message.content.clone();
    }
    let texts: Vec<&str> = message
        .parts
        .iter()
        .filter_map(|p| match &p.part {
            Some(Part::Text(text)) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    texts.join("\n")
}

/// One Anthropic message as the router's messages: a user message's `tool_result` blocks are
/// tool messages of their own (before its text, as Anthropic orders them); an assistant
/// message's `tool_use` blocks are its tool calls.
fn conversation_message(message: &Value, index: usize) -> Result<Vec<(router::ChatMessage, Origin)>, ApiError> {
    let field = format!("messages[{index}]");
    let message = object(message, &field)?;
    let role = required_str(message, "role", &format!("{field}.role"))?;
    let content_field = format!("{field}.content");
    if role == "system" {
        // A system message in the conversation (Anthropic's mid-conversation system messages,
        // which Claude Code sends): instructions, as the top-level `system` is.
        let content = match message.get("content") {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Array(blocks)) => blocks
                .iter()
                .enumerate()
                .map(|(b, block)| text_block(block, &format!("{content_field}[{b}]")))
                .collect::<Result<Vec<_>, _>>()?
                .join("\n"),
            None | Some(Value::Null) => return Err(ApiError::bad_request(content_field, "is required")),
            Some(_) => return Err(ApiError::bad_request(content_field, "must be a string or an array of text blocks")),
        };
        let message = router::ChatMessage { role: router::ChatRole::System as i32, content, ..Default::default() };
        return Ok(vec![(message, Origin::new(field))]);
    }
    let blocks = match message.get("content") {
        Some(Value::String(text)) => {
            let role = match role {
                "user" => router::ChatRole::User,
                "assistant" => router::ChatRole::Assistant,
                other => return Err(unknown_role(&field, other)),
            };
            let message = router::ChatMessage { role: role as i32, content: text.clone(), ..Default::default() };
            return Ok(vec![(message, Origin::new(field))]);
        }
        Some(Value::Array(blocks)) => blocks,
        None | Some(Value::Null) => return Err(ApiError::bad_request(content_field, "is required")),
        Some(_) => return Err(ApiError::bad_request(content_field, "must be a string or an array of blocks")),
    };
    match role {
        "user" => {
            let mut out = Vec::new();
            let mut parts = Vec::new();
            let mut origin = Origin::new(field.clone());
            for (b, block) in blocks.iter().enumerate() {
                let block_field = format!("{content_field}[{b}]");
                match block_type(block, &block_field)? {
                    (block, "text") => parts.push(router::ContentPart {
                        part: Some(Part::Text(required_str(block, "text", &format!("{block_field}.text"))?.to_owned())),
                    }),
                    (block, "image") => parts.push(image_part(block, &block_field)?),
                    (block, "tool_result") => {
                        out.push(tool_result(block, &block_field)?);
                        continue;
                    }
                    (_, other) => {
                        return Err(ApiError::bad_request(
                            format!("{block_field}.type"),
                            format!("a user message takes text, image and tool_result blocks, not `{other}`"),
                        ));
                    }
                }
                origin.parts.push(block_field);
            }
            if !parts.is_empty() || out.is_empty() {
                out.push((content_message(router::ChatRole::User, parts), origin));
            }
            Ok(out)
        }
        "assistant" => {
            let mut texts = Vec::new();
            let mut tool_calls = Vec::new();
            let mut origin = Origin::new(field.clone());
            for (b, block) in blocks.iter().enumerate() {
                let block_field = format!("{content_field}[{b}]");
                match block_type(block, &block_field)? {
                    (block, "text") => texts.push(required_str(block, "text", &format!("{block_field}.text"))?),
                    (block, "tool_use") => {
                        let id = required_str(block, "id", &format!("{block_field}.id"))?.to_owned();
                        let name = required_str(block, "name", &format!("{block_field}.name"))?.to_owned();
                        let input = match block.get("input") {
                            Some(input @ Value::Object(_)) => input.to_string(),
                            None | Some(Value::Null) => "{}".to_owned(),
                            Some(_) => {
                                return Err(ApiError::bad_request(format!("{block_field}.input"), "must be an object"));
                            }
                        };
                        tool_calls.push(router::ToolCall { id, name, arguments_json: input });
                        origin.tool_calls.push(block_field);
                    }
                    // Extended thinking the client hands back: the model's own notes, which
                    // no other vendor reads; dropped from the history.
                    (_, "thinking" | "redacted_thinking") => {}
                    (_, other) => {
                        return Err(ApiError::bad_request(
                            format!("{block_field}.type"),
                            format!("an assistant message takes text and tool_use blocks, not `{other}`"),
                        ));
                    }
                }
            }
            let message = router::ChatMessage {
                role: router::ChatRole::Assistant as i32,
                content: texts.join("\n"),
                tool_calls,
                ..Default::default()
            };
            Ok(vec![(message, origin)])
        }
        other => Err(unknown_role(&field, other)),
    }
}

fn unknown_role(field: &str, role: &str) -> ApiError {
    ApiError::bad_request(format!("{field}.role"), format!("must be `user`, `assistant` or `system`, not `{role}`"))
}

fn tool_result(block: &Object, field: &str) -> Result<(router::ChatMessage, Origin), ApiError> {
    let tool_use_id = required_str(block, "tool_use_id", &format!("{field}.tool_use_id"))?.to_owned();
    let is_error = match block.get("is_error") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(is_error)) => *is_error,
        Some(_) => return Err(ApiError::bad_request(format!("{field}.is_error"), "must be true or false")),
    };
    let content_field = format!("{field}.content");
    let mut origin = Origin::new(field.to_owned());
    let parts = match block.get("content") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(text)) => {
            origin.parts.push(content_field.clone());
            vec![router::ContentPart { part: Some(Part::Text(text.clone())) }]
        }
        Some(Value::Array(blocks)) => blocks
            .iter()
            .enumerate()
            .map(|(b, inner)| {
                let inner_field = format!("{content_field}[{b}]");
                origin.parts.push(inner_field.clone());
                match block_type(inner, &inner_field)? {
                    (inner, "text") => Ok(router::ContentPart {
                        part: Some(Part::Text(required_str(inner, "text", &format!("{inner_field}.text"))?.to_owned())),
                    }),
                    (inner, "image") => image_part(inner, &inner_field),
                    (_, other) => Err(ApiError::bad_request(
                        format!("{inner_field}.type"),
                        format!("a tool result takes text and image blocks, not `{other}`"),
                    )),
                }
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(ApiError::bad_request(content_field, "must be a string or an array of blocks")),
    };
    let mut message = content_message(router::ChatRole::Tool, parts);
    message.tool_call_id = tool_use_id;
    message.is_error = is_error;
    Ok((message, origin))
}

fn client_tool(tool: &Value, index: usize) -> Result<router::ClientTool, ApiError> {
    let field = format!("tools[{index}]");
    let tool = object(tool, &field)?;
    // Anthropic's server tools (`web_search_…`, `bash_…`, `text_editor_…`) run at Anthropic;
    // here only the caller's own tools can be called.
    if let Some(kind) = optional_str(tool, "type", &format!("{field}.type"))?
        && kind != "custom"
    {
        return Err(ApiError::bad_request(
            format!("{field}.type"),
            format!("only the caller's own (`custom`) tools are supported, not `{kind}`"),
        ));
    }
    let name = required_str(tool, "name", &format!("{field}.name"))?.to_owned();
    let description = optional_str(tool, "description", &format!("{field}.description"))?.unwrap_or_default();
    let parameters_json = match tool.get("input_schema") {
        Some(schema @ Value::Object(_)) => schema.to_string(),
        None | Some(Value::Null) => return Err(ApiError::bad_request(format!("{field}.input_schema"), "is required")),
        Some(_) => return Err(ApiError::bad_request(format!("{field}.input_schema"), "must be a JSON Schema object")),
    };
    Ok(router::ClientTool { name, description: description.to_owned(), parameters_json })
}

/// `tool_choice` and the parallel-calls switch inside it.
fn tool_choice(choice: &Value) -> Result<(Option<router::ToolChoice>, Option<bool>), ApiError> {
    let (choice, kind) = block_type(choice, "tool_choice")?;
    let parallel = match choice.get("disable_parallel_tool_use") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(disable)) => Some(!disable),
        Some(_) => {
            return Err(ApiError::bad_request("tool_choice.disable_parallel_tool_use", "must be true or false"));
        }
    };
    let mode = |mode: router::ToolChoiceMode| Choice::Mode(mode as i32);
    let choice = match kind {
        "auto" => mode(router::ToolChoiceMode::Auto),
        "any" => mode(router::ToolChoiceMode::Required),
        "none" => mode(router::ToolChoiceMode::None),
        "tool" => Choice::Function(required_str(choice, "name", "tool_choice.name")?.to_owned()),
        other => {
            return Err(ApiError::bad_request(
                "tool_choice.type",
                format!("must be `auto`, `any`, `tool` or `none`, not `{other}`"),
            ));
        }
    };
    Ok((Some(router::ToolChoice { choice: Some(choice) }), parallel))
}

/// Anthropic's error types by status.
fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    }
}

fn error_body(error: &ApiError) -> Value {
    json!({"type": "error", "error": {"type": error_type(error.status()), "message": error.message()}})
}

/// Anthropic's error shape, `{"type": "error", "error": {"type", "message"}}`, on the status
/// and headers (`retry-after`, `www-authenticate`) the edge's own error response has, which
/// also carries what the failure log needs.
fn anthropic_error(error: ApiError) -> Response {
    let body = error_body(&error).to_string();
    let mut response = error.into_response();
    *response.body_mut() = Body::from(body);
    response
}

/// An error in the middle of a stream: Anthropic's `error` event.
fn error_event(error: &ApiError) -> Event {
    Event::default().event("error").data(error_body(error).to_string())
}

pub async fn messages(State(edge): State<Arc<Edge>>, headers: HeaderMap, body: Body) -> Response {
    match answer(&edge, &headers, body).await {
        Ok(response) => response,
        Err(error) => anthropic_error(error),
    }
}

async fn read_request(edge: &Edge, headers: &HeaderMap, body: Body) -> Result<(Caller, MessagesRequest), ApiError> {
    let caller = edge.admit(headers).await?;
    let bytes = edge.read_json_body(headers, body).await?;
    let body: Value = parse_json(&bytes)?;
    Ok((caller, MessagesRequest::parse(&body)?))
}

async fn answer(edge: &Edge, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let (caller, request) = read_request(edge, headers, body).await?;
    let conversation = Conversation::identify(
        &caller,
        headers,
        "session_id",
        request.session_id.as_deref(),
        &request.system,
        &request.first_user_text(),
    )?;
    let (stream, model_name) = (request.stream, request.model.clone());
    let (mut chat, fields) = request.into_chat(conversation)?;
    chat.anthropic_version = vendor_header(headers, "anthropic-version")?;
    chat.anthropic_beta = vendor_header(headers, "anthropic-beta")?;
    if !stream {
        let response = edge
            .upstreams
            .router()
            .chat(upstream::request(chat, &caller, Some(edge.request_timeout)))
            .await
            .map_err(|status| fields.rename(ApiError::from_status(&status)))?
            .into_inner();
        return Ok(axum_json(&message_json(&response, &model_name)));
    }
    let events = edge
        .upstreams
        .router()
        .chat_stream(upstream::request(stream_request(chat), &caller, None))
        .await
        .map_err(|status| fields.rename(ApiError::from_status(&status)))?
        .into_inner();
    let mut relay = StreamEvents::new(model_name);
    let events = rest::client_stream(events, edge.shutdown.clone(), move |item| relay.next(item), error_event, None);
    Ok(sse(events))
}

/// One of the caller's Anthropic headers, for the router to send on to an Anthropic-wire model
/// (it checks them and names the header it refuses). Several lines of it are one
/// comma-separated list, as HTTP reads them.
fn vendor_header(headers: &HeaderMap, name: &str) -> Result<Option<String>, ApiError> {
    let mut values = Vec::new();
    for value in headers.get_all(name) {
        let value = value.to_str().map_err(|_| ApiError::bad_request(name, "must be printable ASCII"))?;
        if !value.trim().is_empty() {
            values.push(value.trim());
        }
    }
    Ok((!values.is_empty()).then(|| values.join(",")))
}

/// Anthropic's `stop_reason` for the router's finish reason. The router does not say which
/// stop sequence ended an answer, so such a stop is reported as `end_turn`.
fn stop_reason(finish: &str) -> &'static str {
    match finish {
        "length" => "max_tokens",
        "tool_calls" => "tool_use",
        "stop_sequence" => "stop_sequence",
        _ => "end_turn",
    }
}

/// A tool call's arguments as the `input` object Anthropic clients expect; text that is not
/// JSON (a model's slip) is passed on as a string rather than lost.
fn tool_input(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_owned()))
}

fn usage_json(usage: Option<&router::Usage>) -> Value {
    let usage = usage.cloned().unwrap_or_default();
    json!({"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens})
}

/// Anthropic's message object for a ChatResponse; routing metadata rides in `_metadata` and
/// the session in `session_id`, which SDKs ignore.
fn message_json(response: &router::ChatResponse, model: &str) -> Value {
    let message = response.message.clone().unwrap_or_default();
    let mut content = Vec::new();
    if !message.content.is_empty() {
        content.push(json!({"type": "text", "text": message.content}));
    }
    for call in &message.tool_calls {
        content.push(
            json!({"type": "tool_use", "id": call.id, "name": call.name, "input": tool_input(&call.arguments_json)}),
        );
    }
    json!({
        "id": response.id,
        "type": "message",
        "role": "assistant",
        "content": content,
        "model": model,
        "stop_reason": stop_reason(&response.finish_reason),
        "stop_sequence": null,
        "usage": usage_json(response.usage.as_ref()),
        "_metadata": response.metadata.as_ref().map(metadata_json).unwrap_or(Value::Null),
        "session_id": response.session_id,
    })
}

/// The content block being streamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenBlock {
    Text,
    /// The router's tool call index.
    ToolUse(u32),
}

/// Turns the router's stream into Anthropic's events: `message_start` and a `ping`, then
/// each content block as `content_block_start`, its deltas (`text_delta`, or
/// `input_json_delta` for a tool call's arguments) and `content_block_stop`, then
/// `message_delta` with the stop reason and usage, and `message_stop`.
struct StreamEvents {
    id: String,
    model: String,
    started: bool,
    /// Blocks opened so far (the next block's index).
    blocks: u32,
    open: Option<OpenBlock>,
    /// Tool calls streamed as deltas, by the router's index.
    streamed_calls: HashMap<u32, String>,
}

impl StreamEvents {
    fn new(model: String) -> Self {
        Self {
            id: format!("msg_{}", uuid::Uuid::new_v4().simple()),
            model,
            started: false,
            blocks: 0,
            open: None,
            streamed_calls: HashMap::new(),
        }
    }

    fn start(&mut self, out: &mut Vec<(&'static str, Value)>, route: Option<&router::RouteDecided>) {
        if self.started {
            return;
        }
        self.started = true;
        if let Some(route) = route.filter(|r| !r.id.is_empty()) {
            self.id.clone_from(&route.id);
        }
        let mut message = json!({
            "id": self.id, "type": "message", "role": "assistant", "content": [], "model": self.model,
            "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 0, "output_tokens": 0},
        });
        if let Some(route) = route {
            if let Some(metadata) = &route.metadata {
                message["_metadata"] = metadata_json(metadata);
            }
            message["session_id"] = json!(route.session_id);
        }
        out.push(("message_start", json!({"type": "message_start", "message": message})));
        out.push(("ping", json!({"type": "ping"})));
    }

    fn close(&mut self, out: &mut Vec<(&'static str, Value)>) {
        if self.open.take().is_some() {
            out.push(("content_block_stop", json!({"type": "content_block_stop", "index": self.blocks - 1})));
        }
    }

    fn open(&mut self, out: &mut Vec<(&'static str, Value)>, block: OpenBlock, content_block: Value) {
        self.close(out);
        out.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": self.blocks, "content_block": content_block}),
        ));
        self.blocks += 1;
        self.open = Some(block);
    }

    fn delta(&self, out: &mut Vec<(&'static str, Value)>, delta: Value) {
        out.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": self.blocks - 1, "delta": delta}),
        ));
    }

    fn tool_use(&mut self, out: &mut Vec<(&'static str, Value)>, index: u32, id: &str, name: &str) {
        self.streamed_calls.insert(index, id.to_owned());
        self.open(out, OpenBlock::ToolUse(index), json!({"type": "tool_use", "id": id, "name": name, "input": {}}));
    }

    fn next(&mut self, item: router::ChatStreamResponse) -> Vec<Event> {
        self.frames(item).into_iter().map(|(name, data)| Event::default().event(name).data(data.to_string())).collect()
    }

    /// The events, named, for one message of the router's stream.
    fn frames(&mut self, item: router::ChatStreamResponse) -> Vec<(&'static str, Value)> {
        let Some(event) = item.event else { return Vec::new() };
        let mut out = Vec::new();
        match event {
            ChatEvent::Route(route) => self.start(&mut out, Some(&route)),
            ChatEvent::Delta(delta) => {
                self.start(&mut out, None);
                if !delta.content.is_empty() {
                    if self.open != Some(OpenBlock::Text) {
                        self.open(&mut out, OpenBlock::Text, json!({"type": "text", "text": ""}));
                    }
                    self.delta(&mut out, json!({"type": "text_delta", "text": delta.content}));
                }
            }
            // The router's own MCP tool calls: its business, not the caller's.
            ChatEvent::Tool(_) => {}
            ChatEvent::ToolCall(call) => {
                self.start(&mut out, None);
                if self.open != Some(OpenBlock::ToolUse(call.index)) {
                    self.tool_use(&mut out, call.index, &call.id, &call.name);
                }
                if !call.arguments_delta.is_empty() {
                    self.delta(&mut out, json!({"type": "input_json_delta", "partial_json": call.arguments_delta}));
                }
            }
            ChatEvent::Completed(done) => {
                self.start(&mut out, None);
                // Calls the router completed without streaming their pieces come whole.
                for (index, call) in done.tool_calls.iter().enumerate() {
                    let index = u32::try_from(index).unwrap_or(u32::MAX);
                    if self.streamed_calls.values().any(|id| *id == call.id) || self.streamed_calls.contains_key(&index)
                    {
                        continue;
                    }
                    self.tool_use(&mut out, index, &call.id, &call.name);
                    if !call.arguments_json.is_empty() {
                        self.delta(&mut out, json!({"type": "input_json_delta", "partial_json": call.arguments_json}));
                    }
                }
                self.close(&mut out);
                let usage = done.usage.unwrap_or_default();
                let mut delta = json!({
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason(&done.finish_reason), "stop_sequence": null},
                    "usage": {"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens},
                });
                if let Some(metadata) = &done.metadata {
                    delta["_metadata"] = metadata_json(metadata);
                }
                out.push(("message_delta", delta));
                out.push(("message_stop", json!({"type": "message_stop"})));
            }
        }
        out
    }
}

pub async fn count_tokens(State(edge): State<Arc<Edge>>, headers: HeaderMap, body: Body) -> Response {
    match count(&edge, &headers, body).await {
        Ok(response) => response,
        Err(error) => anthropic_error(error),
    }
}

async fn count(edge: &Edge, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    edge.admit(headers).await?;
    let bytes = edge.read_json_body(headers, body).await?;
    let mut body: Value = parse_json(&bytes)?;
    // count_tokens takes a messages request without `max_tokens`.
    if let Some(object) = body.as_object_mut() {
        object.entry("max_tokens").or_insert(json!(1));
    }
    let request = MessagesRequest::parse(&body)?;
    Ok(axum_json(&json!({"input_tokens": estimate_tokens(&request)})))
}

/// An estimate of the input tokens: a quarter of the characters of the system prompt, the
/// messages' text, tool calls and results, and the tools' names, descriptions and schemas,
/// rounded up, plus [`IMAGE_TOKENS`] for each image. Vendors' tokenizers differ from model to
/// model; four characters a token is the rule of thumb they publish for English text and code.
fn estimate_tokens(request: &MessagesRequest) -> u64 {
    let mut chars = request.system.chars().count();
    let mut images = 0_u64;
    for message in &request.messages {
        chars += message.content.chars().count();
        for part in &message.parts {
            match &part.part {
                Some(Part::Text(text)) => chars += text.chars().count(),
                Some(Part::Image(_)) => images += 1,
                None => {}
            }
        }
        for call in &message.tool_calls {
            chars += call.name.chars().count() + call.arguments_json.chars().count();
        }
    }
    for tool in &request.tools {
        chars += tool.name.chars().count() + tool.description.chars().count() + tool.parameters_json.chars().count();
    }
    (chars as u64).div_ceil(4) + images * IMAGE_TOKENS
}

#[cfg(test)]
mod tests {
    use switchyard_proto::router::v1::RouteType;

    use super::*;

    fn parse(body: Value) -> Result<MessagesRequest, ApiError> {
        MessagesRequest::parse(&body)
    }

    fn chat(body: Value) -> Result<router::ChatRequest, ApiError> {
        Ok(parse(body)?.into_chat(Conversation::default())?.0)
    }

    fn model_chat(model: &str) -> router::ChatRequest {
        chat(json!({"model": model, "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]})).unwrap()
    }

    fn field(result: Result<impl std::fmt::Debug, ApiError>) -> String {
        result.unwrap_err().field().unwrap_or_default().to_owned()
    }

    #[test]
    fn a_plain_message_is_the_query_with_the_system_prompt_in_history() {
        let chat = chat(json!({
            "model": "claude-sonnet-4-5", "max_tokens": 100, "temperature": 0.5, "stop_sequences": ["END"],
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": [{"type": "text", "text": "Hello!"}]},
                {"role": "user", "content": [{"type": "text", "text": "What is"}, {"type": "text", "text": "Rust?"}]},
            ],
            "metadata": {"user_id": "u-1"},
            "unknown_field": 1,
        }))
        .unwrap();
        assert_eq!(chat.message, "What is\nRust?");
        assert_eq!(chat.history.len(), 3);
        assert_eq!(chat.history[0].role(), router::ChatRole::System);
        assert_eq!(chat.history[0].content, "Be brief.");
        assert_eq!(chat.history[2].content, "Hello!");
        assert_eq!(chat.max_tokens, Some(100));
        assert_eq!(chat.stop, vec!["END".to_owned()]);
        // An Anthropic model name the router does not know: the router's own model answers.
        assert_eq!((chat.model.as_deref(), chat.force_route()), (None, RouteType::Unspecified));
        assert_eq!(model_chat("switchyard-direct").force_route(), RouteType::Direct);
        assert_eq!(model_chat("anthropic/claude-haiku-4-5").model.as_deref(), Some("anthropic/claude-haiku-4-5"));
    }

    #[test]
    fn tools_tool_use_and_tool_results_map_onto_the_router() {
        let chat = chat(json!({
            "model": "claude", "max_tokens": 100,
            "tools": [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object",
                "properties": {"city": {"type": "string"}}}, "cache_control": {"type": "ephemeral"}}],
            "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true},
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "s"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18C"}]},
                ]},
            ],
        }))
        .unwrap();
        assert_eq!(chat.message, "", "tool results continue the loop");
        assert_eq!(chat.tools.len(), 1);
        assert_eq!(chat.tools[0].name, "get_weather");
        let schema: Value = serde_json::from_str(&chat.tools[0].parameters_json).unwrap();
        assert_eq!(schema["properties"]["city"]["type"], "string");
        assert_eq!(chat.tool_choice.unwrap().choice, Some(Choice::Function("get_weather".into())));
        assert_eq!(chat.parallel_tool_calls, Some(false));
        let assistant = &chat.history[1];
        assert_eq!((assistant.role(), assistant.content.as_str()), (router::ChatRole::Assistant, "Checking."));
        assert_eq!(assistant.tool_calls[0].id, "toolu_1");
        assert_eq!(serde_json::from_str::<Value>(&assistant.tool_calls[0].arguments_json).unwrap()["city"], "Paris");
        let result = &chat.history[2];
        assert_eq!((result.role(), result.tool_call_id.as_str()), (router::ChatRole::Tool, "toolu_1"));
        assert_eq!((result.content.as_str(), result.is_error), ("18C", false));
    }

    #[test]
    fn tool_results_come_before_the_text_of_their_message_and_images_become_parts() {
        let answer = json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "is_error": true, "content": "denied"},
            {"type": "text", "text": "Look at this"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
        ]});
        let call =
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]});
        let image = router::ImagePart { url: "data:image/png;base64,iVBO".into(), detail: String::new() };
        let text = |t: &str| router::ContentPart { part: Some(Part::Text(t.into())) };
        let picture = router::ContentPart { part: Some(Part::Image(image)) };
        // Earlier in the conversation: a tool message, then a user message with the rest.
        let earlier = chat(json!({"model": "m", "max_tokens": 9, "messages": [
            call, answer, {"role": "assistant", "content": "Seen."}, {"role": "user", "content": "Next?"},
        ]}))
        .unwrap();
        assert_eq!(earlier.message, "Next?");
        let roles: Vec<_> = earlier.history.iter().map(router::ChatMessage::role).collect();
        use router::ChatRole::{Assistant, Tool, User};
        assert_eq!(roles, [Assistant, Tool, User, Assistant]);
        assert!(earlier.history[1].is_error);
        assert_eq!(earlier.history[2].parts, vec![text("Look at this"), picture.clone()]);
        // As the last message: the loop goes on, the text and image joining the tool result.
        let last = chat(json!({"model": "m", "max_tokens": 9, "messages": [call, answer]})).unwrap();
        assert_eq!(last.message, "", "a continuation");
        let roles: Vec<_> = last.history.iter().map(router::ChatMessage::role).collect();
        assert_eq!(roles, [Assistant, Tool]);
        assert_eq!(last.history[1].parts, vec![text("denied"), text("Look at this"), picture]);
        assert!(last.history[1].content.is_empty());
    }

    #[test]
    fn system_messages_in_the_conversation_are_instructions_and_never_end_it() {
        // As Claude Code sends it: the user's message, then a system message after it.
        let chat = chat(json!({"model": "m", "max_tokens": 9, "system": "Top.", "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "system", "content": [{"type": "text", "text": "Agent types: a, b."}]},
        ]}))
        .unwrap();
        assert_eq!(chat.message, "Hi");
        let history: Vec<_> = chat.history.iter().map(|m| (m.role(), m.content.as_str())).collect();
        assert_eq!(history, [(router::ChatRole::System, "Top."), (router::ChatRole::System, "Agent types: a, b.")]);
    }

    #[test]
    fn tool_choice_modes() {
        let choice = |value: Value| tool_choice(&value).unwrap().0.unwrap().choice.unwrap();
        assert_eq!(choice(json!({"type": "any"})), Choice::Mode(router::ToolChoiceMode::Required as i32));
        assert_eq!(choice(json!({"type": "auto"})), Choice::Mode(router::ToolChoiceMode::Auto as i32));
        assert_eq!(choice(json!({"type": "none"})), Choice::Mode(router::ToolChoiceMode::None as i32));
    }

    #[test]
    fn bad_requests_name_the_field() {
        let user = json!([{"role": "user", "content": "x"}]);
        assert_eq!(field(parse(json!({"model": "m", "messages": user}))), "max_tokens");
        assert_eq!(field(parse(json!({"model": "m", "max_tokens": "9", "messages": user}))), "max_tokens");
        assert_eq!(field(parse(json!({"model": "m", "max_tokens": 0, "messages": user}))), "max_tokens");
        assert_eq!(field(parse(json!({"max_tokens": 9, "messages": user}))), "model");
        assert_eq!(field(parse(json!({"model": "m", "max_tokens": 9, "messages": []}))), "messages");
        assert_eq!(field(parse(json!([1]))), "body");
        let one = |message: Value| field(parse(json!({"model": "m", "max_tokens": 9, "messages": [message]})));
        assert_eq!(one(json!({"role": "robot", "content": "x"})), "messages[0].role");
        assert_eq!(one(json!({"role": "system", "content": [{"type": "image"}]})), "messages[0].content[0].type");
        assert_eq!(one(json!({"role": "user", "content": 5})), "messages[0].content");
        assert_eq!(one(json!({"role": "user", "content": [{"type": "document"}]})), "messages[0].content[0].type");
        assert_eq!(
            one(
                json!({"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png"}}]})
            ),
            "messages[0].content[0].source.data"
        );
        assert_eq!(
            one(json!({"role": "user", "content": [{"type": "tool_result", "content": "x"}]})),
            "messages[0].content[0].tool_use_id"
        );
        assert_eq!(
            one(json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n", "input": [1]}]})),
            "messages[0].content[0].input"
        );
        let with = |key: &str, value: Value| {
            let mut body = json!({"model": "m", "max_tokens": 9, "messages": user});
            body[key] = value;
            field(parse(body))
        };
        assert_eq!(with("tools", json!([{"name": "t"}])), "tools[0].input_schema");
        assert_eq!(with("tools", json!([{"type": "web_search_20250305", "name": "web_search"}])), "tools[0].type");
        assert_eq!(with("tool_choice", json!({"type": "tool"})), "tool_choice.name");
        assert_eq!(with("tool_choice", json!({"type": "sometimes"})), "tool_choice.type");
        assert_eq!(with("temperature", json!(3)), "temperature");
        assert_eq!(with("stop_sequences", json!("END")), "stop_sequences");
        assert_eq!(with("stream", json!("yes")), "stream");
        assert_eq!(with("metadata", json!({"user_id": 7})), "metadata.user_id");
        assert_eq!(with("system", json!([{"type": "image"}])), "system[0].type");
        let last_assistant = chat(json!({"model": "m", "max_tokens": 9, "messages": [
            {"role": "user", "content": "x"}, {"role": "assistant", "content": "The answer is"}]}));
        assert_eq!(field(last_assistant), "messages");
        let only_system =
            chat(json!({"model": "m", "max_tokens": 9, "messages": [{"role": "system", "content": "x"}]}));
        assert_eq!(field(only_system), "messages");
    }

    fn stream(events: Vec<ChatEvent>) -> Vec<(String, Value)> {
        let mut relay = StreamEvents::new("claude".into());
        events
            .into_iter()
            .flat_map(|event| relay.frames(router::ChatStreamResponse { event: Some(event) }))
            .map(|(name, data)| (name.to_owned(), data))
            .collect()
    }

    #[test]
    fn the_stream_has_anthropics_events_in_order() {
        let route = router::RouteDecided { id: "chat-1".into(), session_id: "s-1".into(), metadata: None };
        let events = stream(vec![
            ChatEvent::Route(route),
            ChatEvent::Delta(router::ContentDelta { content: "Let me ".into() }),
            ChatEvent::Delta(router::ContentDelta { content: "check.".into() }),
            ChatEvent::ToolCall(router::ToolCallDelta {
                index: 0,
                id: "t1".into(),
                name: "ls".into(),
                arguments_delta: String::new(),
            }),
            ChatEvent::ToolCall(router::ToolCallDelta {
                index: 0,
                id: String::new(),
                name: String::new(),
                arguments_delta: "{\"pa".into(),
            }),
            ChatEvent::ToolCall(router::ToolCallDelta {
                index: 0,
                id: String::new(),
                name: String::new(),
                arguments_delta: "th\": 1}".into(),
            }),
            ChatEvent::Completed(router::ChatCompleted {
                finish_reason: "tool_calls".into(),
                usage: Some(router::Usage { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 }),
                tool_calls: vec![router::ToolCall {
                    id: "t1".into(),
                    name: "ls".into(),
                    arguments_json: "{\"path\": 1}".into(),
                }],
                ..Default::default()
            }),
        ]);
        let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "ping",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        assert_eq!(events[0].1["message"]["id"], "chat-1");
        assert_eq!(events[6].1["content_block"]["type"], "tool_use");
        assert_eq!(events[6].1["index"], 1);
        assert_eq!(events[8].1["delta"]["type"], "input_json_delta");
        assert_eq!(events[10].1["delta"]["stop_reason"], "tool_use");
        assert_eq!(events[10].1["usage"]["output_tokens"], 4);
    }

    #[test]
    fn fields_the_router_refuses_are_named_as_the_caller_sent_them() {
        let image = json!({"type": "image", "source": {"type": "url", "url": "http://example.com/a.png"}});
        let (_, fields) = parse(json!({"model": "m", "max_tokens": 9, "system": "Be brief.", "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [{"type": "text", "text": "x"},
                {"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
            {"role": "user", "content": [{"type": "text", "text": "see"},
                {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "r"}, image]},
                image]},
            {"role": "user", "content": "next"},
        ]}))
        .unwrap()
        .into_chat(Conversation::default())
        .unwrap();
        let named = |field: &str| fields.caller_field(field).unwrap_or_default();
        assert_eq!(named("history[0].content"), "system.content");
        assert_eq!(named("history[2].tool_calls[0].arguments_json"), "messages[1].content[1].input");
        assert_eq!(named("history[3].tool_call_id"), "messages[2].content[1].tool_use_id");
        assert_eq!(named("history[3].parts[1].image.url"), "messages[2].content[1].content[1].source");
        assert_eq!(named("history[4].parts[1].image.url"), "messages[2].content[2].source");
        assert_eq!(named("message"), "messages[3].content");
        assert_eq!(named("tools[0].parameters_json"), "tools[0].input_schema");
        assert_eq!(named("stop[1]"), "stop_sequences[1]");
        let error = fields.rename(ApiError::bad_request("history[3].tool_call_id", "answers no call"));
        assert_eq!(error.field(), Some("messages[2].content[1].tool_use_id"));
        assert_eq!(error.message(), "messages[2].content[1].tool_use_id: answers no call");
    }

    #[test]
    fn token_estimates_count_a_quarter_of_the_characters_and_images_whole() {
        let request = parse(json!({"model": "m", "max_tokens": 1, "system": "abcd", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "efgh"},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}]}))
        .unwrap();
        assert_eq!(estimate_tokens(&request), 2 + IMAGE_TOKENS);
    }
}
