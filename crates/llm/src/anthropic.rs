//! The Anthropic Messages API (`POST {base_url}/v1/messages`).

#[cfg(test)]
mod fuzz;
mod stream;
mod wire;

use std::borrow::Cow;

use reqwest::header::{HeaderName, HeaderValue};
use serde_json::json;

use crate::{
    ChatRequest, Completion, ContentPart, FinishReason, ImageSource, Message, ProviderConfig, ProviderError,
    ResponseFormat, ToolCall, ToolChoice, Usage,
    vendor::{Api, EncodeError, Vendor},
};
use wire::{RequestBlock, RequestMessage, Role};

/// The Anthropic Messages API.
pub type Anthropic = Vendor<AnthropicApi>;

/// The Messages API wire format.
pub struct AnthropicApi;

impl Api for AnthropicApi {
    const TYPE_NAME: &'static str = "Anthropic";
    type Decoder = stream::EventDecoder;

    fn encode(request: &ChatRequest, stream: bool) -> Result<Vec<u8>, EncodeError> {
        Ok(serde_json::to_vec(&wire_request(request, stream)?)?)
    }

    fn parse_completion(request: &ChatRequest, body: &[u8]) -> Result<Completion, String> {
        parse_completion(body, AnswerTool::name_for(request).as_deref())
    }

    fn decoder(request: &ChatRequest, provider: &str, attempts: u32) -> Self::Decoder {
        stream::EventDecoder::new(provider, attempts, AnswerTool::name_for(request))
    }

    /// The caller's `anthropic-version` (instead of ours) and `anthropic-beta`, as given.
    fn request_headers(request: &ChatRequest) -> Result<Vec<(HeaderName, HeaderValue)>, EncodeError> {
        let headers = &request.anthropic_headers;
        [(VERSION_HEADER, &headers.version), (BETA_HEADER, &headers.beta)]
            .into_iter()
            .filter_map(|(name, value)| value.as_deref().filter(|value| !value.is_empty()).map(|value| (name, value)))
            .map(|(name, value)| {
                let value = HeaderValue::from_str(value).map_err(|_| {
                    EncodeError::unsupported(name, format!("`{name}` is not a valid HTTP header value"))
                })?;
                Ok((HeaderName::from_static(name), value))
            })
            .collect()
    }
}

const VERSION_HEADER: &str = "anthropic-version";
const BETA_HEADER: &str = "anthropic-beta";

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
            &[(HeaderName::from_static(VERSION_HEADER), Self::API_VERSION)],
        )
    }
}

/// The tool that carries the answer when the request asks for a JSON answer: the API has no
/// response format, so the model is made to call this tool and its input is the answer.
pub(crate) struct AnswerTool<'a> {
    pub name: &'a str,
    description: &'a str,
    schema: Cow<'a, serde_json::Value>,
}

impl<'a> AnswerTool<'a> {
    const JSON_OBJECT_NAME: &'static str = "json_answer";

    fn of(request: &'a ChatRequest) -> Result<Option<Self>, EncodeError> {
        let Some(format) = &request.response_format else { return Ok(None) };
        let tool = match format {
            ResponseFormat::JsonObject => Self {
                name: Self::JSON_OBJECT_NAME,
                description: "Give your answer as this tool's input: a JSON object.",
                schema: Cow::Owned(json!({"type": "object"})),
            },
            ResponseFormat::JsonSchema { name, description, schema, .. } => {
                // A tool's input is an object: a schema of anything else cannot be met this way.
                if schema.get("type").and_then(|kind| kind.as_str()) != Some("object") {
                    return Err(EncodeError::unsupported(
                        "response_format.json_schema.schema",
                        "an Anthropic model meets a JSON schema only when its root is `\"type\": \"object\"`",
                    ));
                }
                let description = if description.is_empty() {
                    "Give your answer as this tool's input, matching its schema."
                } else {
                    description.as_str()
                };
                Self { name, description, schema: Cow::Borrowed(schema) }
            }
        };
        if request.tools.iter().any(|spec| spec.name == tool.name) {
            return Err(EncodeError::unsupported(
                "response_format",
                format!("the response format's name `{}` is also the name of one of the tools", tool.name),
            ));
        }
        Ok(Some(tool))
    }

