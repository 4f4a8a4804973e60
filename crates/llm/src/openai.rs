//! OpenAI-compatible Chat Completions (`POST {base_url}/chat/completions`): OpenAI itself and
//! every server that speaks its API (vLLM, Ollama, LiteLLM, llama.cpp), told apart by URL alone.

#[cfg(test)]
mod fuzz;
mod stream;
mod wire;

use std::borrow::Cow;

use reqwest::header::AUTHORIZATION;
use serde_json::json;

use crate::{
    ChatRequest, Completion, ContentPart, FinishReason, Image, Message, ProviderConfig, ProviderError, ResponseFormat,
    ToolCall, ToolChoice, Usage,
    vendor::{Api, EncodeError, Vendor},
};

/// OpenAI-compatible Chat Completions.
pub type OpenAi = Vendor<OpenAiApi>;

/// The Chat Completions wire format.
pub struct OpenAiApi;

impl Api for OpenAiApi {
    const TYPE_NAME: &'static str = "OpenAi";
    type Decoder = stream::ChunkDecoder;

    fn encode(request: &ChatRequest, stream: bool) -> Result<Vec<u8>, EncodeError> {
        Ok(serde_json::to_vec(&wire_request(request, stream)?)?)
    }

    fn parse_completion(_request: &ChatRequest, body: &[u8]) -> Result<Completion, String> {
        parse_completion(body)
    }

    fn decoder(_request: &ChatRequest, provider: &str, attempts: u32) -> Self::Decoder {
        stream::ChunkDecoder::new(provider, attempts)
    }
}

impl Vendor<OpenAiApi> {
    pub const DEFAULT_BASE_URL: &'static str = "https://api.openai.com/v1";

    /// The `openai` provider.
    pub fn new(config: ProviderConfig) -> Result<Self, ProviderError> {
        Self::named("openai", config)
    }

    /// An OpenAI-compatible server under another provider name (`local/<model>` for a vLLM).
    pub fn named(name: &str, config: ProviderConfig) -> Result<Self, ProviderError> {
        Self::build(name, config, "/chat/completions", (AUTHORIZATION, |key| format!("Bearer {key}")), &[])
    }
}

fn wire_request(request: &ChatRequest, stream: bool) -> Result<wire::ChatCompletionRequest<'_>, EncodeError> {
    let system = request.system.as_deref().map(|content| wire::RequestMessage::System { content });
    let mut messages: Vec<_> = system.into_iter().collect();
    // The API takes images only from the user: those of a run of tool results follow the run
    // as one user message (tool messages must directly follow the assistant's calls).
    let mut tool_images: Vec<wire::RequestPart<'_>> = Vec::new();
    for (position, message) in request.messages.iter().enumerate() {
        if !matches!(message, Message::Tool { .. }) && !tool_images.is_empty() {
            let parts = std::mem::take(&mut tool_images);
            messages.push(wire::RequestMessage::User { content: wire::UserContent::Parts(parts) });
        }
        if let Message::Tool { parts, .. } = message {
            for (index, part) in parts.iter().enumerate() {
                if let ContentPart::Image(image) = part {
                    tool_images.push(image_part(image, || format!("messages[{position}].parts[{index}]"))?);
                }
            }
        }
        messages.push(wire_message(message, position)?);
    }
    if !tool_images.is_empty() {
        messages.push(wire::RequestMessage::User { content: wire::UserContent::Parts(tool_images) });
    }
    let tools: Vec<_> = request
        .tools
        .iter()
        .map(|tool| wire::RequestTool {
            kind: "function",
            function: wire::RequestFunction {
                name: &tool.name,
                description: &tool.description,
                parameters: &tool.parameters,
            },
        })
        .collect();
    // `tool_choice` and `parallel_tool_calls` without `tools` are refused by the API.
    let tool_choice = (!tools.is_empty()).then(|| match &request.tool_choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Function(name) => json!({"type": "function", "function": {"name": name}}),
    });
    let parallel_tool_calls = request.parallel_tool_calls.filter(|_| !tools.is_empty());
    let response_format = request.response_format.as_ref().map(|format| match format {
        ResponseFormat::JsonObject => json!({"type": "json_object"}),
        ResponseFormat::JsonSchema { name, description, schema, strict } => {
            let mut json_schema = json!({"name": name, "schema": schema, "strict": strict});
            if !description.is_empty() {
                json_schema["description"] = json!(description);
            }
            json!({"type": "json_schema", "json_schema": json_schema})
        }
    });
    Ok(wire::ChatCompletionRequest {
        model: &request.model,
        messages,
        tools,
        tool_choice,
        parallel_tool_calls,
        response_format,
        max_tokens: request.max_tokens,
        temperature: request.temperature,
        stop: &request.stop,
        stream,
        stream_options: stream.then_some(wire::StreamOptions { include_usage: true }),
    })
}

