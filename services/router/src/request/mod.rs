//! A chat turn's request, validated at the edge of the RPC: every field checked against the
//! named limits, errors naming the field. The earlier messages a caller sends along are read
//! in [`history`], its own tools and tool choice in [`tools`].

mod history;
#[cfg(test)]
mod tests;
mod tools;

use switchyard_kit::{SessionId, text::reject_nul};
use switchyard_llm::{AnthropicHeaders, ContentPart, ModelRef, ResponseFormat, ToolCall, ToolChoice, ToolSpec};
use switchyard_proto::router::v1 as pb;

use self::{
    history::{check_tool_results, history_message},
    tools::{check_tool_name, client_tools, schema_object, tool_choice},
};
use crate::{
    error::RouterError,
    limits::{
        Limits, MAX_ANTHROPIC_BETA_BYTES, MAX_ANTHROPIC_VERSION_BYTES, MAX_CONVERSATION_KEY_BYTES,
        MAX_INSTRUCTIONS_BYTES, MAX_ROLE_ID_BYTES, MAX_STOP_BYTES, MAX_STOP_SEQUENCES, MAX_TEMPERATURE,
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
    /// The id of the API key the caller used (the edge's `x-switchyard-key-id`), for its budget.
    pub key_id: Option<String>,
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
            key_id: None,
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
