//! A chat turn's request, validated at the edge of the RPC: every field checked against the
//! named limits, errors naming the field.

use std::collections::HashSet;

use switchyard_kit::{SessionId, text::reject_nul};
use switchyard_llm::{AnthropicHeaders, ContentPart, Image, ModelRef, ResponseFormat, ToolCall, ToolChoice, ToolSpec};
use switchyard_proto::router::v1 as pb;

use crate::{
    error::RouterError,
    limits::{
        Limits, MAX_ANTHROPIC_BETA_BYTES, MAX_ANTHROPIC_VERSION_BYTES, MAX_CLIENT_TOOLS, MAX_CONVERSATION_KEY_BYTES,
        MAX_INSTRUCTIONS_BYTES, MAX_ROLE_ID_BYTES, MAX_STOP_BYTES, MAX_STOP_SEQUENCES, MAX_TEMPERATURE,
        MAX_TOOL_NAME_BYTES, MAX_TOOL_SCHEMA_BYTES,
    },
    route::{Route, route_from_proto},
};

/// Who wrote an earlier message the caller sends along.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speaker {
    User,
    Assistant,
    /// Caller-supplied instructions (an OpenAI-style client's system message).
    System,
    /// The result of one of the caller's tools.
    Tool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HistoryMessage {
    pub speaker: Speaker,
    /// The message's text (its text parts joined, when it came in parts).
    pub content: String,
    /// An assistant message's calls of the caller's tools.
    pub tool_calls: Vec<ToolCall>,
    /// The call a tool result answers (tool messages only).
    pub tool_call_id: String,
    pub is_error: bool,
    /// Text and images in order, for a message that came in parts (empty otherwise; the text
    /// parts are `content` as well).
    pub parts: Vec<ContentPart>,
}

impl HistoryMessage {
    pub fn text(speaker: Speaker, content: impl Into<String>) -> Self {
        Self {
            speaker,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: String::new(),
            is_error: false,
            parts: Vec::new(),
        }
    }

    pub fn has_images(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, ContentPart::Image(_)))
    }
}

/// One turn as the caller asked for it.
#[derive(Debug, Clone, Default)]
pub struct TurnRequest {
    pub message: String,
    pub session_id: Option<SessionId>,
    pub model: Option<ModelRef>,
    pub force_route: Option<Route>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub history: Vec<HistoryMessage>,
    pub force_role_id: Option<String>,
    pub custom_instructions: Option<String>,
    /// The caller's own function tools: with them the turn is the caller's agent loop.
    pub tools: Vec<ToolSpec>,
    pub tool_choice: ToolChoice,
    pub parallel_tool_calls: Option<bool>,
    pub response_format: Option<ResponseFormat>,
    pub stop: Vec<String>,
    /// A stateless caller's conversation, standing in for a session id (ignored with one).
    pub conversation_key: Option<String>,
    /// The caller's `anthropic-version` and `anthropic-beta`, for the turn's calls of an
    /// Anthropic-wire model.
    pub anthropic_headers: AnthropicHeaders,
}

impl TurnRequest {
    /// The turn carries the caller's own tools.
    pub fn has_client_tools(&self) -> bool {
        !self.tools.is_empty()
    }

    /// The turn continues a tool loop: the history ends in tool results. No routing call, no
    /// role switch, no model change; `message` is at most text the caller sent with the results.
    pub fn is_continuation(&self) -> bool {
        self.history.last().is_some_and(|m| m.speaker == Speaker::Tool)
    }

    /// What a continuation brings that the model has not seen: the trailing tool results and
    /// any text sent with them (what context switching would look at, were it not held back).
    pub fn continuation_text(&self) -> String {
        let start = self.history.iter().rposition(|m| m.speaker != Speaker::Tool).map_or(0, |i| i + 1);
        let mut texts: Vec<&str> = self.history[start..].iter().map(|m| m.content.as_str()).collect();
        texts.push(&self.message);
        texts.retain(|t| !t.trim().is_empty());
        texts.join("\n")
    }

    /// The user text that started the turn's tool loop: the last user message of the history.
    pub fn loop_user_text(&self) -> Option<&str> {
        self.history.iter().rev().find(|m| m.speaker == Speaker::User).map(|m| m.content.as_str())
    }
}

