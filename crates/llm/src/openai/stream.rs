//! Assembles an OpenAI-compatible SSE stream: text deltas pass straight through; tool calls come
//! as pieces keyed by `index` (id and name first, then argument fragments) and are joined here;
//! usage arrives in a last chunk with no choices; `data: [DONE]` ends it.

use std::collections::{HashMap, VecDeque};

use super::{finish_reason, usage, wire};
use crate::{Completion, ErrorKind, ProviderError, StreamEvent, ToolCall, Usage, sse::SseEvent, streaming::Decoder};

pub struct ChunkDecoder {
    provider: String,
    attempts: u32,
    model: String,
    content: String,
    calls: Vec<PartialCall>,
    /// Where the call of each `index` is in `calls`: a chunk may carry thousands of pieces.
    by_index: HashMap<u32, usize>,
    finish_reason: Option<String>,
    usage: Usage,
}

struct PartialCall {
    id: String,
    name: String,
    arguments: String,
    announced: bool,
}

impl ChunkDecoder {
    pub fn new(provider: &str, attempts: u32) -> Self {
        Self {
            provider: provider.to_owned(),
            attempts,
            model: String::new(),
            content: String::new(),
            calls: Vec::new(),
            by_index: HashMap::new(),
            finish_reason: None,
            usage: Usage::default(),
        }
    }

    fn error(&self, kind: ErrorKind, message: String) -> ProviderError {
        ProviderError::new(self.provider.clone(), kind, message)
    }

    /// The position of the call a piece belongs to: by `index`, or, from servers that send no
    /// index, a new one whenever a new id appears.
    fn call_for(&mut self, delta: &wire::ToolCallDelta) -> usize {
        let position = match delta.index {
            Some(index) => self.by_index.get(&index).copied(),
            None => match (&delta.id, self.calls.last()) {
                (Some(id), Some(last)) if !id.is_empty() && *id != last.id => None,
                (_, Some(_)) => Some(self.calls.len() - 1),
                (_, None) => None,
            },
        };
        position.unwrap_or_else(|| {
            if let Some(index) = delta.index {
                self.by_index.insert(index, self.calls.len());
            }
            self.calls.push(PartialCall {
                id: String::new(),
                name: String::new(),
                arguments: String::new(),
                announced: false,
            });
            self.calls.len() - 1
        })
    }

    /// Joins a piece to its call. The call is announced (`ToolCallStarted`, then a first
    /// `ToolCallDelta` with id, name and the arguments so far) once its name is known; later
    /// pieces pass on their argument text.
    fn tool_call_piece(&mut self, delta: wire::ToolCallDelta, out: &mut VecDeque<StreamEvent>) {
        let position = self.call_for(&delta);
        let call = &mut self.calls[position];
        let index = position as u32;
        if let Some(id) = delta.id.filter(|id| !id.is_empty()) {
            call.id = id;
        }
        let mut arguments = String::new();
        if let Some(function) = delta.function {
            if let Some(name) = function.name.as_deref().filter(|name| !name.is_empty()) {
                // Some servers repeat the name in every piece; it is not a new name.
                if !call.announced && call.name != name {
                    call.name.push_str(name);
                }
            }
            arguments = function.arguments_text();
            call.arguments.push_str(&arguments);
        }
        if !call.announced && !call.name.is_empty() {
            call.announced = true;
            out.push_back(StreamEvent::ToolCallStarted { id: call.id.clone(), name: call.name.clone() });
            out.push_back(StreamEvent::ToolCallDelta {
                index,
                id: Some(call.id.clone()),
                name: Some(call.name.clone()),
                arguments: call.arguments.clone(),
            });
        } else if call.announced && !arguments.is_empty() {
            out.push_back(StreamEvent::ToolCallDelta { index, id: None, name: None, arguments });
        }
    }

    fn completion(&mut self) -> Completion {
        // In order of arrival, which is the `index` of their `ToolCallDelta`s.
        let calls = std::mem::take(&mut self.calls);
        self.by_index.clear();
        let tool_calls: Vec<ToolCall> = calls
            .into_iter()
            .map(|call| ToolCall { id: call.id, name: call.name, arguments: call.arguments })
            .collect();
        Completion {
            content: std::mem::take(&mut self.content),
            finish_reason: finish_reason(self.finish_reason.as_deref(), !tool_calls.is_empty()),
            tool_calls,
            usage: self.usage,
            model: std::mem::take(&mut self.model),
            attempts: self.attempts,
        }
    }
}

