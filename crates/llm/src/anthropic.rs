//! The Anthropic Messages API (`POST {base_url}/v1/messages`).

mod stream;
mod wire;

use reqwest::header::HeaderName;

use crate::{
    ChatRequest, Completion, FinishReason, Message, ProviderConfig, ProviderError, ToolCall, ToolChoice, Usage,
    vendor::{Api, Vendor},
};
use wire::{RequestBlock, RequestMessage, Role};

/// The Anthropic Messages API.
pub type Anthropic = Vendor<AnthropicApi>;

/// The Messages API wire format.
pub struct AnthropicApi;

impl Api for AnthropicApi {
    const TYPE_NAME: &'static str = "Anthropic";
    type Decoder = stream::EventDecoder;

    fn encode(request: &ChatRequest, stream: bool) -> serde_json::Result<Vec<u8>> {
        serde_json::to_vec(&wire_request(request, stream))
    }

    fn parse_completion(body: &[u8]) -> Result<Completion, String> {
        parse_completion(body)
    }

    fn decoder(provider: &str, attempts: u32) -> Self::Decoder {
        stream::EventDecoder::new(provider, attempts)
    }
}

impl Vendor<AnthropicApi> {
    pub const DEFAULT_BASE_URL: &'static str = "https://api.anthropic.com";
    /// The API version we speak (sent as `anthropic-version`).
    pub const API_VERSION: &'static str = "2023-06-01";
    /// The API requires `max_tokens`; this is sent when the request sets none.
    pub const DEFAULT_MAX_TOKENS: u32 = 4096;

    /// The `anthropic` provider.
    pub fn new(config: ProviderConfig) -> Result<Self, ProviderError> {
        Self::named("anthropic", config)
    }

    /// Under another provider name (a second account, or a compatible gateway).
    pub fn named(name: &str, config: ProviderConfig) -> Result<Self, ProviderError> {
        Self::build(
            name,
            config,
            "/v1/messages",
            (HeaderName::from_static("x-api-key"), str::to_owned),
            &[(HeaderName::from_static("anthropic-version"), Self::API_VERSION)],
        )
    }
}

fn wire_request(request: &ChatRequest, stream: bool) -> wire::MessagesRequest<'_> {
    let tools: Vec<_> = request
        .tools
        .iter()
        .map(|tool| wire::RequestTool {
            name: &tool.name,
            description: &tool.description,
            input_schema: &tool.parameters,
        })
        .collect();
    let tool_choice = (!tools.is_empty()).then_some(wire::RequestToolChoice {
        kind: match request.tool_choice {
            ToolChoice::Auto => "auto",
            ToolChoice::None => "none",
            ToolChoice::Required => "any",
        },
    });
    wire::MessagesRequest {
        model: &request.model,
        max_tokens: request.max_tokens.unwrap_or(Anthropic::DEFAULT_MAX_TOKENS),
        system: request.system.as_deref().filter(|system| !system.is_empty()),
        messages: alternating(request.messages.iter().filter_map(wire_message)),
        tools,
        tool_choice,
        temperature: request.temperature,
        stop_sequences: &request.stop,
        stream,
    }
}

/// One message as content blocks; `None` when it has none (the API refuses empty text blocks).
fn wire_message(message: &Message) -> Option<RequestMessage<'_>> {
    let (role, content) = match message {
        Message::User { content } => (Role::User, text_block(content).into_iter().collect()),
        Message::Assistant { content, tool_calls } => {
            let calls = tool_calls.iter().map(|call| RequestBlock::ToolUse {
                id: &call.id,
                name: &call.name,
                input: tool_input(&call.arguments),
            });
            (Role::Assistant, text_block(content).into_iter().chain(calls).collect())
        }
        Message::Tool { call_id, content, is_error } => {
            (Role::User, vec![RequestBlock::ToolResult { tool_use_id: call_id, content, is_error: *is_error }])
        }
    };
    let message = RequestMessage { role, content };
    (!message.content.is_empty()).then_some(message)
}

fn text_block(text: &str) -> Option<RequestBlock<'_>> {
    (!text.is_empty()).then_some(RequestBlock::Text { text })
}

/// The API wants a JSON object as a tool call's input. Arguments the model produced malformed
/// go back as `{}`: the tool result that follows tells the model what was wrong with them.
fn tool_input(arguments: &str) -> serde_json::Value {
    match serde_json::from_str::<serde_json::Value>(arguments) {
        Ok(input @ serde_json::Value::Object(_)) => input,
        _ => serde_json::Value::Object(serde_json::Map::new()),
    }
}