/// The fields ChatRequest and ChatStreamRequest share.
pub struct RawTurn {
    pub message: String,
    pub session_id: String,
    pub model: Option<String>,
    pub force_route: i32,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub history: Vec<pb::ChatMessage>,
    pub force_role_id: Option<String>,
    pub custom_instructions: Option<String>,
    pub tools: Vec<pb::ClientTool>,
    pub tool_choice: Option<pb::ToolChoice>,
    pub parallel_tool_calls: Option<bool>,
    pub response_format: Option<pb::ResponseFormat>,
    pub stop: Vec<String>,
    pub conversation_key: String,
    pub anthropic_version: Option<String>,
    pub anthropic_beta: Option<String>,
}

/// ChatRequest and ChatStreamRequest carry the same fields under the same names.
macro_rules! raw_turn_from {
    ($($request:ty),+) => {$(
        impl From<$request> for RawTurn {
            fn from(r: $request) -> Self {
                Self {
                    message: r.message,
                    session_id: r.session_id,
                    model: r.model,
                    force_route: r.force_route,
                    max_tokens: r.max_tokens,
                    temperature: r.temperature,
                    history: r.history,
                    force_role_id: r.force_role_id,
                    custom_instructions: r.custom_instructions,
                    tools: r.tools,
                    tool_choice: r.tool_choice,
                    parallel_tool_calls: r.parallel_tool_calls,
                    response_format: r.response_format,
                    stop: r.stop,
                    conversation_key: r.conversation_key,
                    anthropic_version: r.anthropic_version,
                    anthropic_beta: r.anthropic_beta,
                }
            }
        }
    )+};
}

raw_turn_from!(pb::ChatRequest, pb::ChatStreamRequest);

impl TurnRequest {
    pub fn validate(raw: RawTurn, limits: &Limits) -> Result<Self, RouterError> {
        if raw.message.len() > limits.max_message_bytes {
            return Err(RouterError::invalid(
                "message",
                format!("is {} bytes; at most {} are accepted", raw.message.len(), limits.max_message_bytes),
            ));
        }
        let session_id = match raw.session_id.as_str() {
            "" => None,
            id => Some(SessionId::parse_field(id, "session_id")?),
        };
        // Identifiers are recorded with the turn's decision and reused: a NUL is refused, while
        // the message, history and instructions go to the model as they are.
        reject_nul("model", raw.model.as_deref().unwrap_or_default())?;
        reject_nul("force_role_id", raw.force_role_id.as_deref().unwrap_or_default())?;
        let model = raw
            .model
            .filter(|m| !m.is_empty())
            .map(|m| m.parse::<ModelRef>().map_err(|reason| RouterError::invalid("model", reason)))
            .transpose()?;
        let force_route = match pb::RouteType::try_from(raw.force_route) {
            Ok(pb::RouteType::Unspecified) => None,
            Ok(route) => route_from_proto(route),
            Err(_) => return Err(RouterError::invalid("force_route", format!("unknown route {}", raw.force_route))),
        };
        // The caller's `max_tokens` is a ceiling it allows: one above the router's own is lowered
        // to it (an answer it cuts stops for length), not refused. Zero asks for nothing.
        if raw.max_tokens == Some(0) {
            return Err(RouterError::invalid("max_tokens", "must be at least 1"));
        }
        let max_tokens = raw.max_tokens.map(|max| max.min(limits.max_tokens));
        if raw.temperature.is_some_and(|t| !(0.0..=MAX_TEMPERATURE).contains(&t)) {
            return Err(RouterError::invalid("temperature", format!("must be between 0 and {MAX_TEMPERATURE}")));
        }
        if raw.history.len() > limits.max_history {
            return Err(RouterError::invalid(
                "history",
                format!("has {} messages; at most {} are accepted", raw.history.len(), limits.max_history),
            ));
        }
        let history = raw
            .history
            .into_iter()
            .enumerate()
            .map(|(i, m)| history_message(i, m, limits))
            .collect::<Result<Vec<_>, _>>()?;
        check_tool_results(&history)?;
        // An empty message continues a tool loop; anything else needs the user's words.
        if raw.message.trim().is_empty() && history.last().is_none_or(|m| m.speaker != Speaker::Tool) {
            return Err(RouterError::invalid(
                "message",
                "must not be empty (it may be empty only when history ends in tool results)",
            ));
        }
        let tools = client_tools(raw.tools)?;
        let tool_choice = tool_choice(raw.tool_choice, &tools)?;
        let response_format = raw.response_format.map(answer_format).transpose()?.flatten();
        let stop = stop_sequences(raw.stop)?;
        let conversation_key = match raw.conversation_key.trim() {
            "" => None,
            key if key.len() > MAX_CONVERSATION_KEY_BYTES => {
                return Err(RouterError::invalid(
                    "conversation_key",
                    format!("is longer than {MAX_CONVERSATION_KEY_BYTES} bytes"),
                ));
            }
            key => {
                reject_nul("conversation_key", key)?;
                Some(key.to_owned())
            }
        };
        let anthropic_headers = AnthropicHeaders {
            version: header_value("anthropic_version", raw.anthropic_version, MAX_ANTHROPIC_VERSION_BYTES)?,
            beta: header_value("anthropic_beta", raw.anthropic_beta, MAX_ANTHROPIC_BETA_BYTES)?,
        };
        let force_role_id = non_empty(raw.force_role_id);
        if force_role_id.as_ref().is_some_and(|role| role.len() > MAX_ROLE_ID_BYTES) {
            return Err(RouterError::invalid("force_role_id", format!("is longer than {MAX_ROLE_ID_BYTES} bytes")));
        }
        let custom_instructions = non_empty(raw.custom_instructions);
        if custom_instructions.as_ref().is_some_and(|c| c.len() > MAX_INSTRUCTIONS_BYTES) {
            return Err(RouterError::invalid(
                "custom_instructions",
                format!("is longer than {MAX_INSTRUCTIONS_BYTES} bytes"),
            ));
        }
        Ok(Self {
            message: raw.message,
            session_id,
            model,
            force_route,
            max_tokens,
            temperature: raw.temperature,
            history,
            force_role_id,
            custom_instructions,
            tools,
            tool_choice,
            parallel_tool_calls: raw.parallel_tool_calls,
            response_format,
            stop,
            conversation_key,
            anthropic_headers,
        })
    }
}

