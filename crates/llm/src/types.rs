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

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ToolChoice {
    /// The model decides whether to call a tool (`tool_choice` `auto`, as the routing call of
    /// docs/requirements.md#router-routing-tools uses it).
    #[default]
    Auto,
    /// No tool calls, even when tools are listed.
    None,
    /// The model must call one of the tools.
    Required,
    /// The model must call this tool (one of the request's tools, by name).
    Function(String),
}

/// The shape the answer must take. Never dropped: a wire that cannot express it meets it
/// another way (Anthropic: a forced tool) or refuses the request.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    /// Any JSON object.
    JsonObject,
    /// A JSON value matching `schema`; `name` is the schema's name (`[A-Za-z0-9_-]`, as OpenAI
    /// requires), `strict` OpenAI's strict schema adherence.
    JsonSchema { name: String, description: String, schema: serde_json::Value, strict: bool },
}

/// One part of a message's content, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum ContentPart {
    Text(String),
    Image(Image),
}

/// An image: an `https:` (or `http:`) URL the vendor fetches, or a `data:<media type>;base64,<bytes>` URL.
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    pub url: String,
    /// OpenAI's `detail` (`auto`, `low`, `high`); `None` for the vendor's default.
    pub detail: Option<String>,
}

impl Image {
    pub fn url(url: impl Into<String>) -> Self {
        Self { url: url.into(), detail: None }
    }

    /// What the URL holds, for wires that tell the two kinds apart (Anthropic's `source`).
    pub fn source(&self) -> Result<ImageSource<'_>, String> {
        if let Some(rest) = self.url.strip_prefix("data:") {
            let (media_type, data) =
                rest.split_once(";base64,").ok_or("a `data:` image URL must be `data:<media type>;base64,<data>`")?;
            if !media_type.starts_with("image/") {
                return Err(format!("the `data:` image URL's media type `{media_type}` is not an image type"));
            }
            if data.is_empty() {
                return Err("the `data:` image URL carries no data".to_owned());
            }
            return Ok(ImageSource::Base64 { media_type, data });
        }
        if self.url.starts_with("https://") || self.url.starts_with("http://") {
            return Ok(ImageSource::Url(&self.url));
        }
        Err("an image URL must be `https:` or a base64 `data:` URL".to_owned())
    }
}

/// An [`Image`]'s URL taken apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageSource<'a> {
    Url(&'a str),
    Base64 { media_type: &'a str, data: &'a str },
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
///
/// A user message and a tool result carry text in `content` and, when they are more than
/// text, `parts` (text and images in order) after it.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    User {
        content: String,
        parts: Vec<ContentPart>,
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
        parts: Vec<ContentPart>,
    },
}

impl Message {
    pub fn user(content: impl Into<String>) -> Self {
        Self::User { content: content.into(), parts: Vec::new() }
    }

    /// A user message of text and images.
    pub fn user_parts(parts: Vec<ContentPart>) -> Self {
        Self::User { content: String::new(), parts }
    }

    /// The text result of the tool call `call_id`.
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>, is_error: bool) -> Self {
        Self::Tool { call_id: call_id.into(), content: content.into(), is_error, parts: Vec::new() }
    }

    /// All the message's text (its text parts joined by newlines after `content`), for
    /// readers that need only words: routing, trigger matching, a text-only model.
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        let (content, parts) = match self {
            Self::User { content, parts } | Self::Tool { content, parts, .. } => (content, parts.as_slice()),
            Self::Assistant { content, .. } => (content, &[][..]),
        };
        let texts: Vec<&str> = std::iter::once(content.as_str())
            .chain(parts.iter().filter_map(|part| match part {
                ContentPart::Text(text) => Some(text.as_str()),
                ContentPart::Image(_) => None,
            }))
            .filter(|text| !text.is_empty())
            .collect();
        match texts.as_slice() {
            [] => std::borrow::Cow::Borrowed(""),
            [one] => std::borrow::Cow::Borrowed(one),
            _ => std::borrow::Cow::Owned(texts.join("\n")),
        }
    }

    /// The message's images.
    pub fn images(&self) -> impl Iterator<Item = &Image> {
        let parts = match self {
            Self::User { parts, .. } | Self::Tool { parts, .. } => parts.as_slice(),
            Self::Assistant { .. } => &[],
        };
        parts.iter().filter_map(|part| match part {
            ContentPart::Image(image) => Some(image),
            ContentPart::Text(_) => None,
        })
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
    /// Whether the model may call several tools in one turn; the vendor's default when `None`.
    pub parallel_tool_calls: Option<bool>,
    pub response_format: Option<ResponseFormat>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub stop: Vec<String>,
    /// The caller's `anthropic-version` and `anthropic-beta`, for an Anthropic-wire provider
    /// (the others ignore them).
    pub anthropic_headers: AnthropicHeaders,
}

