//! The router's stream as `chat.completion.chunk`s.

use std::collections::HashSet;

use axum::response::sse::Event;
use serde::Serialize;
use serde_json::json;
use switchyard_proto::router::v1::{self as router, chat_stream_response::Event as ChatEvent};

use crate::{
    chat::{MetadataJson, UsageJson, finish_reason, json_text},
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

/// One `chat.completion.chunk`, written straight from the router's message (a chunk goes out
/// for every piece of every answer, so no `Value` tree is built for it).
#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: i64,
    model: &'a str,
    /// One choice, or none (`[]`) in the closing usage chunk.
    #[serde(serialize_with = "choice_list")]
    choices: Option<Choice<'a>>,
    #[serde(rename = "_metadata", skip_serializing_if = "Option::is_none")]
    metadata: Option<MetadataJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<UsageJson>,
}

fn choice_list<S: serde::Serializer>(choice: &Option<Choice<'_>>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(choice)
}

#[derive(Serialize)]
struct Choice<'a> {
    index: u32,
    delta: Delta<'a>,
    finish_reason: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Delta<'a> {
    /// The first chunk: the assistant's turn begins.
    Role {
        role: &'static str,
        content: &'static str,
    },
    Content {
        content: &'a str,
    },
    ToolCalls {
        tool_calls: [ToolCallPiece<'a>; 1],
    },
    /// The finishing chunk.
    Empty {},
}

/// A piece of a tool call as OpenAI streams it: the first piece with the call's id, type and
/// name, then argument text.
#[derive(Serialize)]
struct ToolCallPiece<'a> {
    index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    function: FunctionPiece<'a>,
}