/// A value sent on as an HTTP header: trimmed (empty is none), printable ASCII (spaces
/// inside), at most `max` bytes.
fn header_value(field: &str, value: Option<String>, max: usize) -> Result<Option<String>, RouterError> {
    let Some(value) = value else { return Ok(None) };
    let value = value.trim_matches(|c: char| c == ' ' || c == '\t');
    if value.is_empty() {
        return Ok(None);
    }
    if value.len() > max {
        return Err(RouterError::invalid(field, format!("is {} bytes; at most {max} are accepted", value.len())));
    }
    if let Some(bad) = value.bytes().find(|b| !(b' '..=b'~').contains(b)) {
        return Err(RouterError::invalid(
            field,
            format!("must be printable ASCII (no control characters such as CR, LF or NUL); found byte 0x{bad:02x}"),
        ));
    }
    Ok(Some(value.to_owned()))
}

fn history_message(index: usize, message: pb::ChatMessage, limits: &Limits) -> Result<HistoryMessage, RouterError> {
    let field = |name: &str| format!("history[{index}].{name}");
    let speaker = match pb::ChatRole::try_from(message.role) {
        Ok(pb::ChatRole::User) => Speaker::User,
        Ok(pb::ChatRole::Assistant) => Speaker::Assistant,
        Ok(pb::ChatRole::System) => Speaker::System,
        Ok(pb::ChatRole::Tool) => Speaker::Tool,
        _ => {
            return Err(RouterError::invalid(
                field("role"),
                "must be CHAT_ROLE_USER, CHAT_ROLE_ASSISTANT, CHAT_ROLE_SYSTEM or CHAT_ROLE_TOOL",
            ));
        }
    };
    if !message.tool_calls.is_empty() && speaker != Speaker::Assistant {
        return Err(RouterError::invalid(field("tool_calls"), "only a CHAT_ROLE_ASSISTANT message makes tool calls"));
    }
    if !message.parts.is_empty() && !matches!(speaker, Speaker::User | Speaker::Tool) {
        return Err(RouterError::invalid(
            field("parts"),
            "only a CHAT_ROLE_USER message or a CHAT_ROLE_TOOL result comes in parts",
        ));
    }
    match speaker {
        Speaker::Tool if message.tool_call_id.trim().is_empty() => {
            return Err(RouterError::invalid(field("tool_call_id"), "is required on a CHAT_ROLE_TOOL result"));
        }
        Speaker::Tool => reject_nul(&field("tool_call_id"), &message.tool_call_id)?,
        _ if !message.tool_call_id.is_empty() => {
            return Err(RouterError::invalid(field("tool_call_id"), "only a CHAT_ROLE_TOOL result answers a call"));
        }
        _ => {}
    }
    let tool_calls = message
        .tool_calls
        .into_iter()
        .enumerate()
        .map(|(j, call)| {
            let call_field = |name: &str| format!("history[{index}].tool_calls[{j}].{name}");
            if call.id.trim().is_empty() {
                return Err(RouterError::invalid(call_field("id"), "is required"));
            }
            reject_nul(&call_field("id"), &call.id)?;
            check_tool_name(&call_field("name"), &call.name)?;
            Ok(ToolCall { id: call.id, name: call.name, arguments: call.arguments_json })
        })
        .collect::<Result<Vec<_>, RouterError>>()?;
    let mut parts = Vec::with_capacity(message.parts.len());
    for (k, part) in message.parts.into_iter().enumerate() {
        match part.part {
            Some(pb::content_part::Part::Text(text)) => parts.push(ContentPart::Text(text)),
            Some(pb::content_part::Part::Image(image)) => {
                parts.push(image_part(&format!("history[{index}].parts[{k}].image"), image)?)
            }
            None => return Err(RouterError::invalid(format!("history[{index}].parts[{k}]"), "is empty")),
        }
    }
    // The message's own text comes first; with parts it is their first text part too, so a
    // model that takes images gets the parts alone in order.
    if !parts.is_empty() && !message.content.is_empty() {
        parts.insert(0, ContentPart::Text(message.content.clone()));
    }
    let mut content = String::new();
    for part in &parts {
        if let ContentPart::Text(text) = part {
            if !content.is_empty() {
                content.push('\n');
            }
            content.push_str(text);
        }
    }
    if parts.is_empty() {
        content = message.content;
    }
    if content.len() > limits.max_message_bytes {
        return Err(RouterError::invalid(
            field("content"),
            format!("is longer than {} bytes", limits.max_message_bytes),
        ));
    }
    Ok(HistoryMessage {
        speaker,
        content,
        tool_calls,
        tool_call_id: message.tool_call_id,
        is_error: speaker == Speaker::Tool && message.is_error,
        parts,
    })
}