/// The Anthropic API's request headers a caller may choose. Values are sent as given; the
/// router has checked them (visible ASCII, bounded length).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AnthropicHeaders {
    /// Sent as `anthropic-version` instead of the provider's own.
    pub version: Option<String>,
    /// Sent as `anthropic-beta` (a comma-separated list, as the caller gave it).
    pub beta: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Every prompt token, cached or not.
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// Of `prompt_tokens`, those the vendor read from its prompt cache (billed at its cached
    /// rate): OpenAI's `prompt_tokens_details.cached_tokens`, Anthropic's
    /// `cache_read_input_tokens`. (Anthropic's cache writes are ordinary prompt tokens here.)
    pub cached_prompt_tokens: u32,
}

impl Usage {
    pub fn total(&self) -> u32 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }

    pub fn add(&mut self, other: Usage) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self.completion_tokens.saturating_add(other.completion_tokens);
        self.cached_prompt_tokens = self.cached_prompt_tokens.saturating_add(other.cached_prompt_tokens);
    }

    /// The prompt tokens billed at the full input rate.
    pub fn uncached_prompt_tokens(&self) -> u32 {
        self.prompt_tokens.saturating_sub(self.cached_prompt_tokens)
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
    /// The `finish_reason` strings of an answer (docs/requirements.md#router-response).
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

/// What a streaming call yields: text as it arrives, tool calls as they start and as their
/// arguments stream, then exactly one `Done` as the last item.
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
    /// A piece of a tool call as it streams. `index` is the call's position in the final
    /// [`Completion::tool_calls`]; a call's first piece carries its `id` and `name` (and comes
    /// right after its `ToolCallStarted`), the following ones `None`. A call's `arguments` pieces
    /// joined are exactly its arguments in `Done`.
    ToolCallDelta {
        index: u32,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    },
    Done(Completion),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_text_joins_its_text_parts_and_skips_images() {
        let message = Message::User {
            content: "first".into(),
            parts: vec![
                ContentPart::Image(Image::url("https://example.com/a.png")),
                ContentPart::Text("second".into()),
            ],
        };
        assert_eq!(message.text(), "first\nsecond");
        assert_eq!(message.images().count(), 1);
        assert_eq!(Message::user_parts(vec![ContentPart::Text("only".into())]).text(), "only");
        assert_eq!(Message::tool_result("c", "", false).text(), "");
    }

    #[test]
    fn image_urls_are_https_or_base64_data_of_an_image_type() {
        let source = |url: &str| Image::url(url).source().map(|source| format!("{source:?}"));
        assert_eq!(source("https://x.test/a.jpg").unwrap(), r#"Url("https://x.test/a.jpg")"#);
        assert_eq!(
            Image::url("data:image/webp;base64,UklGRg==").source(),
            Ok(ImageSource::Base64 { media_type: "image/webp", data: "UklGRg==" })
        );
        for bad in ["ftp://x.test/a.jpg", "data:image/png,raw", "data:;base64,AAAA", "data:image/png;base64,", ""] {
            assert!(source(bad).is_err(), "{bad}");
        }
    }
}