fn wire_message(message: &Message, position: usize) -> Result<wire::RequestMessage<'_>, EncodeError> {
    Ok(match message {
        Message::User { content, parts } if parts.is_empty() => {
            wire::RequestMessage::User { content: wire::UserContent::Text(content) }
        }
        Message::User { content, parts } => {
            let mut wire_parts: Vec<_> =
                (!content.is_empty()).then_some(wire::RequestPart::Text { text: content }).into_iter().collect();
            for (index, part) in parts.iter().enumerate() {
                wire_parts.push(match part {
                    ContentPart::Text(text) => wire::RequestPart::Text { text },
                    ContentPart::Image(image) => image_part(image, || format!("messages[{position}].parts[{index}]"))?,
                });
            }
            wire::RequestMessage::User { content: wire::UserContent::Parts(wire_parts) }
        }
        Message::Assistant { content, tool_calls } => wire::RequestMessage::Assistant {
            content: (!content.is_empty() || tool_calls.is_empty()).then_some(content.as_str()),
            tool_calls: tool_calls
                .iter()
                .map(|call| wire::RequestToolCall {
                    id: &call.id,
                    kind: "function",
                    function: wire::RequestFunctionCall { name: &call.name, arguments: &call.arguments },
                })
                .collect(),
        },
        // The API has no error flag for tool results: the content itself says so. Text parts
        // join the content; images were moved to a user message by `wire_request`.
        Message::Tool { call_id, content, is_error: _, parts } => {
            let content = if parts.is_empty() { Cow::Borrowed(content.as_str()) } else { message.text() };
            wire::RequestMessage::Tool { tool_call_id: call_id, content }
        }
    })
}

fn image_part(image: &Image, field: impl Fn() -> String) -> Result<wire::RequestPart<'_>, EncodeError> {
    image.source().map_err(|message| EncodeError::unsupported(field(), message))?;
    Ok(wire::RequestPart::ImageUrl { image_url: wire::ImageUrl { url: &image.url, detail: image.detail.as_deref() } })
}

fn parse_completion(body: &[u8]) -> Result<Completion, String> {
    let response: wire::ChatCompletion =
        serde_json::from_slice(body).map_err(|err| format!("not a chat completion: {err}"))?;
    let choice =
        response.choices.and_then(|choices| choices.into_iter().next()).ok_or("the completion has no choices")?;
    let message = choice.message.ok_or("the completion's choice has no message")?;
    let tool_calls: Vec<ToolCall> = message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .map(|call| {
            let function = call.function.unwrap_or(wire::FunctionDelta { name: None, arguments: None });
            ToolCall {
                id: call.id.unwrap_or_default(),
                arguments: function.arguments_text(),
                name: function.name.unwrap_or_default(),
            }
        })
        .collect();
    Ok(Completion {
        content: message.content.or(message.refusal).unwrap_or_default(),
        finish_reason: finish_reason(choice.finish_reason.as_deref(), !tool_calls.is_empty()),
        tool_calls,
        usage: usage(response.usage),
        model: response.model.unwrap_or_default(),
        attempts: 0,
    })
}

/// The vendor's finish reason in our terms. A server that reports `stop` although the model
/// called tools (older Ollama) is read as `tool_calls`: what the caller must act on.
fn finish_reason(reason: Option<&str>, called_tools: bool) -> FinishReason {
    match reason {
        Some("length") => FinishReason::Length,
        Some("tool_calls" | "function_call") => FinishReason::ToolCalls,
        _ if called_tools => FinishReason::ToolCalls,
        Some("stop") | None => FinishReason::Stop,
        Some(_) => FinishReason::Other,
    }
}

fn usage(usage: Option<wire::Usage>) -> Usage {
    let usage = usage.unwrap_or_default();
    Usage {
        prompt_tokens: usage.prompt_tokens.unwrap_or_default(),
        completion_tokens: usage.completion_tokens.unwrap_or_default(),
        cached_prompt_tokens: usage.prompt_tokens_details.and_then(|d| d.cached_tokens).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimal_compatible_response_parses() {
        let completion = parse_completion(br#"{"choices":[{"message":{"content":"hi","tool_calls":null}}]}"#).unwrap();
        assert_eq!(completion.content, "hi");
        assert_eq!(completion.finish_reason, FinishReason::Stop);
        assert_eq!(completion.usage, Usage::default());
    }

    #[test]
    fn object_arguments_and_odd_finish_reasons_are_accepted() {
        let body = br#"{"model":"m","choices":[{"message":{"content":null,"tool_calls":[
            {"id":"c1","type":"function","function":{"name":"f","arguments":{"a":1}}}]},
            "finish_reason":"stop"}]}"#;
        let completion = parse_completion(body).unwrap();
        assert_eq!(completion.tool_calls[0].arguments, r#"{"a":1}"#);
        assert_eq!(completion.finish_reason, FinishReason::ToolCalls);
        assert_eq!(finish_reason(Some("content_filter"), false), FinishReason::Other);
    }

    #[test]
    fn bad_bodies_are_errors_not_panics() {
        assert!(parse_completion(b"<html>").is_err());
        assert!(parse_completion(br#"{"choices":[]}"#).is_err());
        assert!(parse_completion(br#"{"choices":[{"message":{"content":5}}]}"#).is_err());
    }
}