/// An image part: an `https:` URL the vendor fetches or a `data:image/…;base64,` URL.
fn image_part(field: &str, image: pb::ImagePart) -> Result<ContentPart, RouterError> {
    let url = image.url.trim();
    let data = url.strip_prefix("data:");
    let acceptable = match data {
        Some(rest) => {
            rest.starts_with("image/") && rest.split_once(',').is_some_and(|(meta, _)| meta.ends_with(";base64"))
        }
        None => url.starts_with("https://") && url.len() > "https://".len(),
    };
    if !acceptable {
        return Err(RouterError::invalid(
            format!("{field}.url"),
            "must be an https: URL or a data:image/…;base64, URL",
        ));
    }
    reject_nul(&format!("{field}.url"), url)?;
    let detail = match image.detail.as_str() {
        "" => None,
        "auto" | "low" | "high" => Some(image.detail.clone()),
        _ => return Err(RouterError::invalid(format!("{field}.detail"), "must be auto, low or high")),
    };
    Ok(ContentPart::Image(Image { url: url.to_owned(), detail }))
}

/// Every tool result answers a call an earlier assistant message made.
fn check_tool_results(history: &[HistoryMessage]) -> Result<(), RouterError> {
    let mut calls: HashSet<&str> = HashSet::new();
    for (index, message) in history.iter().enumerate() {
        calls.extend(message.tool_calls.iter().map(|c| c.id.as_str()));
        if message.speaker == Speaker::Tool && !calls.contains(message.tool_call_id.as_str()) {
            return Err(RouterError::invalid(
                format!("history[{index}].tool_call_id"),
                format!("`{}` answers no tool call made earlier in history", message.tool_call_id),
            ));
        }
    }
    Ok(())
}