impl Decoder for ChunkDecoder {
    fn event(&mut self, event: SseEvent, out: &mut VecDeque<StreamEvent>) -> Result<bool, ProviderError> {
        if event.data.trim() == "[DONE]" {
            out.push_back(StreamEvent::Done(self.completion()));
            return Ok(true);
        }
        let chunk: wire::Chunk = serde_json::from_str(&event.data).map_err(|err| {
            self.error(ErrorKind::Protocol, format!("a stream chunk is not a completion chunk: {err}"))
        })?;
        if let Some(error) = chunk.error.filter(|error| !error.is_null()) {
            let message = error["message"].as_str().or(error.as_str()).unwrap_or("no message").to_owned();
            return Err(self.error(ErrorKind::Server, format!("the stream reported an error: {message}")));
        }
        if let Some(model) = chunk.model.filter(|model| !model.is_empty()) {
            self.model = model;
        }
        if chunk.usage.is_some() {
            self.usage = usage(chunk.usage);
        }
        // We ask for one choice; a server that sends more has them ignored.
        for choice in chunk.choices.unwrap_or_default().into_iter().filter(|choice| choice.index.unwrap_or(0) == 0) {
            if let Some(delta) = choice.delta {
                for text in [delta.content, delta.refusal].into_iter().flatten().filter(|text| !text.is_empty()) {
                    self.content.push_str(&text);
                    out.push_back(StreamEvent::Text(text));
                }
                for piece in delta.tool_calls.unwrap_or_default() {
                    self.tool_call_piece(piece, out);
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
        }
        Ok(false)
    }

    fn ended_early(&mut self) -> Result<Completion, ProviderError> {
        if self.finish_reason.is_some() {
            Ok(self.completion())
        } else {
            Err(self.error(ErrorKind::Connect, "the stream ended before the answer was complete".to_owned()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FinishReason;

    fn feed(decoder: &mut ChunkDecoder, data: &str, out: &mut VecDeque<StreamEvent>) -> bool {
        decoder.event(SseEvent { event: String::new(), data: data.to_owned() }, out).unwrap()
    }

    #[test]
    fn pieces_without_an_index_are_told_apart_by_id() {
        let mut decoder = ChunkDecoder::new("openai", 1);
        let mut out = VecDeque::new();
        feed(
            &mut decoder,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"f","arguments":"{\"x\""}}]}}]}"#,
            &mut out,
        );
        feed(&mut decoder, r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":":1}"}}]}}]}"#, &mut out);
        feed(
            &mut decoder,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"name":"g","arguments":{}}}]},"finish_reason":"tool_calls"}]}"#,
            &mut out,
        );
        let completion = decoder.ended_early().unwrap();
        let calls: Vec<_> =
            completion.tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str())).collect();
        assert_eq!(calls, [("a", "f", r#"{"x":1}"#), ("b", "g", "{}")]);
        assert_eq!(completion.finish_reason, FinishReason::ToolCalls);
        let started = out.iter().filter(|event| matches!(event, StreamEvent::ToolCallStarted { .. })).count();
        assert_eq!(started, 2, "one ToolCallStarted per call: {out:?}");
    }

    #[test]
    fn an_error_chunk_and_a_garbage_chunk_are_errors() {
        let mut decoder = ChunkDecoder::new("openai", 1);
        let mut out = VecDeque::new();
        let event = |data: &str| SseEvent { event: String::new(), data: data.to_owned() };
        let error = decoder.event(event(r#"{"error":{"message":"overloaded"}}"#), &mut out).unwrap_err();
        assert!(error.message.contains("overloaded"));
        assert_eq!(decoder.event(event("not json"), &mut out).unwrap_err().kind, ErrorKind::Protocol);
        assert_eq!(decoder.ended_early().unwrap_err().kind, ErrorKind::Connect);
    }

    #[test]
    fn a_call_is_announced_once_its_name_comes_with_the_arguments_so_far() {
        let mut decoder = ChunkDecoder::new("openai", 1);
        let mut out = VecDeque::new();
        let piece = |json: &str| format!(r#"{{"choices":[{{"delta":{{"tool_calls":[{json}]}}}}]}}"#);
        feed(&mut decoder, &piece(r#"{"index":0,"id":"c","function":{"arguments":"{\"a\""}}"#), &mut out);
        assert!(out.is_empty(), "no name yet: {out:?}");
        feed(&mut decoder, &piece(r#"{"index":0,"function":{"name":"f","arguments":":"}}"#), &mut out);
        feed(&mut decoder, &piece(r#"{"index":0,"function":{"name":"f","arguments":"1}"}}"#), &mut out);
        feed(&mut decoder, "[DONE]", &mut out);
        let Some(StreamEvent::Done(completion)) = out.pop_back() else { panic!("done last: {out:?}") };
        assert_eq!(
            out,
            [
                StreamEvent::ToolCallStarted { id: "c".into(), name: "f".into() },
                StreamEvent::ToolCallDelta {
                    index: 0,
                    id: Some("c".into()),
                    name: Some("f".into()),
                    arguments: r#"{"a":"#.into()
                },
                StreamEvent::ToolCallDelta { index: 0, id: None, name: None, arguments: "1}".into() },
            ]
        );
        assert_eq!(completion.tool_calls[0].name, "f", "a repeated name is not a longer name");
        assert_eq!(completion.tool_calls[0].arguments, r#"{"a":1}"#);
    }
}