    /// The answer tool's name for a request, for reading the answer back.
    pub(crate) fn name_for(request: &ChatRequest) -> Option<String> {
        match &request.response_format {
            None => None,
            Some(ResponseFormat::JsonObject) => Some(Self::JSON_OBJECT_NAME.to_owned()),
            Some(ResponseFormat::JsonSchema { name, .. }) => Some(name.clone()),
        }
    }
}

fn wire_request(request: &ChatRequest, stream: bool) -> Result<wire::MessagesRequest<'_>, EncodeError> {
    let answer_tool = AnswerTool::of(request)?;
    let mut tools: Vec<_> = request
        .tools
        .iter()
        .map(|tool| wire::RequestTool {
            name: &tool.name,
            description: &tool.description,
            input_schema: Cow::Borrowed(&tool.parameters),
        })
        .collect();
    let client_tools = !tools.is_empty();
    let (mut kind, mut name) = match &request.tool_choice {
        ToolChoice::Auto => ("auto", None),
        ToolChoice::None => ("none", None),
        ToolChoice::Required => ("any", None),
        ToolChoice::Function(name) => ("tool", Some(name.as_str())),
    };
    if let Some(answer) = answer_tool {
        match kind {
            // Only the answer: force it.
            _ if !client_tools => (kind, name) = ("tool", Some(answer.name)),
            "none" => (kind, name) = ("tool", Some(answer.name)),
            // A tool call or the answer, whichever the model picks, but one of them.
            "auto" => kind = "any",
            _ => {}
        }
        tools.push(wire::RequestTool {
            name: answer.name,
            description: answer.description,
            input_schema: answer.schema,
        });
    }
    // `tool_choice` without `tools` is refused by the API, and `none` takes no other field.
    let tool_choice = (!tools.is_empty()).then_some(wire::RequestToolChoice {
        kind,
        name,
        disable_parallel_tool_use: request.parallel_tool_calls.filter(|_| kind != "none").map(|parallel| !parallel),
    });
    let mut messages = Vec::new();
    for (position, message) in request.messages.iter().enumerate() {
        messages.extend(wire_message(message, position)?);
    }
    Ok(wire::MessagesRequest {
        model: &request.model,
        max_tokens: request.max_tokens.unwrap_or(Anthropic::DEFAULT_MAX_TOKENS),
        system: request.system.as_deref().filter(|system| !system.is_empty()),
        messages: alternating(messages),
        tools,
        tool_choice,
        temperature: request.temperature,
        stop_sequences: &request.stop,
        stream,
    })
}

/// One message as content blocks; `None` when it has none (the API refuses empty text blocks).
fn wire_message(message: &Message, position: usize) -> Result<Option<RequestMessage<'_>>, EncodeError> {
    let (role, content) = match message {
        Message::User { content, parts } => (Role::User, blocks(content, parts, position)?),
        Message::Assistant { content, tool_calls } => {
            let calls = tool_calls.iter().map(|call| RequestBlock::ToolUse {
                id: &call.id,
                name: &call.name,
                input: tool_input(&call.arguments),
            });
            (Role::Assistant, text_block(content).into_iter().chain(calls).collect())
        }
        Message::Tool { call_id, content, is_error, parts } => {
            let content = if parts.is_empty() {
                wire::ToolResultContent::Text(content)
            } else {
                wire::ToolResultContent::Blocks(blocks(content, parts, position)?)
            };
            (Role::User, vec![RequestBlock::ToolResult { tool_use_id: call_id, content, is_error: *is_error }])
        }
    };
    let message = RequestMessage { role, content };
    Ok((!message.content.is_empty()).then_some(message))
}