/// A tool name as the vendors accept it: 1 to 64 characters of [A-Za-z0-9_-].
fn check_tool_name(field: &str, name: &str) -> Result<(), RouterError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_TOOL_NAME_BYTES
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if valid {
        Ok(())
    } else {
        Err(RouterError::invalid(field, format!("must be 1 to {MAX_TOOL_NAME_BYTES} characters of [A-Za-z0-9_-]")))
    }
}

/// A JSON Schema given as text: a JSON object (`{"type":"object"}` when empty).
fn schema_object(field: &str, text: &str) -> Result<serde_json::Value, RouterError> {
    if text.trim().is_empty() {
        return Ok(serde_json::json!({"type": "object"}));
    }
    if text.len() > MAX_TOOL_SCHEMA_BYTES {
        return Err(RouterError::invalid(field, format!("is longer than {MAX_TOOL_SCHEMA_BYTES} bytes")));
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value @ serde_json::Value::Object(_)) => Ok(value),
        Ok(_) => Err(RouterError::invalid(field, "must be a JSON object (a JSON Schema)")),
        Err(err) => Err(RouterError::invalid(field, format!("is not valid JSON: {err}"))),
    }
}

fn client_tools(tools: Vec<pb::ClientTool>) -> Result<Vec<ToolSpec>, RouterError> {
    if tools.len() > MAX_CLIENT_TOOLS {
        return Err(RouterError::invalid(
            "tools",
            format!("has {} tools; at most {MAX_CLIENT_TOOLS} are accepted", tools.len()),
        ));
    }
    let mut seen: HashSet<String> = HashSet::new();
    tools
        .into_iter()
        .enumerate()
        .map(|(i, tool)| {
            check_tool_name(&format!("tools[{i}].name"), &tool.name)?;
            if !seen.insert(tool.name.clone()) {
                return Err(RouterError::invalid(
                    format!("tools[{i}].name"),
                    format!("`{}` is listed twice", tool.name),
                ));
            }
            if tool.description.len() > MAX_TOOL_SCHEMA_BYTES {
                return Err(RouterError::invalid(
                    format!("tools[{i}].description"),
                    format!("is longer than {MAX_TOOL_SCHEMA_BYTES} bytes"),
                ));
            }
            let parameters = schema_object(&format!("tools[{i}].parameters_json"), &tool.parameters_json)?;
            Ok(ToolSpec { name: tool.name, description: tool.description, parameters })
        })
        .collect()
}

fn tool_choice(choice: Option<pb::ToolChoice>, tools: &[ToolSpec]) -> Result<ToolChoice, RouterError> {
    let choice = match choice.and_then(|c| c.choice) {
        None => return Ok(ToolChoice::Auto),
        Some(pb::tool_choice::Choice::Mode(mode)) => match pb::ToolChoiceMode::try_from(mode) {
            Ok(pb::ToolChoiceMode::Unspecified | pb::ToolChoiceMode::Auto) => ToolChoice::Auto,
            Ok(pb::ToolChoiceMode::None) => ToolChoice::None,
            Ok(pb::ToolChoiceMode::Required) => ToolChoice::Required,
            Err(_) => return Err(RouterError::invalid("tool_choice.mode", format!("unknown mode {mode}"))),
        },
        Some(pb::tool_choice::Choice::Function(name)) => {
            if !tools.iter().any(|t| t.name == name) {
                return Err(RouterError::invalid(
                    "tool_choice.function",
                    format!("`{name}` is not one of the request's tools"),
                ));
            }
            ToolChoice::Function(name)
        }
    };
    if tools.is_empty() && choice != ToolChoice::Auto {
        return Err(RouterError::invalid("tool_choice", "needs tools"));
    }
    Ok(choice)
}