#[derive(Serialize)]
struct FunctionPiece<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
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

    /// A chunk with no choice and nothing but the stream's identity.
    fn header(&self) -> Chunk<'_> {
        Chunk {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.created,
            model: &self.model,
            choices: None,
            metadata: None,
            session_id: None,
            usage: None,
        }
    }

    fn chunk<'a>(&'a self, delta: Delta<'a>, finish: Option<&'a str>) -> Chunk<'a> {
        Chunk { choices: Some(Choice { index: 0, delta, finish_reason: finish }), ..self.header() }
    }

    /// A piece of a tool call as JSON text: the first piece of a call carries its id, type
    /// and name.
    pub(super) fn tool_call_chunk(&mut self, index: u32, id: &str, name: &str, arguments: &str) -> String {
        let first = !id.is_empty() || !self.calls_sent.contains(&index);
        self.calls_sent.insert(index);
        let piece = ToolCallPiece {
            index,
            id: first.then_some(id),
            kind: first.then_some("function"),
            function: FunctionPiece { name: first.then_some(name), arguments },
        };
        json_text(&self.chunk(Delta::ToolCalls { tool_calls: [piece] }, None))
    }

    pub(super) fn next(&mut self, item: router::ChatStreamResponse) -> Vec<Event> {
        self.chunks(item).into_iter().map(|chunk| Event::default().data(chunk)).collect()
    }

    /// The chunks, as JSON text, for one message of the router's stream.
    pub(super) fn chunks(&mut self, item: router::ChatStreamResponse) -> Vec<String> {
        let Some(event) = item.event else { return Vec::new() };
        let mut out = Vec::new();
        match event {
            ChatEvent::Route(route) => {
                if let Some(id) = Some(&route.id).filter(|id| !id.is_empty()) {
                    self.id.clone_from(id);
                }
                if !self.started {
                    self.started = true;
                    let mut first = self.chunk(Delta::Role { role: "assistant", content: "" }, None);
                    first.metadata = route.metadata.as_ref().map(MetadataJson::from);
                    first.session_id = Some(&route.session_id);
                    out.push(json_text(&first));
                }
            }
            ChatEvent::Delta(delta) => {
                if !delta.content.is_empty() {
                    out.push(json_text(&self.chunk(Delta::Content { content: &delta.content }, None)));
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
                let mut last = self.chunk(Delta::Empty {}, Some(finish_reason(&done.finish_reason)));
                last.metadata = done.metadata.as_ref().map(MetadataJson::from);
                out.push(json_text(&last));
                if self.include_usage {
                    let closing = Chunk { usage: Some(UsageJson::from(done.usage.as_ref())), ..self.header() };
                    out.push(json_text(&closing));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn parsed(texts: &[String]) -> Vec<Value> {
        texts.iter().map(|text| serde_json::from_str(text).expect("a chunk is JSON")).collect()
    }

    #[test]
    fn a_streamed_answer_has_openais_chunk_shapes() {
        let mut chunks = Chunks::new("switchyard".into(), true);
        let event = |event: ChatEvent| router::ChatStreamResponse { event: Some(event) };
        let metadata = router::RouteMetadata {
            route_type: router::RouteType::Direct as i32,
            role_id: "tech-expert".into(),
            cost_parts: vec![router::CallCost { kind: "routing".into(), priced: true, ..Default::default() }],
            ..Default::default()
        };
        let route =
            router::RouteDecided { id: "chat-7".into(), session_id: "s-1".into(), metadata: Some(metadata.clone()) };
        let first = parsed(&chunks.chunks(event(ChatEvent::Route(route))));
        assert_eq!(first.len(), 1);
        assert_eq!(first[0]["id"], "chat-7", "the router's id names the stream");
        assert_eq!(first[0]["object"], "chat.completion.chunk");
        assert_eq!(first[0]["model"], "switchyard");
        assert!(first[0]["created"].as_i64().is_some_and(|t| t > 0));
        assert_eq!(first[0]["choices"][0]["index"], 0);
        assert_eq!(first[0]["choices"][0]["delta"], json!({"role": "assistant", "content": ""}));
        assert_eq!(first[0]["choices"][0]["finish_reason"], Value::Null);
        assert_eq!(first[0]["session_id"], "s-1");
        assert_eq!(first[0]["_metadata"]["route_type"], "direct");
        assert_eq!(first[0]["_metadata"]["role_id"], "tech-expert");
        assert_eq!(first[0]["_metadata"]["reasoning"], Value::Null);
        assert_eq!(first[0]["_metadata"]["cost_parts"][0]["kind"], "routing");
        assert_eq!(first[0]["_metadata"], crate::chat::metadata_json(&metadata), "one shape for both paths");

        let text =
            parsed(&chunks.chunks(event(ChatEvent::Delta(router::ContentDelta { content: "Hi \"you\"\n".into() }))));
        assert_eq!(text[0]["choices"][0]["delta"], json!({"content": "Hi \"you\"\n"}));
        assert!(text[0].get("_metadata").is_none() && text[0].get("usage").is_none(), "{}", text[0]);
        assert!(chunks.chunks(event(ChatEvent::Delta(router::ContentDelta::default()))).is_empty());

        let done = router::ChatCompleted {
            finish_reason: "stop".into(),
            usage: Some(router::Usage {
                prompt_tokens: 3,
                completion_tokens: 2,
                total_tokens: 5,
                ..Default::default()
            }),
            metadata: Some(metadata),
            ..Default::default()
        };
        let last = parsed(&chunks.chunks(event(ChatEvent::Completed(done))));
        assert_eq!(last.len(), 2, "the finish, then the usage: {last:?}");
        assert_eq!(last[0]["choices"][0]["delta"], json!({}));
        assert_eq!(last[0]["choices"][0]["finish_reason"], "stop");
        assert_eq!(last[0]["_metadata"]["role_id"], "tech-expert");
        assert_eq!(last[1]["choices"], json!([]), "the usage chunk has no choice");
        assert_eq!(last[1]["usage"], json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}));
        assert_eq!(last[1]["id"], "chat-7");
    }

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
        let values = |texts: Vec<String>| parsed(&texts);
        let value = |text: String| parsed(&[text]).remove(0);
        let opening = values(chunks.chunks(piece(0, "call_1", "get_weather", "")));
        let call = &opening[0]["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!((call["index"].as_u64(), call["id"].as_str()), (Some(0), Some("call_1")));
        assert_eq!(call["function"]["name"], "get_weather");
        let first = value(chunks.tool_call_chunk(1, "call_2", "get_time", "{}"));
        assert_eq!(first["choices"][0]["delta"]["tool_calls"][0]["id"], "call_2");
        assert_eq!(first["choices"][0]["delta"]["tool_calls"][0]["type"], "function");
        assert_eq!(first["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "get_time");
        let more = value(chunks.tool_call_chunk(0, "", "", "{\"city\":"));
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
        let last = values(chunks.chunks(done));
        assert_eq!(last.len(), 2, "the unsent third call, then the finish: {last:?}");
        assert_eq!(last[0]["choices"][0]["delta"]["tool_calls"][0]["id"], "call_3");
        assert_eq!(last[0]["choices"][0]["delta"]["tool_calls"][0]["index"], 2);
        assert_eq!(last[1]["choices"][0]["finish_reason"], "tool_calls");
    }
}
