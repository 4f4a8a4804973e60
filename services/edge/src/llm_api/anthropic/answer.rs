//! The router's answer as Anthropic's message object, and its stream as Anthropic's events.

use std::collections::HashMap;

use axum::response::sse::Event;
use serde::Serialize;
use serde_json::{Value, json};
use switchyard_proto::router::v1::{self as router, chat_stream_response::Event as ChatEvent};

use crate::chat::{MetadataJson, json_text, metadata_json};

/// Anthropic's `stop_reason` for the router's finish reason. The router does not say which
/// stop sequence ended an answer, so such a stop is reported as `end_turn`.
pub(super) fn stop_reason(finish: &str) -> &'static str {
    match finish {
        "length" => "max_tokens",
        "tool_calls" => "tool_use",
        "stop_sequence" => "stop_sequence",
        _ => "end_turn",
    }
}

/// A tool call's arguments as the `input` object Anthropic clients expect; text that is not
/// JSON (a model's slip) is passed on as a string rather than lost.
pub(super) fn tool_input(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_owned()))
}

/// Anthropic's message object for a ChatResponse; routing metadata rides in `_metadata` and
/// the session in `session_id`, which SDKs ignore.
pub(super) fn message_json(response: &router::ChatResponse, model: &str) -> Value {
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
        "usage": UsageJson::from(response.usage.as_ref()),
        "_metadata": response.metadata.as_ref().map(metadata_json).unwrap_or(Value::Null),
        "session_id": response.session_id,
    })
}

/// The content block being streamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OpenBlock {
    Text,
    /// The router's tool call index.
    ToolUse(u32),
}

/// One of Anthropic's stream events, written straight from the router's message: an answer
/// sends one for every piece, so no `Value` tree is built per event (as the OpenAI chunks).
/// The `type` member is also the SSE event's name.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Frame<'a> {
    MessageStart {
        message: StartMessage<'a>,
    },
    Ping,
    ContentBlockStart {
        index: u32,
        content_block: Block<'a>,
    },
    ContentBlockDelta {
        index: u32,
        delta: Delta<'a>,
    },
    ContentBlockStop {
        index: u32,
    },
    MessageDelta {
        delta: StopDelta,
        usage: UsageJson,
        #[serde(rename = "_metadata", skip_serializing_if = "Option::is_none")]
        metadata: Option<MetadataJson<'a>>,
    },
    MessageStop,
}

impl Frame<'_> {
    /// The SSE event name: the frame's `type`.
    pub(super) fn name(&self) -> &'static str {
        match self {
            Self::MessageStart { .. } => "message_start",
            Self::Ping => "ping",
            Self::ContentBlockStart { .. } => "content_block_start",
            Self::ContentBlockDelta { .. } => "content_block_delta",
            Self::ContentBlockStop { .. } => "content_block_stop",
            Self::MessageDelta { .. } => "message_delta",
            Self::MessageStop => "message_stop",
        }
    }
}