fn answer_format(format: pb::ResponseFormat) -> Result<Option<ResponseFormat>, RouterError> {
    match format.format {
        None | Some(pb::response_format::Format::JsonObject(false)) => Ok(None),
        Some(pb::response_format::Format::JsonObject(true)) => Ok(Some(ResponseFormat::JsonObject)),
        Some(pb::response_format::Format::JsonSchema(schema)) => {
            check_tool_name("response_format.json_schema.name", &schema.name)?;
            if schema.schema_json.trim().is_empty() {
                return Err(RouterError::invalid("response_format.json_schema.schema_json", "is required"));
            }
            let value = schema_object("response_format.json_schema.schema_json", &schema.schema_json)?;
            Ok(Some(ResponseFormat::JsonSchema {
                name: schema.name,
                description: schema.description,
                schema: value,
                strict: schema.strict,
            }))
        }
    }
}

fn stop_sequences(stop: Vec<String>) -> Result<Vec<String>, RouterError> {
    if stop.len() > MAX_STOP_SEQUENCES {
        return Err(RouterError::invalid(
            "stop",
            format!("has {} sequences; at most {MAX_STOP_SEQUENCES} are accepted", stop.len()),
        ));
    }
    for (i, sequence) in stop.iter().enumerate() {
        if sequence.is_empty() || sequence.len() > MAX_STOP_BYTES {
            return Err(RouterError::invalid(format!("stop[{i}]"), format!("must be 1 to {MAX_STOP_BYTES} bytes")));
        }
    }
    Ok(stop)
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(message: &str) -> RawTurn {
        RawTurn::from(pb::ChatRequest { message: message.to_owned(), ..Default::default() })
    }

    fn field_of(result: Result<TurnRequest, RouterError>) -> String {
        match result {
            Err(RouterError::Invalid { field, .. }) => field,
            other => panic!("expected an invalid-argument error, got {other:?}"),
        }
    }

    #[test]
    fn a_plain_message_is_accepted() {
        let turn = TurnRequest::validate(raw("hello"), &Limits::default()).expect("valid");
        assert_eq!(turn.message, "hello");
        assert!(turn.session_id.is_none() && turn.force_route.is_none());
    }

    #[test]
    fn each_bad_field_is_named() {
        let limits = Limits { max_message_bytes: 10, max_history: 1, ..Limits::default() };
        assert_eq!(field_of(TurnRequest::validate(raw("  "), &limits)), "message");
        assert_eq!(field_of(TurnRequest::validate(raw("much too long a message"), &limits)), "message");
        let mut r = raw("hi");
        r.model = Some("gpt-4o".into());
        assert_eq!(field_of(TurnRequest::validate(r, &limits)), "model");
        let mut r = raw("hi");
        r.force_route = 9;
        assert_eq!(field_of(TurnRequest::validate(r, &limits)), "force_route");
        let mut r = raw("hi");
        r.max_tokens = Some(0);
        assert_eq!(field_of(TurnRequest::validate(r, &limits)), "max_tokens");
        let mut r = raw("hi");
        r.temperature = Some(3.5);
        assert_eq!(field_of(TurnRequest::validate(r, &limits)), "temperature");
        let mut r = raw("hi");
        r.history = vec![pb::ChatMessage { role: 9, content: "x".into(), ..Default::default() }];
        assert_eq!(field_of(TurnRequest::validate(r, &limits)), "history[0].role");
        let mut r = raw("hi");
        r.history = vec![pb::ChatMessage::default(), pb::ChatMessage::default()];
        assert_eq!(field_of(TurnRequest::validate(r, &limits)), "history");
        let mut r = raw("hi");
        r.session_id = "not a session id!".into();
        assert_eq!(field_of(TurnRequest::validate(r, &limits)), "session_id");
    }

    fn tool(name: &str) -> pb::ClientTool {
        pb::ClientTool { name: name.into(), description: "a tool".into(), parameters_json: String::new() }
    }

    fn call(id: &str, name: &str) -> pb::ChatMessage {
        pb::ChatMessage {
            role: pb::ChatRole::Assistant as i32,
            tool_calls: vec![pb::ToolCall { id: id.into(), name: name.into(), arguments_json: "{}".into() }],
            ..Default::default()
        }
    }

    fn result(id: &str) -> pb::ChatMessage {
        pb::ChatMessage {
            role: pb::ChatRole::Tool as i32,
            tool_call_id: id.into(),
            content: "42".into(),
            ..Default::default()
        }
    }

    fn user(text: &str) -> pb::ChatMessage {
        pb::ChatMessage { role: pb::ChatRole::User as i32, content: text.into(), ..Default::default() }
    }

    #[test]
    fn client_tools_and_a_tool_loop_are_accepted() {
        let mut r = raw("");
        r.tools = vec![tool("get_weather"), tool("run-shell")];
        r.tool_choice = Some(pb::ToolChoice { choice: Some(pb::tool_choice::Choice::Function("run-shell".into())) });
        r.history = vec![user("weather?"), call("call_1", "get_weather"), result("call_1")];
        let turn = TurnRequest::validate(r, &Limits::default()).expect("valid");
        assert!(turn.is_continuation() && turn.has_client_tools());
        assert_eq!(turn.tools[0].parameters, serde_json::json!({"type": "object"}));
        assert_eq!(turn.tool_choice, ToolChoice::Function("run-shell".into()));
        assert_eq!(turn.loop_user_text(), Some("weather?"));
    }

    #[test]
    fn each_bad_tool_field_is_named() {
        let limits = Limits::default();
        let check = |edit: &dyn Fn(&mut RawTurn), field: &str| {
            let mut r = raw("hi");
            edit(&mut r);
            assert_eq!(field_of(TurnRequest::validate(r, &limits)), field);
        };
        check(&|r| r.tools = vec![tool("has space")], "tools[0].name");
        check(&|r| r.tools = vec![tool("")], "tools[0].name");
        check(&|r| r.tools = vec![tool(&"x".repeat(65))], "tools[0].name");
        check(&|r| r.tools = vec![tool("a"), tool("a")], "tools[1].name");
        check(&|r| r.tools = (0..129).map(|i| tool(&format!("t{i}"))).collect(), "tools");
        check(
            &|r| r.tools = vec![pb::ClientTool { parameters_json: "[1]".into(), ..tool("a") }],
            "tools[0].parameters_json",
        );
        check(
            &|r| r.tools = vec![pb::ClientTool { parameters_json: "{".into(), ..tool("a") }],
            "tools[0].parameters_json",
        );
        check(
            &|r| {
                r.tools = vec![tool("a")];
                r.tool_choice = Some(pb::ToolChoice { choice: Some(pb::tool_choice::Choice::Function("b".into())) });
            },
            "tool_choice.function",
        );
        check(
            &|r| r.tool_choice = Some(pb::ToolChoice { choice: Some(pb::tool_choice::Choice::Mode(3)) }),
            "tool_choice",
        );
        check(&|r| r.history = vec![user("q"), result("call_9")], "history[1].tool_call_id");
        check(&|r| r.history = vec![user("q"), call("call_1", "a"), result("")], "history[2].tool_call_id");
        check(
            &|r| r.history = vec![pb::ChatMessage { tool_call_id: "x".into(), ..user("q") }],
            "history[0].tool_call_id",
        );
        check(
            &|r| r.history = vec![pb::ChatMessage { role: pb::ChatRole::User as i32, ..call("c", "a") }],
            "history[0].tool_calls",
        );
        check(&|r| r.history = vec![call("c", "bad name")], "history[0].tool_calls[0].name");
        check(&|r| r.history = vec![call("", "a")], "history[0].tool_calls[0].id");
        check(&|r| r.history = vec![call("c\0", "a")], "history[0].tool_calls[0].id");
        let image = |url: &str| pb::ChatMessage {
            parts: vec![pb::ContentPart {
                part: Some(pb::content_part::Part::Image(pb::ImagePart { url: url.into(), detail: String::new() })),
            }],
            ..user("")
        };
        check(&|r| r.history = vec![image("http://example.com/a.png")], "history[0].parts[0].image.url");
        check(&|r| r.history = vec![image("data:text/plain;base64,aGk=")], "history[0].parts[0].image.url");
        check(
            &|r| r.history = vec![pb::ChatMessage { parts: image("https://x/a.png").parts, ..call("c", "a") }],
            "history[0].parts",
        );
        check(&|r| r.stop = vec![String::new()], "stop[0]");
        check(&|r| r.conversation_key = "a\0b".into(), "conversation_key");
        check(
            &|r| {
                r.response_format = Some(pb::ResponseFormat {
                    format: Some(pb::response_format::Format::JsonSchema(pb::JsonSchemaFormat {
                        name: "answer".into(),
                        schema_json: "\"string\"".into(),
                        ..Default::default()
                    })),
                })
            },
            "response_format.json_schema.schema_json",
        );
        // An empty message needs a tool result to continue.
        let mut r = raw("");
        r.history = vec![user("q"), call("c", "a")];
        assert_eq!(field_of(TurnRequest::validate(r, &limits)), "message");
        let mut r = raw("");
        r.history = vec![user("q")];
        assert_eq!(field_of(TurnRequest::validate(r, &limits)), "message");
    }

    #[test]
    fn images_are_https_or_base64_data_urls() {
        let mut r = raw("what is this?");
        r.history = vec![pb::ChatMessage {
            content: "look".into(),
            parts: vec![
                pb::ContentPart {
                    part: Some(pb::content_part::Part::Image(pb::ImagePart {
                        url: "data:image/png;base64,iVBORw0KGgo=".into(),
                        detail: "low".into(),
                    })),
                },
                pb::ContentPart { part: Some(pb::content_part::Part::Text("and this".into())) },
            ],
            ..user("")
        }];
        let turn = TurnRequest::validate(r, &Limits::default()).expect("valid");
        let message = &turn.history[0];
        assert!(message.has_images());
        assert_eq!(message.content, "look\nand this");
        assert_eq!(message.parts.first(), Some(&ContentPart::Text("look".into())));
    }

    #[test]
    fn max_tokens_above_the_limit_is_lowered_to_it() {
        let limits = Limits { max_tokens: 16_384, ..Limits::default() };
        let with = |max: Option<u32>| {
            let mut r = raw("hi");
            r.max_tokens = max;
            TurnRequest::validate(r, &limits).expect("valid").max_tokens
        };
        assert_eq!(with(Some(128_000)), Some(16_384));
        assert_eq!(with(Some(16_385)), Some(16_384));
        assert_eq!(with(Some(16_384)), Some(16_384));
        assert_eq!(with(Some(200)), Some(200));
        assert_eq!(with(None), None);
    }

    #[test]
    fn anthropic_headers_are_printable_ascii_of_bounded_length() {
        let limits = Limits::default();
        let mut r = raw("hi");
        r.anthropic_version = Some(" 2023-06-01 ".into());
        r.anthropic_beta = Some("claude-code-20250219, interleaved-thinking-2025-05-14".into());
        let turn = TurnRequest::validate(r, &limits).expect("valid");
        assert_eq!(turn.anthropic_headers.version.as_deref(), Some("2023-06-01"));
        assert_eq!(
            turn.anthropic_headers.beta.as_deref(),
            Some("claude-code-20250219, interleaved-thinking-2025-05-14")
        );
        let mut r = raw("hi");
        r.anthropic_version = Some(String::new());
        assert_eq!(TurnRequest::validate(r, &limits).expect("valid").anthropic_headers, AnthropicHeaders::default());
        let check = |version: Option<&str>, beta: Option<&str>, field: &str| {
            let mut r = raw("hi");
            r.anthropic_version = version.map(str::to_owned);
            r.anthropic_beta = beta.map(str::to_owned);
            assert_eq!(field_of(TurnRequest::validate(r, &limits)), field);
        };
        check(Some("2023-06-01\r\nx-evil: 1"), None, "anthropic_version");
        check(Some("2023\0"), None, "anthropic_version");
        check(Some(&"9".repeat(65)), None, "anthropic_version");
        check(None, Some("a\nb"), "anthropic_beta");
        check(None, Some("caf\u{e9}"), "anthropic_beta");
        check(None, Some(&"b".repeat(1025)), "anthropic_beta");
    }

    #[test]
    fn a_model_is_named_with_its_provider() {
        let mut r = raw("hi");
        r.model = Some("anthropic/claude-3-5-sonnet-20241022".into());
        let turn = TurnRequest::validate(r, &Limits::default()).expect("valid");
        assert_eq!(turn.model, Some(ModelRef::new("anthropic", "claude-3-5-sonnet-20241022")));
    }
}