/// Merges consecutive messages of one role (the API requires user and assistant to alternate;
/// tool results are user messages), with tool results first in each user message, as the API
/// requires of a message answering tool calls.
fn alternating<'a>(messages: impl Iterator<Item = RequestMessage<'a>>) -> Vec<RequestMessage<'a>> {
    let mut merged: Vec<RequestMessage<'a>> = Vec::new();
    for message in messages {
        match merged.last_mut() {
            Some(last) if last.role == message.role => last.content.extend(message.content),
            _ => merged.push(message),
        }
    }
    for message in merged.iter_mut().filter(|message| message.role == Role::User) {
        message.content.sort_by_key(|block| !matches!(block, RequestBlock::ToolResult { .. }));
    }
    merged
}

fn parse_completion(body: &[u8]) -> Result<Completion, String> {
    let response: wire::MessagesResponse =
        serde_json::from_slice(body).map_err(|err| format!("not a Messages API response: {err}"))?;
    let mut content = String::new();
    let mut tool_calls = Vec::new();
    for block in response.content.ok_or("the response has no content")? {
        match block {
            wire::ResponseBlock::Text { text } => content.push_str(&text),
            wire::ResponseBlock::ToolUse { id, name, input } => {
                tool_calls.push(ToolCall { id, name, arguments: arguments_text(&input) })
            }
            wire::ResponseBlock::Other => {}
        }
    }
    Ok(Completion {
        content,
        finish_reason: finish_reason(response.stop_reason.as_deref()),
        tool_calls,
        usage: usage(response.usage.unwrap_or_default()),
        model: response.model.unwrap_or_default(),
        attempts: 0,
    })
}

/// A tool call's input object as the arguments text callers get from every provider.
fn arguments_text(input: &serde_json::Value) -> String {
    if input.is_null() { String::new() } else { input.to_string() }
}

fn finish_reason(stop_reason: Option<&str>) -> FinishReason {
    match stop_reason {
        Some("end_turn" | "stop_sequence") | None => FinishReason::Stop,
        Some("max_tokens") => FinishReason::Length,
        Some("tool_use") => FinishReason::ToolCalls,
        Some(_) => FinishReason::Other,
    }
}

fn usage(usage: wire::Usage) -> Usage {
    Usage {
        prompt_tokens: usage.prompt_tokens().unwrap_or_default(),
        completion_tokens: usage.output_tokens.unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_results_lead_each_merged_user_message() {
        let request = ChatRequest {
            model: "m".into(),
            messages: vec![
                Message::user("first"),
                Message::user(""),
                Message::Assistant {
                    content: String::new(),
                    tool_calls: vec![ToolCall { id: "t1".into(), name: "f".into(), arguments: "{broken".into() }],
                },
                Message::user("an aside"),
                Message::Tool { call_id: "t1".into(), content: "done".into(), is_error: true },
            ],
            ..ChatRequest::default()
        };
        let body = serde_json::to_value(wire_request(&request, false)).unwrap();
        assert_eq!(
            body["messages"],
            serde_json::json!([
                {"role": "user", "content": [{"type": "text", "text": "first"}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "done", "is_error": true},
                    {"type": "text", "text": "an aside"},
                ]},
            ])
        );
        assert_eq!(body["max_tokens"], 4096);
        assert!(body.get("stream").is_none() && body.get("tools").is_none() && body.get("system").is_none());
    }

    #[test]
    fn unknown_blocks_are_skipped_and_bad_bodies_are_errors() {
        let body = br#"{"model":"c","content":[{"type":"thinking","thinking":"hmm"},{"type":"text","text":"hi"}],
            "stop_reason":"refusal","usage":{"input_tokens":3,"cache_read_input_tokens":4,"output_tokens":2}}"#;
        let completion = parse_completion(body).unwrap();
        assert_eq!(completion.content, "hi");
        assert_eq!(completion.finish_reason, FinishReason::Other);
        assert_eq!(completion.usage, Usage { prompt_tokens: 7, completion_tokens: 2 });
        assert!(parse_completion(b"[]").is_err());
        assert!(parse_completion(br#"{"content":[{"type":"text","text":7}]}"#).is_err());
    }
}
