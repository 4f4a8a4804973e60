//! The router's answer as Anthropic's message object, and its stream as Anthropic's events.

use std::collections::HashMap;

use axum::response::sse::Event;
use serde_json::{Value, json};
use switchyard_proto::router::v1::{self as router, chat_stream_response::Event as ChatEvent};

use crate::chat::{json_text, metadata_json};

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

pub(super) fn usage_json(usage: Option<&router::Usage>) -> Value {
    let usage = usage.cloned().unwrap_or_default();
    json!({"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens})
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
        "usage": usage_json(response.usage.as_ref()),
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

    pub(super) fn start(&mut self, out: &mut Vec<(&'static str, Value)>, route: Option<&router::RouteDecided>) {
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

    pub(super) fn close(&mut self, out: &mut Vec<(&'static str, Value)>) {
        if self.open.take().is_some() {
            out.push(("content_block_stop", json!({"type": "content_block_stop", "index": self.blocks - 1})));
        }
    }

    pub(super) fn open(&mut self, out: &mut Vec<(&'static str, Value)>, block: OpenBlock, content_block: Value) {
        self.close(out);
        out.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": self.blocks, "content_block": content_block}),
        ));
        self.blocks += 1;
        self.open = Some(block);
    }

    pub(super) fn delta(&self, out: &mut Vec<(&'static str, Value)>, delta: Value) {
        out.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": self.blocks - 1, "delta": delta}),
        ));
    }

    pub(super) fn tool_use(&mut self, out: &mut Vec<(&'static str, Value)>, index: u32, id: &str, name: &str) {
        self.streamed_calls.insert(index, id.to_owned());
        self.open(out, OpenBlock::ToolUse(index), json!({"type": "tool_use", "id": id, "name": name, "input": {}}));
    }

    pub(super) fn next(&mut self, item: router::ChatStreamResponse) -> Vec<Event> {
        self.frames(item).into_iter().map(|(name, data)| Event::default().event(name).data(json_text(&data))).collect()
    }

    /// The events, named, for one message of the router's stream.
    pub(super) fn frames(&mut self, item: router::ChatStreamResponse) -> Vec<(&'static str, Value)> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(events[0].1["message"]["id"], "chat-1");
        assert_eq!(events[6].1["content_block"]["type"], "tool_use");
        assert_eq!(events[6].1["index"], 1);
        assert_eq!(events[8].1["delta"]["type"], "input_json_delta");
        assert_eq!(events[10].1["delta"]["stop_reason"], "tool_use");
        assert_eq!(events[10].1["usage"]["output_tokens"], 4);
    }
}
