//! The router's answer as a `response` object, and its stream as the Responses events.

use std::collections::BTreeMap;

use axum::response::sse::Event;
use serde::Serialize;
use serde_json::{Value, json};
use switchyard_proto::router::v1::{self as router, chat_stream_response::Event as ChatEvent};

use super::{request::Echo, store::StoredResponse, turn::Turn};
use crate::{
    auth::Caller,
    chat::{json_text, metadata_json},
    error::ApiError,
};

/// What every state of one response object shares.
pub(super) struct Shell {
    pub(super) id: String,
    pub(super) created_at: i64,
    pub(super) model: String,
    pub(super) echo: Echo,
}

impl Shell {
    /// The response object as a borrowing view, for the events that carry it whole.
    pub(super) fn view<'a>(&'a self, status: &'a str, output: &'a [Value], usage: Option<&'a Value>) -> ShellJson<'a> {
        let echo = &self.echo;
        ShellJson {
            id: &self.id,
            object: "response",
            created_at: self.created_at,
            status,
            error: None,
            incomplete_details: (status == "incomplete").then_some(Incomplete { reason: "max_output_tokens" }),
            instructions: &echo.instructions,
            max_output_tokens: &echo.max_output_tokens,
            model: &self.model,
            output,
            parallel_tool_calls: echo.parallel_tool_calls,
            previous_response_id: &echo.previous_response_id,
            temperature: &echo.temperature,
            text: &echo.text,
            tool_choice: &echo.tool_choice,
            tools: &echo.tools,
            metadata: &echo.metadata,
            usage,
        }
    }

    /// The response object, for the answers that are kept or changed after they are built.
    pub(super) fn json(&self, status: &str, output: Vec<Value>, usage: Option<Value>) -> Value {
        serde_json::to_value(self.view(status, &output, usage.as_ref())).unwrap_or(Value::Null)
    }

    /// The output items of a finished answer: its text as a message item, then its calls.
    pub(super) fn output_items(&self, text: &str, calls: &[router::ToolCall]) -> Vec<Value> {
        let mut items = Vec::new();
        if !text.is_empty() || calls.is_empty() {
            items.push(message_item(&item_id("msg"), text, "completed"));
        }
        items.extend(calls.iter().map(|c| call_item(&item_id("fc"), &c.id, &c.name, &c.arguments_json, "completed")));
        items
    }
}

/// The `response` object (see [`Shell::view`]).
#[derive(Debug, Serialize)]
pub(super) struct ShellJson<'a> {
    id: &'a str,
    object: &'static str,
    created_at: i64,
    status: &'a str,
    /// Always `null` here; a failed response's error is set on its JSON value.
    error: Option<()>,
    incomplete_details: Option<Incomplete>,
    instructions: &'a Value,
    max_output_tokens: &'a Value,
    model: &'a str,
    output: &'a [Value],
    parallel_tool_calls: bool,
    previous_response_id: &'a Value,
    temperature: &'a Value,
    text: &'a Value,
    tool_choice: &'a Value,
    tools: &'a Value,
    metadata: &'a Value,
    usage: Option<&'a Value>,
}

#[derive(Debug, Serialize)]
pub(super) struct Incomplete {
    reason: &'static str,
}

/// One Responses event: its `type`, its place in the stream, and its own members. The pieces
/// of an answer go out as typed views rather than `Value` trees (one event per piece).
#[derive(Serialize)]
struct Envelope<'a, T> {
    r#type: &'a str,
    sequence_number: u64,
    #[serde(flatten)]
    data: T,
}

/// `{"response": …}`, the member of the events that carry the response object.
#[derive(Serialize)]
struct Carrying<T> {
    response: T,
}

/// The members of `response.output_text.delta`.
#[derive(Serialize)]
struct TextDelta<'a> {
    item_id: &'a str,
    output_index: usize,
    content_index: u32,
    delta: &'a str,
    logprobs: [(); 0],
}

/// The members of `response.function_call_arguments.delta`.
#[derive(Serialize)]
struct ArgumentsDelta<'a> {
    item_id: &'a str,
    output_index: usize,
    delta: &'a str,
}

