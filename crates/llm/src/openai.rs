//! OpenAI-compatible Chat Completions (`POST {base_url}/chat/completions`): OpenAI itself and
//! every server that speaks its API (vLLM, Ollama, LiteLLM, llama.cpp), told apart by URL alone.

mod stream;
mod wire;

use std::fmt;

use bytes::Bytes;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};

use crate::{
    ChatRequest, Completion, ErrorKind, EventStream, FinishReason, Message, Provider, ProviderConfig, ProviderError,
    ToolCall, ToolChoice, Usage, streaming::event_stream, transport::Transport,
};

pub struct OpenAi {
    transport: Transport,
    url: String,
    headers: HeaderMap,
}

impl fmt::Debug for OpenAi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAi").field("name", &self.transport.provider()).field("url", &self.url).finish()
    }
}

impl OpenAi {
    pub const DEFAULT_BASE_URL: &'static str = "https://api.openai.com/v1";

    /// The `openai` provider.
    pub fn new(config: ProviderConfig) -> Result<Self, ProviderError> {
        Self::named("openai", config)
    }

    /// An OpenAI-compatible server under another provider name (`local/<model>` for a vLLM).
    pub fn named(name: &str, config: ProviderConfig) -> Result<Self, ProviderError> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(key) = &config.api_key {
            let value = Transport::secret_header(&format!("Bearer {}", key.expose()))
                .map_err(|message| ProviderError::new(name, ErrorKind::Auth, message))?;
            headers.insert(AUTHORIZATION, value);
        }
        let url = format!("{}/chat/completions", config.root());
        Ok(Self { transport: Transport::new(name, config)?, url, headers })
    }

    fn body(&self, request: &ChatRequest, stream: bool) -> Result<Bytes, ProviderError> {
        serde_json::to_vec(&wire_request(request, stream))
            .map(Bytes::from)
            .map_err(|err| self.transport.error(ErrorKind::Rejected, format!("the request cannot be encoded: {err}")))
    }
}

#[async_trait::async_trait]
impl Provider for OpenAi {
    fn name(&self) -> &str {
        self.transport.provider()
    }

    async fn complete(&self, request: ChatRequest) -> Result<Completion, ProviderError> {
        let body = self.body(&request, false)?;
        let (body, attempts) = self.transport.post_for_body(&self.url, &self.headers, body).await?;
        let mut completion = parse_completion(&body)
            .map_err(|cause| self.transport.error(ErrorKind::Protocol, format!("unexpected response: {cause}")))?;
        completion.attempts = attempts;
        Ok(completion)
    }

    async fn stream(&self, request: ChatRequest) -> Result<EventStream, ProviderError> {
        let body = self.body(&request, true)?;
        let (response, attempts) = self.transport.post_for_stream(&self.url, &self.headers, body).await?;
        let decoder = stream::ChunkDecoder::new(self.transport.provider(), attempts);
        Ok(event_stream(self.transport.provider(), self.transport.config(), response, decoder))
    }
}

fn wire_request(request: &ChatRequest, stream: bool) -> wire::ChatCompletionRequest<'_> {
    let system = request.system.as_deref().map(|content| wire::RequestMessage::System { content });
    let messages = system.into_iter().chain(request.messages.iter().map(wire_message)).collect();
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
    // `tool_choice` without `tools` is refused by the API.
    let tool_choice = (!tools.is_empty()).then_some(match request.tool_choice {
        ToolChoice::Auto => "auto",
        ToolChoice::None => "none",
        ToolChoice::Required => "required",
    });
    wire::ChatCompletionRequest {
        model: &request.model,
        messages,
        tools,
        tool_choice,
        max_tokens: request.max_tokens,
        temperature: request.temperature,
        stop: &request.stop,
        stream,
        stream_options: stream.then_some(wire::StreamOptions { include_usage: true }),
    }
}

fn wire_message(message: &Message) -> wire::RequestMessage<'_> {
    match message {
        Message::User { content } => wire::RequestMessage::User { content },
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
        // The API has no error flag for tool results: the content itself must say so.
        Message::Tool { call_id, content, is_error: _ } => {
            wire::RequestMessage::Tool { tool_call_id: call_id, content }
        }
    }
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