/// A message's text and parts as text and image blocks.
fn blocks<'a>(
    content: &'a str,
    parts: &'a [ContentPart],
    position: usize,
) -> Result<Vec<RequestBlock<'a>>, EncodeError> {
    let mut blocks: Vec<_> = text_block(content).into_iter().collect();
    for (index, part) in parts.iter().enumerate() {
        match part {
            ContentPart::Text(text) => blocks.extend(text_block(text)),
            ContentPart::Image(image) => {
                let source = image.source().map_err(|message| {
                    EncodeError::unsupported(format!("messages[{position}].parts[{index}]"), message)
                })?;
                let source = match source {
                    ImageSource::Url(url) => wire::ImageSource::Url { url },
                    ImageSource::Base64 { media_type, data } => wire::ImageSource::Base64 { media_type, data },
                };
                blocks.push(RequestBlock::Image { source });
            }
        }
    }
    Ok(blocks)
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
/// tool results are user messages, so all the results of one turn become one message), with
/// tool results first in each user message, as the API requires of a message answering tool
/// calls.
fn alternating<'a>(messages: impl IntoIterator<Item = RequestMessage<'a>>) -> Vec<RequestMessage<'a>> {
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

/// A whole answer; the input of a call of `answer_tool` (see [`AnswerTool`]) is the answer's text.
fn parse_completion(body: &[u8], answer_tool: Option<&str>) -> Result<Completion, String> {
    let response: wire::MessagesResponse =
        serde_json::from_slice(body).map_err(|err| format!("not a Messages API response: {err}"))?;
    let mut content = String::new();
    let mut tool_calls = Vec::new();
    for block in response.content.ok_or("the response has no content")? {
        match block {
            wire::ResponseBlock::Text { text } => content.push_str(&text),
            wire::ResponseBlock::ToolUse { name, input, .. } if Some(name.as_str()) == answer_tool => {
                content.push_str(&arguments_text(&input))
            }
            wire::ResponseBlock::ToolUse { id, name, input } => {
                tool_calls.push(ToolCall { id, name, arguments: arguments_text(&input) })
            }
            wire::ResponseBlock::Other => {}
        }
    }
    Ok(Completion {
        content,
        finish_reason: finish_reason(response.stop_reason.as_deref(), !tool_calls.is_empty()),
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

/// `tool_use` with no tool calls left is the answer tool's call: the answer is complete.
fn finish_reason(stop_reason: Option<&str>, called_tools: bool) -> FinishReason {
    match stop_reason {
        Some("end_turn" | "stop_sequence") | None => FinishReason::Stop,
        Some("max_tokens") => FinishReason::Length,
        Some("tool_use") if called_tools => FinishReason::ToolCalls,
        Some("tool_use") => FinishReason::Stop,
        Some(_) => FinishReason::Other,
    }
}

fn usage(usage: wire::Usage) -> Usage {
    Usage {
        prompt_tokens: usage.prompt_tokens().unwrap_or_default(),
        completion_tokens: usage.output_tokens.unwrap_or_default(),
        cached_prompt_tokens: usage.cache_read_input_tokens.unwrap_or_default(),
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
                Message::tool_result("t1", "done", true),
            ],
            ..ChatRequest::default()
        };
        let body = serde_json::to_value(wire_request(&request, false).unwrap()).unwrap();
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
        let completion = parse_completion(body, None).unwrap();
        assert_eq!(completion.content, "hi");
        assert_eq!(completion.finish_reason, FinishReason::Other);
        assert_eq!(completion.usage, Usage { prompt_tokens: 7, completion_tokens: 2, cached_prompt_tokens: 4 });
        assert!(parse_completion(b"[]", None).is_err());
        assert!(parse_completion(br#"{"content":[{"type":"text","text":7}]}"#, None).is_err());
    }
}