/// The event `kind` numbered from `sequence`, which it advances.
fn framed(sequence: &mut u64, kind: &str, data: impl Serialize) -> Event {
    let text = json_text(&Envelope { r#type: kind, sequence_number: *sequence, data });
    *sequence += 1;
    Event::default().event(kind).data(text)
}

pub(super) fn item_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

pub(super) fn message_item(id: &str, text: &str, status: &str) -> Value {
    let content = if status == "completed" { json!([output_text(text)]) } else { json!([]) };
    json!({"type": "message", "id": id, "role": "assistant", "status": status, "content": content})
}

pub(super) fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": []})
}

pub(super) fn call_item(id: &str, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": id, "call_id": call_id, "name": name, "arguments": arguments, "status": status})
}

/// A turn cut by the token limit is `incomplete`; anything else the router finished is
/// `completed`.
pub(super) fn status_of(finish_reason: &str) -> &'static str {
    if finish_reason == "length" { "incomplete" } else { "completed" }
}

pub(super) fn usage_json(usage: Option<&router::Usage>) -> Value {
    let usage = usage.cloned().unwrap_or_default();
    json!({
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    })
}

/// The text item being streamed.
pub(super) struct TextItem {
    pub(super) id: String,
    pub(super) output_index: usize,
    pub(super) text: String,
}

/// A call of the caller's tools being streamed.
pub(super) struct CallItem {
    pub(super) id: String,
    pub(super) output_index: usize,
    pub(super) call_id: String,
    pub(super) name: String,
    pub(super) arguments: String,
}

/// Turns the router's stream into the Responses events, each with its `sequence_number`:
/// `response.created` and `response.in_progress`; per text item `output_item.added`,
/// `content_part.added`, `output_text.delta`…, `output_text.done`, `content_part.done`,
/// `output_item.done`; per call `output_item.added`, `function_call_arguments.delta`…,
/// `.done`, `output_item.done`; then `response.completed` (or `response.failed`).
pub(super) struct Relay {
    pub(super) shell: Shell,
    pub(super) turn: Turn,
    pub(super) caller: Caller,
    /// The answer to keep, once complete: kept before the client hears `response.completed`,
    /// so that its next request finds it.
    pub(super) to_keep: Option<(String, StoredResponse)>,
    pub(super) sequence: u64,
    pub(super) started: bool,
    pub(super) session_id: String,
    pub(super) text: Option<TextItem>,
    pub(super) calls: BTreeMap<u32, CallItem>,
    /// The finished items, by output index.
    pub(super) output: Vec<(usize, Value)>,
}

impl Relay {
    /// The event `kind` with `data`'s members (an object).
    pub(super) fn event(&mut self, kind: &str, data: impl Serialize) -> Event {
        framed(&mut self.sequence, kind, data)
    }

    pub(super) fn next_index(&self) -> usize {
        self.output.len() + usize::from(self.text.is_some()) + self.calls.len()
    }

    pub(super) fn start(&mut self, out: &mut Vec<Event>) {
        if self.started {
            return;
        }
        self.started = true;
        let response = Carrying { response: self.shell.view("in_progress", &[], None) };
        out.push(framed(&mut self.sequence, "response.created", &response));
        out.push(framed(&mut self.sequence, "response.in_progress", &response));
    }

    pub(super) fn close_text(&mut self, out: &mut Vec<Event>) {
        let Some(item) = self.text.take() else { return };
        let at = json!({"item_id": item.id, "output_index": item.output_index, "content_index": 0});
        let mut done = at.clone();
        done["text"] = json!(item.text);
        done["logprobs"] = json!([]);
        out.push(self.event("response.output_text.done", done));
        let mut part = at;
        part["part"] = output_text(&item.text);
        out.push(self.event("response.content_part.done", part));
        let whole = message_item(&item.id, &item.text, "completed");
        out.push(self.event("response.output_item.done", json!({"output_index": item.output_index, "item": whole})));
        self.output.push((item.output_index, whole));
    }

    pub(super) fn text_delta(&mut self, delta: &str, out: &mut Vec<Event>) {
        if self.text.is_none() {
            let item = TextItem { id: item_id("msg"), output_index: self.next_index(), text: String::new() };
            let added = json!({"output_index": item.output_index, "item": message_item(&item.id, "", "in_progress")});
            out.push(self.event("response.output_item.added", added));
            let part = json!({"item_id": item.id, "output_index": item.output_index, "content_index": 0,
                "part": output_text("")});
            out.push(self.event("response.content_part.added", part));
            self.text = Some(item);
        }
        let Some(item) = self.text.as_mut() else { return };
        item.text.push_str(delta);
        let data =
            TextDelta { item_id: &item.id, output_index: item.output_index, content_index: 0, delta, logprobs: [] };
        out.push(framed(&mut self.sequence, "response.output_text.delta", data));
    }