/// The message of `message_start`: empty, its content to come.
#[derive(Debug, Serialize)]
pub(super) struct StartMessage<'a> {
    id: &'a str,
    r#type: &'static str,
    role: &'static str,
    content: [(); 0],
    model: &'a str,
    stop_reason: Option<&'static str>,
    stop_sequence: Option<&'static str>,
    usage: UsageJson,
    #[serde(rename = "_metadata", skip_serializing_if = "Option::is_none")]
    metadata: Option<MetadataJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<&'a str>,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Block<'a> {
    Text { text: &'static str },
    ToolUse { id: &'a str, name: &'a str, input: EmptyObject },
}

/// `{}`: a tool call's input before its pieces stream in.
#[derive(Debug, Serialize)]
pub(super) struct EmptyObject {}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Delta<'a> {
    TextDelta { text: &'a str },
    InputJsonDelta { partial_json: &'a str },
}

#[derive(Debug, Serialize)]
pub(super) struct StopDelta {
    stop_reason: &'static str,
    stop_sequence: Option<&'static str>,
}

/// Anthropic's `usage` object (absent usage counts as zero).
#[derive(Debug, Default, Serialize)]
pub(super) struct UsageJson {
    input_tokens: u32,
    output_tokens: u32,
}

impl From<Option<&router::Usage>> for UsageJson {
    fn from(usage: Option<&router::Usage>) -> Self {
        usage.map_or_else(Self::default, |usage| Self {
            input_tokens: usage.prompt_tokens,
            output_tokens: usage.completion_tokens,
        })
    }
}

/// Turns the router's stream into Anthropic's events: `message_start` and a `ping`, then
/// each content block as `content_block_start`, its deltas (`text_delta`, or
/// `input_json_delta` for a tool call's arguments) and `content_block_stop`, then
/// `message_delta` with the stop reason and usage, and `message_stop`.
pub(super) struct StreamEvents {
    pub(super) id: String,
    pub(super) model: String,
    pub(super) started: bool,
    /// Blocks opened so far (the next block's index).
    pub(super) blocks: u32,
    pub(super) open: Option<OpenBlock>,
    /// Tool calls streamed as deltas, by the router's index.
    pub(super) streamed_calls: HashMap<u32, String>,
}

/// Where the frames of one router message go: written as SSE events, or kept by a test.
pub(super) trait Sink {
    fn send(&mut self, frame: &Frame<'_>);
}

impl Sink for Vec<Event> {
    fn send(&mut self, frame: &Frame<'_>) {
        self.push(Event::default().event(frame.name()).data(json_text(frame)));
    }
}

impl StreamEvents {
    pub(super) fn new(model: String) -> Self {
        Self {
            id: format!("msg_{}", uuid::Uuid::new_v4().simple()),
            model,
            started: false,
            blocks: 0,
            open: None,
            streamed_calls: HashMap::new(),
        }
    }

    pub(super) fn start(&mut self, out: &mut impl Sink, route: Option<&router::RouteDecided>) {
        if self.started {
            return;
        }
        self.started = true;
        if let Some(route) = route.filter(|r| !r.id.is_empty()) {
            self.id.clone_from(&route.id);
        }
        let message = StartMessage {
            id: &self.id,
            r#type: "message",
            role: "assistant",
            content: [],
            model: &self.model,
            stop_reason: None,
            stop_sequence: None,
            usage: UsageJson::default(),
            metadata: route.and_then(|r| r.metadata.as_ref()).map(MetadataJson::from),
            session_id: route.map(|r| r.session_id.as_str()),
        };
        out.send(&Frame::MessageStart { message });
        out.send(&Frame::Ping);
    }

    pub(super) fn close(&mut self, out: &mut impl Sink) {
        if self.open.take().is_some() {
            out.send(&Frame::ContentBlockStop { index: self.blocks - 1 });
        }
    }

    pub(super) fn open(&mut self, out: &mut impl Sink, block: OpenBlock, content_block: Block<'_>) {
        self.close(out);
        out.send(&Frame::ContentBlockStart { index: self.blocks, content_block });
        self.blocks += 1;
        self.open = Some(block);
    }

    pub(super) fn delta(&self, out: &mut impl Sink, delta: Delta<'_>) {
        out.send(&Frame::ContentBlockDelta { index: self.blocks - 1, delta });
    }

    pub(super) fn tool_use(&mut self, out: &mut impl Sink, index: u32, id: &str, name: &str) {
        self.streamed_calls.insert(index, id.to_owned());
        self.open(out, OpenBlock::ToolUse(index), Block::ToolUse { id, name, input: EmptyObject {} });
    }

    pub(super) fn next(&mut self, item: router::ChatStreamResponse) -> Vec<Event> {
        let mut out = Vec::new();
        self.frames(item, &mut out);
        out
    }

    /// The events for one message of the router's stream.
    pub(super) fn frames(&mut self, item: router::ChatStreamResponse, out: &mut impl Sink) {
        let Some(event) = item.event else { return };
        match event {
            ChatEvent::Route(route) => self.start(out, Some(&route)),
            ChatEvent::Delta(delta) => {
                self.start(out, None);
                if !delta.content.is_empty() {
                    if self.open != Some(OpenBlock::Text) {
                        self.open(out, OpenBlock::Text, Block::Text { text: "" });
                    }
                    self.delta(out, Delta::TextDelta { text: &delta.content });
                }
            }
            // The router's own MCP tool calls: its business, not the caller's.
            ChatEvent::Tool(_) => {}
            ChatEvent::ToolCall(call) => {
                self.start(out, None);
                if self.open != Some(OpenBlock::ToolUse(call.index)) {
                    self.tool_use(out, call.index, &call.id, &call.name);
                }
                if !call.arguments_delta.is_empty() {
                    self.delta(out, Delta::InputJsonDelta { partial_json: &call.arguments_delta });
                }
            }
            ChatEvent::Completed(done) => {
                self.start(out, None);
                // Calls the router completed without streaming their pieces come whole.
                for (index, call) in done.tool_calls.iter().enumerate() {
                    let index = u32::try_from(index).unwrap_or(u32::MAX);
                    if self.streamed_calls.values().any(|id| *id == call.id) || self.streamed_calls.contains_key(&index)
                    {
                        continue;
                    }
                    self.tool_use(out, index, &call.id, &call.name);
                    if !call.arguments_json.is_empty() {
                        self.delta(out, Delta::InputJsonDelta { partial_json: &call.arguments_json });
                    }
                }
                self.close(out);
                out.send(&Frame::MessageDelta {
                    delta: StopDelta { stop_reason: stop_reason(&done.finish_reason), stop_sequence: None },
                    usage: UsageJson::from(done.usage.as_ref()),
                    metadata: done.metadata.as_ref().map(MetadataJson::from),
                });
                out.send(&Frame::MessageStop);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each frame as its event name and the JSON it is written as.
    impl Sink for Vec<(String, Value)> {
        fn send(&mut self, frame: &Frame<'_>) {
            self.push((frame.name().to_owned(), serde_json::from_str(&json_text(frame)).unwrap()));
        }
    }

    fn stream(events: Vec<ChatEvent>) -> Vec<(String, Value)> {
        let mut relay = StreamEvents::new("claude".into());
        let mut out = Vec::new();
        for event in events {
            relay.frames(router::ChatStreamResponse { event: Some(event) }, &mut out);
        }
        out
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
                usage: Some(router::Usage {
                    prompt_tokens: 3,
                    completion_tokens: 4,
                    total_tokens: 7,
                    ..Default::default()
                }),
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
        for (name, data) in &events {
            assert_eq!(data["type"], name.as_str(), "each event's data names its type");
        }
        assert_eq!(
            events[0].1["message"],
            json!({"id": "chat-1", "type": "message", "role": "assistant", "content": [], "model": "claude",
                "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 0, "output_tokens": 0},
                "session_id": "s-1"})
        );
        assert_eq!(
            events[2].1,
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}})
        );
        assert_eq!(
            events[3].1,
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "Let me "}})
        );
        assert_eq!(events[5].1, json!({"type": "content_block_stop", "index": 0}));
        assert_eq!(events[6].1["content_block"], json!({"type": "tool_use", "id": "t1", "name": "ls", "input": {}}));
        assert_eq!(events[7].1["delta"], json!({"type": "input_json_delta", "partial_json": "{\"pa"}));
        assert_eq!(
            events[10].1,
            json!({"type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": null},
            "usage": {"input_tokens": 3, "output_tokens": 4}})
        );
        assert_eq!(events[11].1, json!({"type": "message_stop"}));
        assert_eq!(events[6].1["content_block"]["type"], "tool_use");
        assert_eq!(events[6].1["index"], 1);
        assert_eq!(events[8].1["delta"]["type"], "input_json_delta");
        assert_eq!(events[10].1["delta"]["stop_reason"], "tool_use");
        assert_eq!(events[10].1["usage"]["output_tokens"], 4);
    }
}
