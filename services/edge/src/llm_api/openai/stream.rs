//! The router's stream as `chat.completion.chunk`s.

use std::collections::HashSet;

use axum::response::sse::Event;
use serde_json::{Value, json};
use switchyard_proto::router::v1::{self as router, chat_stream_response::Event as ChatEvent};

use crate::{
    chat::{finish_reason, metadata_json, usage_json},
    error::ApiError,
};

/// An error in the middle of a stream, as OpenAI sends one: a `data:` chunk in its error shape.
pub(super) fn error_chunk(error: &ApiError) -> Event {
    Event::default().data(
        json!({"error": {
            "message": error.message(), "type": "api_error", "param": null,
            "code": crate::error::code_name(error.code()).to_ascii_lowercase(),
        }})
        .to_string(),
    )
}

/// Turns the router's stream into `chat.completion.chunk`s.
pub(super) struct Chunks {
    pub(super) id: String,
    pub(super) model: String,
    pub(super) created: i64,
    pub(super) include_usage: bool,
    pub(super) started: bool,
    /// The indexes of the tool calls whose pieces were sent: a call the router reports only
    /// whole, at the end, is sent whole then.
    pub(super) calls_sent: HashSet<u32>,
}

impl Chunks {
    pub(super) fn new(model: String, include_usage: bool) -> Self {
        Self {
            id: format!("chatcmpl-{}", uuid::Uuid::new_v4()),
            model,
            created: chrono::Utc::now().timestamp(),
            include_usage,
            started: false,
            calls_sent: HashSet::new(),
        }
    }

    pub(super) fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    }

    /// A piece of a tool call as OpenAI streams it: the first piece with the call's id, type
    /// and name, then argument text.
    pub(super) fn tool_call_chunk(&mut self, index: u32, id: &str, name: &str, arguments: &str) -> Value {
        let mut call = json!({"index": index, "function": {"arguments": arguments}});
        if !id.is_empty() || !self.calls_sent.contains(&index) {
            call["id"] = json!(id);
            call["type"] = json!("function");
            call["function"]["name"] = json!(name);
        }
        self.calls_sent.insert(index);
        self.chunk(json!({"tool_calls": [call]}), None)
    }

    pub(super) fn next(&mut self, item: router::ChatStreamResponse) -> Vec<Event> {
        self.chunks(item).into_iter().map(|chunk| Event::default().data(chunk.to_string())).collect()
    }

    pub(super) fn chunks(&mut self, item: router::ChatStreamResponse) -> Vec<Value> {
        let Some(event) = item.event else { return Vec::new() };
        let mut out = Vec::new();
        match event {
            ChatEvent::Route(route) => {
                if let Some(id) = Some(&route.id).filter(|id| !id.is_empty()) {
                    self.id.clone_from(id);
                }
                if !self.started {
                    self.started = true;
                    let mut first = self.chunk(json!({"role": "assistant", "content": ""}), None);
                    if let Some(metadata) = &route.metadata {
                        first["_metadata"] = metadata_json(metadata);
                    }
                    first["session_id"] = json!(route.session_id);
                    out.push(first);
                }
            }
            ChatEvent::Delta(delta) => {
                if !delta.content.is_empty() {
                    out.push(self.chunk(json!({"content": delta.content}), None));
                }
            }
            ChatEvent::ToolCall(piece) => {
                out.push(self.tool_call_chunk(piece.index, &piece.id, &piece.name, &piece.arguments_delta));
            }
            // Tool activity of the gateway's tools is the router's own business; OpenAI
            // clients see the answer and the calls of their own tools.
            ChatEvent::Tool(_) => {}
            ChatEvent::Completed(done) => {
                for (index, call) in (0u32..).zip(&done.tool_calls) {
                    if !self.calls_sent.contains(&index) {
                        out.push(self.tool_call_chunk(index, &call.id, &call.name, &call.arguments_json));
                    }
                }
                let mut last = self.chunk(json!({}), Some(finish_reason(&done.finish_reason)));
                if let Some(metadata) = &done.metadata {
                    last["_metadata"] = metadata_json(metadata);
                }
                out.push(last);
                if self.include_usage {
                    let mut usage = self.chunk(json!({}), None);
                    usage["choices"] = json!([]);
                    usage["usage"] = usage_json(done.usage.as_ref());
                    out.push(usage);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_tool_calls_have_openai_pieces_and_finish_reason() {
        let mut chunks = Chunks::new("switchyard".into(), false);
        let event = |event: ChatEvent| router::ChatStreamResponse { event: Some(event) };
        let piece = |index: u32, id: &str, name: &str, arguments: &str| {
            event(ChatEvent::ToolCall(router::ToolCallDelta {
                index,
                id: id.into(),
                name: name.into(),
                arguments_delta: arguments.into(),
            }))
        };
        let opening = chunks.chunks(piece(0, "call_1", "get_weather", ""));
        let call = &opening[0]["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!((call["index"].as_u64(), call["id"].as_str()), (Some(0), Some("call_1")));
        assert_eq!(call["function"]["name"], "get_weather");
        let first = chunks.tool_call_chunk(1, "call_2", "get_time", "{}");
        assert_eq!(first["choices"][0]["delta"]["tool_calls"][0]["id"], "call_2");
        assert_eq!(first["choices"][0]["delta"]["tool_calls"][0]["type"], "function");
        assert_eq!(first["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "get_time");
        let more = chunks.tool_call_chunk(0, "", "", "{\"city\":");
        let call = &more["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(call["index"], 0);
        assert_eq!(call["function"]["arguments"], "{\"city\":");
        assert!(call.get("id").is_none() && call["function"].get("name").is_none(), "{call}");
        // A call reported only whole at the end is sent whole before the last chunk.
        let done = event(ChatEvent::Completed(router::ChatCompleted {
            finish_reason: "tool_calls".into(),
            tool_calls: vec![
                router::ToolCall { id: "call_1".into(), name: "get_weather".into(), arguments_json: "{}".into() },
                router::ToolCall { id: "call_2".into(), name: "get_time".into(), arguments_json: "{}".into() },
                router::ToolCall { id: "call_3".into(), name: "get_date".into(), arguments_json: "{}".into() },
            ],
            ..Default::default()
        }));
        let last = chunks.chunks(done);
        assert_eq!(last.len(), 2, "the unsent third call, then the finish: {last:?}");
        assert_eq!(last[0]["choices"][0]["delta"]["tool_calls"][0]["id"], "call_3");
        assert_eq!(last[0]["choices"][0]["delta"]["tool_calls"][0]["index"], 2);
        assert_eq!(last[1]["choices"][0]["finish_reason"], "tool_calls");
    }
}