    pub(super) fn call_piece(&mut self, index: u32, call_id: &str, name: &str, delta: &str, out: &mut Vec<Event>) {
        // A call begins a new item: the text before it is finished.
        self.close_text(out);
        if !self.calls.contains_key(&index) {
            let call = CallItem {
                id: item_id("fc"),
                output_index: self.next_index(),
                call_id: call_id.to_owned(),
                name: name.to_owned(),
                arguments: String::new(),
            };
            let item = call_item(&call.id, &call.call_id, &call.name, "", "in_progress");
            out.push(
                self.event("response.output_item.added", json!({"output_index": call.output_index, "item": item})),
            );
            self.calls.insert(index, call);
        }
        if delta.is_empty() {
            return;
        }
        let Some(call) = self.calls.get_mut(&index) else { return };
        call.arguments.push_str(delta);
        let data = ArgumentsDelta { item_id: &call.id, output_index: call.output_index, delta };
        out.push(framed(&mut self.sequence, "response.function_call_arguments.delta", data));
    }

    pub(super) fn next(&mut self, item: router::ChatStreamResponse) -> Vec<Event> {
        let mut out = Vec::new();
        let Some(event) = item.event else { return out };
        self.start(&mut out);
        match event {
            ChatEvent::Route(route) => self.session_id = route.session_id,
            ChatEvent::Delta(delta) if !delta.content.is_empty() => self.text_delta(&delta.content, &mut out),
            ChatEvent::Delta(_) | ChatEvent::Tool(_) => {}
            ChatEvent::ToolCall(piece) => {
                self.call_piece(piece.index, &piece.id, &piece.name, &piece.arguments_delta, &mut out);
            }
            ChatEvent::Completed(done) => self.complete(done, &mut out),
        }
        out
    }

    pub(super) fn complete(&mut self, done: router::ChatCompleted, out: &mut Vec<Event>) {
        // Calls reported only whole, at the end, are streamed whole now.
        for (index, call) in (0u32..).zip(&done.tool_calls) {
            if !self.calls.contains_key(&index) {
                self.call_piece(index, &call.id, &call.name, &call.arguments_json, out);
            }
        }
        let text = self.text.as_ref().map(|t| t.text.clone()).unwrap_or_default();
        if self.text.is_none() && self.calls.is_empty() {
            // An empty answer is still one (empty) message.
            self.text_delta("", out);
        }
        self.close_text(out);
        for (index, call) in std::mem::take(&mut self.calls) {
            let whole = done.tool_calls.get(index as usize);
            let arguments = whole.map_or(call.arguments.clone(), |w| w.arguments_json.clone());
            let call_id = whole.map_or(call.call_id.clone(), |w| w.id.clone());
            let data = json!({"item_id": call.id, "output_index": call.output_index, "arguments": arguments});
            out.push(self.event("response.function_call_arguments.done", data));
            let item = call_item(&call.id, &call_id, &call.name, &arguments, "completed");
            out.push(self.event("response.output_item.done", json!({"output_index": call.output_index, "item": item})));
            self.output.push((call.output_index, item));
        }
        self.output.sort_by_key(|(index, _)| *index);
        let output: Vec<Value> = self.output.iter().map(|(_, item)| item.clone()).collect();
        let mut response =
            self.shell.json(status_of(&done.finish_reason), output, Some(usage_json(done.usage.as_ref())));
        response["_metadata"] = done.metadata.as_ref().map(metadata_json).unwrap_or(Value::Null);
        response["session_id"] = json!(self.session_id);
        let answer = router::ChatMessage { content: text, tool_calls: done.tool_calls, ..Default::default() };
        self.to_keep = self.turn.to_keep(&self.caller, &self.session_id, answer, &response);
        out.push(self.event("response.completed", json!({"response": response})));
    }

    /// A stream that fails after it began ends with `response.failed`, the response's `error`
    /// saying why.
    pub(super) fn failed(&mut self, error: &ApiError) -> Event {
        let code = match error.status() {
            429 => "rate_limit_exceeded",
            400..=499 => "invalid_prompt",
            _ => "server_error",
        };
        let mut response = self.shell.json("failed", Vec::new(), None);
        response["error"] = json!({"code": code, "message": error.message()});
        self.event("response.failed", json!({"response": response}))
    }
}
