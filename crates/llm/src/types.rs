//! The vendor-neutral request, stream and completion types.

use serde::{Deserialize, Serialize};

/// A tool the model may call, with a JSON Schema for its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ToolChoice {
    /// The model decides whether to call a tool (the spec's `tool_choice="auto"`).
    #[default]
    Auto,
    /// No tool calls, even when tools are listed.
    None,
    /// The model must call one of the tools.
    Required,
}

/// A tool call the model made. `arguments` is the JSON text exactly as the model produced it,
/// which may be malformed; [`ToolCall::parsed_arguments`] parses it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The vendor's id for the call (echoed back with the tool's result).
    pub id: String,
    pub name: String,
    pub arguments: String,
}

impl ToolCall {
    /// The arguments as a JSON object; an empty argument string is an empty object.
    pub fn parsed_arguments(&self) -> Result<serde_json::Map<String, serde_json::Value>, String> {
        if self.arguments.trim().is_empty() {
            return Ok(serde_json::Map::new());
        }
        match serde_json::from_str::<serde_json::Value>(&self.arguments) {
            Ok(serde_json::Value::Object(map)) => Ok(map),
            Ok(other) => Err(format!("tool-call arguments are not a JSON object: {other}")),
            Err(err) => Err(format!("tool-call arguments are not valid JSON: {err}")),
        }
    }
}

/// One message of the conversation sent to the model. The system prompt is separate
/// ([`ChatRequest::system`]) because the vendors place it differently.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    User {
        content: String,
    },
    /// An assistant turn; with tool calls when the model called tools.
    Assistant {
        content: String,
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call, answering the call with `call_id`.
    Tool {
        call_id: String,
        content: String,
        is_error: bool,
    },
}

impl Message {
    pub fn user(content: impl Into<String>) -> Self {
        Self::User { content: content.into() }
    }

    pub fn assistant(content: impl Into<String>) -> Self {
        Self::Assistant { content: content.into(), tool_calls: Vec::new() }
    }
}

/// One request to a provider. `model` is the vendor's model name (without the provider prefix).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatRequest {
    pub model: String,
    pub system: Option<String>,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub tool_choice: ToolChoice,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub stop: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
}

impl Usage {
    pub fn total(&self) -> u32 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }

    pub fn add(&mut self, other: Usage) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self.completion_tokens.saturating_add(other.completion_tokens);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FinishReason {
    #[default]
    Stop,
    /// `max_tokens` reached.
    Length,
    ToolCalls,
    /// Content filter or anything else the vendor reports.
    Other,
}

impl FinishReason {
    /// The spec's `finish_reason` strings.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::ToolCalls => "tool_calls",
            Self::Other => "stop",
        }
    }
}

/// The whole answer, once the stream has ended.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Completion {
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: FinishReason,
    pub usage: Usage,
    /// The model that answered, as the vendor names it in its response.
    pub model: String,
    /// HTTP attempts the provider made for this answer: 1, or more when it retried (429, 5xx,
    /// connection errors) before the vendor accepted the request.
    pub attempts: u32,
}

/// What a streaming call yields: text as it arrives, each tool call once its arguments are
/// complete, then exactly one `Done` as the last item.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// Text content, in order.
    Text(String),
    /// The model started a tool call (its name is known; arguments are still streaming).
    /// Lets a caller stop forwarding text as soon as a tool call begins.
    ToolCallStarted {
        id: String,
        name: String,
    },
    Done(Completion),
}
